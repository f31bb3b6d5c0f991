"""A real Slurm cluster on this one machine for the tests: munged, slurmctld and slurmd from the distribution's
packages (scripts/setup-slurm.sh), in the foreground, with a configuration written for the test: private ports,
state and spool directories, munge socket and key; process tracking by process group (no cgroups); the node is this
host, declared with more CPUs than it has so that CPUs never hold a job back (only the licenses do); job ids start at
a random number, so that this cluster's processes are told apart from another test run's. pyvgpu's hooks
(pyvgpu/slurm.py) run as PrologSlurmctld, EpilogSlurmctld, Prolog and TaskProlog through a wrapper that gives them
this checkout and the test's pool configuration.
"""
from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import ROOT, free_port, stop_process

COMMANDS = ("slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "sinfo", "munged")


class SlurmMissing(RuntimeError):
    pass


def check_installed() -> None:
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        raise SlurmMissing(f"Slurm is not installed ({', '.join(missing)} missing): run scripts/setup-slurm.sh "
                           f"(scripts/test.sh does)")
    if os.geteuid() != 0:
        raise SlurmMissing("the Slurm tests start slurmd, which launches jobs: they run as root (as CI does)")


@dataclass
class Cluster:
    work: Path
    pyvgpu_conf: str                    # the body of pyvgpu's slurm.conf (Pool=, ...)
    licenses: str                       # Licenses= of slurm.conf
    node: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    first_job: int = field(default_factory=lambda: random.randrange(1_000_000, 60_000_000))

    @property
    def conf(self) -> Path:
        return self.work / "slurm.conf"

    @property
    def state_dir(self) -> Path:
        return self.work / "pyvgpu-state"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    # ------------------------------------------------------------------ set-up
    def write(self) -> None:
        w = self.work
        for d in ("munge", "ctld", "spool", "log"):
            (w / d).mkdir(parents=True, exist_ok=True)
        (w / "munge").chmod(0o700)
        key = w / "munge" / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
        (w / "pyvgpu-slurm.conf").write_text(self.pyvgpu_conf + f"\nStateDir={self.state_dir}\n")
        import pyvgpu
        hook = w / "pyvgpu-slurm"
        # Slurm runs the controller's hooks with a bare environment (no PATH): everything is spelled out.
        hook.write_text("#!/bin/sh\n"
                        f"export PYVGPU_SLURM_CONF={w / 'pyvgpu-slurm.conf'}\n"
                        f"export PYTHONPATH={ROOT}{os.pathsep}{ROOT / 'daemon'}\n"
                        f"export PYVGPU_LIB={pyvgpu.lib_path()}\n"
                        f"exec {sys.executable} -m pyvgpu.slurm \"$@\"\n")
        hook.chmod(0o755)
        ctld, slurmd = free_port(), free_port()
        self.conf.write_text(f"""\
ClusterName=pvt{self.first_job}
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={ctld}
SlurmdPort={slurmd}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={w / 'munge' / 'sock'}
StateSaveLocation={w / 'ctld'}
SlurmdSpoolDir={w / 'spool'}
SlurmctldPidFile={w / 'slurmctld.pid'}
SlurmdPidFile={w / 'slurmd.pid'}
SlurmctldLogFile={w / 'log' / 'slurmctld.log'}
SlurmdLogFile={w / 'log' / 'slurmd.log'}
MailProg=/bin/true
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=300
KillWait=2
FirstJobId={self.first_job}
Licenses={self.licenses}
PrologSlurmctld={hook}
EpilogSlurmctld={hook}
Prolog={hook}
TaskProlog={hook}
PrologFlags=Alloc
NodeName={self.node} NodeAddr=127.0.0.1 CPUs=16 RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes={self.node} Default=YES MaxTime=30 State=UP
""")

    def start(self) -> None:
        check_installed()
        self.write()
        w = self.work
        sock = w / "munge" / "sock"
        self.procs["munged"] = self._spawn("munged", ["munged", "-F", "--force", f"--socket={sock}",
                                                      f"--key-file={w / 'munge' / 'munge.key'}",
                                                      f"--log-file={w / 'log' / 'munged.log'}",
                                                      f"--pid-file={w / 'munge' / 'pid'}",
                                                      f"--seed-file={w / 'munge' / 'seed'}"])
        self.wait_until(lambda: sock.exists(), 20, "munged's socket")
        self.procs["slurmctld"] = self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self.start_slurmd()
        self.wait_until(lambda: self.node_state() == "idle", 60, "the node to be idle")

    def start_slurmd(self) -> None:
        self.procs["slurmd"] = self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf)])

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        out = open(self.work / "log" / f"{name}.out", "ab")
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)

    def wait_until(self, cond, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited with {p.returncode} while waiting for {what}:\n{self.logs()}")
            if cond():
                return
            time.sleep(0.2)
        raise RuntimeError(f"timed out waiting for {what}:\n{self.logs()}")

    def logs(self) -> str:
        out = []
        for f in sorted((self.work / "log").glob("*")) + [self.state_dir / "pyvgpu-slurm.log"]:
            if f.exists():
                out.append(f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)

    def stop(self) -> None:
        self.cmd("scancel", f"--partition=test", check=False)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and self.cmd("squeue", "-h", "-t", "R,CG", check=False).strip():
            time.sleep(0.3)
        for name in ("slurmd", "slurmctld", "munged"):
            if name in self.procs:
                stop_process(self.procs[name])
        for f in self.state_dir.glob("job-*.keeper"):       # keepers this cluster's Prolog started
            try:
                os.kill(int(f.read_text().split()[0]), signal.SIGTERM)
            except (ValueError, IndexError, ProcessLookupError, OSError):
                pass

    # ------------------------------------------------------------------ use
    def cmd(self, *argv: str, check: bool = True, timeout: float = 30) -> str:
        p = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}: {p.stderr.strip()}\n{self.logs()}")
        return p.stdout

    def node_state(self) -> str:
        return self.cmd("sinfo", "-h", "-n", self.node, "-o", "%T", check=False).strip().rstrip("*~#$@+")

    def submit(self, script: str, *options: str) -> str:
        path = self.work / f"job-{time.monotonic_ns()}.sh"
        path.write_text("#!/bin/sh\n" + script + "\n")
        out = self.cmd("sbatch", "--parsable", "-o", str(self.work / "job-%j.out"), "-t", "10", *options, str(path))
        return out.strip().split(";")[0]

    def job(self, jid: str) -> dict[str, str]:
        text = self.cmd("scontrol", "show", "job", "-o", jid, check=False)
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def wait_state(self, jid: str, *states: str, timeout: float = 60) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        info: dict[str, str] = {}
        while time.monotonic() < deadline:
            info = self.job(jid)
            if info.get("JobState") in states:
                return info
            time.sleep(0.2)
        raise AssertionError(f"job {jid} not {'/'.join(states)} within {timeout} s: {info}\n{self.logs()}")

    def output(self, jid: str) -> str:
        path = self.work / f"job-{jid}.out"
        return path.read_text() if path.exists() else ""

    def release(self, jid: str) -> None:
        """Let a job whose program waits for its go-file end (scripts made by job_script)."""
        (self.work / f"go-{jid}").touch()

    def job_script(self, program: Path, *args: str) -> str:
        """A job that runs the program on its GPUs as it is (no pyvgpu in sight) until the test lets it end."""
        return f'{program} --until-file {self.work}/go-$SLURM_JOB_ID {" ".join(args)}'

    def stepd_session(self, jid: str) -> int | None:
        """The session of the job's slurmstepd (its tasks are in it): what dies with the node."""
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if cmdline.startswith(f"slurmstepd: [{jid}."):
                    return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[3])
            except (OSError, IndexError, ValueError):
                continue
        return None

    def kill_node(self, jid: str) -> list[int]:
        """What a node failure does to a job: slurmd, the job's slurmstepd and tasks, and pyvgpu's keeper for the job
        all die at once (SIGKILL). → the pids killed."""
        sid = self.stepd_session(jid)
        victims = []
        keeper = self.state_dir / f"job-{jid}.keeper"
        if keeper.exists():
            victims.append(int(keeper.read_text().split()[0]))
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit() and sid is not None:
                try:
                    if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[3]) == sid:
                        victims.append(int(proc.name))
                except (OSError, IndexError, ValueError):
                    continue
        victims.append(self.procs["slurmd"].pid)
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.procs["slurmd"].wait(10)
        return victims
