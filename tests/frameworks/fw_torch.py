"""PyTorch against the CPU (run under `pyvgpu run`). Always: what needs no torch kernel (is_available, device
properties, the caching allocator and its statistics, pinned copies both ways, streams and events, mm / addmm / bmm
/ nn.Linear forward through cuBLAS). --kernel-refused: one call that needs a torch kernel must fail with the
emulated GPU's message (torch's wheel holds SASS only). --real: what needs torch kernels (a real GPU): elementwise
ops, reductions, softmax, random numbers, autograd, an MLP trained 30 steps with Adam matching the CPU's loss, a
cuDNN convolution; --two-gpus: tensors on two GPUs."""
from __future__ import annotations

import argparse
import sys

from fwcheck import Checks, close


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--real", action="store_true")
    ap.add_argument("--two-gpus", action="store_true")
    ap.add_argument("--kernel-refused", action="store_true")
    args = ap.parse_args()
    import torch
    c = Checks()
    torch.manual_seed(0)
    c.run("is_available", lambda: torch.cuda.is_available() or "not available")
    c.run("device properties", lambda: (torch.cuda.get_device_properties(0).total_memory > 0 and
                                        torch.cuda.get_device_properties(0).multi_processor_count > 0) or "empty")
    a, b = torch.randn(64, 48), torch.randn(48, 32)

    def allocator():
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated()
        t = torch.empty(1 << 20, device="cuda")
        if torch.cuda.memory_allocated() - before < 4 << 20:
            return "memory_allocated did not grow by 4 MiB"
        stats = torch.cuda.memory_stats()
        if stats["allocation.all.current"] < 1:
            return "no current allocation in memory_stats"
        del t
        if torch.cuda.memory_allocated() != before:
            return "memory_allocated did not go back"
        reserved = torch.cuda.memory_reserved()
        torch.cuda.empty_cache()
        return torch.cuda.memory_reserved() <= reserved or "empty_cache kept memory"
    c.run("caching allocator", allocator)

    def pinned():
        h = a.pin_memory()
        d = h.to("cuda", non_blocking=True)
        back = torch.empty_like(a).pin_memory()
        back.copy_(d, non_blocking=True)
        torch.cuda.synchronize()
        return (h.is_pinned() and torch.equal(back, a)) or "bytes differ"
    c.run("pinned copies", pinned)

    def streams_events():
        s = torch.cuda.Stream()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(s):
            e0.record()
            d = a.to("cuda", non_blocking=True)
            e1.record()
        e1.synchronize()
        return (e0.elapsed_time(e1) >= 0 and torch.equal(d.cpu(), a)) or "event order wrong"
    c.run("streams and events", streams_events)
    c.run("mm", lambda: close((a.cuda() @ b.cuda()).cpu(), a @ b, 1e-4))
    bias = torch.randn(64, 32)
    c.run("addmm", lambda: close(torch.addmm(bias.cuda(), a.cuda(), b.cuda(), beta=0.5, alpha=2.0).cpu(),
                                 torch.addmm(bias, a, b, beta=0.5, alpha=2.0), 1e-4))
    x3, y3 = torch.randn(5, 16, 24), torch.randn(5, 24, 8)
    c.run("bmm", lambda: close(torch.bmm(x3.cuda(), y3.cuda()).cpu(), torch.bmm(x3, y3), 1e-4))

    def linear():
        lin = torch.nn.Linear(48, 32)
        with torch.no_grad():
            return close(lin.cuda()(a.cuda()).cpu(), lin.cpu()(a), 1e-4)
    c.run("nn.Linear forward", linear)
    if args.real:
        real_checks(c, torch)
    if args.two_gpus:
        def two():
            t0 = a.to("cuda:0")
            t1 = t0.to("cuda:1")
            return close((t1 @ b.to("cuda:1")).cpu(), a @ b, 1e-4)
        c.run("two GPUs", two)
    if args.kernel_refused:
        def refused():
            try:
                (a.cuda() + 1).cpu()
            except Exception as exc:              # noqa: BLE001
                text = str(exc)     # torch's own words; pyvgpu's line naming the library goes to stderr
                return "no kernel image" in text or f"unclear error: {text}"
            return "a torch kernel ran on an emulated GPU"
        c.run("torch kernel refused", refused)
    return c.finish("torch")


def real_checks(c: Checks, torch) -> None:
    a = torch.randn(256, 64)
    c.run("elementwise", lambda: close((a.cuda() * 3 + a.cuda().sin()).cpu(), a * 3 + a.sin(), 1e-5))
    c.run("reductions", lambda: close([float(a.cuda().sum()), float(a.cuda().amax())], [float(a.sum()), float(a.amax())],
                                      1e-3))
    c.run("softmax", lambda: close(a.cuda().softmax(-1).cpu(), a.softmax(-1), 1e-5))
    c.run("random numbers", lambda: (lambda r: (r.shape == (1000,) and 0.4 < float(r.mean()) < 0.6) or "bad mean")(
        torch.rand(1000, device="cuda").cpu()))

    def autograd():
        w = torch.randn(64, 8, requires_grad=True)
        wc = w.detach().cuda().requires_grad_()
        (a @ w).square().sum().backward()
        (a.cuda() @ wc).square().sum().backward()
        return close(wc.grad.cpu(), w.grad, 1e-3)
    c.run("autograd", autograd)

    def mlp():
        def train(device):
            torch.manual_seed(1)
            net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device)
            opt = torch.optim.Adam(net.parameters(), lr=1e-2)
            xs, ys = a.to(device), a[:, :1].to(device) * 2
            for _ in range(30):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(net(xs), ys)
                loss.backward()
                opt.step()
            return float(loss)
        return close(train("cuda"), train("cpu"), 1e-3)
    c.run("MLP 30 Adam steps", mlp)

    def conv():
        x = torch.randn(2, 3, 16, 16)
        conv2d = torch.nn.Conv2d(3, 4, 3)
        with torch.no_grad():
            return close(conv2d.cuda()(x.cuda()).cpu(), conv2d.cpu()(x), 1e-4)
    c.run("cuDNN convolution", conv)


if __name__ == "__main__":
    sys.exit(main())
