// report.mjs -- opens an HTML report file (seckill bench --html) in Debian's chromium.
//
//   node tests/browser/report.mjs REPORT.html SCREENSHOT.png
// Prints one JSON line: {errors, plots, drawn, verdict, headings, charts} where plots is the
// number of chart boxes (src/cmd/html_report.c's .chart) and drawn how many of them dygraphs
// drew into (a canvas inside); verdict is the paragraph starting "Verdict"; charts has per
// chart (window.seckillCharts) its labels, its data rows, whether its legend lies over the
// plot area and whether the y axis' label covers a tick number. Exit 0 unless the page
// could not be opened; the caller judges the findings.
import { chromium } from "playwright-core";
import path from "node:path";

const [file, png] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const errors = [];
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.on("pageerror", (e) => errors.push("pageerror: " + e.message));
  page.on("console", (m) => { if (m.type() === "error") errors.push("console: " + m.text()); });
  page.on("request", (r) => { if (!r.url().startsWith("file:") && !r.url().startsWith("data:")) errors.push("fetched " + r.url()); });
  await page.goto("file://" + path.resolve(file));
  await page.waitForLoadState("load");
  const found = await page.evaluate(() => ({
    plots: document.querySelectorAll(".chart").length,
    drawn: [...document.querySelectorAll(".chart")].filter((p) => p.querySelector("canvas")).length,
    verdict: [...document.querySelectorAll("p")].map((p) => p.textContent).find((t) => t.startsWith("Verdict")) || "",
    headings: [...document.querySelectorAll("h2")].map((h) => h.textContent),
    charts: (window.seckillCharts || []).map((g) => {
      // the text's own box (a tick's div is wider than its right-aligned number)
      const text = (el) => { const r = document.createRange(); r.selectNodeContents(el); return r.getBoundingClientRect(); };
      const hit = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
      const box = g.graphDiv.getBoundingClientRect(), area = g.getArea();
      const plot = { left: box.left + area.x, top: box.top + area.y,
                     right: box.left + area.x + area.w, bottom: box.top + area.y + area.h };
      const legend = g.getOption("labelsDiv");
      const ylabel = g.graphDiv.querySelector(".dygraph-ylabel");
      const ticks = [...g.graphDiv.querySelectorAll(".dygraph-axis-label-y")];
      const rows = [];
      for (let i = 0; i < g.numRows(); i++) {
        const r = [];
        for (let c = 0; c < g.numColumns(); c++) r.push(g.getValue(i, c));
        rows.push(r);
      }
      return {
        labels: g.getLabels(), rows,
        legendOverPlot: !legend || hit(legend.getBoundingClientRect(), plot),
        ylabelOverTicks: !!ylabel && ticks.some((t) => hit(text(ylabel), text(t))),
      };
    }),
  }));
  await page.screenshot({ path: png, fullPage: true });
  found.errors = errors;
  console.log(JSON.stringify(found));
} finally {
  await browser.close();
}
