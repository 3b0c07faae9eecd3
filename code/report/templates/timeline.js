// (strict: timeline_draw.js, included first in the same script element, says "use strict")
// The timeline page's script: it looks the chosen setting up in GRID (computed by
// lecture15/timeline_grid.py) and draws it. It computes no model and rounds nothing it prints
// except exact decimals of the stored 0.1 µs integers.
const GRID = decodeGrid(JSON.parse(document.getElementById("grid-data").textContent));
const AX = GRID.axes;
const UNITS_PER_MS = 1e-3 / GRID.time_unit_s;
const COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f",
                 "#ff9da7", "#bab0ac"];
const $ = (id) => document.getElementById(id);
const TEXTS = ["step-on", "step-off", "exposed", "comm", "first", "faster"];   // a point's "t", in order

// A stored time as exact ms: 0.1 µs is the fourth decimal of a ms, so no digit is rounded.
function exactMs(units) { return (units / UNITS_PER_MS).toFixed(4) + " ms"; }
function bytesText(n) {
  return n >= 1e6 ? (n / 1e6).toFixed(1) + " MB" : n >= 1e3 ? (n / 1e3).toFixed(1) + " kB" : n + " B";
}

// ---- the grid as report/timeline.py's encode_grid carries it (each number once) ----------------
// decodeGrid gives back exactly what timeline_grid.build_grid made (decode_grid in timeline.py takes
// the same steps; tests/report/test_timeline_thumb.py compares this page's GRID with build_grid()).
// "10737onp42950,7B" -> [10737, 0, -1, 1, 42950, 7, 0, 0, 0]: n o p are -1 0 1, a capital a run of zeros
// (A = 2, B = 3, …).
function unpackInts(text) {
  return (text.match(/-?\d+|[nopA-Z]/g) || []).flatMap((t) =>
    t >= "A" && t <= "Z" ? new Array(t.charCodeAt(0) - 63).fill(0) : [({n: -1, o: 0, p: 1})[t] ?? Number(t)]);
}
// units / per to `decimals` places, halves up, exact for these integers.
function fixed(units, per, decimals) {
  const q = String(Math.floor((2 * units + per) / (2 * per))).padStart(decimals + 1, "0");
  return q.slice(0, -decimals) + "." + q.slice(-decimals);
}
function derivedText(units) {
  if (units >= 1e7) return fixed(units, 1e5, 2) + " s";
  return units >= 1e4 ? fixed(units, 100, 2) + " ms" : fixed(units, 10, 3) + " ms";
}
function pointTexts(p) {
  return [p.on, p.off, p.exposed, p.comm, p.g[0]].map(derivedText).concat([(100 * (p.off / p.on - 1)).toFixed(0)]);
}
function decodeCap(cap, table) {
  const {kind, g, go, texts, on, off, exposed, comm, ...rest} = cap;
  const points = on.map((_, i) => {
    const p = {on: on[i], off: off[i], exposed: exposed[i], comm: comm[i], d: kind.map((k) => table[i][k]),
               g: unpackInts(g[i]), go: unpackInts(go[i])};
    p.t = pointTexts(p);
    return p;
  });
  for (const [i, j, text] of texts) points[i].t[j] = text;   // where the float rounded otherwise
  return {...rest, points};
}
// A model's caps are decoded when first looked at (the page opens on one model of seven).
function decodeGrid(enc) {
  const table = enc.durations;
  for (const model of enc.models) {
    const encoded = model.caps;
    Object.defineProperty(model, "caps", {configurable: true, enumerable: true, get() {
      const caps = encoded.map((cap) => decodeCap(cap, table));
      Object.defineProperty(model, "caps", {value: caps, enumerable: true, writable: true});
      return caps;
    }});
  }
  delete enc.sizes;
  delete enc.durations;
  return enc;
}

// ---- controls and the URL ----------------------------------------------------------------------
const SLIDERS = {layers: AX.layers, cap: AX.caps, beta: AX.beta_gbs, alpha: AX.alpha_us, k: AX.world_size};
const SHOW = {
  layers: (v) => v + " layers", cap: (v) => v, beta: (v) => v + " GB/s", alpha: (v) => v + " µs",
  k: (v) => "K = " + v,
};
const SPOKEN = {
  layers: (v) => v + " layers",
  cap: (v) => "bucket cap " + v.replace("MiB", "mebibytes").replace("MB", "megabytes"),
  beta: (v) => v + " gigabytes per second", alpha: (v) => v + " microseconds", k: (v) => v + " ranks",
};
// The URL names values, not slider positions: a link stays readable and survives a longer axis.
const URL_VALUE = {layers: String, cap: (v, i) => capKey(i), beta: String, alpha: String, k: String};
function capKey(i) {
  const flag = AX.cap_flags[i];
  return flag === null ? "one" : flag + (AX.first_cap_flags[i] ? "+" + AX.first_cap_flags[i] : "");
}
function modelKind(key) { return key.startsWith("uniform-") ? "uniform" : key; }

function setState(state) {
  for (const id of Object.keys(SLIDERS)) $(id).value = state[id];
  $("model").value = state.kind;
}
function defaultState() {
  const d = GRID.default;
  return {...Object.fromEntries(Object.keys(SLIDERS).map((id) => [id, d[id]])),
          kind: modelKind(GRID.models[d.model].key)};
}
function stateFromUrl() {
  const state = defaultState();
  const params = new URLSearchParams(location.hash.slice(1));
  for (const [id, values] of Object.entries(SLIDERS)) {
    if (!params.has(id)) continue;
    const i = values.findIndex((v, j) => URL_VALUE[id](v, j) === params.get(id));
    if (i >= 0) state[id] = i;
  }
  if (["ResNet-50", "BERT-large", "uniform"].includes(params.get("model"))) state.kind = params.get("model");
  return state;
}
function urlFor(s) {
  const params = new URLSearchParams({model: $("model").value});
  for (const [id, values] of Object.entries(SLIDERS)) params.set(id, URL_VALUE[id](values[s[id]], s[id]));
  return "#" + params.toString();
}
function initControls() {
  const d = GRID.default;
  for (const [id, values] of Object.entries(SLIDERS)) {
    $(id).max = values.length - 1;
    const shown = SHOW[id](values[d[id]]);
    // "the notes: 25 MB", not "the notes: 25 MB (notes)"
    $(id + "-hint").textContent = id === "layers" ? `opens at ${shown} (the notes have no such stack)`
                                                  : "the notes: " + shown.replace(/ \(notes\)$/, "");
  }
  $("model-hint").textContent = "the notes: " + GRID.models[d.model].name;
  setState(stateFromUrl());
  for (const id of ["model", ...Object.keys(SLIDERS)]) {
    $(id).addEventListener("input", update);
    $(id).addEventListener("change", update);
  }
  $("reset").addEventListener("click", () => { setState(defaultState()); update(); });
  document.querySelectorAll("button.preset").forEach((b) => b.addEventListener("click", () => {
    $("cap").value = AX.caps.findIndex((_, i) => capKey(i) === b.dataset.cap);
    update();
  }));
  $("copy-link").addEventListener("click", () => {
    const done = () => { $("copied").textContent = "link copied"; };
    if (navigator.clipboard) navigator.clipboard.writeText(location.href).then(done, () => {
      $("copied").textContent = "copy the address bar: it holds this setting";
    });
    else $("copied").textContent = "copy the address bar: it holds this setting";
  });
  window.addEventListener("hashchange", () => { setState(stateFromUrl()); update(); });
  window.addEventListener("resize", () => { if (current) render(current); });
  // the list names a bucket, the row beside it says which timeline's (with overlap or without)
  const fromList = () => pick(Number($("bucket-list").value), $("bucket-row").value, false);
  $("bucket-list").addEventListener("change", fromList);
  $("bucket-row").addEventListener("change", fromList);
}
function selection() {
  const idx = Object.fromEntries(Object.keys(SLIDERS).map((id) => [id, Number($(id).value)]));
  const kind = $("model").value;
  const key = kind === "uniform" ? "uniform-" + AX.layers[idx.layers] : kind;
  idx.model = GRID.models.findIndex((m) => m.key === key);
  return idx;
}
// Where (β, α, K) sits in a cap's list of points: timeline_grid.point_index.
function pointIndex(s) { return (s.beta * AX.alpha_us.length + s.alpha) * AX.world_size.length + s.k; }
function atNotesSetting(s) {
  const d = GRID.default;
  return ["model", "cap", "beta", "alpha", "k"].every((id) => s[id] === d[id]);
}

// Start and end of every bucket's all-reduce, rebuilt from the stored gaps and durations.
function spans(gaps, durations) {
  const out = [];
  let end = 0;
  for (let i = 0; i < gaps.length; i++) {
    const start = end + gaps[i];
    end = start + durations[i];
    out.push([start, end]);
  }
  return out;
}

// The bucket whose details the panel shows, and the setting drawn now.
const picked = {bucket: 0, which: "on"};
let current = null;

// ---- one update: look the point up, write the numbers, draw --------------------------------------
function update() {
  const s = selection();
  const uniform = $("model").value === "uniform";
  $("layers").disabled = !uniform;
  $("layers-box").classList.toggle("off", !uniform);
  for (const [id, values] of Object.entries(SLIDERS)) {
    $(id + "-out").textContent = SHOW[id](values[s[id]]);
    $(id).setAttribute("aria-valuetext", SPOKEN[id](String(values[s[id]])));
  }
  const model = GRID.models[s.model], cap = model.caps[s.cap], point = cap.points[pointIndex(s)];
  history.replaceState(null, "", urlFor(s));
  current = {model, cap, point, s};
  render(current);
}
function render(v) {
  const {model, cap, point, s} = v;
  const setting = `${model.name} · bucket cap ${AX.caps[s.cap]} · K = ${AX.world_size[s.k]} · ` +
                  `α = ${AX.alpha_us[s.alpha]} µs · β = ${AX.beta_gbs[s.beta]} GB/s`;
  $("setting").textContent = setting;
  document.title = "DDP timeline: " + setting;
  TEXTS.forEach((id, i) => { $(id).textContent = point.t[i] + (id === "faster" ? " %" : ""); });
  for (const [id, units] of [["step-on", point.on], ["step-off", point.off], ["exposed", point.exposed],
                             ["comm", point.comm], ["first", point.g[0]], ["backward", model.backward]]) {
    $(id).dataset.units = units;
  }
  $("backward").textContent = model.backward_text;
  $("buckets").textContent = cap.buckets;
  const notes = atNotesSetting(s);
  document.querySelectorAll(".card .from-notes").forEach((n) => { n.textContent = ""; });
  if (notes) {
    for (const row of GRID.notes) {
      $(row.card + "-notes").textContent = `the notes: ${row.text} (${row.section})`;
    }
  }
  $("compute-note").textContent = `${model.name}: ${model.compute}; ${model.description}`;
  if (picked.bucket >= cap.buckets) picked.bucket = 0;
  draw(v);
  bucketList(v);
  holdChart();
  legend(cap);
  panel(v);
  curve(v);
  command(v);
}
initControls();
update();
