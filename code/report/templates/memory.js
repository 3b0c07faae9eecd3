"use strict";
// The memory page's model: report/memory.py's setting_numbers in JavaScript, from the ledger and
// links DATA carries (cs336/ledger.py, common/costmodel/link.py). tests/report/test_memory_model.py runs
// compute() for every setting allSettings() offers and holds it equal to the Python.
const DATA = JSON.parse(document.getElementById("memory-data").textContent);
const MODELS = Object.fromEntries(DATA.models.map((m) => [m.key, m]));

// TP × PP divide the GPUs (the rest is DP); a bare count has no TP or PP; PP ≤ layers.
function valid(model, world, tp, pp) {
  if (!model.layers) return tp === 1 && pp === 1;
  return world % (tp * pp) === 0 && pp <= model.layers;
}
function allSettings() {
  const out = [];
  for (const model of DATA.models) {
    const shapes = model.batches.length ? model.batches.flatMap((b) => model.seqs.map((s) => [b, s]))
                                        : [[null, null]];
    for (const world of DATA.world_sizes) for (const stage of DATA.stages)
      for (const tp of DATA.degrees) for (const pp of DATA.degrees) {
        if (!valid(model, world, tp, pp)) continue;
        for (const [batch, seq] of shapes) for (const link of Object.keys(DATA.links))
          out.push({model: model.key, world, stage, tp, pp, batch, seq, link});
      }
  }
  return out;
}

// A ring over k ranks: all-reduce 2(k−1) rounds, reduce-scatter and all-gather k−1, each round
// moving N/k; the busiest rank sends rounds × N/k (common/costmodel/collectives.py).
const ROUNDS = {"all-reduce": (k) => 2 * (k - 1), "all-gather": (k) => k - 1, "reduce-scatter": (k) => k - 1};
function ringBytes(kind, k, n) { return ROUNDS[kind](k) * n / k; }
function ringTime(kind, k, n, link) {
  const rounds = ROUNDS[kind](k);
  return rounds === 0 ? 0 : rounds * (link.alpha_s + n / k / link.beta_Bps);
}
// What a step's DP ranks communicate under each stage (costmodel.steps.zero_step_collectives).
function zeroCollectives(stage, paramBytes, layers) {
  if (stage === "DDP") return [["all-reduce", "gradients", 1, paramBytes]];
  if (stage === "ZeRO-1" || stage === "ZeRO-2") {
    return [["reduce-scatter", "gradients", 1, paramBytes], ["all-gather", "updated parameters", 1, paramBytes]];
  }
  const per = paramBytes / layers;
  return [["all-gather", "parameters, forward", layers, per], ["all-gather", "parameters, backward", layers, per],
          ["reduce-scatter", "gradients", layers, per]];
}

function compute(s) {
  const model = MODELS[s.model], link = DATA.links[s.link];
  const dp = s.world / (s.tp * s.pp), local = model.params / (s.tp * s.pp);
  const sharded = DATA.sharded[s.stage];
  const held = Object.fromEntries(Object.entries(DATA.ledger).map(
    ([name, b]) => [name, sharded.includes(name) ? b * local / dp : b * local]));
  const out = {params: held["fp16 parameters"], grads: held["fp16 gradients"], master: held["fp32 master weights"],
               adam: held["Adam m (fp32)"] + held["Adam v (fp32)"], activations: null, dp};
  out.state = out.params + out.grads + out.master + out.adam;
  const stageLayers = model.layers ? Math.ceil(model.layers / s.pp) : 0;
  const act = stageLayers ? s.batch * s.seq * model.width * DATA.fp16 : 0;
  if (stageLayers) out.activations = stageLayers * act;
  out.total = out.state + (out.activations || 0);
  out.fits = DATA.cards_gb.map((gb) => out.total <= gb * 1e9);
  out.traffic = [];
  if (dp > 1) {
    for (const [kind, what, calls, n] of zeroCollectives(s.stage, DATA.fp16 * local, stageLayers || 1)) {
      out.traffic.push({axis: "DP", kind, what, calls, bytes: calls * ringBytes(kind, dp, n),
                        seconds: calls * ringTime(kind, dp, n, link)});
    }
  }
  if (s.tp > 1) {
    const calls = 2 * stageLayers;
    out.traffic.push({axis: "TP", kind: "all-reduce", what: "activations", calls,
                      bytes: calls * ringBytes("all-reduce", s.tp, act),
                      seconds: calls * ringTime("all-reduce", s.tp, act, link)});
  }
  if (s.pp > 1) {   // the busiest stage: a middle one sends both ways, an end stage one way
    const ways = s.pp > 2 ? 2 : 1, calls = ways * s.batch, bytes = ways * act;
    out.traffic.push({axis: "PP", kind: "send", what: "activations and their gradients", calls, bytes,
                      seconds: calls * (link.alpha_s + bytes / calls / link.beta_Bps)});
  }
  out.sent = out.traffic.reduce((a, r) => a + r.bytes, 0);
  out.seconds = out.traffic.reduce((a, r) => a + r.seconds, 0);
  return out;
}
