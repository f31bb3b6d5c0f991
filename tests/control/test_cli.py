"""The `pyvgpu` command, run as a subprocess with its config and state directories in tmp dirs."""
from __future__ import annotations

import importlib.util
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pyvgpu
from harness import free_port

HAVE_DAEMON = importlib.util.find_spec("pyvgpu_daemon.__main__") is not None
needs_daemon = pytest.mark.skipif(not HAVE_DAEMON, reason="pyvgpu_daemon.__main__ is not there yet")


def pyvgpu_cmd() -> list[str]:
    """The installed `pyvgpu` script next to this interpreter when there is one, else the module."""
    script = Path(sys.executable).parent / "pyvgpu"
    return [str(script)] if script.exists() else [sys.executable, "-m", "pyvgpu.cli"]


@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if k not in ("PYVGPU_HOSTS", "PYVGPU_TOKEN", "PYVGPU_DEBUG")}
    e["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    e["XDG_STATE_HOME"] = str(tmp_path / "state")
    return e


@pytest.fixture
def cli(env):
    def run(*args: str, timeout: float = 120, extra_env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([*pyvgpu_cmd(), *args], capture_output=True, text=True, timeout=timeout,
                              env={**env, **(extra_env or {})}, stdin=subprocess.DEVNULL)
    return run


def assert_clean_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    """Nonzero exit, no traceback, and the message names what went wrong."""
    assert proc.returncode != 0, proc
    assert "Traceback" not in proc.stderr, proc.stderr
    for f in fragments:
        assert f in proc.stderr, proc.stderr


# ---------------------------------------------------------------------------------------------- help
@pytest.mark.parametrize("args, expected", [
    ((), ["daemon", "hosts", "devices", "run", "lib", "token", "tls"]),
    (("daemon",), ["start", "stop", "status"]),
    (("daemon", "start"), ["--host", "--port", "--backend", "--detach", "--token-file", "--tls-cert",
                           "--emu-devices", "--emu-memory", "--emu-slowdown", "127.0.0.1", "token"]),
    (("tls",), ["fingerprint", "trust", "PYVGPU_TLS_FINGERPRINT", "PYVGPU_TLS_CA"]),
    (("daemon", "stop"), ["--port", "SIGTERM"]),
    (("daemon", "status"), ["--host", "--port", "sessions"]),
    (("hosts",), ["add", "remove", "list", "PYVGPU_HOSTS"]),
    (("hosts", "add"), ["HOST[:PORT]"]),
    (("hosts", "remove"), ["--all"]),
    (("hosts", "list"), ["PYVGPU_HOSTS"]),
    (("devices",), ["GPU", "unreachable", "--hosts"]),
    (("run",), ["LD_PRELOAD", "PYVGPU_HOSTS", "--hosts", "-cudart shared"]),
    (("lib",), ["libvcudart"]),
    (("token",), ["--show", "--new", "0600"]),
])
def test_help(cli, args, expected):
    proc = cli(*args, "--help")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    for word in expected:
        assert word in text, f"{word!r} missing from `pyvgpu {' '.join(args)} --help`"


def test_version(cli):
    proc = cli("--version")
    assert proc.returncode == 0 and pyvgpu.__version__ in proc.stdout


def test_no_command_is_usage_error(cli):
    proc = cli()
    assert proc.returncode == 2 and "usage" in proc.stderr


# ---------------------------------------------------------------------------------------------- hosts
def test_hosts_round_trip(cli, env):
    hosts_file = Path(env["XDG_CONFIG_HOME"]) / "pyvgpu" / "hosts"
    proc = cli("hosts", "list")
    assert proc.returncode == 0 and proc.stdout == "" and "empty" in proc.stderr

    proc = cli("hosts", "add", "gpu-a", "gpu-b:7701", "[::1]:7702")
    assert proc.returncode == 0, proc.stderr
    assert hosts_file.is_file()
    assert cli("hosts", "list").stdout.split() == ["gpu-a:7700", "gpu-b:7701", "[::1]:7702"]

    proc = cli("hosts", "add", "GPU-A:7700", "gpu-c")        # duplicate is skipped, new one appended
    assert proc.returncode == 0
    assert "already" in proc.stderr
    assert cli("hosts", "list").stdout.split() == ["gpu-a:7700", "gpu-b:7701", "[::1]:7702", "gpu-c:7700"]

    proc = cli("hosts", "remove", "gpu-b:7701", "[::1]:7702")
    assert proc.returncode == 0, proc.stderr
    assert cli("hosts", "list").stdout.split() == ["gpu-a:7700", "gpu-c:7700"]
    # the file is the documented format: what the C side reads
    lines = [ln for ln in hosts_file.read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines == ["gpu-a:7700", "gpu-c:7700"]

    proc = cli("hosts", "remove", "gpu-z")
    assert_clean_error(proc, "gpu-z:7700", "not in the host map")
    assert proc.returncode == 1

    proc = cli("hosts", "remove", "--all")
    assert proc.returncode == 0
    assert cli("hosts", "list").stdout == ""


def test_hosts_list_json_and_env_override(cli):
    assert cli("hosts", "add", "file-host").returncode == 0
    proc = cli("hosts", "list", extra_env={"PYVGPU_HOSTS": "env-a:1,env-b:2"})
    assert proc.stdout.split() == ["env-a:1", "env-b:2"]
    assert "PYVGPU_HOSTS" in proc.stderr
    proc = cli("hosts", "list", "--json")
    assert '"file-host:7700"' in proc.stdout


@pytest.mark.parametrize("bad, fragment", [
    ("gpu:99999", "port"), ("::1", "brackets"), ("bad host", "not a valid host"), ("gpu:", "port"),
])
def test_hosts_add_rejects_bad_entries(cli, env, bad, fragment):
    proc = cli("hosts", "add", "ok-host", bad)
    assert_clean_error(proc, fragment)
    assert not (Path(env["XDG_CONFIG_HOME"]) / "pyvgpu" / "hosts").exists()   # nothing half-written


def test_broken_hosts_file_is_one_line_error(cli, env):
    path = Path(env["XDG_CONFIG_HOME"]) / "pyvgpu" / "hosts"
    path.parent.mkdir(parents=True)
    path.write_text("gpu-a\ngpu-a\n")
    proc = cli("hosts", "list")
    assert_clean_error(proc, "line 2", "duplicates line 1")
    assert len(proc.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------- token
def test_token_create_show_new(cli, env):
    path = Path(env["XDG_CONFIG_HOME"]) / "pyvgpu" / "token"
    proc = cli("token")
    assert proc.returncode == 0 and str(path) in proc.stdout
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = path.read_text().strip()
    assert len(first) == 64 and int(first, 16) >= 0
    assert cli("token").returncode == 0 and path.read_text().strip() == first      # idempotent
    assert cli("token", "--show").stdout.strip() == first
    assert cli("token", "--new").returncode == 0
    second = path.read_text().strip()
    assert second != first and cli("token", "--show").stdout.strip() == second
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# ---------------------------------------------------------------------------------------------- lib / run
def _built_lib() -> Path | None:
    try:
        return pyvgpu.lib_path()
    except FileNotFoundError:
        return None


@pytest.mark.skipif(_built_lib() is None, reason="libvcudart.so is not built yet")
def test_lib_prints_existing_path(cli):
    proc = cli("lib")
    assert proc.returncode == 0, proc.stderr
    path = Path(proc.stdout.strip())
    assert path.is_file() and path.name == "libvcudart.so"


def fake_libs(tmp_path: Path) -> Path:
    """A directory with stand-ins for libvcudart.so and libvcuda.so.1 (not ELF files: the loader ignores them with
    a warning); returns the libvcudart path, for PYVGPU_LIB."""
    (tmp_path / "libvcuda.so.1").write_bytes(b"not really")
    fake = tmp_path / "libvcudart.so"
    fake.write_bytes(b"not really")
    return fake


def test_lib_honours_pyvgpu_lib(cli, tmp_path):
    fake = fake_libs(tmp_path)
    env = {"PYVGPU_LIB": str(fake)}
    proc = cli("lib", extra_env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == str(fake)
    assert cli("lib", "--driver", extra_env=env).stdout.strip() == str(tmp_path / "libvcuda.so.1")
    assert cli("lib", "--dir", extra_env=env).stdout.strip() == str(tmp_path)


def test_run_sets_environment(cli, tmp_path):
    fake = fake_libs(tmp_path)
    script = ("import os; print(os.environ['LD_PRELOAD']); print(os.environ['PYVGPU_HOSTS']); "
              "print(os.environ['LD_LIBRARY_PATH'])")
    proc = cli("run", "--hosts", "a:1,[::1]:2", "--", sys.executable, "-c", script, "ignored-arg",
               extra_env={"PYVGPU_LIB": str(fake), "LD_LIBRARY_PATH": "/opt/x"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"{fake} {tmp_path / 'libvcuda.so.1'}", "a:1,[::1]:2", f"{tmp_path}:/opt/x"]


def test_run_refuses_static_executable(cli, tmp_path):
    """A statically linked program cannot load libcuda.so.1: one line says so instead of a CUDA error later."""
    fake = fake_libs(tmp_path)
    src = tmp_path / "s.c"
    src.write_text("int main(void) { return 0; }\n")
    exe = tmp_path / "static-app"
    subprocess.run(["cc", "-static", "-o", str(exe), str(src)], check=True, capture_output=True)
    proc = cli("run", "--hosts", "a:1", "--", str(exe), extra_env={"PYVGPU_LIB": str(fake)})
    assert_clean_error(proc, "statically linked", "cannot be remoted")
    assert proc.returncode == 126


def test_run_uses_host_map_and_exit_status(cli, tmp_path):
    fake = fake_libs(tmp_path)
    assert cli("hosts", "add", "gpu-a:7000", "gpu-b").returncode == 0
    script = "import os, sys; print(os.environ['PYVGPU_HOSTS']); sys.exit(7)"
    proc = cli("run", "--", sys.executable, "-c", script, extra_env={"PYVGPU_LIB": str(fake)})
    assert proc.returncode == 7                         # the program's own exit status
    assert proc.stdout.strip() == "gpu-a:7000,gpu-b:7700"


def test_run_errors(cli, tmp_path):
    fake = fake_libs(tmp_path)
    lib = {"PYVGPU_LIB": str(fake)}
    assert_clean_error(cli("run", extra_env=lib), "nothing to run")
    assert_clean_error(cli("run", "--", "true", extra_env=lib), "no hosts")
    proc = cli("run", "--hosts", "a:1", "--", "/nonexistent/app", extra_env=lib)
    assert_clean_error(proc, "/nonexistent/app", "not found")
    assert proc.returncode == 127
    assert_clean_error(cli("run", "--hosts", "a:1,a:1", "--", "true", extra_env=lib), "listed twice")


# ---------------------------------------------------------------------------------------------- devices
def test_devices_empty_map(cli):
    assert_clean_error(cli("devices"), "no hosts")


def test_devices_unreachable_only(cli):
    port = free_port()       # nothing listens there
    proc = cli("devices", "--hosts", f"127.0.0.1:{port}", "--timeout", "2")
    assert_clean_error(proc, f"127.0.0.1:{port}", "unreachable", "refused")
    assert proc.returncode == 1


def test_devices_silent_listener_times_out(cli):
    with socket.socket() as srv:          # accepts but never speaks the protocol
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        proc = cli("devices", "--hosts", f"127.0.0.1:{port}", "--timeout", "1", timeout=30)
    assert_clean_error(proc, f"127.0.0.1:{port}", "unreachable")


@needs_daemon
def test_devices_two_daemons_and_one_unreachable(cli, daemon_factory):
    a = daemon_factory("--emu-devices", "1")
    b = daemon_factory("--emu-devices", "1")
    dead = free_port()
    proc = cli("devices", "--hosts", f"{a.address},127.0.0.1:{dead},{b.address}")
    assert proc.returncode == 1
    rows = [ln.split() for ln in proc.stdout.splitlines()[1:]]
    assert [r[0] for r in rows] == ["GPU0", "GPU1"]
    assert rows[0][1] == a.address and rows[1][1] == b.address
    assert rows[0][2] == "0" and rows[1][2] == "0"
    assert all(r[-1] == "emu" for r in rows)
    assert f"127.0.0.1:{dead}: unreachable" in proc.stderr and "Traceback" not in proc.stderr

    proc = cli("devices", "--hosts", f"{a.address},{b.address}")
    assert proc.returncode == 0, proc.stderr
    assert "GPU1" in proc.stdout


@needs_daemon
def test_devices_from_host_map_json(cli, daemon_factory):
    import json
    a = daemon_factory("--emu-devices", "2")
    assert cli("hosts", "add", a.address).returncode == 0
    proc = cli("devices", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [(g["index"], g["remote_ordinal"]) for g in data["gpus"]] == [(0, 0), (1, 1)]
    assert all(g["host"] == a.address and g["total_mem"] > 0 for g in data["gpus"])


# ---------------------------------------------------------------------------------------------- daemon
@needs_daemon
def test_daemon_detach_status_stop(cli, env):
    port = free_port()
    state = Path(env["XDG_STATE_HOME"]) / "pyvgpu"
    proc = cli("daemon", "start", "--detach", "--backend", "emu", "--port", str(port), "--emu-devices", "2")
    assert proc.returncode == 0, proc.stderr
    pid_file = state / f"daemon-{port}.pid"
    log_file = state / f"daemon-{port}.log"
    try:
        assert pid_file.is_file() and log_file.is_file()
        assert str(log_file) in proc.stdout
        pid = int(pid_file.read_text())
        os.kill(pid, 0)
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass

        again = cli("daemon", "start", "--detach", "--backend", "emu", "--port", str(port))
        assert_clean_error(again, "already")

        st = cli("daemon", "status", "--port", str(port))
        assert st.returncode == 0, st.stderr
        assert "backend emu" in st.stdout
        assert "devices: 2" in st.stdout
        assert "sessions:" in st.stdout
        js = cli("daemon", "status", "--port", str(port), "--json")
        assert js.returncode == 0 and js.stdout.lstrip().startswith("{")
    finally:
        stop = cli("daemon", "stop", "--port", str(port))
    assert stop.returncode == 0, stop.stderr
    assert "stopped" in stop.stdout
    assert not pid_file.exists()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    assert_clean_error(cli("daemon", "stop", "--port", str(port)), "no pid file")
    assert_clean_error(cli("daemon", "status", "--port", str(port), "--timeout", "2"), "cannot reach")


@needs_daemon
def test_daemon_detach_failure_is_one_line_with_the_reason(cli, env):
    port = free_port()
    proc = cli("daemon", "start", "--detach", "--backend", "emu", "--port", str(port), "--emu-devices", "1",
               "--emu-memory", "lots")
    assert_clean_error(proc, "exited with status 2", f"daemon-{port}.log")
    assert "lots" in proc.stderr.lower()              # the daemon's own reason is passed on
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (Path(env["XDG_STATE_HOME"]) / "pyvgpu" / f"daemon-{port}.pid").exists()


@needs_daemon
def test_daemon_status_shows_sessions(cli, daemon):
    from pyvgpu.client import Client
    with Client.connect("127.0.0.1", daemon.port) as c:
        ptr, _ = c.check("MALLOC", 0, 1 << 20)
        st = cli("daemon", "status", "--port", str(daemon.port))
    assert st.returncode == 0, st.stderr
    assert "session" in st.stdout
    assert "1.0 MiB" in st.stdout           # the memory the open session holds


@needs_daemon
def test_daemon_start_foreground_delegates_to_daemon(env, tmp_path):
    port = free_port()
    log = open(tmp_path / "fg.log", "wb")
    proc = subprocess.Popen([*pyvgpu_cmd(), "daemon", "start", "--backend", "emu", "--port", str(port),
                             "--emu-devices", "3"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        from pyvgpu.client import Client
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "fg.log").read_text()
            try:
                c = Client.connect("127.0.0.1", port, timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "foreground daemon never listened"
                time.sleep(0.1)
        assert len(c.info["devices"]) == 3 and c.info["backend"] == "emu"
        c.close()
        assert not (Path(env["XDG_STATE_HOME"]) / "pyvgpu" / f"daemon-{port}.pid").exists()   # foreground
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(20)
    assert code == 0


@needs_daemon
def test_token_required_off_loopback(cli, env):
    port = free_port()
    token_file = Path(env["XDG_CONFIG_HOME"]) / "pyvgpu" / "token"
    proc = cli("daemon", "start", "--detach", "--backend", "emu", "--host", "0.0.0.0", "--port", str(port))
    assert proc.returncode == 0, proc.stderr
    try:
        assert token_file.is_file() and "token" in proc.stderr         # created and said so
        fp = cli("tls", "fingerprint").stdout.strip()                  # ... and a self-signed certificate
        assert len(fp) == 64 and f"tls trust {fp}" in proc.stderr
        plain = cli("devices", "--hosts", f"127.0.0.1:{port}", "--timeout", "3")
        assert plain.returncode != 0 and "GPU0" not in plain.stdout    # off loopback it speaks TLS only
        assert cli("tls", "trust", fp, "--note", "test daemon").returncode == 0
        ok = cli("devices", "--hosts", f"127.0.0.1:{port}")
        assert ok.returncode == 0 and "GPU0" in ok.stdout, ok.stderr    # the CLI proves the stored token
        bad = cli("devices", "--hosts", f"127.0.0.1:{port}", extra_env={"PYVGPU_TOKEN": "wrong"})
        assert_clean_error(bad, "token")
        assert "GPU0" not in bad.stdout
        wrong = cli("devices", "--hosts", f"127.0.0.1:{port}", extra_env={"PYVGPU_TLS_FINGERPRINT": "ab" * 32})
        assert_clean_error(wrong, "not a pinned fingerprint")
    finally:
        assert cli("daemon", "stop", "--port", str(port)).returncode == 0


def test_daemon_stop_without_pid_file(cli):
    port = free_port()
    assert_clean_error(cli("daemon", "stop", "--port", str(port)), "no pid file")


def test_daemon_stop_stale_pid_file(cli, env):
    port = free_port()
    state = Path(env["XDG_STATE_HOME"]) / "pyvgpu"
    state.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (state / f"daemon-{port}.pid").write_text(f"{dead.pid}\n")
    proc = cli("daemon", "stop", "--port", str(port))
    assert_clean_error(proc, "not running")
    assert not (state / f"daemon-{port}.pid").exists()


def test_daemon_start_port_in_use(cli):
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        proc = cli("daemon", "start", "--detach", "--backend", "emu", "--port", str(port))
    assert_clean_error(proc, "already listening")


def test_daemon_start_bad_token_file(cli, tmp_path):
    proc = cli("daemon", "start", "--port", str(free_port()), "--token-file", str(tmp_path / "missing"))
    assert_clean_error(proc, "does not exist")
