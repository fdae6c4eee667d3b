"""xtimer.ckpt: flash checkpoint (see checkpointer.py and docs/formats.md)."""
from .checkpointer import Checkpointer, CheckpointError, StorageType

__all__ = ["Checkpointer", "CheckpointError", "StorageType"]
