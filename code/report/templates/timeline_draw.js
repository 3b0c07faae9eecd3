"use strict";
// The timeline page's drawings (timeline.js holds the state and calls them): the two-stream chart,
// one bucket's details, the step against the bucket cap, the legend and the command line.

// ---- drawing -----------------------------------------------------------------------------------
function timeAxis(svg, W, left, right, top, axisY, end) {
  const seconds = end / UNITS_PER_MS >= 1000, scale = seconds ? 1000 : 1, unit = seconds ? "s" : "ms";
  const endShown = end / UNITS_PER_MS / scale, step = niceStep(endShown, W < 600 ? 4 : 8);
  const x = (u) => left + (W - left - right) * u / end;
  for (let t = 0; t <= endShown + 1e-9; t += step) {
    const xx = x(t * scale * UNITS_PER_MS);
    el("line", {x1: xx, x2: xx, y1: top - 4, y2: axisY, stroke: "#e4e4e4"}, svg);
    el("text", {x: xx, y: axisY + 17, "text-anchor": "middle", "font-size": 13}, svg,
       Number(t.toFixed(6)).toString());
  }
  el("line", {x1: left, x2: W - right, y1: axisY, y2: axisY, stroke: "#333"}, svg);
  el("text", {x: (left + W - right) / 2, y: axisY + 35, "text-anchor": "middle", "font-size": 14}, svg,
     `time since backward began (${unit})`);
  return x;
}
function hatch(svg) {
  const defs = el("defs", {}, svg);
  const pattern = el("pattern", {id: "hatch", width: 6, height: 6, patternUnits: "userSpaceOnUse",
                                 patternTransform: "rotate(45)"}, defs);
  el("rect", {width: 6, height: 6, fill: "#c0392b22"}, pattern);
  el("line", {x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#c0392b", "stroke-width": 2}, pattern);
}
function draw(v) {
  const {model, cap, point} = v, svg = $("chart");
  svg.replaceChildren();
  const W = chartWidth(svg), narrow = W < 600;
  const left = narrow ? 78 : 130, right = narrow ? 12 : 30, rowH = narrow ? 26 : 30;
  const top = 48, gap = 6, panelGap = 46;
  const end = Math.max(point.on, point.off, model.backward);
  const panels = [["DDP: overlap", point.g, point.on, "on"], ["no overlap", point.go, point.off, "off"]];
  const height = top + panels.length * (2 * rowH + gap) + (panels.length - 1) * panelGap + 56;
  svg.setAttribute("viewBox", `0 0 ${W} ${height}`);
  el("text", {x: W / 2, y: 20, "text-anchor": "middle", "font-size": narrow ? 14 : 17, "font-weight": 600},
     svg,
     narrow ? model.name : `${model.name}: step ${point.t[0]} with overlap, ${point.t[1]} without`);
  const x = timeAxis(svg, W, left, right, top, height - 40, end);
  hatch(svg);
  panels.forEach(([name, gaps, stepUnits, which], p) => {
    const y0 = top + p * (2 * rowH + gap + panelGap), yComm = y0 + rowH + gap;
    el("text", {x: 4, y: y0 - 8, "font-size": 14, "font-weight": 600}, svg, name);
    el("text", {x: left - 6, y: y0 + rowH / 2 + 5, "text-anchor": "end", "font-size": 13}, svg, "backward");
    el("text", {x: left - 6, y: yComm + rowH / 2 + 5, "text-anchor": "end", "font-size": 13}, svg,
       "all-reduce");
    let from = 0;                          // backward, tinted by the bucket its gradients fill
    cap.ready.forEach((ready, b) => {
      if (ready > from) {
        el("rect", {x: x(from), y: y0, width: Math.max(x(ready) - x(from), 0.5), height: rowH,
                    fill: COLOURS[b % COLOURS.length], "fill-opacity": 0.35}, svg);
        from = ready;
      }
    });
    el("rect", {x: x(0), y: y0, width: x(model.backward) - x(0), height: rowH, fill: "none",
                stroke: "#4a4a4a"}, svg);
    if (stepUnits > model.backward) {      // exposed communication: after the backward, until the step ends
      el("rect", {x: x(model.backward), y: yComm - 3, width: x(stepUnits) - x(model.backward),
                  height: rowH + 6, fill: "url(#hatch)", class: "exposed"}, svg);
    }
    // Under the buckets, the whole all-reduce row answers a tap with the nearest bucket: a bucket
    // 1 px wide on a phone is still picked by a thumb anywhere near it.
    const drawn = spans(gaps, point.d);
    const hit = el("rect", {x: x(0), y: yComm - 5, width: x(end) - x(0), height: rowH + 10, class: "hit",
                            "aria-hidden": "true"}, svg);
    hit.addEventListener("click", (ev) => {
      const box = svg.getBoundingClientRect(), at = (ev.clientX - box.left) * W / box.width;
      const away = drawn.map(([s, e]) => Math.max(x(s) - at, at - x(e), 0));
      pick(away.indexOf(Math.min(...away)), which, true);
    });
    const comm = el("g", {class: "comm", "data-which": which}, svg);
    drawn.forEach(([s, e], b) => {
      const r = el("rect", {x: x(s), y: yComm, width: Math.max(x(e) - x(s), 0.8), height: rowH,
                            class: "bucket", fill: COLOURS[b % COLOURS.length], stroke: "#fff",
                            "stroke-width": 0.5,
                            tabindex: which === "on" && b === picked.bucket ? 0 : -1, role: "button",
                            "data-bucket": b, "data-which": which,
                            "aria-label": `bucket ${b}, ${bytesText(cap.bytes[b])}, ` +
                                          `all-reduce ${exactMs(s)} to ${exactMs(e)}`},
                     comm);
      r.addEventListener("click", () => pick(b, which, true));
      r.addEventListener("focus", () => pick(b, which, false));
      r.addEventListener("mouseenter", () => pick(b, which, false));
      r.addEventListener("keydown", (ev) => stepBucket(ev, b, which, cap.buckets));
    });
    el("line", {x1: x(model.backward), x2: x(model.backward), y1: y0 - 4, y2: yComm + rowH + 4,
                stroke: "#555", "stroke-dasharray": "4 3"}, svg);
    const xs = x(stepUnits);
    el("line", {x1: xs, x2: xs, y1: y0 - 4, y2: yComm + rowH + 4, stroke: "#c0392b", "stroke-width": 2}, svg);
    const label = el("text", {x: Math.min(xs, W - right), y: y0 - 8, "text-anchor": "end", "font-size": 14,
                              "font-weight": 600, fill: "#c0392b", id: "svg-step-" + which}, svg,
                     `step ${point.t[which === "on" ? 0 : 1]}`);
    label.dataset.units = stepUnits;
    if (which === "on" && point.exposed > 0) {
      el("text", {x: Math.min(xs, W - right), y: yComm + rowH + 20, "text-anchor": "end", "font-size": 13,
                  fill: "#c0392b"}, svg, `exposed ${point.t[2]}`);
    }
  });
  markPicked();
}

// ---- one bucket's details: click, tap, hover, focus; ← → between buckets -----------------------
function pick(b, which, fromClick) {
  picked.bucket = b;
  picked.which = which;
  panel(current);
  markPicked();
  if (fromClick) focusBucket();
  // While the chart is held at the top, bring the details into view below it.
  if (fromClick && getComputedStyle($("view")).position === "sticky") {
    $("bucket-panel").scrollIntoView({block: "nearest"});
  }
}
// The list of the buckets, and the row (with overlap or without): a bucket picked without aiming at it.
const tensorsText = (n) => `${n} tensor${n === 1 ? "" : "s"}`;
function bucketList(v) {
  const {cap} = v, list = $("bucket-list");
  list.replaceChildren(...cap.bytes.map((bytes, b) => Object.assign(document.createElement("option"),
    {value: b, textContent: `bucket ${b} of ${cap.buckets}: ${bytesText(bytes)}, ${tensorsText(cap.tensors[b])}`})));
  list.value = picked.bucket;
  $("bucket-row").value = picked.which;
}
// The chart is held at the top of the screen (sticky) where the screen is tall enough: what the
// browser scrolls into view (a slider reached with Tab) must land below it, not under it.
function holdChart() {
  const held = getComputedStyle($("view")).position === "sticky";
  document.documentElement.style.setProperty("--view-h", held ? $("view").offsetHeight + 8 + "px" : "0px");
}
function focusBucket() {
  const r = document.querySelector(
    `#chart rect.bucket[data-which="${picked.which}"][data-bucket="${picked.bucket}"]`);
  if (r && document.activeElement !== r) r.focus();
}
function stepBucket(ev, b, which, n) {
  const move = {ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1, Home: -n, End: n}[ev.key];
  if (move === undefined) return;
  ev.preventDefault();
  pick(Math.max(0, Math.min(n - 1, b + move)), which, true);
}
function markPicked() {
  document.querySelectorAll("#chart rect.bucket").forEach((r) => {
    const on = Number(r.dataset.bucket) === picked.bucket && r.dataset.which === picked.which;
    r.classList.toggle("picked", on);
    r.setAttribute("tabindex", on ? 0 : -1);
  });
  $("bucket-list").value = picked.bucket;
  $("bucket-row").value = picked.which;
}
function panel(v) {
  const {model, cap, point, s} = v, b = Math.min(picked.bucket, cap.buckets - 1);
  const [start, end] = spans(picked.which === "on" ? point.g : point.go, point.d)[b];
  const latency = GRID.latency[s.alpha][s.k];
  const names = model.params.slice(cap.low[b], cap.low[b] + cap.tensors[b]);
  const shown = names.length > 12 ? names.slice(0, 6).concat(["…"], names.slice(-6)) : names;
  const box = $("bucket-panel");
  box.style.borderLeftColor = COLOURS[b % COLOURS.length];
  box.innerHTML = "";
  const line = (text, cls) => {
    const p = document.createElement("p");
    p.textContent = text;
    if (cls) p.className = cls;
    box.appendChild(p);
  };
  line(`Bucket ${b} of ${cap.buckets} (${picked.which === "on" ? "with overlap" : "without overlap"}): ` +
       `${tensorsText(cap.tensors[b])}, ${cap.bytes[b].toLocaleString("en")} bytes ` +
       `(${bytesText(cap.bytes[b])}); ` +
       `its last gradient is ready at ${exactMs(cap.ready[b])}.`);
  line(`All-reduce from ${exactMs(start)} to ${exactMs(end)}: ${exactMs(point.d[b])} = latency 2(K−1)α ` +
       `${exactMs(latency)} + bandwidth 2(K−1)n/(Kβ) ${exactMs(point.d[b] - latency)}.`);
  line("Parameters (reverse registration order fills it): " + shown.join(", "), "params");
}

// ---- the step against the bucket cap, for this model and link -----------------------------------
function curve(v) {
  const {model, s} = v, svg = $("curve");
  svg.replaceChildren();
  const W = Math.max(340, Math.min(760, Math.round(svg.clientWidth || 760))), H = 260;
  const left = 58, right = 12, top = 14, bottom = 70, n = AX.caps.length;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const steps = model.caps.map((c) => [c.points[pointIndex(s)].on, c.points[pointIndex(s)].off]);
  const hi = Math.max(...steps.flat()), seconds = hi / UNITS_PER_MS >= 1000, scale = seconds ? 1000 : 1;
  const tick = niceStep(hi / UNITS_PER_MS / scale, 4);
  const top_ = Math.ceil(hi / UNITS_PER_MS / scale / tick) * tick;
  const x = (i) => left + (W - left - right) * (i + 0.5) / n;
  const y = (u) => top + (H - top - bottom) * (1 - u / UNITS_PER_MS / scale / top_);
  for (let t = 0; t <= top_ + 1e-9; t += tick) {
    const yy = top + (H - top - bottom) * (1 - t / top_);
    el("line", {x1: left, x2: W - right, y1: yy, y2: yy, stroke: "#e4e4e4"}, svg);
    el("text", {x: left - 6, y: yy + 4, "text-anchor": "end", "font-size": 12}, svg,
       Number(t.toFixed(6)).toString());
  }
  el("text", {x: 12, y: (H - bottom + top) / 2, "font-size": 12, "text-anchor": "middle",
              transform: `rotate(-90 12 ${(H - bottom + top) / 2})`}, svg, `step (${seconds ? "s" : "ms"})`);
  for (const [k, colour, dash] of [[1, "#888", "5 4"], [0, "#c0392b", ""]]) {
    el("polyline", {points: steps.map((p, i) => `${x(i)},${y(p[k])}`).join(" "), fill: "none", stroke: colour,
                    "stroke-width": 2, "stroke-dasharray": dash}, svg);
  }
  steps.forEach((p, i) => {
    const texts = model.caps[i].points[pointIndex(s)].t;
    const g = el("g", {class: "cap-point", tabindex: 0, role: "button",
                       "aria-label": `cap ${AX.caps[i]}: step ${texts[0]} with overlap`}, svg);
    el("circle", {class: "hit", cx: x(i), cy: y(p[0]), r: 13}, g);     // a 26 px target around the dot
    el("circle", {class: "dot", cx: x(i), cy: y(p[0]), r: i === s.cap ? 6 : 3.5,
                  fill: i === s.cap ? "#c0392b" : "#fff", stroke: "#c0392b", "stroke-width": 2}, g);
    el("title", {}, g, `${AX.caps[i]}: ${texts[0]} with overlap, ${texts[1]} without`);
    const choose = () => { $("cap").value = i; update(); };
    g.addEventListener("click", choose);
    g.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); choose(); }
    });
    el("text", {x: x(i), y: H - bottom + 14, "font-size": 12, "text-anchor": "end",
                transform: `rotate(-40 ${x(i)} ${H - bottom + 14})`}, svg, capWords(i));
  });
  svg.setAttribute("aria-label", `step with overlap (red) and without (grey, dashed) for each bucket cap, ` +
                   `${model.name}, K = ${AX.world_size[s.k]}, α = ${AX.alpha_us[s.alpha]} µs, ` +
                   `β = ${AX.beta_gbs[s.beta]} GB/s`);
  $("curve-title").textContent = "Step against the bucket cap (in MiB; 25 MB is the notes' cap): " +
                                 `${model.name}, this link and K; tap a point to choose its cap`;
}
// A cap under the curve, in words: "25 MB", "25 +1st" (PyTorch's 1 MiB first bucket), "per tensor".
function capWords(i) {
  const flag = AX.cap_flags[i];
  if (flag === null) return "one bucket";
  if (AX.cap_bytes[i] === 0) return "per tensor";
  return flag.replace(/MB$/, " MB") + (AX.first_cap_flags[i] ? " +1st" : "");
}
function legend(cap) {
  const box = $("legend");
  box.replaceChildren();
  const item = (cls, style, text) => {
    const span = document.createElement("span");
    span.innerHTML = `<span class="${cls}" style="${style}"></span>`;
    span.append(text);
    box.appendChild(span);
  };
  const shown = Math.min(cap.buckets, COLOURS.length);
  for (let b = 0; b < shown; b++) {
    item("sw", `background:${COLOURS[b]}`, `bucket ${b}: ${bytesText(cap.bytes[b])}`);
  }
  if (cap.buckets > shown) item("sw", "background:repeating-linear-gradient(90deg," + COLOURS.join(",") + ")",
                                `… ${cap.buckets} buckets in all (colours repeat every ${COLOURS.length})`);
  item("sw", "background:repeating-linear-gradient(45deg,#c0392b 0 2px,#c0392b22 2px 5px)",
       "exposed communication");
  item("ln", "border-top:2px solid #c0392b", "end of the step (the red line and its time)");
  item("ln", "border-top:2px dashed #555", "end of backward; backward tinted by the bucket it fills");
}
function command(v) {
  const {model, s} = v, i = s.cap;
  const [k, alpha, beta] = [AX.world_size[s.k], AX.alpha_us[s.alpha], AX.beta_gbs[s.beta]];
  const flags = `--world-size ${k} --alpha-us ${alpha} --beta-gbs ${beta}`;
  const lines = [`PYTHONPATH=code python -c "from lecture15.timeline_grid import show_setting; ` +
                 `show_setting('${model.key}', ${i}, ${beta}, ${alpha}, ${k})"`];
  let part = "It runs the full per-parameter ddp_sim.simulate_ddp for this setting and prints the steps " +
             "and the exposed time.";
  if (model.key === "ResNet-50" && AX.cap_flags[i] !== null) {
    const cap = `--bucket-cap-mb ${AX.cap_flags[i]}`, first = AX.first_cap_flags[i];
    lines.push(`python code/lecture15/03_overlap.py ${flags} ${cap}` +
               (first ? ` --first-bucket-cap-mb ${first}` : ""));
    const which = first ? "3 draws this step (first bucket capped)" : "1 draws this step";
    part += ` The script's Part ${which}, with the notes' figures beside it.`;
  }
  // Each flag with its value stays on one line (a phone would otherwise break "--world-" from "size").
  const flag = (text) => Object.assign(document.createElement("span"), {textContent: text});
  $("command").replaceChildren(...lines.flatMap((line, n) => {
    const [head, ...rest] = line.split(" --");
    return [...(n ? ["\n"] : []), head, ...rest.flatMap((word) => [" ", flag("--" + word)])];
  }));
  $("command-part").textContent = part;
}
