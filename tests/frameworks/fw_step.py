"""One framework step, N times (run under `pyvgpu run --stats`): CuPy `y = x * 2 + 1; float(y.sum())`, PyTorch
`c = a @ b; c.cpu()`. tests/frameworks counts the blocking round trips per step (docs/frameworks.md)."""
import sys

import numpy as np


def main() -> None:
    framework, n = sys.argv[1], int(sys.argv[2])
    if framework == "cupy":
        import cupy as cp
        x = cp.asarray(np.arange(4096, dtype=np.float32))
        for _ in range(n):
            y = x * 2 + 1
            float(y.sum())
    else:
        import torch
        a, b = torch.randn(64, 64).cuda(), torch.randn(64, 64).cuda()
        for _ in range(n):
            c = a @ b
            c.cpu()


if __name__ == "__main__":
    main()
