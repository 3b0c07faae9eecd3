"""Problem 118's cases: one 1F1B training step of CS336's deep MLP, a stage per gloo rank.

The judge hands each rank its stage (code/cs336/mlp.py's layers, mlp.stage_layers' split) as a
module whose forward notes every pass: which micro-batch (found by its input, against one
process's activations), and, through a hook on the output's gradient, when its backward ran. From
that order the judge reads what the notes promise, here in its own process: the activations a rank
held (engine_probes.most_held) at most S, each rank's order equal to cs336/pipeline.py's
one_f_one_b_order, the sends and bytes of costmodel_steps.pp_step_traffic (a 1F1B step sends what
GPipe's does, in another order), and the batch's output, the gradients and the weights after every
step equal to one process (mlp.train_one_process) with SGD and with Adam.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch
from torch import nn

from common.costmodel.steps import pp_step_traffic
from cs336 import mlp
from cs336 import pipeline as pp
from cs336.engine_probes import most_held
from judging.engine import Case
from judging.messages import kind
from judging.ranks import check_seen, run_ranks, solution_in_rank, watched
from judging.sandbox import Fail, function

FUNCTIONS = ("train_step",)
SEED, WIDTH, STEPS = 23, 8, 2
ELEM = 8              # float64: the pipeline and one process differ only in the order of additions
TOL = 1e-10           # round-off is ~1e-16 here; a lost micro-batch or a wrong scale is far above
MATCH_TOL = 1e-9      # how close a stage's input must be to one process's to name its micro-batch
DATA_ONLY = ("barrier",)
HINT_HELD = ("README hint 1: 1F1B starts micro-batch i's backward as soon as it can (S − s − 1 forwards of "
             "warm-up, then one forward, one backward): a stage never holds more than S activations")
HINT_ORDER = ("README hint 1: stage s runs min(S − s − 1, M) forwards, then F(w + i), B(i) in turn, then the "
              "remaining backwards (cs336/pipeline.py's one_f_one_b_order)")
HINT_P2P = ("README hint 2: send/recv between neighbours only: each micro-batch's activation to s + 1, its "
            "input gradient to s − 1")
HINT_LOSS = ("README hint 3: the last stage's loss for micro-batch m is y_m.square().sum() / batch.numel(): "
             "the micro-batches' parts add up to the batch's mean")
HINT_GRAD = ("README hint 2: a stage's backward is y.backward(the gradient received from s + 1); what it "
             "sends to s − 1 is its input's .grad (the received input needs requires_grad_())")
HINT_STAGE = ("README: run every forward as stage(x) and every backward as y.backward(...) on what it "
              "returned: the judge sees your passes there")
HINT_OUTPUT = ("README: the last stage returns the batch's output, its micro-batches' outputs in order, "
               "detached; every other stage returns None")
HINT_BUFFER = ("README hint 2: receive into a buffer of the tensor sent's shape AND dtype (float64 here: "
               "torch.empty(shape, dtype=batch.dtype)); gloo refuses a size that differs")
HINT_STEP = ("README hint 3: every step starts with optimizer.zero_grad() and ends with optimizer.step(), "
             "once, after every micro-batch's backward")
HINT_DEADLOCK = ("README hint 2: ranks waited for each other. Check every peer: activations go from s to "
                 "s + 1, gradients from s + 1 back to s, and only the first and last stages skip one. A "
                 "gloo send also waits for its receive: send with dist.isend and wait at the end")
ERROR_HINTS = [("Received data size doesn't match", HINT_BUFFER), ("size doesn't match", HINT_BUFFER),
               # isend(h.grad) with h.grad None: the received input never had requires_grad_()
               ("Expected parameter `tensor` of type torch.Tensor", HINT_GRAD),
               # a step between micro-batches changes the weights a later backward still needs
               ("modified by an inplace operation", HINT_STEP)]


def prepare() -> None:
    """Build both optimizers once in the judge before any fork: their imports (~1 s) are then inherited."""
    weight = torch.zeros(1, requires_grad=True)
    torch.optim.SGD([weight], lr=mlp.LR_SGD)
    torch.optim.Adam([weight], lr=mlp.LR_ADAM)


class Stage(nn.Module):
    """This rank's layers of the deep MLP, x = gelu(x @ W) for each; stage(x) runs them and notes
    the pass (the judge's bookkeeping: the student's code only calls it)."""

    def __init__(self, ws: list[torch.Tensor], micro_inputs: list[torch.Tensor]) -> None:
        super().__init__()
        self.ws = nn.ParameterList(nn.Parameter(w.clone()) for w in ws)
        self._micro_inputs = micro_inputs   # one process's input to this stage, per micro-batch, step 1
        self._passes: list[tuple[str, int]] = []
        self._recording = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = mlp.forward(list(self.ws), x)
        if self._recording:
            micro = self._which(x)
            self._passes.append((pp.FORWARD, micro))
            if y.requires_grad:
                y.register_hook(lambda grad, m=micro: self._backward_seen(m))
        return y

    def _backward_seen(self, micro: int) -> None:
        if self._recording:
            self._passes.append((pp.BACKWARD, micro))

    def _which(self, x: torch.Tensor) -> int:
        """The micro-batch whose input `x` is (-1: none: wrong data reached this stage)."""
        x = x.detach()
        for micro, want in enumerate(self._micro_inputs):
            if x.shape == want.shape and x.dtype == want.dtype and (x - want).abs().max().item() <= MATCH_TOL:
                return micro
        return -1


def _optimizer(name: str, params: Any) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=mlp.LR_SGD)
    return torch.optim.Adam(params, lr=mlp.LR_ADAM)


def pipeline_worker(rank: int, world: int, layers: int, batch: int, micro: int,
                    optimizer: str) -> dict[str, Any]:
    params, x = mlp.make_params(layers, WIDTH, seed=SEED), mlp.make_batch(batch, WIDTH, seed=SEED)
    mine = mlp.stage_layers(layers, world)[rank]
    inputs = [mlp.forward(params[:mine.start], chunk) for chunk in x.tensor_split(micro)]
    stage = Stage([params[i] for i in mine], inputs)
    opt = _optimizer(optimizer, stage.parameters())
    step = function(solution_in_rank(), "train_step")
    res: dict[str, Any] = {"weights": []}
    for index in range(STEPS):
        with watched() as seen:
            returned = step(stage, opt, x.clone(), micro)
        if index == 0:       # the order, traffic and gradients of the first step (the weights are known)
            stage._recording = False
            attached = isinstance(returned, torch.Tensor) and returned.requires_grad   # lost in transit
            res.update(returned=returned, attached=attached, traffic=seen, passes=list(stage._passes),
                       grads=[None if w.grad is None else w.grad.clone() for w in stage.ws])
        res["weights"].append([w.detach().clone() for w in stage.ws])
    return res


def collect(solution: ModuleType, inputs: dict[str, Any]) -> list[Any]:
    return run_ranks(pipeline_worker, inputs["world_size"], inputs["layers"], inputs["batch"],
                     inputs["micro_batches"], inputs["optimizer"])


# ---- in the judge's process: one check per property, each with its hint -----------------------------------
def order_text(order: list[tuple[str, int]]) -> str:
    """F0 F1 B0 …; a forward whose input matched no micro-batch is F?."""
    return " ".join(f"{k}{m if m >= 0 else '?'}" for k, m in order) or "no pass through stage(x)"


def _check_traffic(data: list[Any], inputs: dict[str, Any]) -> None:
    check_seen(data, "traffic")
    world, micro, batch = inputs["world_size"], inputs["micro_batches"], inputs["batch"]
    for rank, res in enumerate(data):
        seen = res["traffic"]
        used = {n: c for n, c in seen["collectives"].items() if n not in DATA_ONLY}
        if used:
            calls = ", ".join(f"{name} ×{count}" for name, count in used.items())
            raise Fail("send/recv only between stages", f"rank {rank} called {calls}", HINT_P2P)
        neighbours = [r for r in (rank - 1, rank + 1) if 0 <= r < world]
        sends, sent = pp_step_traffic(world, rank, micro, batch, WIDTH, ELEM)
        if not set(seen["destinations"]) <= set(neighbours) or (seen["sends"], seen["sent_bytes"]) != (
                sends, sent):
            raise Fail(f"rank {rank}: {sends} sends, {sent:,.0f} B counted, to ranks {neighbours} "
                       "(pp_step_traffic)", f"{seen['sends']} sends, {seen['sent_bytes']:,} B, to ranks "
                                            f"{seen['destinations']}", HINT_P2P)


def _check_schedule(data: list[Any], inputs: dict[str, Any]) -> None:
    world, micro = inputs["world_size"], inputs["micro_batches"]
    orders = pp.one_f_one_b_order(world, micro)
    for rank, res in enumerate(data):           # the notes' memory claim first: GPipe fails it here
        order = [(k, m) for k, m in res["passes"]]
        held = most_held([(k, m, rank) for k, m in order], 1)
        if held > world:
            raise Fail(f"rank {rank} holds at most S = {world} micro-batches' activations",
                       f"it held {held:g} at once: {order_text(order)}", HINT_HELD)
    for rank, res in enumerate(data):
        want = [(k, m) for k, m, _ in orders[rank]]
        got = [(k, m) for k, m in res["passes"]]
        if got != want:
            hint = HINT_STAGE if not got else HINT_GRAD if any(m < 0 for _, m in got) else HINT_ORDER
            raise Fail(f"rank {rank}: {order_text(want)}", f"rank {rank}: {order_text(got)}", hint)


def _gap(got: Any, want: torch.Tensor) -> float:
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return float("inf")
    return (got.double() - want).abs().max().item()


def _check_numbers(data: list[Any], inputs: dict[str, Any], ref: mlp.Reference) -> None:
    world, layers = inputs["world_size"], inputs["layers"]
    for rank, res in enumerate(data[:-1]):
        if res["returned"] is not None:
            raise Fail(f"rank {rank} (not the last stage) returns None", kind(res["returned"]), HINT_OUTPUT)
    out = data[-1]["returned"]
    shape = tuple(ref.output.shape)
    attached = data[-1].get("attached", False)
    if _gap(out, ref.output) > TOL or attached:
        got = (kind(out) if not isinstance(out, torch.Tensor) else f"shape {tuple(out.shape)}"
               if tuple(out.shape) != shape else f"max |difference| {_gap(out, ref.output):.3g}"
               if _gap(out, ref.output) > TOL else "a tensor that requires grad (not detached)")
        raise Fail(f"rank {world - 1} (the last stage) returns the batch's output, shape {shape}, "
                   "detached", got, HINT_OUTPUT)
    for rank in reversed(range(world)):      # the last stage first: where the loss is, and a wrong
        res = data[rank]                     # gradient goes down from there to every stage below
        for w, layer in zip(res["grads"], mlp.stage_layers(layers, world)[rank]):
            if _gap(w, ref.grads[layer]) > TOL:
                got = "None" if w is None else f"max |difference| {_gap(w, ref.grads[layer]):.3g}"
                # None: no gradient left after the step (zero_grad after step(), not before the backward)
                raise Fail(f"rank {rank}, layer {layer}: one process's dL/dW after step 1", got,
                           HINT_STEP if w is None else HINT_LOSS if rank == world - 1 else HINT_GRAD)
    for step in range(STEPS):
        for rank, res in enumerate(data):
            for w, layer in zip(res["weights"][step], mlp.stage_layers(layers, world)[rank]):
                if _gap(w, ref.params_after[step][layer]) > TOL:
                    raise Fail(f"rank {rank}, layer {layer}: one process's weights after step {step + 1} "
                               f"({inputs['optimizer']})", f"max |difference| "
                                                           f"{_gap(w, ref.params_after[step][layer]):.3g}",
                               HINT_STEP)


def check(inputs: dict[str, Any], data: list[Any]) -> None:
    _check_traffic(data, inputs)
    _check_schedule(data, inputs)
    params = mlp.make_params(inputs["layers"], WIDTH, seed=SEED)
    x = mlp.make_batch(inputs["batch"], WIDTH, seed=SEED)
    _check_numbers(data, inputs, mlp.train_one_process(params, x, STEPS, inputs["optimizer"]))


def case(name: str, world: int, layers: int, batch: int, micro: int, optimizer: str,
         quick: bool = True) -> Case:
    return Case(name, {"world_size": world, "layers": layers, "batch": batch, "micro_batches": micro,
                       "optimizer": optimizer}, collect, check, HINT_ORDER, quick, ranks=True)


CASES = [
    case("2 ranks, 4 layers, batch 8 in 4 micro-batches (M > S), SGD, 2 steps", 2, 4, 8, 4, "sgd"),
    case("4 ranks, 4 layers, batch 13 in 6 micro-batches (3, 2, 2, 2, 2, 2), Adam, 2 steps", 4, 4, 13, 6,
         "adam"),
    case("4 ranks, 4 layers, batch 6 in 2 micro-batches (M < S − 1: warm-up cut to M), SGD", 4, 4, 6, 2,
         "sgd"),
    case("3 ranks, 5 layers (2, 2, 1), 2 micro-batches (M < S: warm-up cut to M), Adam", 3, 5, 6, 2, "adam",
         quick=False),
]
