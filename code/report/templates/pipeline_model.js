"use strict";
// cs336/pipeline.py, ported: the three schedules' orders, the event simulation, the notes' bubble
// formula, the closed forms and the smallest M; and report/pipeline.py's held_over_time and
// smallest_m. The same floating-point operations in the same order as the Python, so a run's times
// equal the model's bit for bit; tests/report/test_pipeline_model.py checks every setting the page
// offers against the Python model. Times are in seconds, as the model's.
const FORWARD = "F", BACKWARD = "B";

function checkSM(S, M) {
  if (S < 1 || M < 1) throw new Error(`need S >= 1 and M >= 1, got S = ${S}, M = ${M}`);
}
// GPipe: every forward, then every backward.
function gpipeOrder(S, M) {
  checkSM(S, M);
  const orders = [];
  for (let s = 0; s < S; s++) {
    const order = [];
    for (let m = 0; m < M; m++) order.push([FORWARD, m, s]);
    for (let m = 0; m < M; m++) order.push([BACKWARD, m, s]);
    orders.push(order);
  }
  return orders;
}
// 1F1B: S - s - 1 warm-up forwards, then one forward and one backward, then the remaining backwards.
function oneFOneBOrder(S, M) {
  checkSM(S, M);
  const orders = [];
  for (let s = 0; s < S; s++) {
    const warmup = Math.min(S - s - 1, M), order = [];
    for (let m = 0; m < warmup; m++) order.push([FORWARD, m, s]);
    for (let i = 0; i < M - warmup; i++) order.push([FORWARD, warmup + i, s], [BACKWARD, i, s]);
    for (let m = M - warmup; m < M; m++) order.push([BACKWARD, m, s]);
    orders.push(order);
  }
  return orders;
}
// Megatron-LM's interleaved 1F1B: device d holds chunks d, d + S, …; M must be a multiple of S.
function interleavedOrder(S, M, v) {
  checkSM(S, M);
  if (v < 1) throw new Error("virtual stages per device must be >= 1");
  if (M % S) throw new Error(`interleaved 1F1B needs M a multiple of S (M = ${M}, S = ${S})`);
  const total = M * v, group = S * v;
  const op = (k, kind, d) => {
    let chunk = Math.floor((k % group) / S);
    if (kind === BACKWARD) chunk = v - 1 - chunk;
    return [kind, Math.floor(k / group) * S + (k % S), chunk * S + d];
  };
  const orders = [];
  for (let d = 0; d < S; d++) {
    let warmup = v > 1 && M === S ? total : (S - d - 1) * 2 + (v - 1) * S;
    warmup = Math.min(warmup, total);
    const order = [];
    for (let k = 0; k < warmup; k++) order.push(op(k, FORWARD, d));
    for (let i = 0; i < total - warmup; i++) order.push(op(warmup + i, FORWARD, d), op(i, BACKWARD, d));
    for (let k = total - warmup; k < total; k++) order.push(op(k, BACKWARD, d));
    orders.push(order);
  }
  return orders;
}

// Each device's passes as early as their inputs allow (no p2p time: the notes' setting).
function simulate(orders, M, tf, tb, v, name) {
  const S = orders.length, nV = S * v, lastV = nV - 1;
  const fEnd = new Array(nV * M).fill(null), bEnd = new Array(nV * M).fill(null);
  const free = new Array(S).fill(0), ptr = new Array(S).fill(0);
  const starts = orders.map(() => []), ends = orders.map(() => []);
  const ready = [...Array(S).keys()];
  while (ready.length) {
    const d = ready.shift(), order = orders[d];
    let p = ptr[d];
    if (p >= order.length) continue;
    const durF = tf[d] / v, durB = tb[d] / v;
    let t = free[d], wokeUp = false, wokeDown = false;
    while (p < order.length) {
      const [kind, m, j] = order[p];
      if (kind === FORWARD) {
        if (j) {
          const dep = fEnd[(j - 1) * M + m];
          if (dep === null) break;
          if (dep > t) t = dep;
        }
        starts[d].push(t);
        t += durF;
        fEnd[j * M + m] = t;
        wokeUp = wokeUp || j < lastV;
      } else {
        const own = fEnd[j * M + m];
        if (own === null) break;
        let dep = own;
        if (j < lastV) {
          dep = bEnd[(j + 1) * M + m];
          if (dep === null) break;
        }
        if (own > dep) dep = own;
        if (dep > t) t = dep;
        starts[d].push(t);
        t += durB;
        bEnd[j * M + m] = t;
        wokeDown = wokeDown || j > 0;
      }
      ends[d].push(t);
      p++;
    }
    ptr[d] = p;
    free[d] = t;
    if (wokeUp && S > 1) ready.push((d + 1) % S);
    if (wokeDown && S > 1) ready.push((d - 1 + S) % S);
  }
  if (ptr.some((p, d) => p < orders[d].length)) throw new Error("schedule deadlocks");
  const busy = [], peak = [];
  orders.forEach((order, d) => {
    let held = 0, most = 0, forwards = 0;
    for (const [kind] of order) {
      if (kind === FORWARD) { forwards++; held++; if (held > most) most = held; } else held--;
    }
    busy.push((forwards * tf[d] + (order.length - forwards) * tb[d]) / v);
    peak.push(most / v);
  });
  const makespan = Math.max(...free);
  const bubble = makespan > 0 ? 1 - busy.reduce((a, b) => a + b, 0) / (S * makespan) : 0;
  return {name, stages: S, micro: M, virtual: v, orders, starts, ends, makespan, busy, peak, bubble,
          idle: busy.map((b) => makespan - b)};
}
function runSchedule(schedule, S, M, tf, tb, v) {
  if (schedule === "GPipe") return simulate(gpipeOrder(S, M), M, tf, tb, 1, schedule);
  if (schedule === "1F1B") return simulate(oneFOneBOrder(S, M), M, tf, tb, 1, schedule);
  return simulate(interleavedOrder(S, M, v), M, tf, tb, v, `interleaved 1F1B, v = ${v}`);
}

// ---- closed forms and the notes' formula -------------------------------------------------------
function bubbleClosedForm(S, M) { return (S - 1) / (M + S - 1); }
function makespanClosedForm(S, M, tf, tb, v) { return (M + (S - 1) / v) * (tf + tb); }
// The notes' worked example: only the forward fill (S-1)·t_f counts as bubble.
function notesBubbleShare(S, M, tf, tb) {
  const fill = (S - 1) * tf;
  return fill / (M * (tf + tb) + fill);
}
function interleavedShare(S, M, v) { return 1.0 - M * 2.0 / makespanClosedForm(S, M, 1.0, 1.0, v); }
function smallestMicroBatches(share, bubbleOfM) {
  let lo = 1, hi = 1;
  while (bubbleOfM(hi) > share) { lo = hi + 1; hi *= 2; }
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2);
    if (bubbleOfM(mid) <= share) hi = mid; else lo = mid + 1;
  }
  return lo;
}
// report/pipeline.py's smallest_m: equal stages; the chosen schedule's closed form and the notes'.
function smallestM(st, targetPct, tol) {
  const S = st.stages, share = targetPct / 100 + tol, tf = st.tf_ms / 1e3, tb = st.tb_ms / 1e3;
  const ours = st.schedule === "interleaved"
    ? S * smallestMicroBatches(share, (k) => interleavedShare(S, k * S, st.virtual))
    : smallestMicroBatches(share, (m) => bubbleClosedForm(S, m));
  return {ours, notes: smallestMicroBatches(share, (m) => notesBubbleShare(S, m, tf, tb))};
}
// report/pipeline.py's held_over_time: after each pass of `d`, the activations it holds (a chunk 1/v).
function heldOverTime(run, d) {
  let held = 0;
  return run.orders[d].map(([kind], i) => {
    held += kind === FORWARD ? 1 : -1;
    return [run.ends[d][i], held / run.virtual];
  });
}
// report/pipeline.py's stage_times: the slow stage's t_f and t_b × its factor, in seconds.
function stageTimes(st) {
  const tf = st.tf_ms / 1e3, tb = st.tb_ms / 1e3, tfs = [], tbs = [];
  for (let d = 0; d < st.stages; d++) {
    const x = d === st.slow ? st.slow_factor : 1.0;
    tfs.push(tf * x);
    tbs.push(tb * x);
  }
  return [tfs, tbs];
}
function runSetting(st) {
  const [tfs, tbs] = stageTimes(st);
  return runSchedule(st.schedule, st.stages, st.micro_batches, tfs, tbs, st.virtual);
}
