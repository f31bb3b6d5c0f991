"""pytest plugin of the real-GPU check (tools/gpu_check.py runs pytest with `-p gpu_check_pytest`): one JSON line per
test result, appended to $PYVGPU_GPU_CHECK_RESULTS as each test ends, so a run cut short at its share of the budget
still tells what it reached. Lines: {"collected": N} once, then {"test", "outcome", "when", "chain", "seconds", "detail"} ("chain": the test is
marked to run on the cuda backend too, tests/conftest.py).
Under pytest-xdist only the controller writes (it sees every worker's reports)."""
from __future__ import annotations

import json
import os

_config = None


def _write(obj: dict) -> None:
    path = os.environ.get("PYVGPU_GPU_CHECK_RESULTS")
    if not path or (_config is not None and hasattr(_config, "workerinput")):
        return
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(obj) + "\n")


def pytest_configure(config) -> None:
    global _config
    _config = config


def pytest_collection_finish(session) -> None:
    _write({"collected": len(session.items)})


def pytest_runtest_logreport(report) -> None:
    # A test's result is its call phase; setup/teardown count only when they fail or skip the test.
    if report.when != "call" and report.outcome == "passed":
        return
    outcome = report.outcome if report.when == "call" or report.outcome == "skipped" else "error"
    detail = ""
    if report.outcome != "passed":
        text = report.longreprtext or ""
        lines = [ln for ln in text.splitlines() if ln.strip()]
        # The line saying what went wrong: pytest's "E   ..." lines, else the last line (a skip's reason).
        errs = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
        detail = " | ".join(errs[:3]) if errs else (lines[-1] if lines else "")
    _write({"test": report.nodeid, "outcome": outcome, "when": report.when, "chain": "chain" in report.keywords,
            "seconds": round(report.duration, 2), "detail": detail[:400]})
