"""DLRover's module path for the DDP checkpointer: `dlrover.trainer.torch.flash_checkpoint.ddp`
becomes `xtimer.ckpt.ddp` (the classes live in checkpointer.py)."""
from .checkpointer import DdpCheckpointer, StorageType

__all__ = ["DdpCheckpointer", "StorageType"]
