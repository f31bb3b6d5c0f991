"""Framework probe (real-GPU check): PyTorch through pyvgpu (tools/gpu_probes/probe_common.py says how)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_common import main  # noqa: E402

BODY = '''
import torch
step("init", lambda: f"{torch.cuda.device_count()} device(s), {torch.cuda.get_device_name(0)}, "
                     f"cc {torch.cuda.get_device_capability(0)}")
n = 1 << 20
def roundtrip():
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    assert torch.equal(x.cpu(), torch.arange(n, dtype=torch.float32)), "copy back differs"
    return f"{n} floats"
step("copy", roundtrip)
def elementwise():
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    assert torch.equal((x * 2 + 1).cpu(), torch.arange(n, dtype=torch.float32) * 2 + 1), "x*2+1 differs"
step("elementwise", elementwise)
def reduction():
    g = torch.Generator().manual_seed(1)
    h = torch.rand(n, generator=g, dtype=torch.float64)
    got = h.cuda().sum().item()
    e = abs(got - h.sum().item()) / abs(h.sum().item())
    assert e < 1e-12, f"sum rel err {e:.2e}"
    return f"rel err {e:.1e}"
step("reduction", reduction)
def matmul():
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator().manual_seed(2)
    a, b = torch.rand(256, 256, generator=g), torch.rand(256, 256, generator=g)
    got = (a.cuda() @ b.cuda()).cpu()
    e = rel_err(got.numpy(), a.double().numpy() @ b.double().numpy())
    assert e < 1e-5, f"float32 matmul rel err {e:.2e} (cuBLAS)"
    return f"rel err {e:.1e}"
step("matmul", matmul)
step("synchronize", lambda: torch.cuda.synchronize())
'''

if __name__ == "__main__":
    sys.exit(main("torch", "torch", BODY))
