#!/usr/bin/env python3
"""NVIDIA's cuBLAS for CUDA 13 from PyPI (the `nvidia-cublas` wheel): fetch it once, keep only what we need.

The headers are needed only to *build* CUDA test programs that call cuBLAS and to (re)generate the committed
files under csrc/cublas/; a client that runs a binary needs nothing from NVIDIA, and nothing of NVIDIA's is
committed to git. The wheel is large (444 MB for 13.10.0.20), so the headers (~580 KB) are read straight out of
the wheel on PyPI with HTTP range requests (a few MB transferred); where that is not possible (no range support,
only a local index), pip downloads the wheel into a temporary directory, the headers are extracted into a cache
under build/, and the wheel is deleted:

    python tools/cublas_wheel.py                 # prints the cached include directory (fetching it if missing)
    python tools/cublas_wheel.py --lib           # also keep lib/libcublas.so.13 (57 MB; to refresh the exports)
    python tools/cublas_wheel.py --lib libcublasLt.so.13   # or another library of the wheel (552 MB for cuBLASLt)

Cache: build/cublas/<version>/include/{cublas_api.h, cublas_v2.h, cublas.h, cublasXt.h, ...}. Programs also need
CUDA's own library_types.h, cuComplex.h, cuda_fp16.h, ... which come with nvcc's toolkit.

`read_prototypes(include_dir)` parses every `CUBLASWINAPI` declaration (return type, name, parameters); the stub
generator and the tests that check pyvgpu/cublas_spec.py against NVIDIA's signatures use it.
"""
from __future__ import annotations

import argparse
import html
import io
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The newest 13.x at the time of writing; its export list is a superset of 13.0's (13.0.2.14 lacks only 10
# emulation-control functions), so programs built against any 13.x header find every symbol in libvcublas.
PINNED_VERSION = "13.10.0.20"
CACHE = ROOT / "build" / "cublas"
HEADERS = ("cublas_api.h", "cublas_v2.h", "cublas.h", "cublasXt.h", "cublasLt.h", "nvblas.h")
# Headers whose CUBLASWINAPI declarations are exported by libcublas.so.13 (cublasLt.h belongs to libcublasLt).
PROTOTYPE_HEADERS = ("cublas_api.h", "cublas.h", "cublasXt.h")


def cache_dir(version: str = PINNED_VERSION) -> Path:
    return CACHE / version


def include_dir(version: str = PINNED_VERSION) -> Path:
    return cache_dir(version) / "include"


LIBRARIES = ("libcublas.so.13", "libcublasLt.so.13")     # the wheel's libraries fetch() can keep


def lib_path(version: str = PINNED_VERSION, name: str = "libcublas.so.13") -> Path:
    return cache_dir(version) / "lib" / name


def fetch(version: str = PINNED_VERSION, want_lib: bool | str = False, python: str = sys.executable) -> Path:
    """Make sure the cache holds the headers (and a library if asked: True is libcublas.so.13, or a name of
    LIBRARIES); returns the include directory."""
    inc = include_dir(version)
    lib = "libcublas.so.13" if want_lib is True else (want_lib or None)
    if lib is not None and lib not in LIBRARIES:
        raise SystemExit(f"cublas_wheel: the wheel has no library {lib!r} ({', '.join(LIBRARIES)})")
    if all((inc / h).is_file() for h in HEADERS) and (lib is None or lib_path(version, lib).is_file()):
        return inc
    remote = None if lib else _remote_wheel(version)
    if remote is not None:
        try:
            with zipfile.ZipFile(remote) as zf:
                _unpack(zf, version, None)
        except (OSError, zipfile.BadZipFile) as exc:
            print(f"cublas_wheel: reading the headers out of the remote wheel failed ({exc}); downloading it",
                  file=sys.stderr)
            remote = None
    if remote is None:
        with tempfile.TemporaryDirectory(prefix="pyvgpu-cublas-") as tmp:
            subprocess.run([python, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                            "--progress-bar", "off", "-q", "-d", tmp, f"nvidia-cublas=={version}"], check=True)
            wheels = list(Path(tmp).glob("nvidia_cublas-*.whl"))
            if len(wheels) != 1:
                raise SystemExit(f"cublas_wheel: expected one nvidia_cublas wheel in {tmp}, found {wheels}")
            with zipfile.ZipFile(wheels[0]) as zf:
                _unpack(zf, version, lib)
    missing = [h for h in HEADERS if not (inc / h).is_file()]
    if missing:
        raise SystemExit(f"cublas_wheel: nvidia-cublas {version} lacks {missing}")
    return inc


def _unpack(zf: zipfile.ZipFile, version: str, lib: str | None) -> None:
    """Extract the headers (and the library `lib` if given) into the cache, atomically per part."""
    staging = Path(tempfile.mkdtemp(prefix="stage-", dir=CACHE.parent if CACHE.parent.exists() else None))
    try:
        for info in zf.infolist():
            name = info.filename
            if name.startswith("nvidia/cu13/include/") and name.endswith(".h"):
                _extract(zf, info, staging / "include" / Path(name).name)
            elif lib and name == f"nvidia/cu13/lib/{lib}":
                _extract(zf, info, staging / "lib" / lib)
            elif name.endswith("licenses/License.txt"):
                _extract(zf, info, staging / "License.txt")
        dest = cache_dir(version)
        dest.mkdir(parents=True, exist_ok=True)
        for part in ("include", "lib", "License.txt"):
            src = staging / part
            if not src.exists():
                continue
            if part == "lib":             # libraries are kept side by side: fetching one keeps the other
                (dest / part).mkdir(exist_ok=True)
                for f in src.iterdir():
                    shutil.move(str(f), str(dest / part / f.name))
                continue
            if (dest / part).exists() and src.is_dir():
                shutil.rmtree(dest / part)
            shutil.move(str(src), str(dest / part))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# ----------------------------------------------------------------------------------------------- remote wheel
SIMPLE_INDEX = "https://pypi.org/simple/nvidia-cublas/"


class HTTPRangeFile(io.RawIOBase):
    """A read-only, seekable view of a remote file through HTTP range requests.

    Why: the wheel is 444 MB and only its headers (~0.6 MB) are needed; zipfile reads the central directory at the
    end and then each member it extracts, so a few range requests replace the whole download. Blocks are cached so
    zipfile's many small reads cost one request each block."""

    BLOCK = 1 << 20

    def __init__(self, url: str, size: int, timeout: float = 60.0) -> None:
        super().__init__()
        self.url, self.size, self.timeout, self.pos = url, size, timeout, 0
        self._blocks: dict[int, bytes] = {}

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.pos = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence] + offset
        return self.pos

    def _block(self, index: int) -> bytes:
        if index not in self._blocks:
            lo = index * self.BLOCK
            hi = min(self.size, lo + self.BLOCK) - 1
            req = urllib.request.Request(self.url, headers={"Range": f"bytes={lo}-{hi}"})
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                if resp.status != 206:
                    raise OSError(f"no range support (HTTP {resp.status})")
                data = resp.read()
            if len(data) != hi - lo + 1:
                raise OSError(f"short range read ({len(data)} of {hi - lo + 1} bytes)")
            self._blocks[index] = data
        return self._blocks[index]

    def readinto(self, buf) -> int:  # type: ignore[override]
        n = min(len(buf), max(0, self.size - self.pos))
        done = 0
        while done < n:
            block = self._block((self.pos + done) // self.BLOCK)
            start = (self.pos + done) % self.BLOCK
            k = min(n - done, len(block) - start)
            buf[done:done + k] = block[start:start + k]
            done += k
        self.pos += n
        return n


def _remote_wheel(version: str) -> io.BufferedReader | None:
    """The pinned manylinux x86-64 wheel on PyPI as a seekable file, or None when PyPI cannot be reached that way."""
    try:
        with urllib.request.urlopen(SIMPLE_INDEX, timeout=30) as resp:
            page = resp.read().decode()
        pat = rf'href="(https://[^"#]*/nvidia_cublas-{re.escape(version)}-py3-none-[^"#]*x86_64[^"#]*\.whl)'
        m = re.search(pat, page)
        if not m:
            return None
        url = html.unescape(m.group(1))
        head = urllib.request.Request(url, method="HEAD")
        with urllib.request.urlopen(head, timeout=30) as resp:
            size = int(resp.headers["Content-Length"])
        return io.BufferedReader(HTTPRangeFile(url, size), buffer_size=1 << 16)
    except (OSError, ValueError, KeyError):
        return None


def _extract(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zf.open(info) as src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out)


# ----------------------------------------------------------------------------------------------- parsing
@dataclass(frozen=True)
class Param:
    ctype: str    # normalised: "const float*", "cublasHandle_t", "const float* const*", ...
    name: str


@dataclass(frozen=True)
class Prototype:
    ret: str
    name: str
    params: tuple[Param, ...]
    header: str


def normalise_type(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"\s*\*\s*", "*", text)
    text = text.replace("*const", "* const")
    return text


def _split_param(text: str) -> Param:
    text = re.sub(r"\s+", " ", text).strip()
    arr = text.endswith("[]")
    if arr:
        text = text[:-2].strip()
    m = re.match(r"(.*?)(\w+)$", text)
    if not m or not m.group(1).strip():
        return Param(normalise_type(text + ("*" if arr else "")), "")
    ctype = m.group(1) + ("*" if arr else "")
    return Param(normalise_type(ctype), m.group(2))


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def read_prototypes(inc: Path, headers: tuple[str, ...] = PROTOTYPE_HEADERS) -> dict[str, Prototype]:
    """name -> Prototype for every `RET CUBLASWINAPI name(params);` in the headers (first declaration wins)."""
    protos: dict[str, Prototype] = {}
    pat = re.compile(r"([A-Za-z_][\w\s\*]*?)\bCUBLASWINAPI\s+(\w+)\s*\(([^;{}]*?)\)\s*;", re.S)
    for header in headers:
        path = inc / header
        if not path.is_file():
            continue
        text = strip_comments(path.read_text(errors="replace"))
        text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        for m in pat.finditer(text):
            ret = re.sub(r"\b(CUBLASAPI|extern|static|inline)\b", " ", m.group(1).split(";")[-1].split("}")[-1])
            ret = normalise_type(ret)
            raw = m.group(3).strip()
            params = () if raw in ("", "void") else tuple(_split_param(p) for p in raw.split(","))
            protos.setdefault(m.group(2), Prototype(ret, m.group(2), params, header))
    return protos


def read_enums(inc: Path, header: str = "cublas_api.h") -> dict[str, int]:
    """Every `NAME = value` enumerator of the header's typedef'd enums (decimal values)."""
    text = strip_comments((inc / header).read_text(errors="replace"))
    out: dict[str, int] = {}
    for body in re.findall(r"typedef\s+enum\s*\w*\s*\{(.*?)\}", text, re.S):
        for name, value in re.findall(r"(\w+)\s*=\s*(-?\d+)", body):
            out[name] = int(value)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default=PINNED_VERSION)
    ap.add_argument("--lib", nargs="?", const="libcublas.so.13", default=None, choices=LIBRARIES,
                    help="also keep lib/LIB (default libcublas.so.13)")
    args = ap.parse_args(argv)
    print(fetch(args.version, want_lib=args.lib or False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
