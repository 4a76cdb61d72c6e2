// board_life.mjs -- the sale board's order-lifecycle line in Debian's chromium (playwright-core).
//
//   node tests/browser/board_life.mjs   (tests/it/test_lifecycle_bench.py runs it with this environment)
//     BOARD_URL    http://127.0.0.1:PORT of one instance
//     ADMIN_TOKEN  the right token
//     SALE         the id of a stream-mode sale with paid, cancelled and unpaid orders
//     OUT_DIR      where the screenshot goes (board-life.png)
//     CHROMIUM     the browser binary (default /usr/bin/chromium)
//
// Logs in, waits for the sale's "orders:" line right under its row and prints one JSON line
// of what it says, and the sale's "sold / initial" cell (units sold: buyers less returns). The page runs under its CSP: any JavaScript or console error fails the run.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import path from "node:path";

const env = (k, d) => {
  const v = process.env[k] ?? d;
  if (v === undefined) throw new Error(`${k} is not set`);
  return v;
};
const url = env("BOARD_URL"), token = env("ADMIN_TOKEN"), out = env("OUT_DIR");
const sale = Number(env("SALE"));
mkdirSync(out, { recursive: true });

const errors = [], found = {};
const browser = await chromium.launch({
  executablePath: env("CHROMIUM", "/usr/bin/chromium"),
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  page.on("pageerror", (e) => errors.push("pageerror: " + e.message));
  page.on("console", (m) => { if (m.type() === "error") errors.push("console: " + m.text()); });
  await page.goto(url + "/admin/");
  await page.waitForSelector("#login-form", { state: "visible" });
  await page.fill("#token", token);
  await page.click("#login-form button");
  await page.waitForSelector("#board", { state: "visible" });
  const line = `#sales tr[data-life-of="${sale}"]`;
  await page.waitForSelector(line, { timeout: 20000 });
  found.parts = await page.$$eval(line + " span[data-life]",
    (els) => Object.fromEntries(els.map((e) => [e.dataset.life, e.textContent])));
  found.sold = await page.evaluate((v) =>
    document.querySelector(`#sales tr[data-id="${v}"]`)?.cells[3]?.textContent ?? null, sale);
  // under the sale's own row, or under its room line when it has one
  found.row_before = await page.evaluate((sel) => {
    const p = document.querySelector(sel)?.previousElementSibling;
    return p?.dataset.id ?? p?.dataset.roomOf ?? p?.dataset.bucketsOf ?? null;
  }, line);
  await page.locator(line).scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(out, "board-life.png"), fullPage: true });
} catch (e) {
  errors.push(String(e));
} finally {
  await browser.close();
}
found.errors = errors;
console.log(JSON.stringify(found));
process.exit(errors.length ? 1 : 0);
