// common/units.py's number formats in JavaScript, so a page prints a number with the digits the
// script prints it with (the memory and pipeline pages; their tests compare the texts).
// (strict: each page includes this after a file that says "use strict", in the same script element)
// Python's f"{x:.4g}" rounds the binary value's exact decimal expansion, a tie to even (406.25 → 406.2);
// toPrecision rounds a tie up (406.3). Rounded here from 100 exact digits, as Python does.
function sig(x, digits) {
  if (x === 0 || !Number.isFinite(x)) return String(x);
  const [mantissa, exp] = Math.abs(x).toExponential(99).split("e");
  const all = mantissa.replace(".", ""), next = all[digits], rest = all.slice(digits + 1);
  let head = BigInt(all.slice(0, digits));
  if (next > "5" || (next === "5" && (/[1-9]/.test(rest) || head % 2n === 1n))) head += 1n;
  return String(Math.sign(x) * Number(`${head}e${Number(exp) - digits + 1}`));
}
// Python's f"{x:.{places}f}", the same way: toFixed(100) is the exact expansion (below 1e21),
// rounded here a tie to even where toFixed(places) would round it up (0.125 → "0.12", not "0.13").
function fixed(x, places) {
  const exact = Math.abs(x).toFixed(100), point = exact.indexOf("."), all = exact.replace(".", "");
  const keep = point + places, next = all[keep], rest = all.slice(keep + 1);
  let head = BigInt(all.slice(0, keep));
  if (next > "5" || (next === "5" && (/[1-9]/.test(rest) || head % 2n === 1n))) head += 1n;
  const text = String(head).padStart(places + 1, "0");
  return (x < 0 || Object.is(x, -0) ? "-" : "") + (places ? `${text.slice(0, -places)}.${text.slice(-places)}` : text);
}
// units.ms: seconds as milliseconds rounded to 1e-9 ms (Python's round(x, 9): the float noise off).
function msOf(seconds) { return Number(fixed(seconds * 1e3, 9)); }
// x to `digits` significant digits in Python's exponent form (1.234e+04); trimmed: as .g writes it.
function expText(x, digits, trimmed) {
  const [mantissa, exp] = Number(sig(x, digits)).toExponential(digits - 1).split("e");   // exact digits
  return (trimmed ? mantissa.replace(/\.?0+$/, "") : mantissa) + `e${exp[0]}${exp.slice(1).padStart(2, "0")}`;
}
// Python's f"{x:.{digits}g}": in exponent form from 10^digits and below 1e-4, where String(x) would
// write 12340 and 0.00001234 (Python: 1.234e+04, 1.234e-05).
function gText(x, digits) {
  const shown = sig(x, digits), a = Math.abs(Number(shown));
  return a === 0 || !Number.isFinite(a) || (a >= 1e-4 && a < 10 ** digits) ? shown : expText(x, digits, true);
}
// units.fmt_num for a float, 4 digits: a whole number from 1,000 with thousands separators, else
// .4g between 1e-3 and 1e6, else .3e.
function fmtNum(x) {
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  if (!Number.isFinite(x)) return String(x).replace("Infinity", "inf").replace("NaN", "nan");
  const a = Math.abs(x);
  if (Number.isInteger(x) && a >= 1000 && a < 1e15) return x.toFixed(0).replace(/\B(?=(\d{3})+$)/g, ",");
  return a >= 1e-3 && a < 1e6 ? gText(x, 4) : expText(x, 4, false);
}
function fmtBytes(n) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let v = n, i = 0;
  while (Math.abs(v) >= 1000 && i < units.length - 1) { v /= 1000; i++; }
  return gText(v, 4) + " " + units[i];
}
function fmtTime(s) {
  const a = Math.abs(s);
  if (a >= 1) return gText(s, 3) + " s";
  if (a >= 1e-3) return gText(s * 1e3, 3) + " ms";
  return gText(s * 1e6, 3) + " µs";
}
