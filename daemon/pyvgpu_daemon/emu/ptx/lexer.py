"""PTX tokenizer: text → list of (kind, text, line).

kinds: 'id' (identifiers, directives, dotted opcodes, registers, special registers), 'num' (any numeric
literal as written), 'str' (a quoted string), 'punct' (one of {}[](),;:@!|<>+-=).
Comments are dropped; line numbers are 1-based.
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

    def __new__(cls, kind: str, text: str, line: int):
        return tuple.__new__(cls, (kind, text, line))

    kind = property(lambda s: s[0])
    text = property(lambda s: s[1])
    line = property(lambda s: s[2])


def tokenize(src: str) -> list[Token]:
    out: list[Token] = []
    line = 1
    pos = 0
    n = len(src)
    match = _TOKEN.match
    while pos < n:
        m = match(src, pos)
        if m is None:
            raise CudaError("cudaErrorInvalidPtx", f"PTX line {line}: unexpected character {src[pos]!r}")
        kind = m.lastgroup
        text = m.group()
        if kind == "nl":
            line += 1
        elif kind == "bc":
            line += text.count("\n")
        elif kind == "id" and text[0] == "." and "." in text[1:]:
            # `.reg.b32` is `.reg .b32`: directives never contain dots themselves.
            for part in text[1:].split("."):
                out.append(Token(kind, "." + part, line))
        elif kind not in ("ws", "lc"):
            out.append(Token(kind, text, line))
        pos = m.end()
    return out
