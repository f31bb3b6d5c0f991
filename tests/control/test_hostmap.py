"""Host map parsing, editing, PYVGPU_HOSTS override and GPU numbering (no daemon needed)."""
from __future__ import annotations

import pytest

from pyvgpu import hostmap
from pyvgpu.hostmap import Gpu, Host, HostDevices, HostMapError
from pyvgpu.protocol import DEFAULT_PORT


@pytest.mark.parametrize("spec, host, port", [
    ("gpu-a", "gpu-a", DEFAULT_PORT),
    ("gpu-b:7701", "gpu-b", 7701),
    ("  10.0.0.5:1  ", "10.0.0.5", 1),
    ("node_3.cluster.local:65535", "node_3.cluster.local", 65535),
    ("[::1]:7702", "::1", 7702),
    ("[::1]", "::1", DEFAULT_PORT),
    ("[fe80::1%eth0]:9000", "fe80::1%eth0", 9000),
])
def test_parse_valid(spec, host, port):
    h = Host.parse(spec)
    assert (h.host, h.port) == (host, port)
    assert Host.parse(str(h)) == h          # canonical form round-trips


@pytest.mark.parametrize("spec, fragment", [
    ("", "empty"),
    ("gpu:", "port"),
    ("gpu:0", "port"),
    ("gpu:65536", "port"),
    ("gpu:77x", "port"),
    ("::1", "brackets"),
    ("2001:db8::1:7700", "brackets"),
    ("[::1", "missing ']'"),
    ("[::1]7700", "':PORT'"),
    ("[not-v6]:7700", "not an IPv6"),
    ("bad host", "not a valid host"),
    ("-lead", "not a valid host"),
])
def test_parse_invalid(spec, fragment):
    with pytest.raises(HostMapError, match=None) as info:
        Host.parse(spec)
    assert fragment in str(info.value)


def test_str_brackets_ipv6_only():
    assert str(Host("a", 1)) == "a:1"
    assert str(Host("::1", 7700)) == "[::1]:7700"


def test_file_comments_blank_lines_and_order(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# my cluster\n\ngpu-b:7701   # second\n  gpu-a\n[::1]:7702\n")
    hosts = hostmap.load_file(path)
    assert [str(h) for h in hosts] == ["gpu-b:7701", "gpu-a:7700", "[::1]:7702"]


def test_missing_file_is_empty(tmp_path):
    assert hostmap.load_file(tmp_path / "nope") == []


@pytest.mark.parametrize("text, error", [
    ("gpu-a\n# x\nGPU-A:7700\n", r"line 3: gpu-a:7700 duplicates line 1|line 3: GPU-A:7700 duplicates line 1"),
    ("[0:0:0:0:0:0:0:1]:7700\n[::1]\n", "duplicates line 1"),     # IPv6 addresses compare in canonical form
    ("gpu-a\ngpu-b:notaport\n", r"line 2: .*port"),
], ids=["duplicate-names-both-lines", "ipv6-duplicates-canonical", "bad-line-numbered"])
def test_bad_hosts_file_names_the_line(tmp_path, text, error):
    path = tmp_path / "hosts"
    path.write_text(text)
    with pytest.raises(HostMapError, match=error):
        hostmap.load_file(path)


def test_env_replaces_file(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("file-host:7000\n")
    hm = hostmap.load(env={"PYVGPU_HOSTS": "a:1, [::1]:2 ,,b"}, path=path)
    assert hm.source == "PYVGPU_HOSTS"
    assert [str(h) for h in hm] == ["a:1", "[::1]:2", f"b:{DEFAULT_PORT}"]
    hm = hostmap.load(env={"PYVGPU_HOSTS": "  "}, path=path)   # set but empty: the file applies
    assert hm.source == str(path)
    assert [str(h) for h in hm] == ["file-host:7000"]


def test_env_duplicates_and_errors():
    with pytest.raises(HostMapError, match="listed twice"):
        hostmap.parse_env("a:1,A:1")
    with pytest.raises(HostMapError, match="PYVGPU_HOSTS"):
        hostmap.parse_env("a:1,b:x")


def test_add_keeps_comments_and_skips_present(tmp_path):
    path = tmp_path / "cfg" / "hosts"
    added, present = hostmap.add([Host.parse("gpu-a"), Host.parse("gpu-b:7701")], path)
    assert [str(h) for h in added] == ["gpu-a:7700", "gpu-b:7701"]
    assert present == []
    path.write_text(path.read_text() + "# keep me\n")
    added, present = hostmap.add([Host.parse("gpu-a:7700"), Host.parse("gpu-c"), Host.parse("gpu-c")], path)
    assert [str(h) for h in added] == ["gpu-c:7700"]
    assert [str(h) for h in present] == ["gpu-a:7700", "gpu-c:7700"]
    text = path.read_text()
    assert "# keep me" in text
    assert [str(h) for h in hostmap.load_file(path)] == ["gpu-a:7700", "gpu-b:7701", "gpu-c:7700"]


def test_remove(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# top\ngpu-a\ngpu-b:7701 # b\ngpu-c\n")
    removed, missing = hostmap.remove([Host.parse("gpu-b:7701"), Host.parse("gpu-z")], path)
    assert [str(h) for h in removed] == ["gpu-b:7701"]
    assert [str(h) for h in missing] == ["gpu-z:7700"]
    assert path.read_text() == "# top\ngpu-a\ngpu-c\n"


def test_remove_refuses_broken_file(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("gpu-a\ngpu-a\n")
    with pytest.raises(HostMapError):
        hostmap.remove([Host.parse("gpu-a")], path)


def test_save_round_trip_and_refuses_duplicates(tmp_path):
    path = tmp_path / "hosts"
    hosts = [Host.parse("x:1"), Host.parse("[::1]:2")]
    hostmap.save(hosts, path)
    assert hostmap.load_file(path) == hosts
    with pytest.raises(HostMapError):
        hostmap.save([Host.parse("x:1"), Host.parse("X:1")], path)


def test_default_path_follows_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("PYVGPU_HOSTS", raising=False)
    hostmap.add([Host.parse("gpu-q:1234")])
    assert (tmp_path / "pyvgpu" / "hosts").read_text().strip().endswith("gpu-q:1234")
    assert [str(h) for h in hostmap.load()] == ["gpu-q:1234"]


def test_numbering_host_order_then_ordinal():
    a, b, c = Host("a", 1), Host("b", 2), Host("c", 3)
    reports = [
        HostDevices(a, devices=[{"name": "A0", "total_mem": 10}, {"name": "A1", "total_mem": 11}], backend="cuda"),
        HostDevices(b, error="connection refused"),
        HostDevices(c, devices=[{"name": "C0", "total_mem": 12, "backend": "emu"}], backend="emu"),
    ]
    gpus = hostmap.number_gpus(reports)
    assert gpus == [
        Gpu(0, a, 0, "A0", 10, "cuda"),
        Gpu(1, a, 1, "A1", 11, "cuda"),
        Gpu(2, c, 0, "C0", 12, "emu"),
    ]


def test_query_host_reports_failure_as_one_line():
    def refuse(*a, **k):
        raise ConnectionRefusedError(111, "Connection refused")

    rep = hostmap.query_host(Host("x", 1), connect=refuse)
    assert rep.devices is None and "refused" in rep.error and "\n" not in rep.error
    assert rep.error.startswith("unreachable: ")

    def reject(*a, **k):
        raise RuntimeError("daemon x:1 rejected the token proof\n(details)")

    rep = hostmap.query_host(Host("x", 1), connect=reject)
    assert rep.error == "daemon x:1 rejected the token proof"

    class Fake:
        info = {"devices": [{"name": "d"}], "backend": "emu"}
        closed = False

        def close(self):
            Fake.closed = True

    rep = hostmap.query_host(Host("x", 1), connect=lambda *a, **k: Fake())
    assert rep.devices == [{"name": "d"}] and rep.backend == "emu" and Fake.closed


def test_format_bytes():
    assert hostmap.format_bytes(512) == "512 B"
    assert hostmap.format_bytes(16 << 30) == "16.0 GiB"
    assert hostmap.format_bytes(1536 << 20) == "1.5 GiB"


# ---------------------------------------------------------------------------------------------- C parity
def test_libvcudart_reads_the_hosts_file_pyvgpu_writes(daemon_factory, tmp_path):
    """A hosts file written by `pyvgpu hosts add` (header comments, hand-added comment) is what libvcudart reads:
    a CUDA program run with plain LD_PRELOAD (no PYVGPU_HOSTS) sees the GPUs of both daemons, in map order."""
    import os
    import subprocess
    from pathlib import Path

    import pyvgpu
    from harness import NVCC, ROOT, build_cuda
    if not Path(NVCC).exists():
        pytest.skip("nvcc not installed")
    try:
        lib = pyvgpu.lib_path()
    except FileNotFoundError:
        pytest.skip("libvcudart.so not built")
    a = daemon_factory("--emu-devices", "2")
    b = daemon_factory("--emu-devices", "1")
    cfg = tmp_path / "cfg"
    path = cfg / "pyvgpu" / "hosts"
    hostmap.add([Host.parse(a.address)], path)
    path.write_text(path.read_text() + "   # a hand-written comment\n\n")
    hostmap.add([Host.parse(b.address)], path)
    assert [str(h) for h in hostmap.load_file(path)] == [a.address, b.address]

    exe = build_cuda(ROOT / "examples" / "hello" / "vector_add.cu")
    env = {k: v for k, v in os.environ.items() if k != "PYVGPU_HOSTS"}
    env.update(XDG_CONFIG_HOME=str(cfg), LD_PRELOAD=str(lib))
    proc = subprocess.run([str(exe), "300"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 GPU(s) visible" in proc.stdout
    assert "PASSED" in proc.stdout
    # numbering as the C side sees it: a holds GPU0-1, b starts at GPU2; the client announces each host's pointer
    # window as (first GPU index + 1) * VA_WINDOW_BYTES, which the daemons log
    from pyvgpu.protocol import VA_WINDOW_BYTES
    assert f"va_base={hex(1 * VA_WINDOW_BYTES)}" in a.log_text()
    assert f"va_base={hex(3 * VA_WINDOW_BYTES)}" in b.log_text()
