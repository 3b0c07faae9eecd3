"use strict";
// The contents (a drawer on a narrow screen, a column beside the text on a wide one, the entry you
// are reading marked), the folds (a part's agreeing rows, its tables), the claim filters (the
// summary's counts are filters too), the search, the figures' full-size viewer and the wide tables'
// scroll signs. Nothing is fetched: everything works from the page itself.
const body = document.body, tocButton = document.getElementById("toc-button");
const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => [...root.querySelectorAll(sel)];
function openToc(open) {
  body.classList.toggle("toc-open", open);
  tocButton.setAttribute("aria-expanded", String(open));
}
tocButton.addEventListener("click", () => openToc(!body.classList.contains("toc-open")));
$$("#toc a").forEach((a) => a.addEventListener("click", () => openToc(false)));
document.addEventListener("keydown", (ev) => {
  if (ev.key === "Escape") { openToc(false); showResults(false); }
});

// ---- folds ------------------------------------------------------------------------------------------
function setFold(button, open) {
  const panel = document.getElementById(button.getAttribute("aria-controls"));
  button.setAttribute("aria-expanded", String(open));
  $(".act", button).textContent = open ? "(hide)" : "(show)";
  panel.hidden = !open;
  if (open) { panel.querySelectorAll(".scroller").forEach(edges); measureQuotes(panel); }
}
$$("button.fold").forEach((b) => b.addEventListener("click", () =>
  setFold(b, b.getAttribute("aria-expanded") !== "true")));
// The tables stay folded at every width, as on a phone: opened, a wide screen's page was 100 screens
// of tables; folded, each is one tap away under its part ("2 tables (show)").

// Whatever a link lands on is shown: its fold opened, a filter that hides it cleared.
function reveal(target) {
  if (!target) return;
  if (target.closest(".filtered")) applyFilter("folded");
  const note = target.closest(".clamp.long:not(.open)");
  if (note) $("button.more", note).click();
  const panel = target.closest(".panel[hidden]");
  if (panel) setFold($(`button.fold[aria-controls="${panel.id}"]`), true);
}
function land(id) {
  const target = document.getElementById(id);
  if (!target) return;
  reveal(target);
  $$("tr.landed").forEach((r) => r.classList.remove("landed"));
  if (target.matches("tr.claim")) target.classList.add("landed");
  if (target.matches("li.erratum")) $("details", target).open = true;
}
document.addEventListener("click", (ev) => {
  const a = ev.target.closest('a[href^="#"]');
  if (a && !a.dataset.filter) land(decodeURIComponent(a.getAttribute("href").slice(1)));
}, true);
window.addEventListener("hashchange", () => {
  const id = decodeURIComponent(location.hash.slice(1));
  land(id);
  const target = document.getElementById(id);
  if (target) target.scrollIntoView();
});

// ---- long text: on a phone, its first lines and "read on" -------------------------------------------
$$(".clamp").forEach((note) => {
  const b = document.createElement("button");
  b.type = "button"; b.className = "more"; b.textContent = "read on";
  b.setAttribute("aria-expanded", "false"); b.setAttribute("aria-controls", note.id);
  b.addEventListener("click", () => {
    const open = !note.classList.contains("open");
    note.classList.toggle("open", open);
    b.setAttribute("aria-expanded", String(open)); b.textContent = open ? "less" : "read on";
  });
  note.appendChild(b);
});
function measureNotes() {
  $$(".clamp").forEach((note) => {
    const line = parseFloat(getComputedStyle(note).lineHeight) || 22;
    note.classList.toggle("long", note.scrollHeight > (note.matches(".note, .doc") ? 3.3 : 3.9) * line);
  });
}
measureNotes();
window.addEventListener("resize", measureNotes);

// The notes' words in a row: two lines on a phone; a quote that is cut there is a button (a tap,
// Enter or Space shows it whole). One that is whole at this width is text: no Tab stop, no role.
function measureQuotes(root = document) {
  $$("q.said", root).forEach((q) => {
    if (q.offsetParent === null) return;               // folded away: measured when its fold opens
    const open = q.classList.contains("open");
    q.classList.remove("open");
    const cut = getComputedStyle(q).webkitLineClamp !== "none" && q.scrollHeight > q.clientHeight + 1;
    q.classList.toggle("open", open && cut);
    q.classList.toggle("cut", cut);
    if (cut) {
      q.tabIndex = 0; q.setAttribute("role", "button");
      q.setAttribute("aria-expanded", String(open && cut));
    } else {
      q.removeAttribute("tabindex"); q.removeAttribute("role"); q.removeAttribute("aria-expanded");
    }
  });
}
function toggleQuote(q) {
  if (!q.classList.contains("cut")) return;
  const open = q.classList.toggle("open");
  q.setAttribute("aria-expanded", String(open));
}
$$("q.said").forEach((q) => {
  q.addEventListener("click", () => toggleQuote(q));
  q.addEventListener("keydown", (ev) => {
    if ((ev.key === "Enter" || ev.key === " ") && q.classList.contains("cut")) { ev.preventDefault(); toggleQuote(q); }
  });
});
measureQuotes();
window.addEventListener("resize", () => measureQuotes());

// ---- filters ----------------------------------------------------------------------------------------
// "folded": the page as it opens (the rows that need a look, the agreeing ones folded); "all": every
// claim unfolded; otherwise one verdict word (or "erratum"): only those rows, each part without one hidden.
function shows(row, key) {
  return key === "folded" || key === "all" || row.dataset.verdict === key ||
    (key === "agree" && row.classList.contains("agree")) ||
    (key === "erratum" && row.dataset.erratum === "yes");
}
function applyFilter(key) {
  $$("#filters button").forEach((b) => {
    b.classList.toggle("on", b.dataset.filter === key);
    b.setAttribute("aria-pressed", String(b.dataset.filter === key));
  });
  $$("tr.claim").forEach((row) => row.classList.toggle("filtered", !shows(row, key)));
  let any = false;
  $$("section.script").forEach((script) => {
    let scriptShown = false;
    $$("section.part", script).forEach((part) => {
      const shown = key === "folded" || key === "all" || $("tr.claim:not(.filtered)", part) !== null;
      part.classList.toggle("filtered", !shown);
      $$("table.claims", part).forEach((t) => t.closest(".box").classList.toggle("filtered",
        !$("tr.claim:not(.filtered)", t)));
      $$('button.fold[data-kind="agree"]', part).forEach((b) => {
        const panel = document.getElementById(b.getAttribute("aria-controls"));
        setFold(b, key !== "folded" && $("tr.claim:not(.filtered)", panel) !== null);
      });
      const entry = $(`#toc li[data-part="${part.id}"]`);
      if (entry) entry.classList.toggle("hidden", !shown);
      scriptShown = scriptShown || shown;
    });
    scriptShown = scriptShown || key === "folded" || key === "all";
    script.classList.toggle("filtered", !scriptShown);
    $$(`li[data-script="${script.id}"]`).forEach((li) => li.classList.toggle("hidden", !scriptShown));
    any = any || scriptShown;
  });
  $$("h2.group").forEach((h) => {
    let next = h.nextElementSibling, shown = false;
    while (next && !next.matches("h2.group")) { shown = shown || (next.matches("section.script:not(.filtered)")); next = next.nextElementSibling; }
    h.classList.toggle("filtered", !shown);
  });
  document.getElementById("filter-empty").hidden = any;
  const label = $(`#filters button[data-filter="${key}"]`);
  const names = {agree: "what agrees with the notes"};
  const what = key === "folded" ? "" : (label ? label.firstChild.textContent.trim() : names[key] || key);
  const n = $$("tr.claim:not(.filtered)").length, rows = `${n} row${n === 1 ? "" : "s"}`;
  const bar = document.getElementById("bar-filter");
  bar.hidden = key === "folded";
  document.getElementById("bar-filter-what").textContent = what && `only ${what} (${rows})`;
  bar.setAttribute("aria-label", what && `Showing only ${what}, ${rows}: clear the filter`);
  bar.title = what && `Showing only ${what} (${rows}): tap to show the findings again`;
  document.getElementById("bar-filter-said").textContent = what && `Showing only ${what}, ${rows}.`;
  document.getElementById("filter-note").hidden = key === "folded";
  document.getElementById("filter-what").textContent = what && `Showing ${what} (${rows}).`;
  barHeight();
  measureQuotes();
}
$$("#filters button").forEach((button) => {
  button.addEventListener("click", () => applyFilter(button.dataset.filter));
});
document.getElementById("filter-reset").addEventListener("click", () => {
  applyFilter("folded");
  document.getElementById("summary").scrollIntoView();
});
// The bar's filter button clears the filter and keeps the reader where they were.
document.getElementById("bar-filter").addEventListener("click", () => {
  const at = current && current.id !== "summary" ? current : null;
  applyFilter("folded");
  if (at) at.scrollIntoView(); else document.getElementById("summary").scrollIntoView();
});
// The bar's height (it grows a line for a filter on a narrow screen): what sticks under it and the
// anchors' landing place follow it.
function barHeight() {
  document.documentElement.style.setProperty("--bar", `${document.getElementById("bar").offsetHeight}px`);
}
barHeight();
window.addEventListener("resize", barHeight);
// A count in the findings: exactly its rows, the first of them on screen.
$$("a[data-filter]").forEach((a) => a.addEventListener("click", (ev) => {
  ev.preventDefault();
  applyFilter(a.dataset.filter);
  const first = $("tr.claim:not(.filtered)");
  (first ? first.closest("section.part") : document.getElementById("scripts")).scrollIntoView();
}));

// ---- where you are ----------------------------------------------------------------------------------
const here = document.getElementById("here");
const places = $$("section.part[data-label], section.script, #summary");
let current = null, pending = false;
// "L15 §2 · buckets › 2" as two spans: the topic may be shortened ("L15 §2 · buc…"), the part never.
// Each box keeps its two spans and changes their text only: a tap that starts on a span the scroll
// has just replaced would never become a click.
function showPlace(box, label) {
  const cut = label.lastIndexOf(" › ");
  if (!box.querySelector(".h-topic")) {
    const topic = document.createElement("span"), part = document.createElement("span");
    topic.className = "h-topic"; part.className = "h-part";
    box.replaceChildren(topic, part);
  }
  box.querySelector(".h-topic").textContent = cut < 0 ? label : label.slice(0, cut);
  box.querySelector(".h-part").textContent = cut < 0 ? "" : "\u00a0" + label.slice(cut + 1);  // (a flex item drops a plain space)
}
function locate() {
  pending = false;
  const line = parseFloat(getComputedStyle(document.documentElement).scrollPaddingTop) + 8 || 60;
  let found = null;
  for (const el of places) {
    if (el.offsetParent === null && el.id !== "summary") continue;
    if (el.getBoundingClientRect().top <= line) {
      if (!found || el.compareDocumentPosition(found) & Node.DOCUMENT_POSITION_PRECEDING) found = el;
    }
  }
  if (found === current) return;
  current = found;
  const label = !found ? "Contents" : found.id === "summary" ? "Findings" : found.dataset.label;
  showPlace(here, label);
  const wide = document.getElementById("here-wide");
  wide.hidden = label === "Contents";
  showPlace(wide.querySelector(".at"), label);
  tocButton.setAttribute("aria-label", `Contents (you are at ${label})`);
  $$('#toc a[aria-current]').forEach((a) => a.removeAttribute("aria-current"));
  const link = found && ($(`#toc li[data-part="${found.id}"] > a`) ||
    $(`#toc a[href="#${found.id}"]`) || $(`#toc li[data-script="${found.closest("section.script")?.id}"] > a`));
  if (link) {
    link.setAttribute("aria-current", "location");
    const nav = document.getElementById("toc"), r = link.getBoundingClientRect(), n = nav.getBoundingClientRect();
    if (nav.offsetParent !== null && (r.top < n.top || r.bottom > n.bottom)) nav.scrollTop += r.top - n.top - n.height / 3;
  }
}
window.addEventListener("scroll", () => { if (!pending) { pending = true; requestAnimationFrame(locate); } },
  {passive: true});
tocButton.addEventListener("click", () => {
  const link = $('#toc a[aria-current]');
  if (link && body.classList.contains("toc-open")) link.scrollIntoView({block: "center"});
});

// ---- search -----------------------------------------------------------------------------------------
// Each part: its title (with its topic's), its tables' captions, its statements (what each row
// says and the notes' words), values and printed lines; and each erratum of the findings (its title, "errata").
// Text and query are cut into tokens the same way: letters and digits apart ("ZeRO-3", "zero3" and
// "zero 3" are all zero·3; "ResNet-50" and "resnet50" resnet·50), a number whole ("25" is not "256"
// nor "1.25"); a word matches the start of a token ("bucket" finds "buckets"). A part is found when
// every token is somewhere in it; a token in a title weighs most, then in a statement, then a caption
// or value; the query's tokens next to each other, as typed, weigh more again.
const text = (el) => (el ? el.textContent : "").replace(/\s+/g, " ").trim();
const NUMBER = /^\d+(?:[.,]\d+)*$/;
function tokens(s) {
  const out = [];
  for (const t of s.toLowerCase().match(/[\p{L}\p{N}]+(?:[.,]\p{N}+)*/gu) || [])
    out.push(...(t.match(/\d+(?:[.,]\d+)*|[^\d.,]+/g) || []).filter((x) => !/^[.,]+$/.test(x)));
  return out;
}
function field(s) { return {s, t: tokens(s)}; }
const index = $$("section.part").map((part) => {
  const script = part.closest("section.script");
  const title = `${script.dataset.label} ${text($(".t", script))} ${part.dataset.label ? text($("h3", part)) : ""}`;
  return {href: part.id, title: field(title),
    label: part.dataset.label ? `${script.dataset.label} › ${text($("h3 a", part))}` : `${script.dataset.label}: ${text($(".t", script))}`,
    whats: $$("tr.claim td.what > a", part).map(text).map(field),
    said: $$("tr.claim q.said", part).map(text).map(field),
    captions: $$("p.cap > span:first-child:not(.more), table.data th", part).map(text).map(field),
    values: $$("tr.claim td.val .v", part).map(text).concat($$("table.data td", part).map(text)).map(field),
    printed: $$("pre.out, pre.drawing", part).flatMap((pre) => pre.textContent.split("\n"))
      .map((line) => line.trim()).filter(Boolean).map(field),
    notes: $$(".note", part).map(text).map(field)};
}).concat($$("#errata-table > li.erratum").map((li) => ({
  href: li.id, label: `Erratum: ${text($("summary b", li))}`,
  title: field(`errata erratum ${text($("summary", li))} ${text($("a.place", li))}`),
  whats: [], said: $$(".places li", li).map(text).map(field), captions: [], values: [], printed: [],
  notes: [field(text($(".more-of p.why", li)))], finding: true})));
const search = document.getElementById("search"), panel = document.getElementById("search-panel");
const results = document.getElementById("search-results"), count = document.getElementById("search-count");
function showResults(open) { panel.hidden = !open; }
function escapeHtml(s) { return s.replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c])); }
// Does query token q match text token t (or t and the next, written apart: "all reduce" for "allreduce")?
function same(q, t, next) {
  if (NUMBER.test(q)) return t === q;
  if (NUMBER.test(t)) return false;
  const stem = q.length > 3 && q.endsWith("s") ? q.slice(0, -1) : q;
  return t.startsWith(stem) || (next !== undefined && !NUMBER.test(next) && (t + next).startsWith(stem) &&
    stem.length > t.length) || (/[^\x00-\x7f]/.test(q) && t.includes(q));
}
function has(f, q) { return f.t.some((t, i) => same(q, t, f.t[i + 1])); }
// The longest run of the query's tokens, in order, next to each other in the field.
function run(f, qs) {
  let best = 0;
  for (let i = 0; i < f.t.length; i++) {
    let n = 0;
    while (n < qs.length && i + n < f.t.length && same(qs[n], f.t[i + n])) n++;
    best = Math.max(best, n);
    for (let k = 1; k < qs.length && !n; k++) {          // a run starting at a later query token
      let m = 0;
      while (k + m < qs.length && i + m < f.t.length && same(qs[k + m], f.t[i + m])) m++;
      best = Math.max(best, m);
    }
  }
  return best;
}
function score(item, qs) {
  let total = 0, snippet = "";
  const fields = [["whats", 3, 4], ["said", 2, 4], ["captions", 2, 3], ["values", 1, 3], ["printed", 1, 3],
                  ["notes", 0.5, 2]];
  for (const q of qs) {
    let s = has(item.title, q) ? 12 : 0;
    for (const [name, weight, most] of fields) {
      const found = item[name].filter((f) => has(f, q));
      s += weight * Math.min(found.length, most);
      if (!snippet && found.length && name !== "values") snippet = found[0].s;
    }
    if (s === 0) return [0, ""];
    total += s;
  }
  if (qs.length > 1) {                 // the tokens as typed, together: a phrase
    const whole = (f) => run(f, qs) === qs.length;
    total += (whole(item.title) ? 20 : 0);
    let together = "";
    for (const [name, weight, most] of fields) {
      const found = item[name].filter(whole);
      total += 4 * weight * Math.min(found.length, most);
      if (!together && found.length) together = found[0].s;
    }
    if (together) snippet = together;
  }
  if (!snippet) snippet = (item.values.find((f) => qs.some((q) => has(f, q))) || {s: ""}).s;
  // An erratum is on the first screen already: it comes after the parts unless "errata" is asked for.
  if (item.finding && !qs.some((q) => q.startsWith("errat"))) total /= 2;
  return [total, snippet];
}
function mark(s, qs) {
  let out = escapeHtml(s.length > 140 ? s.slice(0, 137) + "…" : s);
  for (const q of new Set(qs)) {
    const body = q.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    const re = NUMBER.test(q) ? new RegExp(`(?<![\\d.,])${body}(?![\\d]|[.,]\\d)`, "gi") : new RegExp(body, "gi");
    out = out.replace(re, (m) => `<mark>${m}</mark>`);
  }
  return out;
}
const SHOWN = 20;
let limit = SHOWN;
const more = document.getElementById("search-more");
more.addEventListener("click", () => { limit = Infinity; runSearch(); search.focus(); });
function runSearch() {
  const qs = tokens(search.value);
  if (!qs.length) { showResults(false); results.innerHTML = ""; return; }
  const found = index.map((item, i) => [item, i, ...score(item, qs)]).filter((r) => r[2] > 0)
    .sort((a, b) => b[2] - a[2] || a[1] - b[1]);
  const n = found.length, cut = n > limit;
  count.textContent = !n ? "Nothing found" : cut ? `first ${limit} of ${n} found` : `${n} found`;
  more.hidden = !cut;
  more.textContent = `show all ${n}`;
  results.innerHTML = found.slice(0, limit).map(([item, , , snippet]) =>
    `<li><a href="#${item.href}"><b>${escapeHtml(item.label)}</b>` +
    (snippet ? `<span class="hit">${mark(snippet, qs)}</span>` : "") + "</a></li>").join("");
  showResults(true);
}
search.addEventListener("input", () => { limit = SHOWN; runSearch(); });
search.addEventListener("focus", () => { if (search.value.trim()) runSearch(); });
search.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter") { const a = $("#search-results a"); if (a) a.click(); }
  if (ev.key === "ArrowDown") { const a = $("#search-results a"); if (a) { ev.preventDefault(); a.focus(); } }
});
results.addEventListener("click", (ev) => {
  const a = ev.target.closest("a");
  if (!a) return;
  showResults(false);
  const id = a.getAttribute("href").slice(1);
  land(id);
  const target = document.getElementById(id);
  if (target) { ev.preventDefault(); history.pushState(null, "", "#" + id); target.scrollIntoView(); }
});
document.addEventListener("click", (ev) => { if (!ev.target.closest(".search")) showResults(false); });

// ---- figures full size ------------------------------------------------------------------------------
const viewer = document.getElementById("viewer");
const viewerBox = document.getElementById("viewer-box"), fit = document.getElementById("viewer-fit");
function fitFigure(on) {
  viewerBox.classList.toggle("fit", on);
  fit.setAttribute("aria-pressed", String(on));
  fit.textContent = on ? "Full size" : "Fit to the screen";
  edges(viewerBox.closest(".scroller"));
}
fit.addEventListener("click", () => fitFigure(!viewerBox.classList.contains("fit")));
// Full size at first, scrolling in its box with the sign that says so; "Fit to the screen" shrinks it.
$$("button.zoom").forEach((b) => b.addEventListener("click", () => {
  const img = $("img", b), big = document.createElement("img");   // made here: no empty <img> on the page
  big.id = "viewer-img"; big.src = img.src; big.alt = img.alt;
  big.addEventListener("load", () => edges(viewerBox.closest(".scroller")));
  viewerBox.replaceChildren(big);
  viewerBox.scrollLeft = 0;
  document.getElementById("viewer-caption").textContent = img.alt;
  viewer.showModal();
  fitFigure(false);
}));
viewer.addEventListener("click", (ev) => { if (ev.target === viewer) viewer.close(); });
viewer.addEventListener("close", () => { viewerBox.replaceChildren(); edges(viewerBox.closest(".scroller")); });

// ---- wide tables: a sign at the edge that more is there ---------------------------------------------
function edges(scroller) {
  const box = $(".box", scroller);
  const more = box.scrollWidth > box.clientWidth + 1;
  const first = $("table.data tr > :first-child", box);     // a table's first column sticks; a drawing's not
  scroller.style.setProperty("--stick", `${first ? first.getBoundingClientRect().width : 0}px`);
  scroller.style.setProperty("--top", `${box.offsetTop}px`);
  scroller.classList.toggle("scrolls", more);
  scroller.classList.toggle("more-right", more && box.scrollLeft + box.clientWidth < box.scrollWidth - 1);
  scroller.classList.toggle("more-left", more && box.scrollLeft > 1);
}
$$(".scroller").forEach((s) => {
  $(".box", s).addEventListener("scroll", () => edges(s), {passive: true});
  edges(s);
});
window.addEventListener("resize", () => $$(".scroller").forEach(edges));
if (location.hash) {
  const id = decodeURIComponent(location.hash.slice(1));
  land(id);
  const target = document.getElementById(id);
  if (target) target.scrollIntoView();
}
locate();
