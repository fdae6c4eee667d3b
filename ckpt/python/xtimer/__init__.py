"""xtimer: tools around distributed PyTorch training. The flash checkpoint is xtimer.ckpt."""
