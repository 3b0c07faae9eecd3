"use strict";
// The contents (a drawer on a narrow screen, a column beside the text on a wide one) and the claim
// filters: a filter shows the claims of one kind and hides every table, part and script (and its
// entry in the contents) left without one.
const body = document.body, tocButton = document.getElementById("toc-button");
function openToc(open) {
  body.classList.toggle("toc-open", open);
  tocButton.setAttribute("aria-expanded", String(open));
}
tocButton.addEventListener("click", () => openToc(!body.classList.contains("toc-open")));
document.querySelectorAll("#toc a").forEach((a) => a.addEventListener("click", () => openToc(false)));
document.addEventListener("keydown", (ev) => { if (ev.key === "Escape") openToc(false); });

function shows(row, key) {
  return key === "all" || row.dataset.verdict === key || (key === "erratum" && row.dataset.erratum === "yes");
}
function applyFilter(key) {
  document.querySelectorAll("#filters button").forEach((b) => {
    b.classList.toggle("on", b.dataset.filter === key);
    b.setAttribute("aria-pressed", String(b.dataset.filter === key));
  });
  document.querySelectorAll("tr.claim").forEach((row) => row.classList.toggle("filtered", !shows(row, key)));
  let any = false;
  document.querySelectorAll("section.script").forEach((script) => {
    let scriptShown = false;
    script.querySelectorAll("section.part").forEach((part) => {
      const shown = key === "all" || part.querySelector("tr.claim:not(.filtered)") !== null;
      part.classList.toggle("filtered", !shown);
      const box = part.querySelector("table.claims");
      if (box) box.parentElement.classList.toggle("filtered", !box.querySelector("tr.claim:not(.filtered)"));
      const entry = document.querySelector(`#toc li[data-part="${part.id}"]`);
      if (entry) entry.classList.toggle("hidden", !shown);
      scriptShown = scriptShown || shown;
    });
    scriptShown = scriptShown || key === "all";
    script.classList.toggle("filtered", !scriptShown);
    document.querySelectorAll(`li[data-script="${script.id}"]`).forEach((li) => li.classList.toggle("hidden",
                                                                                                 !scriptShown));
    any = any || scriptShown;
  });
  document.getElementById("filter-empty").hidden = any;
  const label = document.querySelector(`#filters button[data-filter="${key}"]`);
  const shown = key === "all" ? "" : "only: " + label.firstChild.textContent.trim();
  document.getElementById("bar-filter").textContent = shown;
}
document.querySelectorAll("#filters button").forEach((button) => {
  button.addEventListener("click", () => applyFilter(button.dataset.filter));
});
// A link to a claim or part that a filter hides shows everything again, so the link lands.
window.addEventListener("hashchange", () => {
  const target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
  if (target && target.closest(".filtered")) { applyFilter("all"); target.scrollIntoView(); }
});
