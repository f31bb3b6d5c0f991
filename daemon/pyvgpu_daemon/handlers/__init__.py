"""Device ops: one handler per device op of protocol.OPS, in one module per feature, and the job that runs them.

- registry.py: Call, @handler / generated (registration, checked against the spec line), argument conversion and
  handle resolution;
- dispatch.py: execute (one op as a job: the deferred/sticky error rules) and account (an op's figures); it imports
  every feature module (registering their handlers) and checks that each device op of the spec has exactly one, so
  a new op cannot be forgotten;
- memory.py, modules.py, streams.py, device.py: the runtime's core ops; array.py, graph.py, managed.py,
  coherence.py, peer.py, vmm.py, emufeat.py: runtime features; blas.py, blaslt.py: cuBLAS and cuBLASLt, generated
  from their tables;
- control.py (+ lease.py): the ops the daemon answers itself on its loop (NO_DEVICE), one @control each.

This file imports nothing: feature modules import registry.py, dispatch.py imports them, so there is no import
cycle, not even through a package (tests/daemon/test_structure.py).
"""
