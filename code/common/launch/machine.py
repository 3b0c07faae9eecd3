"""What this machine can run: its cores and memory, how many local ranks that allows, and which
backends it has. Checked before any work starts, so a run this machine cannot hold ends with one
line (UsageError, exit status 2) that says the limit and why. Pure Python: torch only to ask
whether the GPUs for NCCL are there."""

from __future__ import annotations

import os

from common.error_types import UsageError

RANKS_PER_CORE = 32  # local ranks beyond this spend their time waiting for each other
MEMORY_PER_RANK = 256 * 2**20  # what a torch rank of these scripts can reach (import + small models)


def cores() -> int:
    """The cores this process may run on (its CPU affinity: a container's or taskset's share)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def total_memory() -> int | None:
    """The machine's memory (not what is free right now: the limit should not move between runs)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def max_local_ranks() -> tuple[int, str]:
    """How many ranks this machine can run as local processes, and why that many.
    COURSE_MAX_RANKS overrides it (for a machine you know holds more)."""
    override = os.environ.get("COURSE_MAX_RANKS", "").strip()
    if override:
        return positive_env_int("COURSE_MAX_RANKS", "a number of ranks"), "COURSE_MAX_RANKS"
    limit, why = RANKS_PER_CORE * cores(), f"{RANKS_PER_CORE} ranks per core on {cores()} cores"
    memory = total_memory()
    if memory is not None and memory // MEMORY_PER_RANK < limit:
        limit = max(1, memory // MEMORY_PER_RANK)
        why = f"{memory / 2**30:.1f} GiB of memory at {MEMORY_PER_RANK // 2**20} MiB per rank"
    return limit, why


def positive_env_int(name: str, what: str) -> int:
    """An environment variable that must hold a whole number >= 1 ("8"; not "abc", "0", "-1",
    "1e3"): garbage is a usage error naming the variable, never quietly ignored."""
    text = os.environ.get(name, "").strip()
    if not (text.isascii() and text.isdigit()) or int(text) < 1 or len(text) > 9:
        raise UsageError(f"{name}={text!r} is not {what}: give a whole number from 1 to 999,999,999, "
                         "or unset it")
    return int(text)


def check_course_environment() -> None:
    """The COURSE_* variables a run may read, each checked before any work, whether or not this
    command reads it: a typo in one is an error where it was made, not a failure later inside a case."""
    if os.environ.get("COURSE_MAX_RANKS", "").strip():
        positive_env_int("COURSE_MAX_RANKS", "a number of ranks")
    if os.environ.get("COURSE_MAX_MINUTES", "").strip():
        positive_env_int("COURSE_MAX_MINUTES", "a number of minutes")
    backend = os.environ.get("COURSE_BACKEND") or "auto"
    if backend not in ("gloo", "nccl", "auto"):
        raise UsageError(f"unknown backend {backend!r} (COURSE_BACKEND): use gloo, nccl or auto, or unset it")


def check_world_size(world_size: int) -> None:
    """A world size this machine can run, or a UsageError that says the limit and why."""
    if int(world_size) != world_size or world_size < 1:
        raise UsageError(f"world size must be an integer >= 1, got {world_size}")
    limit, why = max_local_ranks()
    if world_size > limit:
        raise UsageError(f"--world-size {world_size:,} is more ranks than this machine can run at once (at "
                         f"most {limit}: {why}; gloo also connects every pair of ranks, so start-up grows as "
                         "W²). Set COURSE_MAX_RANKS to raise the limit, or run across machines with torchrun")


def check_backend(world_size: int, backend: str) -> str:
    """A backend name this machine can run (gloo, nccl or auto), or a UsageError."""
    if backend not in ("gloo", "nccl", "auto"):
        raise UsageError(f"unknown backend {backend!r} (COURSE_BACKEND or backend=): use gloo, nccl or auto")
    if backend == "nccl":
        import torch  # only here: the rest of this module is pure Python

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        if gpus < local:
            raise UsageError(f"backend nccl needs a GPU per rank: {local} ranks here, {gpus} GPUs "
                             "(unset COURSE_BACKEND to use gloo on the CPU)")
    return backend
