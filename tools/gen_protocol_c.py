"""The C view of pyvgpu/protocol.py, generated at build time into csrc's build directory (CMake runs this file).

    PYTHONPATH=. python tools/gen_protocol_c.py OUTDIR [--depfile FILE]

writes three files:
- protocol_gen.h: constants, op codes and flags, op names, shared string keys (PV_KEY_*), device attribute numbers
  (PV_cudaDevAttr*) and the cudaError_t table;
- ops_gen.h / ops_gen.c: one sender per device op, with the op's arguments as C parameters in wire order.
  `pv_call_<OP>(d, args..., [payload, payload_len], [result])` sends and waits for the reply;
  ASYNC ops also get `pv_send_<OP>(d, args..., [payload, payload_len])`, fire-and-forget; DETACHED ops get
  `pv_detach_<OP>(d, args..., out, out_cap)`: sent with a req_id, the reply's payload lands in out later;
  COMPRESSIBLE ASYNC ops with a payload get `pv_sendz_<OP>(d, args..., payload, wire_len, raw_len, codec)`, the
  payload already compressed (compress.c); SYNC ops with a payload out get `pv_start_<OP>(d, args..., out, out_cap,
  &h)` and `pv_collect_<OP>(d, h, got)`, pv_call_<OP> in two halves so that several can be in flight (copy.c).
  No C file states an op's argument count, order or reply shape by hand: they come from OPS.

Like protocol.py this imports only the standard library and pyvgpu's spec modules (the build runs it before the
package is installed; gen_support.py checks that the spec is this tree's).
"""
from __future__ import annotations

import sys

import gen_support

from pyvgpu import protocol as P
from pyvgpu.cuda_enums import CUDA_ENUMS, DEVICE_ATTRS
from pyvgpu.cuda_errors import CUDA_ERRORS

GENERATED = "/* Generated from pyvgpu/protocol.py by tools/gen_protocol_c.py. Do not edit. */"

# Wire type -> (C parameter declarations, msgpack packing statement); {n} is the argument's name. Every handle
# and address travels as a u64.
_U64 = ("uint64_t {n}", "msgpack_pack_uint64(&r.pk, {n});")
C_ARG: dict[str, tuple[str, str]] = {
    **dict.fromkeys(("u64", "ptr", "size", "handle", "stream", "event", "func", "blas"), _U64),
    "i64": ("int64_t {n}", "msgpack_pack_int64(&r.pk, {n});"),
    "u32": ("uint32_t {n}", "msgpack_pack_uint32(&r.pk, {n});"),
    "i32": ("int32_t {n}", "msgpack_pack_int32(&r.pk, {n});"),
    "f64": ("double {n}", "msgpack_pack_double(&r.pk, {n});"),
    "dim3": ("dim3 {n}", "pv_pack_dim3(&r.pk, {n});"),
    "str": ("const char *{n}", "pv_pack_str(&r.pk, {n});"),
    "bytes": ("const void *{n}, size_t {n}_len", "pv_pack_bytes(&r.pk, {n}, {n}_len);"),
}
# Reply shape -> (C out-parameter, decoding call); nil replies need neither.
C_REPLY: dict[str, tuple[str, str]] = {
    "u64": ("uint64_t *result", "pv_reply_u64"),
    "i64": ("int64_t *result", "pv_reply_i64"),
    "f64": ("double *result", "pv_reply_f64"),
    "u64x2": ("uint64_t result[2]", "pv_reply_u64x2"),
    "map": ("struct pv_reply *rep", ""),
}


def generated_ops() -> list[P.OpSpec]:
    """The ops that get C senders: every device op (HELLO/STATUS/GOODBYE are the handshake's and tools')."""
    return [op for op in P.OPS if not op.flags & P.OpFlag.NO_DEVICE]


CALL, SEND, DETACH, SENDZ, START, COLLECT = "call", "send", "detach", "sendz", "start", "collect"


def _params(op: P.OpSpec, mode: str) -> str:
    if mode == COLLECT:
        return "struct pv_device *d, struct pv_inflight *h, size_t *got"
    ps = ["struct pv_device *d"] + [C_ARG[a.type][0].format(n=a.name) for a in op.args[1:]]
    if op.flags & P.OpFlag.PAYLOAD_IN:
        ps.append("const void *payload, size_t payload_len")
    if mode == CALL and op.flags & P.OpFlag.PAYLOAD_OUT:
        ps.append("void *out, size_t out_cap, size_t *got")
    if mode in (DETACH, START):
        ps.append("void *out, size_t out_cap")
    if mode == START:
        ps.append("struct pv_inflight **h")
    if mode == SENDZ:
        ps.append("size_t raw_len, int codec")
    if mode == CALL and op.reply in C_REPLY:
        ps.append(C_REPLY[op.reply][0])
    return ", ".join(ps)


def _signature(op: P.OpSpec, mode: str) -> str:
    return f"cudaError_t pv_{mode}_{op.name}({_params(op, mode)})"


def _body(op: P.OpSpec, mode: str) -> list[str]:
    if mode == COLLECT:
        return _collect_body(op)
    payload = "payload, payload_len" if op.flags & P.OpFlag.PAYLOAD_IN else "NULL, 0"
    if mode == SENDZ:
        payload += ", raw_len, codec"
    out = "out, out_cap" if mode not in (SEND, SENDZ) and op.flags & P.OpFlag.PAYLOAD_OUT else "NULL, 0"
    lines = ["    struct pv_req r;"]
    if mode == CALL and op.reply == "map":
        lines.append("    memset(rep, 0, sizeof *rep);")      # the caller frees it whatever happens
    begin = "pv_op_begin_z" if mode == SENDZ else "pv_op_begin"
    lines += [f"    cudaError_t err = {begin}(&r, d, PV_OP_{op.name}, PV_OP_{op.name}_NARGS, "
              f"{int(mode not in (SEND, SENDZ))}, {payload}, {out});",
              "    if (err != PV_SUCCESS)",
              "        return err;"]
    lines += ["    " + C_ARG[a.type][1].format(n=a.name) for a in op.args[1:]]
    if mode in (SEND, SENDZ):
        lines.append("    return pv_req_send(&r);")       # fire-and-forget: sent, or recorded into a graph
        return lines
    if mode == DETACH:
        lines.append("    return pv_req_detach(&r);")     # the reply's payload lands in out later
        return lines
    if mode == START:
        lines.append("    return pv_req_start(&r, h);")
        return lines
    if op.flags & P.OpFlag.PAYLOAD_OUT:
        lines += ["    struct pv_reply pr;",
                  "    err = pv_req_finish(&r, &pr);",
                  *_payload_got()]
    elif op.reply == "map":
        lines.append("    err = pv_req_finish(&r, rep);")
    elif op.reply in C_REPLY:
        lines += ["    struct pv_reply pr;",
                  f"    err = {C_REPLY[op.reply][1]}(d, PV_OP_{op.name}, pv_req_finish(&r, &pr), &pr, result);"]
    else:
        lines.append("    err = pv_req_finish(&r, NULL);")
    return lines + _sync_tail(op) + ["    return err;"]


def _payload_got() -> list[str]:
    return ["    if (got)",
            "        *got = pr.payload_len;",
            "    pv_reply_free(&pr);"]


def _sync_tail(op: P.OpSpec) -> list[str]:
    if op.sync_point:
        return ["    err = pv_coherence_after_sync(d, err);    /* the host may now read what the device wrote */",
                "    err = pv_sync_result(d, err);       /* a refused module's kernel was used: its error */"]
    return []


def _collect_body(op: P.OpSpec) -> list[str]:
    return ["    struct pv_reply pr;",
            "    cudaError_t err = pv_req_collect(h, &pr);",
            *_payload_got(), *_sync_tail(op), "    return err;"]


def _senders(op: P.OpSpec) -> list[tuple[P.OpSpec, str]]:
    f = op.flags
    modes = [CALL] + ([SEND] if f & P.OpFlag.ASYNC else []) + ([DETACH] if f & P.OpFlag.DETACHED else [])
    if f & P.OpFlag.SYNC and f & P.OpFlag.PAYLOAD_OUT:
        modes += [START, COLLECT]
    if f & P.OpFlag.ASYNC and f & P.OpFlag.PAYLOAD_IN and f & P.OpFlag.COMPRESSIBLE:
        modes.append(SENDZ)
    return [(op, m) for m in modes]


def ops_header() -> str:
    out = [GENERATED, "#ifndef PV_OPS_GEN_H", "#define PV_OPS_GEN_H", "",
           "/* pv_call_X: send and wait (result out-parameters are set only on success); pv_send_X: fire-and-forget;",
           " * pv_detach_X: sent, the reply's payload lands in out when it comes (pv_req_detach); pv_sendz_X:",
           " * fire-and-forget with a payload compressed by codec (compress.c); pv_start_X + pv_collect_X: pv_call_X",
           " * in two halves, several in flight at once (pv_req_start).",
           " * All return the cudaError_t of the call; transport failures are PV_ERR_UNAVAILABLE. */"]
    for op in generated_ops():
        out.append(f"/* {op.name}: {' '.join(f'{a.name}:{a.type}' for a in op.args)} -> {op.reply}"
                   + (f"; {op.doc}" if op.doc else "") + " */")
        out += [_signature(o, mode) + ";" for o, mode in _senders(op)]
    out += ["", "#endif", ""]
    return "\n".join(out)


def ops_source() -> str:
    out = [GENERATED, '#include "pv_core.h"', ""]
    for op in generated_ops():
        for o, mode in _senders(op):
            out += [_signature(o, mode), "{", *_body(o, mode), "}", ""]
    return "\n".join(out)


def _c_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _c_value(value: int | float | str) -> str:
    """A constant of protocol.c_constants() as a C literal (its C type from CU32/CU64)."""
    if isinstance(value, str):
        return f'"{_c_string(value)}"'
    if isinstance(value, P.CU64):
        return f"{int(value)}ull"
    if isinstance(value, P.CU32):
        return f"{int(value)}u"
    return repr(value)


def protocol_header() -> str:
    out = [
        GENERATED,
        "#ifndef PYVGPU_PROTOCOL_GEN_H",
        "#define PYVGPU_PROTOCOL_GEN_H",
        "",
        "/* Scalar constants (protocol.c_constants()). */",
        *(f"#define PV_{name} {_c_value(value)}" for name, value in P.c_constants().items()),
        "",
    ]
    out += [f"#define PV_FLAG_{f.name} {int(f)}" for f in P.OpFlag if f.name and f.name != "NONE"]
    out += ["", "enum pv_op {"]
    out += [f"    PV_OP_{op.name} = {op.code}," for op in P.OPS]
    out += ["};", "/* Wire arguments of each op (the device ordinal included). */"]
    out += [f"#define PV_OP_{op.name}_NARGS {len(op.args)}" for op in P.OPS]
    out += ["", f"#define PV_OP_TABLE_SIZE {max(op.code for op in P.OPS) + 1}",
            "/* Flags and names of each op, indexed by op code (0 / NULL = unknown op). */",
            "static const unsigned short pv_op_flags[PV_OP_TABLE_SIZE] = {"]
    out += [f"    [{op.code}] = {int(op.flags)}," for op in P.OPS]
    out += ["};", "static const char *const pv_op_names[PV_OP_TABLE_SIZE] = {"]
    out += [f'    [{op.code}] = "{op.name}",' for op in P.OPS]
    out += ["};", "", "/* String keys shared with the daemon (protocol.shared_keys()). */"]
    out += [f'#define PV_KEY_{name} "{_c_string(value)}"' for name, value in P.shared_keys().items()]
    out += ["", "/* cudaDeviceAttr values (CUDA's numbering, pyvgpu/cuda_enums.py). */"]
    out += [f"#define PV_{name} {value}" for name, value in DEVICE_ATTRS.items()]
    out += ["", "/* The other CUDA enumerations both sides use (pyvgpu/cuda_enums.py CUDA_ENUMS). */"]
    out += [f"#define PV_{name} {value}" for values in CUDA_ENUMS.values() for name, value in values.items()]
    limit = max(DEVICE_ATTRS.values()) + 1
    out += [f"#define PV_DEV_ATTR_LIMIT {limit}",
            "static const unsigned char pv_dev_attr_valid[PV_DEV_ATTR_LIMIT] = {"
            + ", ".join(f"[{v}] = 1" for v in sorted(set(DEVICE_ATTRS.values()))) + "};"]
    out += ["/* Attributes pyvgpu decides for every GPU (protocol.py REMOTED_DEVICE_ATTRS): {attribute, value}. */",
            "static const int pv_remoted_dev_attrs[][2] = {"
            + ", ".join(f"{{ PV_cudaDevAttr{name}, {value} }}" for name, value in P.REMOTED_DEVICE_ATTRS.items())
            + "};",
            f"#define PV_REMOTED_DEV_ATTRS_LEN {len(P.REMOTED_DEVICE_ATTRS)}"]
    out += ["", "/* cudaError_t values (CUDA's numbering). */"]
    out += [f"#define PV_{name} {value}" for value, name, _ in CUDA_ERRORS]
    out += ["", "struct pv_error_desc { int code; const char *name; const char *text; };",
            "static const struct pv_error_desc pv_error_table[] = {"]
    out += [f'    {{ {value}, "{name}", "{_c_string(text)}" }},' for value, name, text in CUDA_ERRORS]
    out += ["};", f"#define PV_ERROR_TABLE_LEN {len(CUDA_ERRORS)}", "", "#endif", ""]
    return "\n".join(out)


def files() -> dict[str, str]:
    """The generated files, by name."""
    return {"protocol_gen.h": protocol_header(), "ops_gen.h": ops_header(), "ops_gen.c": ops_source()}


if __name__ == "__main__":
    raise SystemExit(gen_support.main(sys.argv, files))
