"""Several scripts, one after another, in one torchrun group (tests/suite/test_torchrun_numbers.py):

    torchrun --standalone --nproc-per-node=N tests/probes/torchrun_batch.py SCRIPT JSON [SCRIPT JSON ...]

Each rank runs each script's main as `python SCRIPT --quick --json JSON` would, in this process:
torchrun's start-up (its agent and every rank importing torch, the rendezvous) is paid once for
the batch instead of once a script. What a fresh process would give each script again: its own
sys.argv and __main__, torch's default random state as at start-up. The group is joined once,
by the first script, and reused (threads per rank are the launcher's default for every script).
Rank 0 prints `== batch: SCRIPT exit STATUS` after each script (the tests name a failure by it);
the first script that fails ends the batch with its exit status: its group may be broken.
"""

import runpy
import sys
from pathlib import Path

# This checkout's code/, ahead of anything installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "code"))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)
from common.process_exit import end_process

# isort: split

import torch

from common.launch.torchrun import is_rank0, speak


def unquiet() -> None:
    """Stdout and stderr where torchrun pointed them, as a fresh process has them: a script's start
    quiets every rank but 0 (common.launch.torchrun.quiet_unless_rank0) and nothing undoes it, so without
    this only the batch's first script would show that it quiets them itself."""
    if sys.stdout is not sys.__stdout__:
        sys.stdout.close()
        sys.stdout = sys.__stdout__
    speak()


def run_one(script: str, json_path: str, seed: int) -> int:
    """The script's main as its own process would run it; its exit status."""
    unquiet()
    torch.manual_seed(seed)  # a fresh process's default generator, whatever the previous script drew
    sys.argv = [script, "--quick", "--json", json_path]
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return 0


def main() -> None:
    pairs = list(zip(sys.argv[1::2], sys.argv[2::2]))
    seed = torch.initial_seed()
    for script, json_path in pairs:
        status = run_one(script, json_path, seed)
        sys.stdout.flush()
        if is_rank0():
            print(f"== batch: {script} exit {status}", flush=True)
        if status:
            sys.exit(status)


if __name__ == "__main__":
    main()
    end_process(0)   # as each script ends (common.script_end.run_main), less the modules' teardown
