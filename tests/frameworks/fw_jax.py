"""JAX's jnp.dot against NumPy (run under `pyvgpu run`; real GPUs: XLA compiles cubins on the client)."""
from __future__ import annotations

import sys

import numpy as np

from fwcheck import Checks, close


def main() -> int:
    import jax
    import jax.numpy as jnp
    c = Checks()
    a = np.random.default_rng(5).standard_normal((64, 32)).astype(np.float32)
    c.run("jax sees a GPU", lambda: any(d.platform == "gpu" for d in jax.devices()) or str(jax.devices()))
    # precision HIGHEST: JAX's default on Hopper is TF32 (a 10-bit mantissa), 0.0098 off natively on an H100 (GPU run 3)
    c.run("jnp.dot", lambda: close(np.asarray(jnp.dot(jnp.asarray(a), jnp.asarray(a.T),
                                                      precision=jax.lax.Precision.HIGHEST)), a @ a.T, 1e-3))
    return c.finish("jax")


if __name__ == "__main__":
    sys.exit(main())
