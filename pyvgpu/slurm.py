"""`pyvgpu-slurm`: the pyvgpu pool as a Slurm resource, with Slurm's own mechanisms and nothing compiled.

The GPUs of the pool are a cluster-wide license (`Licenses=vgpu:4` in slurm.conf): Slurm counts them, queues the jobs
that ask for them (`sbatch -L vgpu:2`) and accounts for them. One executable serves as four hooks, told apart by
SLURM_SCRIPT_CONTEXT:

  PrologSlurmctld (prolog_slurmctld: the controller, once per job, before it starts; SLURM_JOB_LICENSES set)
      leases the job's GPUs from the pool: `vgpu:N` -> N exclusive GPUs, `vgpu_share:K` -> a share K/Shares of one
      GPU (with that part of its memory as quota and of its time as weight). Waits in line (at most AcquireTimeout)
      when the pool is busy (Slurm counts the GPUs, but the leases of a job that just ended may still be going
      back); failing, the job is requeued. The leases last StartTTL until the job's node renews them.
  Prolog (prolog_slurmd with PrologFlags=Alloc: each node of the job, at allocation)
      finds the job's leases in the pool, writes them for its tasks (StateDir/job-ID.json, owned by the job's user)
      and starts a keeper that renews them every LeaseTTL/3 (with a LeaseTTL) for as long as they exist: if the node
      dies, the keeper dies with it and the leases expire within LeaseTTL.
  TaskProlog (prolog_task: each task, as the user)
      prints `export PYVGPU_HOSTS=...` (the leased GPUs, host:port/ordinal), `export PYVGPU_LEASES=...` and
      LD_LIBRARY_PATH with pyvgpu's client libraries first: `./app` runs on the leased GPUs as it is.
  EpilogSlurmctld (epilog_slurmctld: the controller, once per job, when it ends: completed, cancelled, timed out,
      node failed, requeued) gives every lease of the job back; their sessions end; the keepers exit.

Configuration: /etc/pyvgpu/slurm.conf (or PYVGPU_SLURM_CONF), `Key=Value` lines (see Config). `pyvgpu-slurm check`
asks the pool and prints the slurm.conf lines that match it. docs/operations.md has the whole set-up.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from pyvgpu import hostmap, leasing
from pyvgpu.hostmap import Host, HostMapError
from pyvgpu.protocol import ENV_LEASES, LEASE_DEVICE, LEASE_ID

DEFAULT_CONF = "/etc/pyvgpu/slurm.conf"
ENV_CONF = "PYVGPU_SLURM_CONF"
PROG = "pyvgpu-slurm"


class SlurmHookError(Exception):
    """Said in one line to the hook's log; the hook's exit status tells Slurm."""


# ---------------------------------------------------------------------------------------------- configuration
@dataclass
class Config:
    pool: list[Host]                         # Pool=: the daemons whose GPUs are leased whole (License)
    license: str = "vgpu"                    # License=
    shared_pool: list[Host] = field(default_factory=list)   # SharedPool=: the daemons whose GPUs are shared out
    shared_license: str = "vgpu_share"       # SharedLicense=
    shares: int = 4                          # Shares=: one SharedLicense unit is 1/Shares of a GPU
    lease_ttl: float = 30.0                  # LeaseTTL=: seconds a lease lives unless the job's node renews it
    start_ttl: float = 300.0                 # StartTTL=: ... before the node has started renewing it
    acquire_timeout: float = 600.0           # AcquireTimeout=: how long PrologSlurmctld waits for the GPUs
    timeout: float = 5.0                     # Timeout=: connecting to a daemon
    state_dir: Path = Path("/run/pyvgpu-slurm")   # StateDir=: per node, the jobs' leases and keepers; hook log
    token_file: str | None = None            # TokenFile=: the pool's token (daemons off loopback)
    tls_ca: str | None = None                # TLSCA=, TLSFingerprints=: how the hooks trust the daemons
    tls_fingerprints: str | None = None
    export_token: bool = False               # ExportToken=yes: the tasks get PYVGPU_TOKEN too

    KEYS = {"Pool": "pool", "License": "license", "SharedPool": "shared_pool", "SharedLicense": "shared_license",
            "Shares": "shares", "LeaseTTL": "lease_ttl", "StartTTL": "start_ttl", "AcquireTimeout": "acquire_timeout",
            "Timeout": "timeout", "StateDir": "state_dir", "TokenFile": "token_file", "TLSCA": "tls_ca",
            "TLSFingerprints": "tls_fingerprints", "ExportToken": "export_token"}

    @classmethod
    def load(cls, path: str | None = None) -> "Config":
        path = path or os.environ.get(ENV_CONF) or DEFAULT_CONF
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise SlurmHookError(f"cannot read {path}: {exc.strerror or exc}") from None
        return cls.parse(text, path)

    @classmethod
    def parse(cls, text: str, origin: str = "slurm.conf") -> "Config":
        values: dict[str, Any] = {}
        keys = {k.lower(): v for k, v in cls.KEYS.items()}          # keys are case-insensitive, as slurm.conf's
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            key, sep, value = line.partition("=")
            name = keys.get(key.strip().lower())
            if not sep or name is None:
                raise SlurmHookError(f"{origin}:{n}: expected Key=Value with Key one of {', '.join(cls.KEYS)}: "
                                     f"{raw.strip()!r}")
            values[name] = value.strip()
        try:
            out = cls(pool=_hosts(values.pop("pool", ""), origin))
            out.shared_pool = _hosts(values.pop("shared_pool", ""), origin)
            for name, value in values.items():
                default = getattr(out, name)
                if isinstance(default, bool):
                    setattr(out, name, value.lower() in ("1", "yes", "true", "on"))
                elif isinstance(default, (int, float)):
                    setattr(out, name, type(default)(value))
                elif isinstance(default, Path):
                    setattr(out, name, Path(value))
                else:
                    setattr(out, name, value or None)
        except (ValueError, HostMapError) as exc:
            raise SlurmHookError(f"{origin}: {exc}") from None
        if not out.pool and not out.shared_pool:
            raise SlurmHookError(f"{origin}: Pool= (or SharedPool=) names no daemon")
        if out.shares < 1 or not out.lease_ttl >= 1 or out.start_ttl < out.lease_ttl:
            raise SlurmHookError(f"{origin}: Shares >= 1, LeaseTTL >= 1 and StartTTL >= LeaseTTL required")
        return out

    def token(self) -> bytes | None:
        if self.token_file is None:
            return None
        from pyvgpu.auth import TokenFileError, read_token_file
        try:
            return read_token_file(self.token_file)
        except TokenFileError as exc:
            raise SlurmHookError(str(exc)) from None

    def trust(self) -> None:
        """The hooks run with Slurm's bare environment: TLS trust comes from this file."""
        if self.tls_ca:
            os.environ["PYVGPU_TLS_CA"] = self.tls_ca
        if self.tls_fingerprints:
            os.environ["PYVGPU_TLS_FINGERPRINT"] = self.tls_fingerprints

    def daemons(self) -> list[Host]:
        return list({h.daemon_key(): h for h in [*self.pool, *self.shared_pool]}.values())


def _hosts(text: str, origin: str) -> list[Host]:
    return hostmap.parse_env(",".join(t for t in re.split(r"[\s,]+", text) if t), origin) if text.strip() else []


# ---------------------------------------------------------------------------------------------- the job
@dataclass(frozen=True)
class Job:
    id: str
    cluster: str
    user: str
    uid: int | None
    licenses: dict[str, int]

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "Job":
        env = dict(os.environ if env is None else env)
        jid = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""
        if not jid.isdigit():
            raise SlurmHookError("SLURM_JOB_ID is not set: not run by Slurm as a prolog/epilog")
        uid = env.get("SLURM_JOB_UID", "")
        return cls(jid, env.get("SLURM_CLUSTER_NAME", "cluster"), env.get("SLURM_JOB_USER", "?"),
                   int(uid) if uid.isdigit() else None, parse_licenses(env.get("SLURM_JOB_LICENSES", "")))

    @property
    def key(self) -> str:
        """The leases' job name: unique across the clusters that share a pool."""
        return f"slurm:{self.cluster}:{self.id}"

    @property
    def holder(self) -> str:
        return f"slurm job {self.id} ({self.user})"


def parse_licenses(text: str) -> dict[str, int]:
    """SLURM_JOB_LICENSES ("vgpu:2,vgpu_share:1"; "name*N" and a bare "name" = 1 too) -> {name: count}."""
    out: dict[str, int] = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        m = re.fullmatch(r"([^:*@]+)(?:@[^:*]+)?(?:[:*](\d+))?", item)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0) + int(m.group(2) or 1)
    return out


def wanted(cfg: Config, job: Job) -> tuple[int, int]:
    """(exclusive GPUs, shares) the job's licenses ask for."""
    return job.licenses.get(cfg.license, 0), job.licenses.get(cfg.shared_license, 0)


# ---------------------------------------------------------------------------------------------- logging
def _log(cfg: Config | None, job: Job | None, text: str) -> None:
    """One line to stderr (Slurm's own log keeps a hook's output) and to StateDir/pyvgpu-slurm.log."""
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {PROG}[{os.getpid()}]" + \
        (f" job {job.id}" if job else "") + f": {text}"
    print(line, file=sys.stderr, flush=True)
    if cfg is not None:
        try:
            cfg.state_dir.mkdir(parents=True, exist_ok=True)
            with open(cfg.state_dir / "pyvgpu-slurm.log", "a") as fh:
                fh.write(line + "\n")
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------- the hooks
def prolog_slurmctld(cfg: Config, job: Job) -> int:
    """Lease the job's GPUs (before it starts). Nonzero: Slurm requeues the job."""
    whole, shares = wanted(cfg, job)
    if not whole and not shares:
        return 0
    token = cfg.token()
    held = leasing.Held()
    try:
        if whole:
            if not cfg.pool:
                raise SlurmHookError(f"{cfg.license} asked but Pool= names no daemon")
            held.leases += _acquire(cfg, job, cfg.pool, whole, None, token).leases
        if shares:
            if shares > cfg.shares:
                raise SlurmHookError(f"{cfg.shared_license}:{shares} asked: a job gets at most one GPU's "
                                     f"{cfg.shares} shares")
            pool = cfg.shared_pool or cfg.pool
            held.leases += _acquire(cfg, job, pool, 1, shares / cfg.shares, token).leases
    except (SlurmHookError, leasing.LeaseError) as exc:
        leasing.release(held, token, cfg.timeout)
        _log(cfg, job, f"no GPUs for the job ({exc}): Slurm requeues it")
        return 1
    _log(cfg, job, f"leased {leasing.shares(held)} for {cfg.start_ttl:g} s until its node renews them")
    return 0


def _acquire(cfg: Config, job: Job, pool: list[Host], n: int, fraction: float | None,
             token: bytes | None) -> leasing.Held:
    terms = leasing.Terms(holder=job.holder, job=job.key, ttl=cfg.start_ttl, fraction=fraction)
    return leasing.acquire(pool, n, terms, wait=cfg.acquire_timeout, token=token, timeout=cfg.timeout,
                           on_wait=lambda why: _log(cfg, job, f"waiting for the pool: {why}"))


def epilog_slurmctld(cfg: Config, job: Job) -> int:
    """Give the job's leases back (it ended, however it ended)."""
    whole, shares = wanted(cfg, job)
    if not whole and not shares:
        return 0
    ended, problems = leasing.release_job(cfg.daemons(), job.key, cfg.token(), cfg.timeout)
    _log(cfg, job, f"released {ended} lease(s)" + (f"; not reached: {'; '.join(problems)} (the leases expire "
                                                      f"within {cfg.lease_ttl:g} s)" if problems else ""))
    return 0


def prolog_slurmd(cfg: Config, job: Job) -> int:
    """On each node of the job: note its leases for the tasks and start their keeper. Never fails the job: a node
    that cannot reach the pool gives its tasks no GPUs (and says so in their output)."""
    held, problems = leasing.find_job(cfg.daemons(), job.key, cfg.token(), min(cfg.timeout, 2.0))
    for p in problems:
        _log(cfg, job, f"cannot look up the job's leases on {p}")
    if not len(held):
        if problems:
            _write_job_file(cfg, job, {"error": f"the pool could not be asked: {'; '.join(problems)}"})
        return 0
    _write_job_file(cfg, job, {"hosts": [str(h) for h in held.hosts()], "leases": held.ids()})
    pid = start_keeper(cfg, job)
    _log(cfg, job, f"{len(held)} lease(s) on this node's tasks; keeper pid {pid}")
    return 0


def prolog_task(cfg: Config, job: Job, out: Any = None) -> int:
    """Print the task's environment (TaskProlog protocol: `export NAME=value`, `print text`)."""
    out = out or sys.stdout
    path = job_file(cfg, job)
    try:
        info = json.loads(path.read_text())
    except FileNotFoundError:
        return 0
    except (OSError, ValueError) as exc:
        print(f"print {PROG}: cannot read {path}: {exc}", file=out)
        return 0
    if info.get("error"):
        print(f"print {PROG}: no pooled GPUs for this task: {info['error']}", file=out)
        return 0
    import pyvgpu
    lib_dir = str(pyvgpu.lib_path(pyvgpu.DRIVER_LIB_NAME).parent)
    paths = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and p != lib_dir]
    print(f"export {hostmap.ENV_HOSTS}={','.join(info['hosts'])}", file=out)
    print(f"export {ENV_LEASES}={','.join(info['leases'])}", file=out)
    print(f"export LD_LIBRARY_PATH={os.pathsep.join([lib_dir, *paths])}", file=out)
    if cfg.export_token:
        token = cfg.token()
        if token:
            print(f"export PYVGPU_TOKEN={token.decode()}", file=out)
    return 0


# ---------------------------------------------------------------------------------------------- the node's files
def job_file(cfg: Config, job: Job) -> Path:
    return cfg.state_dir / f"job-{job.id}.json"


def keeper_file(cfg: Config, job: Job) -> Path:
    return cfg.state_dir / f"job-{job.id}.keeper"


def _write_job_file(cfg: Config, job: Job, info: dict[str, Any]) -> None:
    """Readable by the job's user only (the lease ids are what lets its programs use the GPUs)."""
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    path = job_file(cfg, job)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(info, fh)
    if job.uid is not None and os.geteuid() == 0:
        os.chown(tmp, job.uid, -1)
    os.replace(tmp, path)


def start_keeper(cfg: Config, job: Job) -> int:
    """A detached `pyvgpu-slurm keep` for the job on this node (one per job: it locks its pid file)."""
    # Its own session, no terminal, no pipe of Slurm's held open: the Prolog ends, the keeper stays. It logs to
    # StateDir/pyvgpu-slurm.log itself.
    proc = subprocess.Popen([sys.executable, "-m", "pyvgpu.slurm", "keep", "--job", job.id, "--cluster",
                             job.cluster], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    return proc.pid


def keep(cfg: Config, job: Job) -> int:
    """Renew the job's leases every LeaseTTL/3 until none is left (the epilog released them, or they expired);
    then remove the node's files of the job."""
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    lock = open(keeper_file(cfg, job), "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0                                  # another keeper of this job runs on this node
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        info = json.loads(job_file(cfg, job).read_text())
        held = leasing.Held()
        for host, lease_id in zip(info["hosts"], info["leases"]):
            h = Host.parse(host)
            held.leases.append((h.daemon, {LEASE_ID: lease_id, LEASE_DEVICE: h.device}))
        keeper = leasing.Keeper(held, cfg.lease_ttl, cfg.token(), cfg.timeout, renew_ttl=cfg.lease_ttl,
                                on_lost=lambda ids, why: _log(cfg, job, f"keeper: {len(ids)} lease(s) ended"))
        keeper.renew_once()                       # at once: from StartTTL down to LeaseTTL
        keeper.start().wait()
        _log(cfg, job, "keeper: no lease left; exiting")
    except Exception as exc:  # noqa: BLE001 - its one line in the log, never a traceback nobody reads
        _log(cfg, job, f"keeper: {type(exc).__name__}: {exc}")
    finally:
        job_file(cfg, job).unlink(missing_ok=True)
        keeper_file(cfg, job).unlink(missing_ok=True)
    return 0


# ---------------------------------------------------------------------------------------------- check
def check(cfg: Config, out: Any = None) -> int:
    """Ask the pool and print the slurm.conf lines that match it. 1 when a daemon did not answer."""
    out = out or sys.stdout
    cfg.trust()
    reports = {r.host.daemon_key(): r for r in hostmap.query_daemons(cfg.daemons(), cfg.token(), cfg.timeout)}
    failed = False

    def count(pool: list[Host]) -> int:
        nonlocal failed
        total = 0
        for h in pool:
            r = reports.get(h.daemon_key())
            if r is None or r.error is not None:
                failed = True
                print(f"# {h}: {r.error if r else 'not asked'}", file=out)
                continue
            total += 1 if h.device is not None else len(r.devices or [])
        return total

    licenses = []
    if cfg.pool:
        licenses.append(f"{cfg.license}:{count(cfg.pool)}")
    if cfg.shared_pool:
        licenses.append(f"{cfg.shared_license}:{count(cfg.shared_pool) * cfg.shares}")
    import shutil
    import sysconfig
    exe = shutil.which(PROG) or str(Path(sysconfig.get_path("scripts")) / PROG)
    print(f"Licenses={','.join(licenses)}", file=out)
    for hook in ("PrologSlurmctld", "EpilogSlurmctld", "Prolog", "TaskProlog"):
        print(f"{hook}={exe}", file=out)
    print("PrologFlags=Alloc", file=out)
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------- entry point
HOOKS = {"prolog_slurmctld": prolog_slurmctld, "epilog_slurmctld": epilog_slurmctld, "prolog_slurmd": prolog_slurmd,
         "prolog_task": prolog_task}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    context = os.environ.get("SLURM_SCRIPT_CONTEXT", "")
    if not argv and context:
        return run_hook(context)
    p = argparse.ArgumentParser(prog=PROG, description="The pyvgpu pool as a Slurm license (`sbatch -L vgpu:2`). Slurm "
                                "runs this command as PrologSlurmctld, EpilogSlurmctld, Prolog and TaskProlog (it "
                                "reads SLURM_SCRIPT_CONTEXT): the job's GPUs are leased before it starts, its tasks "
                                "get PYVGPU_HOSTS, the leases end with it. By hand: `check`. Set-up: "
                                "docs/operations.md (Slurm).")
    p.add_argument("--conf", help=f"the configuration (default: ${ENV_CONF} or {DEFAULT_CONF})")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    sub.required = True
    sub.add_parser("check", help="ask the pool; print the slurm.conf lines that match it")
    k = sub.add_parser("keep", help="(started by the Prolog) renew a job's leases on this node")
    k.add_argument("--job", required=True)
    k.add_argument("--cluster", default="cluster")
    args = p.parse_args(argv)
    try:
        cfg = Config.load(args.conf)
        if args.cmd == "check":
            return check(cfg)
        cfg.trust()
        return keep(cfg, Job(args.job, args.cluster, "?", None, {}))
    except SlurmHookError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2


def run_hook(context: str) -> int:
    """One hook, as Slurm runs it. Unknown contexts (the Epilog of a node, ...) have nothing to do."""
    hook = HOOKS.get(context)
    if hook is None:
        return 0
    job = None
    cfg = None
    try:
        cfg = Config.load()
        cfg.trust()
        job = Job.from_env()
        return hook(cfg, job)
    except SlurmHookError as exc:
        _log(cfg, job, f"{context}: {exc}")
        return 1 if context == "prolog_slurmctld" else 0
    except Exception as exc:  # noqa: BLE001 - a hook says what went wrong in one line, never a traceback
        _log(cfg, job, f"{context}: {type(exc).__name__}: {exc}")
        return 1 if context == "prolog_slurmctld" else 0


if __name__ == "__main__":
    raise SystemExit(main())
