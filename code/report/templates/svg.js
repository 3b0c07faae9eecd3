// The SVG helpers the three pages draw with (timeline, memory, pipeline), one copy.
// (strict: each page includes this after a file that says "use strict", in the same script element)
const SVG_NS = "http://www.w3.org/2000/svg";

// An SVG element with these attributes (and text), appended to `parent` if one is given.
function el(name, attrs, parent, text) {
  const node = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}
// A tick spacing of 1, 2, 2.5 or 5 × a power of ten, about `ticks` ticks over `range`.
function niceStep(range, ticks) {
  const raw = range / ticks, p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}
// The chart's coordinate width follows the width it is shown at (one unit a CSS pixel), so its text
// stays at about its pixel size on a phone as on a desktop.
function chartWidth(svg) { return Math.max(340, Math.min(1200, Math.round(svg.clientWidth || 1200))); }
