"""Every real script gives the same numbers under torchrun as standalone: one test per script (the
scripts that start ranks through common.launch.launcher), each running it with `--quick --json` both ways
and comparing what does not depend on timing, exactly (floats to rounding). Under torchrun the
--json goes into a named pipe, read as it comes: a second rank writing it would show as a second
document; each title is printed once (rank 0 alone prints), and torchrun's world size replaces a
script's default. Two scripts also run on two torchrun "nodes" on this machine, as a student runs
them: the numbers, and each node's local ranks.

torchrun imports torch in every process (about 10 s before a script starts here), so the scripts
with the same number of ranks run one after another in one torchrun (tests/probes/torchrun_batch.py),
and a standalone run at a script's default world size is the session's reproduction's (conftest's
quick_run). Still slow, so marked `torchrun`: `pytest -m "not torchrun"` leaves them out.
"""

from __future__ import annotations

import json
import math
import os
import re
import select
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, NamedTuple

import pytest
from conftest import ROOT, load_script, run_script

from common import checker
from common.checker import MEASURED
from reproduction.suite import scripts

# One worker runs them all (pytest-xdist --dist loadgroup): the batches are this module's, and real
# ranks on two cores want no second torchrun beside them.
pytestmark = [pytest.mark.torchrun, pytest.mark.timeout(300), pytest.mark.xdist_group("torchrun")]

# What differs by design, as patterns over the names _values gives (claims of kind "measured here"
# and every claim's wording are never compared). Timings, and what is computed from them; (?!…)
# keeps the columns that name a row or a size:
TIMED = {
    "lecture14/04_alpha_beta.py": [r"^Part 2/"],
    "lecture15/01_ddp_basics.py": [r"^Part 3/tables/timing/\d+/(?!setting$)"],
    "lecture15/02_buckets.py": [r"^Part 3/tables/sweep/\d+/(total time|× one tensor's time"
                                r"|total time as a bar|range)$"],
    "lecture15/04_details.py": [r"^Part 2/tables/cost/\d+/(median|range)"],
    "lecture15/model_vs_real.py": [r"^Part 1/(alpha_s|beta_Bps)$", r"^Part 1/tables/allreduce/\d+/(?!size$)",
                                   r"^Part 2/tables/ready/\d+/(?!parameter)", r"^Part 3/"],
    "lecture15/my_ddp_check.py": [r"^Part \d+/steps_s", r"^Part \d+/tables/timing/\d+/median"],
    "lecture15/07_traces.py": [r"^Part 1/", r"^Part 2/tables/", r"^Part 3/tables/"],
    "cs336/02_benchmark.py": [r"^Part 1/tables/[^/]+/\d+/(t \(p50\)|p10 … p90|algbw GB/s|busbw GB/s"
                              r"|lecture code's GB/s)$",
                              r"^Part 1/[^/]+\[\d+\]/(t|p10|p90|t_fastest|algbw|busbw|slip)$",
                              r"^Part 1/(copy|link)_Bps$",
                              r"^Part [234]/tables/[^/]+/\d+/(?!(collective|bytes divided by t"
                              r"|ring bytes per rank / S)$)"],
}
# What a torchrun run does differently on purpose:
BY_DESIGN = {
    # the store's address and port are torchrun's (localhost, its port), not the launcher's
    "lecture15/01_ddp_basics.py": [r"^Part 1/tables/environment/\d+/MASTER_(ADDR|PORT)"],
    # a skipped collective would break torchrun's one group: those parts say "not run"
    "lecture14/02_primitives.py": [r"^claim Part 4: ",
                                   r"^Part 4/values/(skip_outcome|skipped_collective_fails)$"],
    "cs336/01_collectives.py": [r"^claim Part 5: a rank that skips a collective",
                                r"^Part 5/values/skip_(waits|outcome)$"],
    # every part stages a mismatched collective, which would end torchrun's one group: none runs there
    "lecture14/06_debug_collectives.py": [r"^(claim |Part )"],
}
# Ranks for each: the script's default (the notes' setting), but 04_alpha_beta's 8 (all timing) and
# 02_primitives' 4: at 2, torchrun's world size is seen to replace the default.
RANKS = {"lecture14/02_primitives.py": 2, "lecture14/04_alpha_beta.py": 2, "lecture14/05_data_parallel.py": 4,
         "lecture15/01_ddp_basics.py": 4, "lecture15/02_buckets.py": 2, "lecture15/04_details.py": 2,
         "lecture15/model_vs_real.py": 2, "lecture15/my_ddp_check.py": 2, "cs336/01_collectives.py": 4,
         "cs336/02_benchmark.py": 4, "cs336/05_parallel.py": 4, "cs336/07_tensor_parallel.py": 4,
         "cs336/08_pipeline_schedules.py": 4, "cs336/09_zero.py": 4, "lecture15/06_comm_hooks.py": 4,
         "lecture14/06_debug_collectives.py": 4, "lecture15/07_traces.py": 4,
         "lecture15/handbook_details.py": 2, "lecture15/my_ddp_vs_ddp.py": 2}
REAL = sorted(s.name for s in scripts() if s.real)
PRIMITIVES, DATA_PARALLEL = "lecture14/02_primitives.py", "lecture14/05_data_parallel.py"
DDP_BASICS = "lecture15/01_ddp_basics.py"


def _values(data: dict) -> dict[str, Any]:
    """The JSON's values by name: table cells as part/tables/name/row/column header, other records
    by their path, and each claim's ours, notes and status (measured claims left out)."""
    found: dict[str, Any] = {}
    for part, body in data["parts"].items():
        _walk(body, part, found)
    for claim in data["claims"]:
        if claim["kind"] != MEASURED:
            for field in ("ours", "notes", "status"):
                found[f"claim {claim['part']}: {claim['what']} [{field}]"] = claim[field]
    return found


def _walk(value: Any, path: str, found: dict[str, Any]) -> None:
    if isinstance(value, dict) and {"headers", "rows"} <= set(value):
        for i, row in enumerate(value["rows"]):
            for header, cell in zip(value["headers"], row):
                found[f"{path}/{i}/{header}"] = cell
    elif isinstance(value, dict):
        for key, item in value.items():
            _walk(item, f"{path}/{key}", found)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _walk(item, f"{path}[{i}]", found)
    else:
        found[path] = value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    return a == b


def measured_values(script: str) -> set[str]:
    """The recorded values that rows of the kind "measured here" compare: timings, never compared."""
    return {row.value for row in checker.rows_for(script) if row.basis == MEASURED and row.value}


def differences(script: str, standalone: dict, torchrun: dict) -> list[str]:
    # Figure names: a standalone run from the session's reproduction drew them (--save-figs), the
    # torchrun batch draws none; the figures' data are the tables compared here.
    skip = [re.compile(p) for p in TIMED.get(script, []) + BY_DESIGN.get(script, []) + [r"/figures\[\d+\]$"]]
    skip += [re.compile(rf"^Part [^/]+/values/{re.escape(name)}$") for name in measured_values(script)]
    skip += [re.compile(rf"^{re.escape(part)}/values/{re.escape(name)}$")   # what Report.value marked timed
             for data in (standalone, torchrun) for part, body in data["parts"].items()
             for name in body.get("timed", [])]
    a, b = _values(standalone), _values(torchrun)
    out = []
    for name in sorted(set(a) | set(b)):
        if any(p.search(name) for p in skip):
            continue
        if name not in a or name not in b or not _same(a[name], b[name]):
            out.append(f"{name}: standalone {a.get(name, '(absent)')!r}, torchrun "
                       f"{b.get(name, '(absent)')!r}")
    return out


class _Pipe:
    """A named pipe to write --json into, read while the run goes on (no writer waits for us)."""

    def __init__(self, folder: Path, name: str = "out.json") -> None:
        self.path = folder / name
        os.mkfifo(self.path)
        self.fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self.keep = os.open(self.path, os.O_WRONLY)  # one writer always there: no end of file between two
        self.data, self.stop = bytearray(), threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            if select.select([self.fd], [], [], 0.1)[0]:
                self.data += os.read(self.fd, 1 << 16)
            elif self.stop.is_set():
                return

    def documents(self) -> list[Any]:
        self.stop.set()
        self.reader.join()
        os.close(self.keep)
        os.close(self.fd)
        text, found, decoder = self.data.decode(), [], json.JSONDecoder()
        while text.strip():
            doc, end = decoder.raw_decode(text.lstrip())
            found.append(doc)
            text = text.lstrip()[end:]
        return found


def _torchrun(ranks: int, program: list[str], nodes: int = 1,
              timeout: float = 240) -> list[tuple[int, str, str]]:
    """Run `program` (a file and its arguments) under torchrun (`nodes` simulated on this machine);
    each agent's exit status, stdout and stderr."""
    with socket.socket() as sock:  # a free port for the rendezvous (a test may pick one; scripts never do)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    where = (["--standalone"] if nodes == 1 else
             [f"--nnodes={nodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
              f"--rdzv-id=course-{os.getpid()}-{port}"])
    # Which agent hosts the rendezvous store is said, not raced for (both are on 127.0.0.1).
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *where,
                               f"--nproc-per-node={ranks // nodes}",
                               *([f"--node-rank={n}", f"--rdzv-conf=is_host={int(n == 0)}"] if nodes > 1
                                 else []),
                               *program], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in range(nodes)]
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return [(proc.returncode, out, err) for proc, (out, err) in zip(procs, outs)]


class Batch(NamedTuple):
    documents: dict[str, dict | str]   # each script's JSON document, or why it has none
    agents: list[tuple[int, str, str]]  # each torchrun agent's exit status, stdout and stderr

    def printed(self, script: str) -> str:
        """What rank 0 printed for `script`: from the batch's line before it to the one after."""
        out = self.agents[0][1]
        end = out.index(f"== batch: {ROOT / 'code' / script} exit")
        before = out.rfind("== batch: ", 0, end)
        return out[0 if before < 0 else out.index("\n", before) + 1:end]


def torchrun_batch(scripts_: list[str], ranks: int, folder: Path, nodes: int = 1) -> Batch:
    """Each script's `--quick --json` document, all run in one torchrun (tests/probes/
    torchrun_batch.py: torchrun's start-up paid once; `nodes` simulated on this machine), or why
    it has none (a failure, with its output; a script after the one that failed did not run)."""
    pipes = {s: _Pipe(folder, f"{i}.json") for i, s in enumerate(scripts_)}
    program = [str(ROOT / "tests" / "probes" / "torchrun_batch.py")]
    for script, pipe in pipes.items():
        program += [str(ROOT / "code" / script), str(pipe.path)]
    agents = _torchrun(ranks, program, nodes, timeout=180 + 60 * len(scripts_))
    rc, out, err = agents[0]   # node 0's agent: rank 0 is there
    found: dict[str, dict | str] = {}
    for script, pipe in pipes.items():
        ended = re.search(rf"^== batch: {re.escape(str(ROOT / 'code' / script))} exit (\d+)$", out, re.M)
        documents = pipe.documents()
        if ended is None:
            found[script] = f"not run: the batch ended before it (torchrun exit {rc})\n{err[-3000:]}"
        elif ended[1] != "0":
            found[script] = (f"exit {ended[1]} under torchrun\n--- stdout ---\n{out[-3000:]}\n"
                             f"--- stderr ---\n{err[-3000:]}")
        elif len(documents) != 1:
            found[script] = f"{len(documents)} JSON documents written: only rank 0 may write"
        else:
            found[script] = documents[0]
    return Batch(found, agents)


class _Parsed(Exception):
    pass


def default_world_size(script: str) -> int | None:
    """The script's --world-size when none is given (its parser's default), read without running it."""
    from common import cli

    seen: list[Any] = []

    def capture(parser: Any, *args: object, **kwargs: object) -> None:
        seen.append(parser)
        raise _Parsed  # out of main() before it does anything

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli.OneLineParser, "parse_args", capture)
        with pytest.raises(_Parsed):
            load_script(script).main()
    return seen[0].get_default("world_size")


def standalone_json(script: str, ranks: int, folder: Path, quick_run: Any = None) -> dict:
    """`script --quick --world-size RANKS --json`: the session's reproduction ran exactly that when
    RANKS is the default (conftest's quick_run), else a run of its own."""
    if quick_run is not None and default_world_size(script) == ranks:
        return quick_run(script).data
    out = folder / "standalone.json"
    run_script(script, "--quick", "--world-size", str(ranks), "--json", str(out), timeout=240)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def under_torchrun(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Batch]:
    """under_torchrun(script): the batch it ran in, one torchrun per rank count, run when first asked."""
    batches: dict[int, Batch] = {}

    def get(script: str) -> Batch:
        ranks = RANKS[script]
        if ranks not in batches:
            batches[ranks] = torchrun_batch([s for s in REAL if RANKS[s] == ranks], ranks,
                                            tmp_path_factory.mktemp(f"torchrun{ranks}"))
        return batches[ranks]

    return get


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Batch:
    """Two torchrun "nodes" of one rank each on this machine, as a student runs them: one batch."""
    return torchrun_batch([DATA_PARALLEL, DDP_BASICS], 2, tmp_path_factory.mktemp("two_nodes"), nodes=2)


def test_every_real_script_is_compared() -> None:
    assert sorted(RANKS) == REAL


@pytest.mark.timeout(900)
@pytest.mark.parametrize("script", REAL)
def test_torchrun_gives_the_standalone_numbers(script: str, tmp_path: Path, under_torchrun,
                                                request: pytest.FixtureRequest) -> None:
    # torchrun's side first: the session's quick reproduction (the standalone side) is meanwhile
    # computed on the other worker, instead of this one waiting for it idle
    under = under_torchrun(script).documents[script]
    alone = standalone_json(script, RANKS[script], tmp_path, request.getfixturevalue("quick_run"))
    assert isinstance(under, dict), f"{script}: {under}"
    found = differences(script, alone, under)
    assert not found, f"{len(found)} differences:\n" + "\n".join(found)


@pytest.mark.parametrize("ranks", sorted(set(RANKS.values())))
def test_rank_0_alone_prints_under_torchrun(ranks: int, under_torchrun) -> None:
    # Every rank runs the script; one title each, and --world-size is torchrun's where they differ.
    batch = under_torchrun(next(s for s in REAL if RANKS[s] == ranks))
    for script in (s for s in REAL if RANKS[s] == ranks):
        assert len(re.findall(rf"^{re.escape(Path(script).name)}: ", batch.agents[0][1], re.M)) == 1, script
    if ranks == RANKS[PRIMITIVES]:   # its default is 4: torchrun's world size wins
        printed = batch.printed(PRIMITIVES)
        # the line a student reads under torchrun: whose world size wins
        assert f"--world-size is torchrun's {ranks}" in printed and f"on {ranks} gloo ranks" in printed
        assert "differs" not in printed   # the identities hold on torchrun's ranks


def test_two_torchrun_nodes_give_the_standalone_numbers(tmp_path: Path, two_nodes: Batch) -> None:
    alone = standalone_json(DATA_PARALLEL, 2, tmp_path)
    under = two_nodes.documents[DATA_PARALLEL]
    assert isinstance(under, dict), under
    found = differences(DATA_PARALLEL, alone, under)
    assert not found, f"{len(found)} differences:\n" + "\n".join(found)


def test_two_nodes_keep_torchruns_local_rank(two_nodes: Batch) -> None:
    """Rank 1 is local rank 0 on its node; only node 0's rank 0 prints."""
    assert isinstance(two_nodes.documents[DDP_BASICS], dict), two_nodes.documents[DDP_BASICS]
    table = two_nodes.printed(DDP_BASICS)
    rows = {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"^\s+2\s+(\d)\s+(\d)\s", table, re.M)}
    assert rows == {0: 0, 1: 0}  # WORLD_SIZE 2; RANK -> LOCAL_RANK
    assert [out for _, out, _ in two_nodes.agents[1:]] == [""]
    assert [rc for rc, _, _ in two_nodes.agents] == [0, 0], two_nodes.agents[1][2][-3000:]


def test_the_comparison_sees_a_difference() -> None:
    # The check is not empty: a changed table cell and a changed claim are both reported.
    base = {"parts": {"Part 1": {"tables": {"t": {"headers": ["x"], "rows": [[1.0]]}}}},
            "claims": [{"part": "Part 1", "what": "w", "ours": 1, "notes": 1, "status": "agrees",
                        "kind": "exact"}]}
    changed = json.loads(json.dumps(base))
    changed["parts"]["Part 1"]["tables"]["t"]["rows"][0][0] = 1.5
    changed["claims"][0]["status"] = "differs"
    assert len(differences("x.py", base, changed)) == 2


def test_only_values_marked_as_timings_are_left_out() -> None:
    # Report.value(timed=True) lists a value under its part's "timed"; a value recorded beside it is compared.
    alone = {"parts": {"Part 2": {"values": {"t_ms": 1.0, "n": 3}, "timed": ["t_ms"]}}, "claims": []}
    under = {"parts": {"Part 2": {"values": {"t_ms": 7.0, "n": 4}, "timed": ["t_ms"]}}, "claims": []}
    assert differences("x.py", alone, under) == ["Part 2/values/n: standalone 3, torchrun 4"]
