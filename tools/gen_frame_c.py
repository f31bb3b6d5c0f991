"""The compiled frame path's table of FAST ops, generated at build time from pyvgpu/protocol.py (CMake runs this file).

    PYTHONPATH=. python tools/gen_frame_c.py OUTDIR [--depfile FILE]

writes frame_ops_gen.h for csrc/daemon/frame.c: per op flagged FAST on its spec line, its code, whether it takes a
payload, and the wire kind of each argument (PVF_K_*: how frame.c decodes and bounds it); the op-code index; the
record size; the spec's fast_signature(), which the loader compares with its own. No C file names an op or states its arguments by hand; daemon/pyvgpu_daemon/framepath.py rebuilds
the arguments from the same spec.
"""
from __future__ import annotations

import sys

import gen_support

from pyvgpu import protocol as P

GENERATED = "/* Generated from pyvgpu/protocol.py by tools/gen_frame_c.py. Do not edit. */"
# Wire type -> how frame.c decodes it. A value outside what the kind accepts ends the run (the Python path judges).
KINDS = {"dev": "U63", "u64": "U63", "ptr": "U63", "size": "U63", "stream": "U63", "event": "U63", "func": "U63",
         "i64": "I64", "u32": "U32", "i32": "I32", "dim3": "DIM3"}
assert set(KINDS) == P.FAST_ARG_TYPES, "a FAST argument type frame.c cannot decode"
RECORD_HEAD = 4          # code, payload offset, payload length, end of the frame (framepath.py reads the same)


def words(spec: P.OpSpec) -> int:
    return sum(3 if a.type == "dim3" else 1 for a in spec.args)


def header() -> str:
    fast = [op for op in P.OPS if op.fast]
    max_args = max(len(op.args) for op in fast)
    max_words = max(words(op) for op in fast)
    max_code = max(op.code for op in fast)
    out = [GENERATED, "#ifndef PV_FRAME_OPS_GEN_H", "#define PV_FRAME_OPS_GEN_H", "", "#include <stdint.h>", "",
           "enum pvf_kind { " + ", ".join(f"PVF_K_{k}" for k in sorted(set(KINDS.values()))) + " };",
           f"#define PVF_MAX_ARGS {max_args}",
           f"#define PVF_MAX_WORDS {max_words}        /* argument words of a record (a dim3 is three) */",
           f"#define PVF_RECORD_HEAD {RECORD_HEAD}",
           f"#define PVF_RECORD_WORDS {RECORD_HEAD + max_words}",
           f"#define PVF_MAX_CODE {max_code}",
           f"#define PVF_MAX_HEADER_BYTES {P.MAX_HEADER_BYTES}u",
           f"#define PVF_MAX_PAYLOAD_BYTES {P.MAX_PAYLOAD_BYTES}ull",
           f'#define PVF_SIGNATURE "{P.fast_signature()}"   /* protocol.fast_signature(): checked at load */', "",
           "struct pvf_op { uint16_t code; uint8_t payload_in; uint8_t nargs; uint8_t kinds[PVF_MAX_ARGS]; };",
           "static const struct pvf_op pvf_ops[] = {"]
    for op in fast:
        kinds = ", ".join(f"PVF_K_{KINDS[a.type]}" for a in op.args)
        out.append(f"    {{ {op.code}, {int(op.payload_in)}, {len(op.args)}, {{ {kinds} }} }},   /* {op.name} */")
    out += ["};", "/* op code -> index in pvf_ops + 1 (0: not a FAST op) */",
            "static const uint8_t pvf_index[PVF_MAX_CODE + 1] = {"]
    index = {op.code: i + 1 for i, op in enumerate(fast)}
    out.append("    " + ", ".join(str(index.get(c, 0)) for c in range(max_code + 1)))
    out += ["};", "", "#endif", ""]
    return "\n".join(out)


def files() -> dict[str, str]:
    return {"frame_ops_gen.h": header()}


if __name__ == "__main__":
    raise SystemExit(gen_support.main(sys.argv, files))
