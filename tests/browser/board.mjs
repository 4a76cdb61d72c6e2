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
// the create form refuses, when Create is pressed and without asking the service, stock
// 0, a price above the worth and an end in the past, and shows the API's own message for
// what only the API checks; then creates a sale (empty times: now and an hour later) whose
// title, countdown and window (with the year) are shown; a bench sells it out while the
// page is watched: admissions/s rises above zero, the sale is paused from the page (its
// stock stands still, the state says paused) and resumed, its stock falls to 0, without
// a page reload; then it is ended (two clicks) and extended from the page; its totals by
// outcome and the events (paused, resumed, ended, extended, sold out) are shown, and the
// totals are the same after a reload. Any JavaScript error on the page fails the run.
// Screenshots at 1280x800 and at a phone's 390x844. Prints one JSON line of findings at
// the end; exit 0 = all held.
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

  // The page's own checks, made when Create is pressed: nothing is sent.
  let creates = 0;
  page.on("request", (r) => { if (r.method() === "POST" && /\/voucher\/seckill$/.test(r.url())) creates++; });
  // A datetime-local input keeps "HH:MM" when the seconds are 0, and playwright's fill
  // refuses a value the input does not keep as given ("Malformed value"): leave ":00" off.
  const localIso = (ms) => {
    const d = new Date(ms), p = (n) => String(n).padStart(2, "0");
    const ss = d.getSeconds() ? `:${p(d.getSeconds())}` : "";
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}${ss}`;
  };
  check((await page.inputValue("#create input[name=begin]")) === "" &&
        (await page.inputValue("#create input[name=end]")) === "",
        "the form's times are empty (taken when Create is pressed), not fixed at page load");
  found.page_validation = [];
  const pageCheck = async (fill) => {
    for (const [name, v] of Object.entries(fill)) await page.fill(`#create input[name=${name}]`, v);
    await page.evaluate(() => { document.getElementById("create-msg").textContent = ""; });
    await page.click("#create button");
    await page.waitForFunction(() => {
      const m = document.getElementById("create-msg");
      return m.className === "error" && m.textContent.length > 0;
    });
    found.page_validation.push(await page.textContent("#create-msg"));
  };
  await pageCheck({ stock: "0" });
  await pageCheck({ stock: String(stock), payValue: "20000" });
  await pageCheck({ payValue: "8000", end: localIso(Date.now() - 3600 * 1000) });
  await pageCheck({ begin: localIso(Date.now() + 7200 * 1000), end: localIso(Date.now() + 3600 * 1000) });
  await page.fill("#create input[name=begin]", "");
  await page.fill("#create input[name=end]", "");
  found.page_validation_requests = creates;
  await shot(page, "board-form-validation.png");

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
  const row = `#sales tr[data-id="${voucher}"]`;
  const stateOf = () => page.evaluate((sel) => document.querySelector(sel)?.firstChild?.textContent ?? null,
                                      row + " td.state");
  found.title = await page.textContent(row + " td.sale-title");
  found.countdown = await page.textContent(row + " td.state .countdown");
  found.window = await page.textContent(row + " td.window");
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

  // Pause from the page while the bench sells: the state says so and the stock stands
  // still; resume, and it sells again.
  await page.click(row + ' button[data-action="pause"]');
  await page.waitForFunction((sel) => document.querySelector(sel)?.firstChild?.textContent === "paused",
                             row + " td.state", { timeout: 5000, polling: 50 });
  const pausedAt = await page.textContent(stockCell);
  await page.waitForTimeout(1500);          // an observation window: no sale in it
  found.stock_paused = [pausedAt, await page.textContent(stockCell)];
  await shot(page, "board-paused.png");
  await page.click(row + ' button[data-action="resume"]');
  await page.waitForFunction(([sel, s]) => document.querySelector(sel)?.textContent !== s,
                             [stockCell, pausedAt], { timeout: 20000, polling: 100 });
  found.state_resumed = "on sale";
  const code = await benchDone;
  benchProc = null;
  found.bench_exit = code;
  if (code !== 0) errors.push("seckill bench exited " + code + ":\n" + benchOut.slice(-3000));
  await page.waitForFunction((sel) => document.querySelector(sel)?.textContent === "0", stockCell,
                             { timeout: 20000 });
  found.state_after = await stateOf();
  found.stock_after = await page.textContent(stockCell);
  if (buckets > 1)
    found.bucket_texts_after = await page.$$eval(
      `#sales tr[data-buckets-of="${voucher}"] span.bk[data-bucket]`, (els) => els.map((e) => e.textContent));
  // End it (a second click confirms), then extend it by the form the page opens.
  await page.click(row + ' button[data-action="end"]');
  check((await page.textContent(row + ' button[data-action="end"]')) === "Confirm end", "End asks to confirm");
  await page.click(row + ' button[data-action="end"]');
  await page.waitForFunction((sel) => document.querySelector(sel)?.firstChild?.textContent === "ended",
                             row + " td.state", { timeout: 5000, polling: 50 });
  found.state_ended = await stateOf();
  found.countdown_ended = await page.textContent(row + " td.state .countdown");
  await page.click(row + ' button[data-action="extend"]');
  await page.waitForSelector("#extend", { state: "visible" });
  await page.click("#extend button[type=submit]");
  await page.waitForFunction((sel) => document.querySelector(sel)?.firstChild?.textContent === "sold out",
                             row + " td.state", { timeout: 5000, polling: 50 });
  found.state_extended = await stateOf();
  found.control_msg = await page.textContent("#control-msg");

  // The sale's totals by outcome under its row, and its events.
  const totalsOf = () => page.$$eval(`#sales tr[data-totals-of="${voucher}"] span[data-outcome]`,
    (els) => Object.fromEntries(els.map((e) => [e.dataset.outcome, Number(e.querySelector("b").textContent.replace(/,/g, ""))])));
  await page.waitForFunction(([v, s]) => {
    const b = document.querySelector(`#sales tr[data-totals-of="${v}"] span[data-outcome="ok"] b`);
    const p = document.querySelector(`#sales tr[data-totals-of="${v}"] span[data-outcome="paused"] b`);
    return b && Number(b.textContent.replace(/,/g, "")) === s && p && Number(p.textContent) > 0;
  }, [voucher, stock], { timeout: 15000, polling: 200 });
  found.totals = await totalsOf();
  await page.waitForFunction((v) => {
    const kinds = [...document.querySelectorAll(`#events tr[data-sale="${v}"]`)].map((t) => t.dataset.kind);
    return ["sale_paused", "sale_resumed", "sale_ended", "sale_extended", "sale_sold_out"].every((k) => kinds.includes(k));
  }, voucher, { timeout: 15000, polling: 200 });
  found.events = await page.$$eval(`#events tr[data-sale="${voucher}"]`, (els) => els.map((e) => e.dataset.kind));
  await page.locator("#events").scrollIntoViewIfNeeded();
  await shot(page, "board-events.png");

  // Let a few polls draw the tail of the sale in the charts.
  await page.waitForTimeout(2500);
  found.p99 = await page.textContent("#t-p99");
  found.redis = await page.textContent("#t-redis");
  found.sql = await page.textContent("#t-sql");
  await shot(page, "board-1280x800.png");
  found.navigations = navigations;

  // A reload (the token stays in the tab): the totals come back the same, from Redis.
  // First the totals settle: the last answers reach Redis with each instance's next
  // one-second write, so two reads 1.5 s apart must agree.
  for (let i = 0, last = null; ; i++) {
    const t = JSON.stringify(await totalsOf());
    if (t === last) break;
    check(i < 20, "totals settle: " + t);
    last = t;
    await page.waitForTimeout(1500);
  }
  found.totals = await totalsOf();
  await page.reload();
  await page.waitForSelector(`#sales tr[data-totals-of="${voucher}"]`, { timeout: 10000 });
  found.totals_after_reload = await totalsOf();
  await shot(page, "board-after-reload.png");

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
