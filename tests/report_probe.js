// Injected into a copy of a Snakemake report by tests/headless_browser.py. It clicks through the
// report as a reader does: the "Tables" entry of the menu, then the view button of each table's
// HTML row, and copies what the viewer's frame then shows into the page (a <section> per table
// in <div id="probe">), so that Chromium's --dump-dom prints it. Problems become
// <p class="probe-error"> lines; data-done="yes" marks the end.
(function () {
  const wanted = JSON.parse(document.currentScript.dataset.tables);
  const out = document.createElement("div");
  out.id = "probe";
  document.body.appendChild(out);
  const note = (text) => { const p = document.createElement("p"); p.className = "probe-error"; p.textContent = text; out.appendChild(p); };
  const byText = (selector, text) => Array.from(document.querySelectorAll(selector)).find((el) => el.textContent.trim() === text);
  function step(index) {
    if (index >= wanted.length) { out.dataset.done = "yes"; return; }
    const row = Array.from(document.querySelectorAll("tr")).find((tr) => tr.textContent.includes(wanted[index]) && tr.textContent.includes("HTML"));
    if (!row) { note("no row for " + wanted[index]); return step(index + 1); }
    row.querySelector("a").click();
    setTimeout(() => {
      const frame = document.querySelector("iframe");
      if (!frame) { note("no frame for " + wanted[index]); return step(index + 1); }
      const copy = () => {
        const section = document.createElement("section");
        section.dataset.table = wanted[index];
        try { section.innerHTML = frame.contentDocument.body.innerHTML; } catch (error) { note(String(error)); }
        out.appendChild(section);
        step(index + 1);
      };
      if (frame.contentDocument && frame.contentDocument.readyState === "complete" && frame.contentDocument.body.childElementCount) copy(); else frame.addEventListener("load", copy, { once: true });
    }, 200);
  }
  window.addEventListener("load", () => setTimeout(() => {
    const link = byText("nav a", "Tables");
    if (!link) { note("no Tables entry in the menu"); out.dataset.done = "yes"; return; }
    link.click();
    setTimeout(() => step(0), 200);
  }, 200));
})();
