"""Every flag of a model-only script is bounded by its cost (common.model_bounds): --tp 999999999 is
refused at once, the largest value each growing flag accepts runs within the model budget, one more
is refused with a line that names the largest, and a ring's busiest and total bytes cost the same
at any K (common.costmodel.collectives lists no K positions to take their max or sum).

Times are CPU seconds of a fresh process (os.wait4), against `import torch`'s beside them: the wall
clock of a machine shared with other work is not the script's (test_world_sizes.py says the same),
and bench/bench_scripts.py --largest times the same runs as a student sees them."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest
from conftest import ROOT, assert_usage_error, run_script

from common.costmodel import collectives as cdef
from common.model_bounds import MAX_MODEL_WORLD, MODEL_MEMORY_BYTES
from reproduction.suite import scripts

RUN_LIMIT_X = 3.0   # CPU of the largest run, in import torch's: about 1-2.5x here (a 2-core machine)
HANG_S = 300        # a run still going after this is killed: the test fails, the suite goes on


def _bench() -> object:
    spec = importlib.util.spec_from_file_location("bench_scripts", ROOT / "bench" / "bench_scripts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LARGEST_RUNS = _bench().LARGEST_RUNS
# Flags of a run set for it, not at a bound of their own: one more of them is refused naming another
# flag (04's TP × PP × DP names the largest axis) or is no larger cost (a bucket cap of 0 is the most).
NOT_STEPPED = {("cs336/04_memory.py", "--pp"), ("cs336/04_memory.py", "--dp"),
               ("cs336/04_memory.py", "--global-batch"), ("lecture14/01_scale.py", "--pp")}
UNSTEPPED_FLAGS = {"--save-figs", "--bucket-cap-mb", "--first-bucket-cap-mb"}
# 05's samples run holds one micro-batch: --sync-every 2 is refused as more than the micro-batches.
NOT_STEPPED_AT = {("lecture15/05_scaling.py", "--sync-every", "1")}


def measured(argv: list[str]) -> tuple[int, str, str, float, int]:
    """(exit status, stdout, stderr, CPU seconds, peak memory in bytes) of `argv`, run fresh."""
    with open(os.devnull, "rb") as stdin, _Temp() as out, _Temp() as err:
        proc = subprocess.Popen(argv, cwd=ROOT, stdin=stdin, stdout=out.file, stderr=err.file)
        timer = threading.Timer(HANG_S, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        return (proc.returncode, out.text(), err.text(), usage.ru_utime + usage.ru_stime,
                usage.ru_maxrss * 1024)


class _Temp:
    """A temporary file a child writes and the parent reads once it has ended."""

    def __enter__(self) -> _Temp:
        import tempfile

        self.file = tempfile.TemporaryFile()
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()

    def text(self) -> str:
        self.file.seek(0)
        return self.file.read().decode(errors="replace")


@pytest.fixture(scope="module")
def import_torch_cpu_s() -> float:
    rc, _, err, cpu, _ = measured([sys.executable, "-c", "import torch"])
    assert rc == 0, err
    return cpu


def test_04_memory_refuses_tp_999999999_at_once() -> None:
    """The report: 67 s and 15.6 GB, linear in --tp. Now a usage error of one line before any work."""
    start = time.perf_counter()
    rc, out, err, cpu, _ = measured([sys.executable, str(ROOT / "code/cs336/04_memory.py"),
                                     "--tp", "999999999", "--quick"])
    wall = time.perf_counter() - start
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and out == "", (rc, out, err)
    # the one-line stderr contract: the value refused and the largest allowed
    assert "--tp 999,999,999" in lines[0] and "at most --tp 32 at --pp 8 --dp 16" in lines[0], lines[0]
    assert cpu < 1.0 and wall < 30, (cpu, wall)   # wall: a guard only, the machine may be busy


def _runs() -> list:
    return [pytest.param(name, argv, id=f"{name}:{' '.join(argv)}") for name, argv in LARGEST_RUNS]


@pytest.mark.parametrize("name, argv", _runs())
def test_the_largest_values_run_within_the_budget(name: str, argv: tuple[str, ...], tmp_path: Path,
                                                  import_torch_cpu_s: float) -> None:
    command = [arg.replace("{dir}", str(tmp_path / "figs")) for arg in argv]
    rc, out, err, cpu, memory = measured([sys.executable, str(ROOT / "code" / name), *command])
    assert rc == 0 and err == "", err[-2000:]
    # the printed output is what is tested: no failed check's NO, no number that ran away
    assert not re.search(r"\bNO\b|\bnan\b|\binf\b", out), "a check failed or a number ran away"
    assert cpu <= RUN_LIMIT_X * import_torch_cpu_s, \
        f"{cpu:.1f} s of CPU: {cpu / import_torch_cpu_s:.1f}x import torch's {import_torch_cpu_s:.1f} s"
    assert memory <= MODEL_MEMORY_BYTES, f"{memory / 2**20:.0f} MiB at the peak"


def _steps() -> list:
    """(script, the run's flags, the flag to raise by one, its value as a bound names it)."""
    found = []
    for name, argv in LARGEST_RUNS:
        for i in range(0, len(argv) - 1):
            flag, value = argv[i], argv[i + 1]
            if (not flag.startswith("--") or flag in UNSTEPPED_FLAGS or (name, flag) in NOT_STEPPED
                    or (name, flag, value) in NOT_STEPPED_AT
                    or value.startswith("--")):
                continue
            found.append(pytest.param(name, argv, i, id=f"{name}:{flag} {value}+1"))
    return found


def _one_more(value: str) -> tuple[str, str]:
    """The value plus one as typed, and the value as a bound's message shows it."""
    number = re.fullmatch(r"(\d+)(MiB)?", value)
    assert number, value
    if number.group(2):   # a size: one byte more
        return f"{int(number.group(1)) * 2**20 + 1}B", value
    return str(int(value) + 1), f"{int(value):,}"


@pytest.mark.parametrize("name, argv, at", _steps())
def test_one_more_is_refused_naming_the_largest(name: str, argv: tuple[str, ...], at: int,
                                                tmp_path: Path) -> None:
    flag, (more, shown) = argv[at], _one_more(argv[at + 1])
    changed = [arg.replace("{dir}", str(tmp_path / "figs")) for arg in argv]
    changed[at + 1] = more
    proc = run_script(name, *changed, expect_rc=2, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and proc.stdout == "", proc.stderr
    assert re.search(rf"; at most (.*, or )?{flag} {shown}\b", lines[0]), lines[0]
    assert not (tmp_path / "figs").exists()


def test_every_model_script_with_a_growing_flag_has_a_largest_run() -> None:
    """A model script that bounds a flag, or takes a model's devices, is timed at its largest."""
    timed = {name for name, _ in LARGEST_RUNS}
    for script in scripts():
        text = script.path.read_text(encoding="utf-8")
        grows = "bounds=" in text or re.search(r"make_parser\([^)]*\b(world_size|tp|pp|dp)=", text, re.S)
        if not script.real and grows:
            assert script.name in timed, f"{script.name}: add its largest run to bench_scripts.LARGEST_RUNS"


@pytest.mark.parametrize("argv, says", [
    (["--world-size", str(MAX_MODEL_WORLD + 1)], f"at most --world-size {MAX_MODEL_WORLD:,}"),
    (["--tp", "600", "--pp", "8"], "TP × PP = 600 × 8 = 4,800 devices, and a model goes up to 4,096; "
                      "at most --tp 512 at --pp 8"),
    (["--tp", "5000", "--pp", "5000"], "no --tp fits at --pp 5,000: lower those"),
])
def test_a_models_devices_are_bounded(argv: list[str], says: str) -> None:
    proc = run_script("lecture14/01_scale.py", *argv, expect_rc=2, timeout=60)
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# ---- a ring's bytes cost the same at any K ---------------------------------------------------------

SIZES = [0, 1, 7, 1000, 0.1, 1 / 3, 64 * 2**20, 26e9, 2.5e15, 12345678901234567, Fraction(7, 3)]


@pytest.mark.parametrize("name", list(cdef.ALGORITHMS))
def test_busiest_and_total_equal_the_positions_max_and_sum(name: str) -> None:
    """Read off runs of equal positions, the busiest and the total are the listed positions' max and
    exact sum, to the last bit (the printed numbers cannot move)."""
    alg = cdef.algorithm(name)
    for k in [*range(1, 40), 64, 127, 128, 1000, 1024]:
        for n in SIZES:
            listed = alg.bytes_sent(k, n)
            exact = cdef.ALGORITHM_BYTES[name](k, Fraction(n))
            exact = exact.expand() if isinstance(exact, cdef.Runs) else exact
            assert alg.busiest_bytes(k, n) == max(listed), (k, n)
            assert alg.total_bytes(k, n) == float(sum(exact)), (k, n)
            assert len(listed) == (k + 1 if name == "parameter server" else k)


def test_a_rings_bytes_at_a_billion_devices_list_nothing() -> None:
    k, n = 10**9, 26e9
    start = time.process_time()
    for kind in ("ring all-reduce", "ring reduce-scatter", "ring all-gather", "pipelined ring broadcast",
                 "naive all-reduce", "parameter server", "direct broadcast"):
        cdef.algorithm(kind).busiest_bytes(k, n)
        cdef.algorithm(kind).total_bytes(k, n)
    assert time.process_time() - start < 0.5   # a list of 10^9 positions took a minute and 16 GB
    assert cdef.algorithm("ring all-reduce").busiest_bytes(k, n) == 2 * (k - 1) * n / k
    assert cdef.algorithm("ring all-gather").total_bytes(k, n) == float((k - 1) * Fraction(n))


def test_a_compute_time_that_underflows_is_refused() -> None:
    """5e-324 ms is a positive float whose seconds are 0: refused, not a ZeroDivisionError after work."""
    assert_usage_error("cs336/06_pipeline.py", "--tf-ms", "5e-324", "--tb-ms", "5e-324")
