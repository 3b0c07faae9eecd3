"""Lecture 15: PyTorch DDP — buckets, overlap, no_sync, unused parameters, buffers, scaling."""
