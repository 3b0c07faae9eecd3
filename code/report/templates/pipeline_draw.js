// (strict: pipeline_model.js, included first in the same script element, says "use strict")
// The pipeline page's chart: a row per rank with its passes (06's colours: forward blue, backward
// orange; a forward's digit and a backward's letter name its micro-batch, as 06's ASCII chart), idle
// time grey, and under each row the activations that rank holds over the step.
const F_COLOURS = ["#4e79a7", "#7399c2", "#9bb8d9", "#c4d7ea"];   // chunk 0, 1, … of interleaved 1F1B: lighter
const B_COLOURS = ["#f28e2b", "#f5a65a", "#f8c08c", "#fbd9b8"];
const LETTERS = "abcdefghij";

const MIN_PASS_PX = 8;   // the shortest pass at least this wide, or its edges run together

// The chart's width: its box's, or wider where the shortest pass would be under MIN_PASS_PX (S = 8,
// M = 32, v = 4 has 256 passes a rank): then it scrolls sideways in its box, and says so.
function widthFor(run, left, right) {
  const box = $("chart-box"), fits = chartWidth(box);
  const shortest = Math.min(...run.starts.flatMap((st, d) => st.map((t, i) => run.ends[d][i] - t)));
  // widened only where a pass would be more than a pixel short of it (the opening example on a phone
  // is 7.8 px a pass: it stays whole); + 2 for the chart's border
  const atFit = (fits - left - right) * shortest / run.makespan;
  const W = atFit < MIN_PASS_PX - 1 ? Math.ceil(left + right + MIN_PASS_PX * run.makespan / shortest) + 2 : fits;
  $("chart").style.width = W > fits ? W + "px" : "";
  box.classList.toggle("scrolls", W > fits);
  return W;
}
function drawChart(run) {
  const svg = $("chart");
  [...svg.children].forEach((c) => { if (c.tagName !== "title") c.remove(); });
  const narrow = chartWidth($("chart-box")) < 600, S = run.stages;
  const left = narrow ? 50 : 70, right = narrow ? 58 : 100, top = 8, W = widthFor(run, left, right);
  const rowH = S > 4 ? (narrow ? 15 : 20) : (narrow ? 20 : 26), actH = narrow ? 10 : 14, gap = 5;
  const band = rowH + actH + gap, height = top + S * band + 44;
  svg.setAttribute("viewBox", `0 0 ${W} ${height}`);
  const end = run.makespan, x = (t) => left + (W - left - right) * t / end;
  const most = Math.max(...run.peak, 1e-9);
  // time axis, in ms
  const stepMs = niceStep(end * 1e3, narrow ? 4 : 8), axisY = top + S * band;
  for (let t = 0; t <= end * 1e3 + 1e-9; t += stepMs) {
    const xx = x(t / 1e3);
    el("line", {x1: xx, x2: xx, y1: top, y2: axisY, stroke: "#e4e4e4"}, svg);
    el("text", {x: xx, y: axisY + 16, "text-anchor": "middle", "font-size": 12}, svg, String(+t.toFixed(6)));
  }
  el("text", {x: (left + W - right) / 2, y: axisY + 34, "text-anchor": "middle", "font-size": 13}, svg,
     "time in the step (ms)");
  for (let d = 0; d < S; d++) {
    const y = top + d * band;
    el("text", {x: left - 6, y: y + rowH / 2 + 5, "text-anchor": "end", "font-size": 13}, svg, `rank ${d}`);
    el("rect", {x: left, y, width: x(end) - left, height: rowH, fill: "#e9e9e9"}, svg);   // idle, under all
    const g = el("g", {class: "passes", "data-rank": d}, svg);
    run.orders[d].forEach(([kind, m, j], i) => {
      const x0 = x(run.starts[d][i]), w = x(run.ends[d][i]) - x0, chunk = Math.floor(j / S);
      el("rect", {x: x0, y, width: Math.max(w, 0.5), height: rowH, stroke: "#fff", "stroke-width": w > 3 ? 0.6 : 0,
                  fill: (kind === FORWARD ? F_COLOURS : B_COLOURS)[chunk % 4]}, g);
      if (w >= 9) {
        el("text", {x: x0 + w / 2, y: y + rowH / 2 + 4, "text-anchor": "middle", "font-size": Math.min(12, rowH - 6),
                    fill: chunk ? "#000" : "#fff"}, g, kind === FORWARD ? String(m % 10) : LETTERS[m % 10]);
      }
    });
    // the activations held: a step line under the row, full height = the most any rank holds
    const base = y + rowH + actH, scale = (actH - 1) / most;
    let path = `M${x(0)},${base}`;
    for (const [t, held] of heldOverTime(run, d)) {
      path += `H${x(t)}V${base - held * scale}`;
    }
    path += `H${x(end)}V${base}Z`;
    el("path", {d: path, fill: "#59a14f55", stroke: "#59a14f", "stroke-width": 1, class: "held"}, svg);
    el("text", {x: W - right + 6, y: y + rowH / 2 + 5, "font-size": 12}, svg,
       narrow ? `${msText(run.idle[d])} ms` : `idle ${msText(run.idle[d])} ms`);
    el("text", {x: W - right + 6, y: base, "font-size": 12, fill: "#3b7a32"}, svg,
       (narrow ? "" : "peak ") + heldText(run.peak[d]));
  }
}

// ---- the words and numbers around the chart ------------------------------------------------------
const NAMES = {GPipe: "GPipe", "1F1B": "1F1B", interleaved: "interleaved 1F1B"};
const SHOW = {virtual: (v) => `v = ${v}`, stages: (v) => `S = ${v}`, micro_batches: (v) => `M = ${v}`,
              tf_ms: (v) => `${v} ms`, tb_ms: (v) => `${v} ms`, slow_factor: (v) => `${v}×`};
const SPOKEN = {virtual: (v) => `${v} chunks a rank`, stages: (v) => `${v} stages`,
                micro_batches: (v) => `${v} micro-batches`, tf_ms: (v) => `${v} milliseconds`,
                tb_ms: (v) => `${v} milliseconds`, slow_factor: (v) => `${v} times slower`};

function settingText(st) {
  return `${NAMES[st.schedule]}${st.schedule === "interleaved" ? `, v = ${st.virtual}` : ""} · S = ${st.stages} · ` +
         `M = ${st.micro_batches} · t_f = ${st.tf_ms} ms · t_b = ${st.tb_ms} ms · ` +
         (st.slow === null ? "equal stages" : `stage ${st.slow} ${st.slow_factor}× slower`);
}
// The notes' figures that belong to this setting: their worked example (t_f = 10 ms, t_b = 20 ms,
// equal stages) under GPipe or 1F1B, at the (S, M) of their tables (S alone: the 5 % rows).
function notesHere(st) {
  if (st.tf_ms !== DEF.tf_ms || st.tb_ms !== DEF.tb_ms || st.slow !== null || st.schedule === "interleaved") {
    return [];
  }
  return DATA.notes.filter((n) => n.S === st.stages && (n.M === null ? st.target_pct === 5 : n.M === st.micro_batches));
}
function render(st, run, numbers) {
  $("setting").textContent = settingText(st);
  document.title = "Pipeline schedules: " + settingText(st);
  for (const id of SLIDERS) {
    $(id + "-out").textContent = SHOW[id](st[id]);
    $(id).setAttribute("aria-valuetext", SPOKEN[id](st[id]));
  }
  const off = {virtual: st.schedule !== "interleaved", slow_factor: st.slow === null};
  for (const [id, disabled] of Object.entries(off)) {
    $(id).disabled = disabled;
    $(id + "-box").classList.toggle("off", disabled);
  }
  $("slow-hint").textContent = `06 Part 5 slows stage S/2 = ${Math.floor(st.stages / 2)} (1F1B)`;
  for (const id of ["step", "bubble", "notes-share", "closed", "eta", "idle", "busy", "peak"]) {
    $(id).textContent = numbers[id] + (["idle", "busy"].includes(id) ? " ms" : "");
  }
  const mins = numbers.smallest[st.target_pct];
  // the search assumes equal stages (with a slow one the bubble has a floor): said on the card itself
  document.querySelector("#card-min-ours .label").textContent =
    `smallest M, bubble ≤ ${st.target_pct} %${st.slow === null ? "" : ", were the stages equal"}`;
  document.querySelector("#card-min-notes .label").textContent = `the same by the notes' formula`;
  $("min-ours").textContent = `M = ${mins.ours}`;
  $("min-notes").textContent = `M = ${mins.notes}`;
  document.querySelectorAll(".card .from-notes").forEach((n) => { n.textContent = ""; });
  for (const n of notesHere(st)) {
    // an error of theirs says why in words beside the two numbers (06's ✗, "error in the notes")
    const err = n.erratum ? ` Error in the notes: ${n.why} (${n.erratum}).` : "";
    $(n.card + "-notes").textContent = `the notes: ${n.text} (${n.as}; row ${n.row}).${err}`;
  }
  $("closed-notes").textContent ||= st.slow === null ? "" : "none: the stages are unequal";
  ranksTable(numbers);
  smallestTable(st, numbers);
  drawChart(run);
  $("legend-chunk").textContent = st.schedule === "interleaved"
    ? `lighter: chunk 1 … ${st.virtual - 1} of a rank (virtual stage d + c·S)` : "";
  command(st);
  holdChart();
  announce(`${settingText(st)}: step ${numbers.step}, bubble ${numbers.bubble} (the notes' formula ` +
           `${numbers["notes-share"]}), peak activations ${numbers.peak} micro-batches, the most on a rank.`);
}
// The live region: said once the setting rests (a held arrow key would otherwise queue every step).
let announceTimer = null;
function announce(sentence) {
  clearTimeout(announceTimer);
  announceTimer = setTimeout(() => { $("announce").textContent = sentence; }, 500);
}
function ranksTable(numbers) {
  $("ranks").tBodies[0].replaceChildren(...numbers.ranks.map((row, d) => {
    const tr = document.createElement("tr");
    for (const text of [`rank ${d}`, ...row]) tr.appendChild(Object.assign(document.createElement("td"), {textContent: text}));
    return tr;
  }));
}
function smallestTable(st, numbers) {
  const sched = st.schedule === "interleaved" ? `interleaved 1F1B, v = ${st.virtual} (M a multiple of S)`
    : `${NAMES[st.schedule]}: (S − 1)/(M + S − 1)`;
  $("smallest-caption").textContent = `Smallest M, S = ${st.stages}, equal stages`;
  $("smallest-ours-head").textContent = sched;
  $("smallest").tBodies[0].replaceChildren(...AX.target_pct.map((p) => {
    const tr = document.createElement("tr");
    for (const text of [`${p} %`, numbers.smallest[p].ours, numbers.smallest[p].notes]) {
      tr.appendChild(Object.assign(document.createElement("td"), {textContent: String(text)}));
    }
    if (p === st.target_pct) tr.style.fontWeight = "600";
    return tr;
  }));
  $("smallest-note").textContent = "The bubble as a share of the step, with equal stages: this schedule's " +
    "closed form (the simulation equals it), and the notes' formula with t_f and t_b as chosen." +
    (st.slow === null ? "" : " A slow stage is left out here: it keeps a bubble however large M is, the " +
     "other stages waiting for it at every micro-batch (06 Part 5).");
}
// 06_pipeline.py's flags that print this setting; what it cannot print is said, not flagged.
function command(st) {
  const flags = [`--pp ${st.stages}`, `--micro-batches ${st.micro_batches}`, `--tf-ms ${st.tf_ms}`,
                 `--tb-ms ${st.tb_ms}`];
  const parts = ["Part 1 prints GPipe and 1F1B at this S, M, t_f and t_b (step, bubble, each stage's idle " +
                 "time and peak activations)."];
  if (st.schedule === "interleaved") {
    flags.push(`--virtual-stages ${st.virtual}`);
    parts.push(`Part 4's interleaved table has a row for S = ${st.stages}, M = ${st.micro_batches} (v = ` +
               `${st.virtual}: bubble, peak activations on the first rank).`);
  }
  const half = Math.floor(st.stages / 2);
  if (st.slow !== null && st.slow === half && st.schedule === "1F1B") {
    flags.push(`--slow-factor ${st.slow_factor}`);
    parts.push(`Part 5 prints 1F1B with stage ${half} ${st.slow_factor}× slower (step, bubble).`);
  } else if (st.slow !== null) {
    parts.push(`No flag prints this slow stage: 06 Part 5 slows only stage S/2 = ${half}, under 1F1B; the ` +
               "command above prints the equal stages.");
  }
  const span = (text) => Object.assign(document.createElement("span"), {textContent: text});
  $("command").replaceChildren(DATA.command, ...flags.flatMap((f) => [" ", span(f)]));
  $("command-part").textContent = parts.join(" ");
}
function holdChart() {
  const held = getComputedStyle($("view")).position === "sticky";
  document.documentElement.style.setProperty("--view-h", held ? $("view").offsetHeight + 8 + "px" : "0px");
}
