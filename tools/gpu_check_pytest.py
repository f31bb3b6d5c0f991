"""pytest plugin of the real-GPU check (tools/gpu_check.py runs pytest with `-p gpu_check_pytest`): one JSON line per
test result, appended to $PYVGPU_GPU_CHECK_RESULTS as each test ends, so a run cut short at its share of the budget
still tells what it reached. Lines: {"collected": N} once, then {"test", "outcome", "when", "chain", "seconds",
"detail"} ("chain": the test is marked to run on the cuda backend too, tests/conftest.py). Under pytest-xdist the
controller writes the results (it receives every worker's reports), worker gw0 the count."""
from __future__ import annotations

import json
import os

_config = None


def _worker() -> str | None:
    """This process's pytest-xdist worker id (gw0, ...), None in the controller or without xdist."""
    return getattr(_config, "workerinput", {}).get("workerid") if _config is not None else None


def _write(obj: dict) -> None:
    path = os.environ.get("PYVGPU_GPU_CHECK_RESULTS")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(obj) + "\n")


def pytest_configure(config) -> None:
    global _config
    _config = config


def pytest_collection_finish(session) -> None:
    # Under xdist the controller collects nothing and every worker collects everything: the first worker counts.
    if (_worker() is None and session.items) or _worker() == "gw0":
        _write({"collected": len(session.items)})


def pytest_runtest_logreport(report) -> None:
    # A test's result is its call phase; setup/teardown count only when they fail or skip the test. Under xdist the
    # controller receives every worker's reports: only it writes.
    if _worker() is not None or (report.when != "call" and report.outcome == "passed"):
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
