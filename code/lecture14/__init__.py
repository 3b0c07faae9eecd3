"""Lecture 14: collectives, ring all-reduce, the α-β model, data parallelism."""
