"""pyvgpu_daemon: the daemon that replays remoted CUDA calls on real GPUs (cuda-python) or the emulated GPU."""
