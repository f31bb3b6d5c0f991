"""The ops of issue 19's emulator features (380-399): cooperative launches (LAUNCH_COOPERATIVE), whose blocks are
all resident at once so that grid-wide synchronization works (DeviceContext.launch_cooperative: the emulator runs
the grid as one chunk with a grid workspace, a real GPU through cuLaunchCooperativeKernel)."""
from __future__ import annotations

from typing import Any

from pyvgpu_daemon.handlers.modules import check_params
from pyvgpu_daemon.handlers.registry import Call, handler


@handler("LAUNCH_COOPERATIVE")
def launch_cooperative(c: Call, func: Any, grid: tuple[int, int, int], block: tuple[int, int, int], shmem: int,
                       stream: Any) -> None:
    module, kernel = func
    check_params(c, kernel)
    c.ctx.launch_cooperative(module, kernel, grid, block, shmem, c.payload, stream)
