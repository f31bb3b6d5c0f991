"""Python's `compile` of a large generated source in a child interpreter, so that the daemon keeps the GIL.

`compile` holds the GIL from start to end: CUB's onesweep kernel's block code (3.4 MB of source) takes about 2.3 s
of CPU, and under load (more runnable processes than cores) several times that in wall time, during which no other
thread of the daemon runs Python: not the event loop, whose heartbeats the clients count on (no reply or heartbeat
for PYVGPU_REPLY_TIMEOUT_MS, 10 s, and a client gives the daemon up: radix_sort_thrust failed so at --load 3 with a
cold cache), nor the other sessions' launches. A source of at least MIN_SOURCE characters is therefore compiled by
`python -I -S` (this interpreter: the same bytecode) and handed back marshalled (the format of .pyc files and of
bytecode_cache.py) in a file, while this process only waits for the child. The same flags as an in-process compile from the
translator (its modules' `from __future__ import annotations`; the interpreter's optimisation level); a child that
fails in any way (a syntax error included) leaves it to the in-process compile, which gives the same code or raises
the same error.
"""
from __future__ import annotations

import __future__
import marshal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import CodeType

MIN_SOURCE = 256 << 10               # smaller sources compile in tens of ms: not worth a process
TIMEOUT_S = 600
_FLAGS = __future__.annotations.compiler_flag
_CHILD = ("import marshal, sys\n"
          "src, out, name, flags, opt = sys.argv[1:]\n"
          "with open(src, encoding='utf-8') as f:\n"
          "    code = compile(f.read(), name, 'exec', flags=int(flags), dont_inherit=True, optimize=int(opt))\n"
          "with open(out, 'wb') as f:\n"
          "    marshal.dump(code, f)\n")


def compile_source(source: str, filename: str) -> CodeType:
    """compile(source, filename, "exec") with the translator's flags; off the GIL when the source is large."""
    if len(source) >= MIN_SOURCE:
        code = _in_child(source, filename)
        if code is not None:
            return code
    return compile(source, filename, "exec", flags=_FLAGS, dont_inherit=True)


def _in_child(source: str, filename: str) -> CodeType | None:
    """The code compiled by a child, through files in a private temporary directory: through pipes, each 64 KB
    chunk was a round trip between the two processes, and under load those round trips (the daemon's thread
    scheduled in again for each) took several times the compile itself."""
    try:
        with tempfile.TemporaryDirectory(prefix="pyvgpu-compile-") as d:
            src, out = Path(d) / "source.py", Path(d) / "code.marshal"
            src.write_text(source, encoding="utf-8")
            proc = subprocess.run([sys.executable, "-I", "-S", "-c", _CHILD, str(src), str(out), filename,
                                   str(_FLAGS), str(sys.flags.optimize)],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  timeout=TIMEOUT_S)
            if proc.returncode != 0:
                return None
            code = marshal.loads(out.read_bytes())
    except (OSError, subprocess.SubprocessError, ValueError, EOFError, TypeError):
        return None
    return code if isinstance(code, CodeType) else None
