"""PTX tokenizer: text → list of (kind, text, line, pos).

kinds: 'id' (identifiers, directives, dotted opcodes, registers, special registers), 'num' (any numeric
literal as written), 'str' (a quoted string), 'punct' (one of {}[](),;:@!|<>+-=).
Comments are dropped; line numbers are 1-based; pos is the token's offset in the text.

`tokenize` reads a whole text or one span of it (a function body: ptx/index.py); `Lexer` reads a text token by token
on demand, so the module-level parser can jump over function bodies without reading them.
"""
from __future__ import annotations

import re

from pyvgpu_daemon.errors import CudaError

_TOKEN = re.compile(r"""
  (?P<ws>[ \t\r\f\v]+)
| (?P<nl>\n)
| (?P<lc>//[^\n]*)
| (?P<bc>/\*.*?\*/)
| (?P<str>"(?:[^"\\\n]|\\.)*")
| (?P<num>0[fF][0-9a-fA-F]{8}(?![\w$])|0[dD][0-9a-fA-F]{16}(?![\w$])|0[xX][0-9a-fA-F]+[uU]?|
         [0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|0[bB][01]+[uU]?|[0-9]+[uU]?)
| (?P<id>[.%$]?[A-Za-z_$][\w$]*(?:\.[\w$]+(?:::[\w$]+)*)*)
| (?P<punct>[{}\[\](),;:@!|<>+\-=])
""", re.X | re.S)


class Token(tuple):
    __slots__ = ()

    def __new__(cls, kind: str, text: str, line: int, pos: int = 0):
        return tuple.__new__(cls, (kind, text, line, pos))

    kind = property(lambda s: s[0])
    text = property(lambda s: s[1])
    line = property(lambda s: s[2])
    pos = property(lambda s: s[3])


class Lexer:
    """Tokens of src[pos:end], produced on demand (`more`)."""

    def __init__(self, src: str, pos: int = 0, end: int | None = None, line: int = 1) -> None:
        self.src = src
        self.pos = pos
        self.end = len(src) if end is None else end
        self.line = line

    def more(self, out: list[Token]) -> bool:
        """Append the next token(s) to `out` (a dotted directive is several); False at the end of the text."""
        src, end, match = self.src, self.end, _TOKEN.match
        pos, line = self.pos, self.line
        while pos < end:
            m = match(src, pos, end)
            if m is None:
                raise CudaError("cudaErrorInvalidPtx", f"PTX line {line}: unexpected character {src[pos]!r}")
            kind = m.lastgroup
            start, pos = pos, m.end()
            if kind == "nl":
                line += 1
            elif kind == "bc":
                line += m.group().count("\n")
            elif kind not in ("ws", "lc"):
                _append(out, kind, m.group(), line, start)
                self.pos, self.line = pos, line
                return True
        self.pos, self.line = pos, line
        return False


def _append(out: list[Token], kind: str, text: str, line: int, start: int) -> None:
    if kind == "id" and text[0] == "." and "." in text[1:]:
        # `.reg.b32` is `.reg .b32`: directives never contain dots themselves.
        for part in text[1:].split("."):
            out.append(Token(kind, "." + part, line, start))
    else:
        out.append(Token(kind, text, line, start))


def tokenize(src: str, start: int = 0, end: int | None = None, line: int = 1) -> list[Token]:
    """Every token of src[start:end]; `line` is the line number at `start`."""
    # Lexer.more's loop without its per-token return: folded into `more` (a flag to read on), tokenizing 3 MB of
    # CuPy's CUB PTX took 5% longer (1.77 -> 1.86 s, median of 7), and this is the loop each first launch runs.
    out: list[Token] = []
    pos = start
    n = len(src) if end is None else end
    match = _TOKEN.match
    while pos < n:
        m = match(src, pos, n)
        if m is None:
            raise CudaError("cudaErrorInvalidPtx", f"PTX line {line}: unexpected character {src[pos]!r}")
        kind = m.lastgroup
        if kind == "nl":
            line += 1
        elif kind == "bc":
            line += m.group().count("\n")
        elif kind not in ("ws", "lc"):
            _append(out, kind, m.group(), line, pos)
        pos = m.end()
    return out
