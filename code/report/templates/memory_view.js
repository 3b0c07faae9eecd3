// The memory page's controls, URL, cards, chart, tables and command line (memory.js computes).
const $ = (id) => document.getElementById(id);
const PARTS = [["params", "fp16 parameters", "#4e79a7"], ["grads", "fp16 gradients", "#f28e2b"],
               ["master", "fp32 master weights", "#59a14f"], ["adam", "Adam m + v", "#76b7b2"],
               ["activations", "activations", "#b07aa1"]];
const CONTROLS = ["model", "world", "stage", "tp", "pp", "batch", "seq", "link"];
const NUMERIC = new Set(["world", "tp", "pp", "batch", "seq"]);

function countText(p) {   // a --params value 04_memory.py reads back exactly (13B, 200M, 201326592)
  for (const [u, scale] of [["T", 1e12], ["B", 1e9], ["M", 1e6]]) {
    const text = String(p / scale);
    if (p >= scale && Number(text) * scale === p && text.length <= 8) return text + u;
  }
  return String(p);
}

// ---- controls and the URL ----------------------------------------------------------------------
function fill(id, values, label) {
  const el = $(id), now = el.value;
  el.replaceChildren(...values.map((v) => new Option(label(v), String(v))));
  if (values.map(String).includes(now)) el.value = now;
}
function initControls() {
  fill("model", DATA.models.map((m) => m.key), (k) => MODELS[k].name + (MODELS[k].note ? " — " + MODELS[k].note : ""));
  fill("world", DATA.world_sizes, String);
  fill("stage", DATA.stages, (s) => s === "DDP" ? "0: DDP (shards nothing)" : s.replace("ZeRO-", "") + ": " + s);
  fill("tp", DATA.degrees, String);
  fill("pp", DATA.degrees, String);
  fill("link", Object.keys(DATA.links), (k) => DATA.links[k].name);
  for (const id of CONTROLS) $(id).addEventListener("change", () => update(id));
  $("reset").addEventListener("click", () => { setState(DATA.default); update("reset"); });
  window.addEventListener("hashchange", () => { setState(stateFromUrl()); update("url"); });
  window.addEventListener("resize", () => drawChart(readState()));
}
function shapeOptions(state) {
  const m = MODELS[state.model];
  fill("batch", m.batches.length ? m.batches : ["-"], String);
  fill("seq", m.seqs.length ? m.seqs : ["-"], String);
}
function setState(state) {
  $("model").value = state.model;
  shapeOptions(state);
  for (const id of CONTROLS) if (id !== "model") $(id).value = String(state[id] ?? "-");
}
function readState() {
  const s = Object.fromEntries(CONTROLS.map((id) => [id, NUMERIC.has(id) ? Number($(id).value) : $(id).value]));
  const m = MODELS[s.model];
  if (!m.batches.length) { s.batch = null; s.seq = null; }
  return s;
}
// A setting the page offers: each value on its list and TP × PP valid; else the notes' setting's.
function repaired(s) {   // the URL's words are never looked up as keys before they are on a list
  const d = DATA.default, pick = (v, list, fallback) => (list.includes(v) ? v : fallback);
  const m = pick(s.model, Object.keys(MODELS), d.model), model = MODELS[m];
  const out = {model: m, world: pick(s.world, DATA.world_sizes, d.world), stage: pick(s.stage, DATA.stages, d.stage),
               tp: pick(s.tp, DATA.degrees, 1), pp: pick(s.pp, DATA.degrees, 1),
               batch: model.batches.length ? pick(s.batch, model.batches, model.batches[0]) : null,
               seq: model.seqs.length ? pick(s.seq, model.seqs, model.seqs[model.seqs.length - 1]) : null,
               link: pick(s.link, Object.keys(DATA.links), d.link)};
  if (m === d.model && !model.batches.includes(s.batch)) out.batch = d.batch;
  if (m === d.model && !model.seqs.includes(s.seq)) out.seq = d.seq;
  while (!valid(model, out.world, out.tp, out.pp) && out.pp > 1) out.pp /= 2;
  while (!valid(model, out.world, out.tp, out.pp) && out.tp > 1) out.tp /= 2;
  return out;
}
let fromUrl = [];   // what a link asked for and the page does not offer, said once in the status line
function stateFromUrl() {
  const params = new URLSearchParams(location.hash.slice(1));
  const s = {...DATA.default};
  for (const id of CONTROLS) if (params.has(id)) s[id] = NUMERIC.has(id) ? Number(params.get(id)) : params.get(id);
  const out = repaired(s);
  fromUrl = CONTROLS.filter((id) => params.has(id) && String(out[id]) !== params.get(id))
    .map((id) => `${id} ${JSON.stringify(params.get(id).slice(0, 24))} (shown: ${out[id] ?? "-"})`);
  return out;
}
function urlFor(s) {
  const params = new URLSearchParams();
  for (const id of CONTROLS) if (s[id] !== null) params.set(id, String(s[id]));
  return "#" + params.toString();
}
// Options a setting cannot take are greyed out, and the hint says why.
function markValid(s) {
  const model = MODELS[s.model];
  for (const id of ["tp", "pp"]) {
    for (const o of $(id).options) {
      const v = Number(o.value);
      o.disabled = !valid(model, s.world, id === "tp" ? v : s.tp, id === "pp" ? v : s.pp);
    }
  }
  const why = !model.layers ? "a count without layers or width: no TP or PP (they split layers and their width)"
    : `TP × PP must divide the ${s.world} GPUs (the rest is DP = ${s.world / (s.tp * s.pp)}); TP stays in an ` +
      `8-GPU node; PP ≤ ${model.layers} layers`;
  $("tp-hint").textContent = why;
  $("pp-hint").textContent = model.layers ? `a stage holds ${Math.ceil(model.layers / s.pp)} of ${model.layers} layers` : "";
  for (const id of ["batch", "seq"]) {
    $(id).disabled = !model.batches.length;
    $(id + "-box").classList.toggle("off", !model.batches.length);
  }
  $("batch-hint").textContent = model.batches.length ? "for activations and TP/PP traffic" : "no activations: no shape given";
  $("seq-hint").textContent = model.layers ? `d = ${model.width}, ${model.layers} layers` : "";
  $("model-hint").textContent = `${countText(model.params)} parameters`;
  $("stage-hint").textContent = `over DP = ${s.world / (s.tp * s.pp)} ranks` + (s.stage !== "ZeRO-1" ? "" :
    "; priced as the ZeRO paper's (RS + AG); the notes' text keeps DDP's all-reduce (table below)");
  $("world-hint").textContent = "the notes' ZeRO table: 4";
  $("link-hint").textContent = `α = ${DATA.links[s.link].alpha_s * 1e6} µs, β = ${DATA.links[s.link].beta_Bps / 1e9} GB/s`;
}

// ---- one update ---------------------------------------------------------------------------------
function update(moved) {
  if (moved === "model") shapeOptions(readState());
  const asked = readState(), s = repaired(asked);
  const changed = CONTROLS.filter((id) => asked[id] !== s[id] && id !== "batch" && id !== "seq");
  setState(s);
  markValid(s);
  history.replaceState(null, "", urlFor(s));
  const v = compute(s);
  render(s, v);
  $("status").textContent = changed.length ? `${changed.join(" and ")} set to ${changed.map((id) => s[id]).join(
    " and ")}: TP × PP must divide the GPUs` : "";
  if ((moved === "open" || moved === "url") && fromUrl.length) {
    $("status").textContent = `The link asked for what this page does not offer: ${fromUrl.join(", ")}.`;
  }
}
function atNotes(s, at) { return Object.entries(at).every(([k, v]) => s[k] === v); }
function render(s, v) {
  const model = MODELS[s.model];
  $("setting").textContent = `${model.name} on ${s.world} GPUs · ${s.stage} · TP ${s.tp} × PP ${s.pp} × DP ${v.dp}` +
    (s.batch ? ` · b = ${s.batch}, s = ${s.seq}` : "") + ` · ${DATA.links[s.link].name}`;
  document.title = "Memory per GPU: " + $("setting").textContent;
  for (const id of ["params", "grads", "master", "adam", "state", "total"]) {
    $(id).textContent = fmtBytes(v[id]);
    $(id).dataset.bytes = v[id];
  }
  $("activations").textContent = v.activations === null ? "not modelled" : fmtBytes(v.activations);
  $("activations").dataset.bytes = v.activations ?? "";
  document.querySelectorAll(".from-notes").forEach((n) => { n.textContent = ""; });
  $("fits").replaceChildren(...DATA.cards_gb.map((gb, i) => {
    const span = document.createElement("span");
    span.className = v.fits[i] ? "yes" : "no";
    span.id = "fits-" + gb;
    span.textContent = `${gb} GB card: ${v.fits[i] ? "fits" : "does not fit"}`;
    return span;
  }));
  for (const b of DATA.notes.beside) {
    if (!atNotes(s, b.at)) continue;
    const where = b.card === "fits-80" ? $("fits-80") : $(b.card + "-notes");
    const text = `the notes: ${b.card === "fits-80" ? (b.notes ? "fits" : "does not fit") : b.notes + " " + b.unit}` +
                 ` (${b.verdict}, row ${b.row}${b.reading ? "; read as: " + b.reading : ""})`;
    if (b.card === "fits-80") where.textContent += ` — ${text}`; else where.textContent = text;
  }
  answer(s, v);
  drawChart(s);
  trafficTable(s, v);
  command(s, v);
}
// The one line a screen reader hears on each change (the cards and tables are not live: too many).
function answer(s, v) {
  const fit = DATA.cards_gb.filter((gb, i) => v.fits[i]), miss = DATA.cards_gb.filter((gb, i) => !v.fits[i]);
  const cards = (list) => (list.length > 1 ? list.slice(0, -1).join(", ") + " or " : "") + list.at(-1) + " GB";
  const held = v.activations === null ? "" : ` (${fmtBytes(v.state)} of training state + ${fmtBytes(v.activations)} of activations)`;
  const fits = !fit.length ? `fits none of the ${cards(miss)} cards` :
    `fits a ${cards(fit)} card` + (miss.length ? `, not a ${cards(miss)} one` : "");
  const sent = v.traffic.length ? `sends ${fmtBytes(v.sent)} per step, ${fmtTime(v.seconds)} on ${DATA.links[s.link].name}` +
    " (a model's price)" : "sends nothing (one GPU on every axis)";
  $("answer").textContent = `Each GPU holds ${fmtBytes(v.total)}${held}: ${fits}. It ${sent}.`;
}
function trafficTable(s, v) {
  const rows = v.traffic.map((r) => [r.axis, r.kind, r.what, r.calls, fmtBytes(r.bytes), fmtTime(r.seconds)]);
  rows.push(["all", "", "one after another", v.traffic.reduce((a, r) => a + r.calls, 0), fmtBytes(v.sent), fmtTime(v.seconds)]);
  $("traffic").tBodies[0].replaceChildren(...rows.map((cells, i) => {
    const tr = document.createElement("tr");
    if (i === rows.length - 1) tr.className = "sum";
    for (const c of cells) { const td = document.createElement("td"); td.textContent = c; tr.append(td); }
    return tr;
  }));
  const theirs = DATA.notes.traffic.filter((b) => atNotes(s, b.at));
  $("traffic-notes").textContent = !theirs.length ? "" : "The notes' Llama 2 13B example (DDP on 4 GPUs), " +
    "beside our 'all' row: " + theirs.map((b) => `${b.notes} ${b.unit} ${b.card === "bytes" ? "per rank" : "on " +
    DATA.links[s.link].name} (${b.verdict}, row ${b.row}${b.assumes ? "; assumes: " + b.assumes : ""})`).join("; ") + ".";
  $("traffic-note").textContent = (v.traffic.length ? "" : "Nothing is sent: one GPU on every axis. ") +
    `Bytes the busiest GPU sends per step on ${DATA.links[s.link].name}, each collective as a ring; ` +
    "a model's price, not a measurement.";
}

// ---- the chart: each stage's bytes per GPU at this setting, the cards as lines ----------------
function drawChart(s) {
  const bars = DATA.stages.map((stage) => ({stage, v: compute({...s, stage})}));
  const top = Math.max(...bars.map((b) => b.v.total), DATA.cards_gb.at(-1) * 1e9) * 1.1;
  // one unit of the drawing is one CSS pixel, so its text stays 12-14 px at every width
  const W = Math.max(300, Math.round($("chart").getBoundingClientRect().width)), H = W < 600 ? 200 : 250;
  $("chart").setAttribute("viewBox", `0 0 ${W} ${H}`);
  const x0 = 56, x1 = W - 8, y0 = H - 26, y1 = 18, y = (n) => y0 - (y0 - y1) * n / top;
  const w = (x1 - x0) / bars.length;
  const out = [el("line", {x1: x0, x2: x1, y1: y0, y2: y0, stroke: "#888"})];
  bars.forEach(({stage, v}, i) => {
    let base = 0;
    const g = el("g", {"data-stage": stage, class: stage === s.stage ? "chosen" : ""});
    for (const [key, label, colour] of PARTS) {
      const n = v[key] || 0;
      if (n <= 0) continue;
      g.append(el("rect", {x: x0 + i * w + w * 0.18, width: w * 0.64, y: y(base + n), height: y(base) - y(base + n),
                            fill: colour, "data-part": key}));
      g.lastChild.append(el("title", {}, null, `${stage}: ${label} ${fmtBytes(n)}`));
      base += n;
    }
    g.append(el("text", {x: x0 + (i + 0.5) * w, y: y(base) - 4, "text-anchor": "middle", "font-size": 13,
                          "font-weight": stage === s.stage ? 700 : 400}, null, fmtBytes(v.total)));
    g.append(el("text", {x: x0 + (i + 0.5) * w, y: y0 + 18, "text-anchor": "middle", "font-size": 13,
                          "font-weight": stage === s.stage ? 700 : 400}, null, stage + (stage === s.stage ? " ◀" : "")));
    out.push(g);
  });
  for (const gb of DATA.cards_gb) {
    const yy = y(gb * 1e9);
    out.push(el("line", {x1: x0, x2: x1, y1: yy, y2: yy, stroke: "#c0392b", "stroke-dasharray": "5 4",
                          "stroke-width": 1}));
    out.push(el("text", {x: x0 - 4, y: yy + 4, "text-anchor": "end", "font-size": 12, fill: "#c0392b"}, null, gb + " GB"));
  }
  $("chart").replaceChildren($("chart").firstChild, ...out);
  $("chart-title").textContent = "bytes per GPU under each ZeRO stage at this setting; dashed: 24, 40, 80, 141 GB cards";
  $("legend").replaceChildren(...PARTS.map(([, label, colour]) => {
    const span = document.createElement("span");
    span.innerHTML = `<span class="sw" style="background:${colour}"></span>`;
    span.append(label);
    return span;
  }));
}

// ---- the command line that prints the same setting ---------------------------------------------
function command(s, v) {
  const model = MODELS[s.model], parts = ["python code/cs336/04_memory.py"], said = [];
  const layers = model.layers ? Math.ceil(model.layers / s.pp) : 1;
  if (s.tp * s.pp === 1) {
    parts.push(`--params ${countText(model.params)} --world-size ${s.world} --layers ${layers}`);
    said.push(`Part 2 prints every ZeRO stage's bytes per GPU and traffic for this model on ${s.world} GPUs`);
    if (s.model === "mlp") {
      parts.push(`--batch ${s.batch}`);
      said.push("Part 1 its activations at this b");
    }
  } else {
    parts.push(`--params ${countText(model.params / (s.tp * s.pp))} --world-size ${v.dp} --layers ${layers}`);
    said.push("Part 2 prints one TP × PP slice's ZeRO over the DP ranks: the state per GPU and the DP rows here");
  }
  if (s.model === "gpt3") {
    parts.push(`--tp ${s.tp} --pp ${s.pp} --dp ${v.dp} --seq-len ${s.seq} --global-batch ${s.batch * v.dp}`);
    said.push("Part 3 this 3D split (DDP and ZeRO-1's state; its TP counts 4 all-reduces a layer, its " +
              "links are NVLink for TP and InfiniBand across nodes)");
  }
  $("command").textContent = parts.join(" ");
  $("command-part").textContent = said.join("; ") + ".";
}

initControls();
setState(stateFromUrl());
update("open");
