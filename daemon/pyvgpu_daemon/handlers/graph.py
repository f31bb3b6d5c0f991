"""Graphs on the daemon: an uploaded graph is a list of this device's own request frames, replayed in order.

The client records, at instantiation, the fire-and-forget frames its API code would have sent for the graph's device
work (kernels, device copies, memsets, event records and waits) and uploads them once (GRAPH_CREATE). GRAPH_LAUNCH
runs them through the very handlers that run those ops when they arrive one by one, with every stream argument
replaced by the launch's stream, so a replay does what the captured stream did.

An upload is checked when it arrives: only ops flagged GRAPH on their spec line, addressed to this device, fire-and-forget,
with the spec's arity and argument types, at most MAX_GRAPH_OPS of them; a session holds at most MAX_GRAPH_BYTES of
graphs per device. Handles inside (functions, events) are resolved at launch, so a destroyed event is the launch's
cudaErrorInvalidResourceHandle, as it would be for the op itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyvgpu import wire
from pyvgpu.protocol import MAX_GRAPH_BYTES, MAX_GRAPH_OPS, OP_BY_CODE, OpSpec
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.handlers.registry import ARG_CHECKS, Call, handler, invoke, lookup_handle, positional


@dataclass(frozen=True)
class GraphOp:
    spec: OpSpec
    args: list[Any]              # the wire arguments, dev first, types checked at upload
    payload: bytes


@dataclass(frozen=True)
class Graph:
    ops: tuple[GraphOp, ...]
    nbytes: int


def parse_graph(dev: int, data: bytes | bytearray | memoryview) -> Graph:
    """The frames of an upload → a Graph; anything malformed is cudaErrorInvalidValue naming the frame."""
    try:
        frames = wire.split_frames(data, MAX_GRAPH_OPS)
    except wire.ProtocolError as exc:
        raise CudaError("cudaErrorInvalidValue", f"graph upload: {exc}") from None
    ops = []
    for i, (header, payload) in enumerate(frames):
        try:
            req = wire.parse_request(header)
        except wire.ProtocolError as exc:
            raise CudaError("cudaErrorInvalidValue", f"graph op {i}: {exc}") from None
        spec = OP_BY_CODE.get(req.op)
        if spec is None or not spec.graph:
            raise CudaError("cudaErrorInvalidValue", f"graph op {i}: op {req.op} cannot be part of a graph")
        if req.req_id != 0 or len(req.args) != len(spec.args) or req.args[0] != dev:
            raise CudaError("cudaErrorInvalidValue",
                            f"graph op {i} ({spec.name}): not a fire-and-forget frame of device {dev} "
                            f"with {len(spec.args)} arguments")
        for arg, v in zip(spec.args[1:], req.args[1:]):
            ARG_CHECKS[arg.type](arg.name, v)
        ops.append(GraphOp(spec, req.args, bytes(payload)))
    return Graph(tuple(ops), len(data))


@handler("GRAPH_CREATE")
def graph_create(c: Call) -> int:
    st = c.st
    if st.graph_bytes + len(c.payload) > MAX_GRAPH_BYTES:
        raise CudaError("cudaErrorMemoryAllocation",
                        f"graphs of this session would hold {st.graph_bytes + len(c.payload)} B on the device "
                        f"(limit {MAX_GRAPH_BYTES} B)")
    h = st.add(st.graphs, lambda: parse_graph(st.ordinal, c.payload))
    graph = st.graphs[h]
    st.graph_bytes += graph.nbytes
    return h


def _graph(c: Call, h: int) -> Graph:
    return lookup_handle(c.st.graphs, h, "graph")


@handler("GRAPH_LAUNCH")
def graph_launch(c: Call, graph: int, stream: Any) -> None:
    for i, op in enumerate(_graph(c, graph).ops):
        try:
            values = positional(op.spec, c.st, op.args)
            si = op.spec.stream_arg
            if si is not None:
                values[si - 1] = stream                  # positional(): the arguments after `dev`
            invoke(op.spec, Call(c.session, c.st, op.payload), values)
        except CudaError as exc:
            # The launch fails with the op's own error; the log names the node that failed.
            exc.args = (f"graph op {i} ({op.spec.name}): {exc}",) + exc.args[1:]
            raise


@handler("GRAPH_DESTROY")
def graph_destroy(c: Call, graph: int) -> None:
    g = c.st.graphs.pop(graph, None)
    if g is None:
        raise CudaError("cudaErrorInvalidResourceHandle", f"destroy of unknown graph {graph:#x}")
    c.st.graph_bytes -= g.nbytes
