"""The device memory a cuBLAS call names, from the table: (what, address, bytes) per operand it may touch.

A backend that hands pointers to a real library (the cuda backend) needs every one of them checked against the
session's allocations first, or a client could make cuBLAS read or write another session's memory. Empty operands
(a zero dimension or count) name nothing. The device pointers inside a pointer array (gemmBatched) are read through
`read_pointers` and checked too.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping

from pyvgpu import cublas_spec as spec
from pyvgpu_daemon.blas import layout


def _size(t: int) -> int:
    return spec.DTYPE_BY_VALUE[t].size


def regions(fam: spec.Family, args: Mapping[str, Any], derived: Mapping[str, int],
            read_pointers: Callable[[int, int], list[int]]) -> Iterator[tuple[str, int, int]]:
    names = {**{k: v for k, v in args.items() if isinstance(v, int)}, **derived}

    def dtype(a: Any) -> int:
        return names[a.dtype]

    for a in fam.args:
        if isinstance(a, spec.HostInfo):
            continue                        # host memory of the client's: it never travels
        v = args[a.name]
        if isinstance(a, (spec.Scalar, spec.Result)):
            if isinstance(v, int):          # device pointer mode
                yield a.name, v, _size(dtype(a))
        elif isinstance(a, spec.Vector):
            if a.optional and v == 0:
                continue                    # NULL: "none" (no pivoting, no info)
            first, shape, strides = layout.vector(int(spec.evaluate(a.n, names)), int(spec.evaluate(a.inc, names)))
            reach = layout.span(shape, strides)
            if reach:
                yield a.name, v, (reach[1] - reach[0] + 1) * _size(dtype(a))
        elif isinstance(a, spec.Matrix):
            batch = None if a.batch is None else names[a.batch]
            shape, strides = layout.matrix(int(spec.evaluate(a.rows, names)), int(spec.evaluate(a.cols, names)),
                                           names[a.ld], batch, names[a.stride] if a.stride else 0)
            reach = layout.span(shape, strides)
            if reach:
                size = _size(dtype(a))
                yield a.name, v + reach[0] * size, (reach[1] - reach[0] + 1) * size
        elif isinstance(a, spec.MatrixArray):
            count = names[a.count]
            shape, strides = layout.matrix(int(spec.evaluate(a.rows, names)), int(spec.evaluate(a.cols, names)),
                                           int(spec.evaluate(a.ld, names)))
            reach = layout.span(shape, strides)
            if count <= 0 or reach is None:
                continue
            yield a.name, v, count * 8
            nbytes = (reach[1] + 1) * _size(dtype(a))
            for i, p in enumerate(read_pointers(v, count)):
                yield f"{a.name}[{i}]", p, nbytes
