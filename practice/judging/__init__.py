"""The practice problems the judge knows: number, folder, title, and the module holding the cases.

Each case module defines `CASES` (a list of engine.Case) and `FUNCTIONS` (what the student writes).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Problem:
    number: str
    slug: str
    title: str
    cases_module: str

    @property
    def folder(self) -> str:
        return f"{self.number}_{self.slug}"

    def cases(self) -> ModuleType:
        return importlib.import_module(f"judging.{self.cases_module}")


PROBLEMS = [
    Problem("113", "ddp_buckets", "DDP buckets and the communication timeline", "p113_ddp_buckets"),
    Problem("114", "hw5_data_parallel", "HW5: partition_indices, average_gradients, train_step", "p114_hw5"),
    Problem("115", "ring_allreduce", "ring all-reduce with send/recv on real ranks", "p115_ring"),
    Problem("116", "myddp_no_sync", "MyDDP's no_sync: gradient accumulation without all-reduce",
            "p116_no_sync"),
    Problem("117", "tp_backward", "tensor-parallel backward of the CS336 MLP", "p117_tp_backward"),
    Problem("118", "pipeline_1f1b", "a 1F1B pipeline over send/recv, a stage per rank", "p118_pipeline"),
    Problem("119", "zero_by_hand", "ZeRO-1 by hand: Adam's state sharded over the ranks", "p119_zero"),
    Problem("120", "busbw", "nccl-tests' arithmetic: algbw and busbw of a collective", "p120_busbw"),
]
