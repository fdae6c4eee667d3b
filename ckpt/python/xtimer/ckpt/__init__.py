"""xtimer.ckpt: flash checkpoint (see checkpointer.py and docs/formats.md)."""
from .checkpointer import Checkpointer, CheckpointError, DdpCheckpointer, StorageType

__all__ = ["Checkpointer", "CheckpointError", "DdpCheckpointer", "StorageType"]
