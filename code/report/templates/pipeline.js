// The pipeline page's state, controls, URL and numbers. Every number it prints comes from
// pipeline_model.js (the port of cs336/pipeline.py) through pageNumbers(), the one function the
// enumeration test calls for every setting offered.
const $ = (id) => document.getElementById(id);
const DATA = JSON.parse($("page-data").textContent);
const AX = DATA.axes, DEF = DATA.default;
const SLIDERS = ["virtual", "stages", "micro_batches", "tf_ms", "tb_ms", "slow_factor"];
const URL_KEYS = {schedule: "schedule", virtual: "v", stages: "S", micro_batches: "M", tf_ms: "tf",
                  tb_ms: "tb", slow: "slow", slow_factor: "x", target_pct: "target"};

// ---- the texts numbers are shown as: 06_pipeline.py's digits (units.js ports common/units.py) ----
// The part of 06 that prints this setting's step and bubble: Part 1 (GPipe and 1F1B, equal stages),
// Part 4's interleaved table, Part 5 (one stage slower: stage S/2 under 1F1B; a setting 06 cannot
// print takes the digits of the part nearest it, so a number keeps its digits while a control moves).
function printedIn(st) { return st.slow !== null ? 5 : st.schedule === "interleaved" ? 4 : 1; }
// The step: Part 1's "makespan 330 ms" (fmt_time, 3 digits; interleaved, whose makespan 06 does not
// print, as the other schedules), Part 5's "makespan ms" column (fmt_num of ms, 4 digits).
function stepText(st, s) { return printedIn(st) === 5 ? msText(s) + " ms" : fmtTime(s); }
// A share: Part 1's "bubble 27.27 %" and "(closed form 27.27 %)" (.2f), a table's cell elsewhere
// (fmt_num: Part 2's η, Part 3's share by the notes' formula, Parts 4 and 5's bubble %).
function pctText(share, st) { return (st && printedIn(st) === 1 ? fixed(100 * share, 2) : fmtNum(100 * share)) + " %"; }
// Times in ms and activations in micro-batches: the stage table's cells (fmt_num of ms; fmt_num).
function msText(s) { return fmtNum(msOf(s)); }
function heldText(h) { return fmtNum(h); }

// ---- what the page offers ------------------------------------------------------------------------
// M: every value, or for interleaved 1F1B those a multiple of S (interleaved_order refuses others).
function validMs(schedule, S) {
  return schedule === "interleaved" ? AX.micro_batches.filter((m) => m % S === 0) : AX.micro_batches;
}
// The stages one may slow: the first, the middle one S/2 (06 Part 5's) and the last.
function slowStages(S) { return [...new Set([0, Math.floor(S / 2), S - 1])].sort((a, b) => a - b); }
function valuesOf(id, st) { return id === "micro_batches" ? validMs(st.schedule, st.stages) : AX[id]; }
// Every setting the controls can reach, less what changes no number (v unless interleaved, the
// factor with no slow stage, the target: pageNumbers gives every target's smallest M at once).
function offeredSettings() {
  const out = [];
  for (const schedule of AX.schedule) {
    for (const virtual of schedule === "interleaved" ? AX.virtual : [DEF.virtual]) {
      for (const stages of AX.stages) {
        for (const micro_batches of validMs(schedule, stages)) {
          for (const tf_ms of AX.tf_ms) {
            for (const tb_ms of AX.tb_ms) {
              for (const slow of [null, ...slowStages(stages)]) {
                for (const slow_factor of slow === null ? [DEF.slow_factor] : AX.slow_factor) {
                  out.push({schedule, virtual, stages, micro_batches, tf_ms, tb_ms, slow, slow_factor,
                            target_pct: DEF.target_pct});
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

// ---- every number the page shows for a setting ----------------------------------------------------
function digest(run) {     // the drawn passes in one number (the test computes it from the Python run)
  let h = 0, k = 0;
  run.orders.forEach((order, d) => order.forEach(([kind, m, j], i) => {
    k++;
    h += k * (run.starts[d][i] + 3 * run.ends[d][i]) + k * ((kind === FORWARD ? 1 : 2) + 5 * m + 11 * j);
  }));
  return h;
}
function heldDigest(run) {
  let h = 0, k = 0;
  for (let d = 0; d < run.stages; d++) {
    for (const [t, held] of heldOverTime(run, d)) { k++; h += k * t * (1 + held); }
  }
  return h;
}
function pageNumbers(st, run) {
  run = run || runSetting(st);
  const equal = st.slow === null, S = st.stages, M = st.micro_batches;
  const closed = st.schedule === "interleaved" ? interleavedShare(S, M, st.virtual) : bubbleClosedForm(S, M);
  const smallest = Object.fromEntries(AX.target_pct.map((p) => [p, smallestM(st, p, DATA.target_tol)]));
  return {
    step: stepText(st, run.makespan), bubble: pctText(run.bubble, st), eta: pctText(1 - run.bubble),
    "notes-share": pctText(notesBubbleShare(S, M, st.tf_ms / 1e3, st.tb_ms / 1e3)),
    closed: equal ? pctText(closed, st) : "—",
    idle: msText(Math.max(...run.idle)), busy: msText(Math.max(...run.busy)), peak: heldText(Math.max(...run.peak)),
    ranks: run.busy.map((b, d) => [msText(b), msText(run.idle[d]), heldText(run.peak[d])]),
    smallest, digest: digest(run), held: heldDigest(run),
  };
}

// ---- state, controls and the URL ------------------------------------------------------------------
let state = {...DEF};

// A setting made valid: M moved to the nearest value the schedule allows, the slow stage kept on the
// pipeline. Returns why, if anything moved.
function settle(st) {
  const ms = validMs(st.schedule, st.stages);
  let why = "";
  if (!ms.includes(st.micro_batches)) {
    const to = ms.find((m) => m >= st.micro_batches) ?? ms[ms.length - 1];
    why = `Interleaved 1F1B needs M a multiple of S (Megatron-LM's order; cs336/pipeline.py refuses ` +
          `others): M = ${st.micro_batches} moved to ${to}.`;
    st.micro_batches = to;
  }
  if (st.slow !== null && !slowStages(st.stages).includes(st.slow)) st.slow = Math.floor(st.stages / 2);
  return why;
}
// The setting a link holds, and why, if any of its values were not taken: a value the page does not
// offer is named (cut short: it is the reader's own text) and the notes' example's kept in its place.
function stateFromUrl() {
  const st = {...DEF}, params = new URLSearchParams(location.hash.slice(1)), refused = [];
  const pick = (key, list) => {
    const v = params.get(URL_KEYS[key]);
    const found = list.find((x) => String(x) === v);
    if (found !== undefined) st[key] = found;
    else if (v !== null) refused.push(`${URL_KEYS[key]}=${v.slice(0, 24)}`);
  };
  pick("schedule", AX.schedule);
  for (const key of [...SLIDERS, "target_pct"]) pick(key, AX[key]);
  const slow = params.get("slow");
  if (slowStages(st.stages).map(String).includes(slow)) st.slow = Number(slow);
  else if (slow !== null && slow !== "none") refused.push(`slow=${slow.slice(0, 24)}`);
  const why = refused.length ? `The link's ${refused.join(", ")}: not a value this page offers, so the ` +
    "notes' example's is kept." : "";
  return {st, why: [why, settle(st)].filter(Boolean).join(" ")};
}
function urlFor(st) {
  const params = new URLSearchParams();
  for (const [key, name] of Object.entries(URL_KEYS)) params.set(name, st[key] === null ? "none" : String(st[key]));
  return "#" + params.toString();
}
function showState(st) {
  $("schedule").value = st.schedule;
  const role = (d) => [d === 0 && "first", d === Math.floor(st.stages / 2) && "S/2, 06 Part 5's",
                       d === st.stages - 1 && "last"].filter(Boolean).join(", ");
  $("slow").replaceChildren(...[null, ...slowStages(st.stages)].map((d) => Object.assign(
    document.createElement("option"), {value: d === null ? "none" : d,
                                       textContent: d === null ? "none: equal stages" : `stage ${d} (${role(d)})`})));
  $("slow").value = st.slow === null ? "none" : st.slow;
  $("target").value = st.target_pct;
  for (const id of SLIDERS) {
    const values = valuesOf(id, st);
    $(id).max = values.length - 1;
    $(id).value = values.indexOf(st[id]);
  }
}
function readControls() {
  const st = {...state, schedule: $("schedule").value, target_pct: Number($("target").value),
              slow: $("slow").value === "none" ? null : Number($("slow").value)};
  for (const id of SLIDERS) st[id] = valuesOf(id, state)[Number($(id).value)];
  // S moved: the slow stage keeps its place (first, middle or last)
  if (st.stages !== state.stages && st.slow !== null) {
    st.slow = st.slow === 0 ? 0 : st.slow === state.stages - 1 ? st.stages - 1 : Math.floor(st.stages / 2);
  }
  return st;
}
function initControls() {
  $("target").replaceChildren(...AX.target_pct.map((p) => Object.assign(document.createElement("option"),
    {value: p, textContent: `${p} % of the step`})));
  const unit = {tf_ms: " ms", tb_ms: " ms", slow_factor: "×"};
  for (const id of SLIDERS) {
    $(id + "-hint").textContent = id === "micro_batches" ? `the notes' example: ${DEF[id]} (also 4, 16, 32)`
      : id === "virtual" ? "interleaved only" : id === "slow_factor" ? "06 Part 5's --slow-factor"
        : `the notes' example: ${DEF[id]}${unit[id] || ""}`;
  }
  for (const id of ["schedule", "slow", "target", ...SLIDERS]) {
    $(id).addEventListener("input", () => update(readControls()));
    $(id).addEventListener("change", () => update(readControls()));
  }
  $("reset").addEventListener("click", () => update({...DEF}));
  $("copy-link").addEventListener("click", () => {
    const done = () => { $("copied").textContent = "link copied"; };
    const fallback = () => { $("copied").textContent = "copy the address bar: it holds this setting"; };
    if (navigator.clipboard) navigator.clipboard.writeText(location.href).then(done, fallback);
    else fallback();
  });
  window.addEventListener("hashchange", () => { const {st, why} = stateFromUrl(); update(st, why); });
  window.addEventListener("resize", () => { if (current) drawChart(current); });
}
let current = null;

function update(st, fromUrl = "") {
  const why = [fromUrl, settle(st)].filter(Boolean).join(" ");
  state = st;
  showState(st);
  const run = runSetting(st), numbers = pageNumbers(st, run);
  current = run;
  history.replaceState(null, "", urlFor(st));
  // where this model's order is Megatron-LM's and not PyTorch's (08_pipeline_schedules.py found it)
  const megatron = st.schedule === "interleaved" && st.micro_batches === st.stages
    ? "At M = S this is Megatron-LM's order (every forward first); PyTorch's ScheduleInterleaved1F1B " +
      "keeps its warm-up on some ranks (row EN-08-interleaved-ms-order), in the same step time." : "";
  $("why-not").textContent = [why, megatron].filter(Boolean).join(" ");
  render(st, run, numbers);
}
initControls();
{ const {st, why} = stateFromUrl(); update(st, why); }
