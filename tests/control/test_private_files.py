"""Files and directories pyvgpu creates for secrets are private whatever the umask (issue 23, part 5): under umask
000 the `pyvgpu` command creates its config dir, token, TLS dir, key and trust file, host map and state dir (pid
file, daemon log) with no access for group or other, and nothing world-writable."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from harness import free_port
from pyvgpu import config


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyvgpu.cli", *args], capture_output=True, text=True, timeout=120,
                          env=env, stdin=subprocess.DEVNULL, umask=0)


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_cli_creates_private_files_under_umask_000(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYVGPU_HOSTS", "PYVGPU_TOKEN")}
    # every component below tmp_path is missing: each one is created by pyvgpu
    env["XDG_CONFIG_HOME"] = str(tmp_path / "home" / "config")
    env["XDG_STATE_HOME"] = str(tmp_path / "home" / "state")
    port = free_port()
    for args in (("token",), ("hosts", "add", "gpu-a:7700"), ("tls", "trust", "ab" * 32, "--note", "gpu-a"),
                 ("daemon", "start", "--detach", "--backend", "emu", "--host", "0.0.0.0", "--port", str(port))):
        proc = cli(env, *args)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    try:
        cfg = Path(env["XDG_CONFIG_HOME"]) / "pyvgpu"
        state = Path(env["XDG_STATE_HOME"]) / "pyvgpu"
        dirs = [cfg, cfg / "tls", state, Path(env["XDG_CONFIG_HOME"]), Path(env["XDG_STATE_HOME"])]
        for d in dirs:
            assert mode(d) == 0o700, f"{d}: {oct(mode(d))}"
        secrets = [cfg / "token", cfg / "tls" / "daemon.key", cfg / "tls" / "fingerprints", state / f"daemon-{port}.log"]
        public = [cfg / "hosts", cfg / "tls" / "daemon.crt", state / f"daemon-{port}.pid"]
        for f in secrets:
            assert mode(f) == 0o600, f"{f}: {oct(mode(f))}"
        for f in public:
            assert mode(f) == 0o644, f"{f}: {oct(mode(f))}"
        everything = [p for p in (tmp_path / "home").rglob("*")]
        assert len(everything) >= len(dirs) + len(secrets) + len(public) - 2
        for p in everything:
            assert not mode(p) & stat.S_IWOTH and not mode(p) & stat.S_IWGRP, f"{p}: {oct(mode(p))}"
    finally:
        stop = cli(env, "daemon", "stop", "--port", str(port))
    assert stop.returncode == 0, stop.stderr


def test_private_dir_narrows_pyvgpus_own_directory(tmp_path):
    old = os.umask(0)
    try:
        loose = tmp_path / "pyvgpu"
        loose.mkdir(0o777)
        assert mode(loose) == 0o777
        assert config.private_dir(loose) == loose and mode(loose) == 0o700
        deep = tmp_path / "a" / "b" / "c"
        config.private_dir(deep)
        assert [mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", deep)] == [0o700] * 3
        config.write_file(deep / "f", b"x", config.PRIVATE_FILE)
        assert mode(deep / "f") == 0o600 and (deep / "f").read_bytes() == b"x"
        config.write_file(deep / "f", b"y", config.PRIVATE_FILE, append=True)
        assert (deep / "f").read_bytes() == b"xy"
    finally:
        os.umask(old)


def test_native_code_cache_is_private(tmp_path, monkeypatch):
    """The emulator's native-code cache holds shared libraries the daemon loads: private like the config dir."""
    from pyvgpu_daemon.emu import native
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    old = os.umask(0)
    try:
        lib = native.load("int pv_private_probe(void) { return 7; }\n", tmp_path / "cache" / "pyvgpu" / "emu-native")
    finally:
        os.umask(old)
    d = tmp_path / "cache" / "pyvgpu" / "emu-native"
    if native.compiler() is None:
        assert lib is None and not d.exists()
        return
    assert lib is not None and lib.pv_private_probe() == 7
    assert mode(d) == 0o700 and mode(d.parent) == 0o700
