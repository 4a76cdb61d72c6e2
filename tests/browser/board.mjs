// board.mjs -- the sale board in Debian's chromium, driven by playwright-core.
//
//   node tests/browser/board.mjs      (tests/it/test_board.py runs it with this environment)
//     BOARD_URL      http://127.0.0.1:PORT of one instance
//     ADMIN_TOKEN    the right token
//     INSTANCES      how many instances the board must list
//     BENCH          JSON argv of a `seckill bench` to run against the new sale; "{voucher}"
//                    is replaced by its id
//     STOCK          the stock to create the sale with
//     BUCKETS        its stock buckets (default 1); above 1 the page must show each
//                    bucket's stock under the sale's row, adding up to its stock
//     OUT_DIR        where the screenshots go
//     CHROMIUM       the browser binary (default /usr/bin/chromium)
//
// Steps: a wrong token is refused; the right one shows the board with every instance;
// the create form shows the API's validation message, then creates a sale; a bench
// sells it out while the page is watched: admissions/s rises above zero and the sale's
// stock falls to 0, without a page reload. Any JavaScript error on the page fails the
// run. Screenshots at 1280x800 and at a phone's 390x844. Prints one JSON line of
// findings at the end; exit 0 = all held.
import { chromium } from "playwright-core";
import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import path from "node:path";

const env = (k, d) => {
  const v = process.env[k] ?? d;
  if (v === undefined) throw new Error(`${k} is not set`);
  return v;
};
const url = env("BOARD_URL");
const token = env("ADMIN_TOKEN");
const instances = Number(env("INSTANCES", "1"));
const bench = JSON.parse(env("BENCH"));
const stock = Number(env("STOCK", "300"));
const buckets = Number(env("BUCKETS", "1"));
const out = env("OUT_DIR");
mkdirSync(out, { recursive: true });

const errors = [];
const found = {};
function check(cond, what) {
  if (!cond) throw new Error("check failed: " + what);
}
const shot = (page, name) => page.screenshot({ path: path.join(out, name), fullPage: true });

const browser = await chromium.launch({
  executablePath: env("CHROMIUM", "/usr/bin/chromium"),
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
let benchProc = null;
try {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await ctx.newPage();
  // /admin/ is served with a CSP without 'unsafe-eval', and waitForFunction compiles its
  // predicate inside the page with eval: poll with page.evaluate instead (the DevTools
  // protocol, which the CSP does not govern), so the page itself runs under its policy.
  page.waitForFunction = async (fn, arg, opts = {}) => {
    const deadline = Date.now() + (opts.timeout ?? 30000);
    for (;;) {
      const v = await page.evaluate(fn, arg);
      if (v) return v;
      if (Date.now() > deadline) throw new Error(`waitForFunction timed out: ${fn}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  page.on("pageerror", (e) => errors.push("pageerror: " + e.message));
  // Console errors fail the run, except the browser's own note on the 403 and 400 answers
  // this script provokes on purpose (wrong token, invalid form).
  page.on("console", (m) => {
    if (m.type() === "error" && !/Failed to load resource: .* status of (403|400)/.test(m.text()))
      errors.push("console: " + m.text());
  });
  let navigations = 0;
  page.on("framenavigated", (f) => { if (f === page.mainFrame()) navigations++; });

  await page.goto(url + "/admin/");
  await page.waitForSelector("#login-form", { state: "visible" });
  await shot(page, "board-login.png");

  // A wrong token: refused, stays on the login form, nothing kept.
  await page.fill("#token", "wrong-" + token);
  await page.click("#login-form button");
  await page.waitForFunction(() => document.getElementById("login-error").textContent.includes("Wrong admin token"));
  check(await page.isHidden("#board"), "board hidden after a wrong token");
  check((await page.evaluate(() => sessionStorage.getItem("seckill-admin-token"))) === null,
        "a wrong token is not kept");
  found.wrong_token = await page.textContent("#login-error");
  await shot(page, "board-wrong-token.png");

  // The right token.
  await page.fill("#token", token);
  await page.click("#login-form button");
  await page.waitForSelector("#board", { state: "visible" });
  check((await page.evaluate(() => sessionStorage.getItem("seckill-admin-token"))) === token,
        "token kept in sessionStorage");
  await page.waitForFunction((n) => document.querySelectorAll("#instances tbody tr").length === n &&
                             document.getElementById("t-inst").textContent === String(n), instances,
                             { timeout: 15000 });
  found.instances = await page.$$eval("#instances tbody tr td:first-child", (tds) => tds.map((t) => t.textContent));

  // The API's validation message, shown as it is.
  await page.fill("#create input[name=title]", "");
  await page.click("#create button");
  await page.waitForFunction(() => {
    const m = document.getElementById("create-msg");
    return m.className === "error" && m.textContent.length > 0;
  });
  found.validation = await page.textContent("#create-msg");

  // Create the sale.
  await page.fill("#create input[name=title]", "浏览器测试券");
  await page.fill("#create input[name=stock]", String(stock));
  await page.fill("#create input[name=buckets]", String(buckets));
  await page.click("#create button");
  await page.waitForFunction(() => /Created flash sale #\d+/.test(document.getElementById("create-msg").textContent));
  const voucher = Number((await page.textContent("#create-msg")).match(/#(\d+)/)[1]);
  found.voucher = voucher;
  const stockCell = `#sales tr[data-id="${voucher}"] td.stock`;
  await page.waitForFunction(([sel, s]) => document.querySelector(sel)?.textContent === s.toLocaleString(),
                             [stockCell, stock], { timeout: 10000 });
  if (buckets > 1) {
    // each bucket's share of the stock, under the sale's row
    const sel = `#sales tr[data-buckets-of="${voucher}"] span.bk[data-bucket]`;
    await page.waitForFunction(([s, k]) => document.querySelectorAll(s).length === k,
                               [sel, buckets], { timeout: 10000 });
    found.bucket_texts = await page.$$eval(sel, (els) => els.map((e) => e.textContent));
  }
  await shot(page, "board-created.png");

  // Sell it out with a bench and watch.
  const argv = bench.map((a) => a.replace("{voucher}", String(voucher)));
  let benchOut = "";
  const benchDone = new Promise((resolve) => {
    benchProc = spawn(argv[0], argv.slice(1), { stdio: ["ignore", "pipe", "pipe"] });
    benchProc.stdout.on("data", (d) => { benchOut += d; });
    benchProc.stderr.on("data", (d) => { benchOut += d; });
    benchProc.on("exit", (code) => resolve(code));
  });
  await page.waitForFunction(() => parseFloat(document.getElementById("t-ok").textContent.replace(/,/g, "")) > 0,
                             null, { timeout: 60000, polling: 100 });
  found.admissions_per_s = await page.textContent("#t-ok");
  found.stock_during = await page.textContent(stockCell);
  await shot(page, "board-during-sale.png");
  const code = await benchDone;
  benchProc = null;
  found.bench_exit = code;
  if (code !== 0) errors.push("seckill bench exited " + code + ":\n" + benchOut.slice(-3000));
  await page.waitForFunction((sel) => document.querySelector(sel)?.textContent === "0", stockCell,
                             { timeout: 20000 });
  found.state_after = await page.textContent(`#sales tr[data-id="${voucher}"] td:nth-child(5)`);
  found.stock_after = await page.textContent(stockCell);
  if (buckets > 1)
    found.bucket_texts_after = await page.$$eval(
      `#sales tr[data-buckets-of="${voucher}"] span.bk[data-bucket]`, (els) => els.map((e) => e.textContent));
  // Let a few polls draw the tail of the sale in the charts.
  await page.waitForTimeout(2500);
  found.p99 = await page.textContent("#t-p99");
  found.redis = await page.textContent("#t-redis");
  found.sql = await page.textContent("#t-sql");
  await shot(page, "board-1280x800.png");
  found.navigations = navigations;

  // Phone width: the same session, no horizontal page scroll.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(1200);
  found.phone_overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  await shot(page, "board-phone.png");
} finally {
  if (benchProc) benchProc.kill();
  await browser.close();
}
found.errors = errors;
console.log(JSON.stringify(found));
process.exit(errors.length ? 1 : 0);
