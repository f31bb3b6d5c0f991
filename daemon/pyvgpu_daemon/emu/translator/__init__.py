"""The translator: PTX IR (ptx/) -> Python block code the runtime (runtime/) executes. See kernel.py for the
pipeline and codegen.py for the shape of the generated code."""
from .kernel import Kernel

__all__ = ["Kernel"]
