"""Stanford CS336 lecture 8 (distributed training across GPUs): numbered scripts and their pure models."""
