"""pyvgpu-slurm's parts that need no Slurm: its configuration file, SLURM_JOB_LICENSES, what the TaskProlog prints,
and `pyvgpu-slurm check` against daemons (the hooks themselves run under real Slurm in test_slurm.py)."""
from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from pyvgpu import slurm
from pyvgpu.slurm import Config, Job, SlurmHookError, parse_licenses


def test_config_file():
    cfg = Config.parse("# the pool\nPool=gpu-a:7700, gpu-b\nsharedpool = gpu-c:7701  # shares\nShares=8\n"
                       "LeaseTTL=10\nStateDir=/tmp/x\nExportToken=yes\n")
    assert [str(h) for h in cfg.pool] == ["gpu-a:7700", "gpu-b:7700"] and [str(h) for h in cfg.shared_pool] == \
        ["gpu-c:7701"]
    assert cfg.shares == 8 and cfg.lease_ttl == 10.0 and str(cfg.state_dir) == "/tmp/x" and cfg.export_token
    assert cfg.license == "vgpu" and cfg.start_ttl == 300.0 and cfg.token_file is None
    for text, why in [("Pool=a\nBogus=1\n", "Key one of Pool, License"), ("License=x\n", "names no daemon"),
                      ("Pool=a\nShares=x\n", "invalid literal"), ("Pool=a\nLeaseTTL=60\nStartTTL=30\n", "StartTTL"),
                      ("Pool=a:99999\n", "port"), ("Pool a\n", "expected Key=Value")]:
        with pytest.raises(SlurmHookError, match=why):
            Config.parse(text, "conf")


def test_job_licenses():
    assert parse_licenses("vgpu:2,vgpu_share:1") == {"vgpu": 2, "vgpu_share": 1}
    assert parse_licenses("vgpu") == {"vgpu": 1} and parse_licenses("vgpu*3,fs@db:4") == {"vgpu": 3, "fs": 4}
    assert parse_licenses("") == {}
    job = Job.from_env({"SLURM_JOB_ID": "42", "SLURM_CLUSTER_NAME": "c1", "SLURM_JOB_USER": "ann",
                        "SLURM_JOB_UID": "1001", "SLURM_JOB_LICENSES": "vgpu:2"})
    assert job.key == "slurm:c1:42" and job.holder == "slurm job 42 (ann)" and job.uid == 1001
    assert slurm.wanted(Config.parse("Pool=a\n"), job) == (2, 0)
    with pytest.raises(SlurmHookError, match="not run by Slurm"):
        Job.from_env({})


def test_task_prolog_prints_the_environment(tmp_path, monkeypatch):
    cfg = Config.parse(f"Pool=a\nStateDir={tmp_path}\n")
    job = Job("7", "c", "ann", None, {})
    out = io.StringIO()
    assert slurm.prolog_task(cfg, job, out) == 0 and out.getvalue() == ""        # not a pyvgpu job
    (tmp_path / "job-7.json").write_text(json.dumps({"hosts": ["a:7700/0", "b:7700/1"], "leases": ["x" * 32,
                                                                                                   "y" * 32]}))
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/lib")
    slurm.prolog_task(cfg, job, out)
    lines = out.getvalue().splitlines()
    import pyvgpu
    lib_dir = pyvgpu.lib_path(pyvgpu.DRIVER_LIB_NAME).parent
    assert lines == ["export PYVGPU_HOSTS=a:7700/0,b:7700/1", f"export PYVGPU_LEASES={'x' * 32},{'y' * 32}",
                     f"export LD_LIBRARY_PATH={lib_dir}:/opt/lib"]
    (tmp_path / "job-7.json").write_text(json.dumps({"error": "the pool could not be asked: a: refused"}))
    out = io.StringIO()
    slurm.prolog_task(cfg, job, out)
    assert out.getvalue() == "print pyvgpu-slurm: no pooled GPUs for this task: the pool could not be asked: " \
                             "a: refused\n"


def test_check_prints_the_slurm_conf_lines(daemon_factory, tmp_path):
    a = daemon_factory("--emu-devices", "2")
    b = daemon_factory("--emu-devices", "1")
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"Pool={a.address},{b.address}\nSharedPool={b.address}/0\nShares=4\n")
    r = subprocess.run([sys.executable, "-m", "pyvgpu.slurm", "--conf", str(conf), "check"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "Licenses=vgpu:3,vgpu_share:4"
    assert [ln.split("=")[0] for ln in lines[1:]] == ["PrologSlurmctld", "EpilogSlurmctld", "Prolog", "TaskProlog",
                                                       "PrologFlags"]
    conf.write_text("Pool=127.0.0.1:1\n")
    r = subprocess.run([sys.executable, "-m", "pyvgpu.slurm", "--conf", str(conf), "check"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and "# 127.0.0.1:1: unreachable" in r.stdout
