// course.mjs -- the course-style pages (tests/browser/course/) in Debian's chromium,
// driven by playwright-core, through nginx as the course serves its pages: the pages at
// the web root, /api proxied to seckill with the prefix stripped (deploy/nginx.conf.in).
//
//   node tests/browser/course.mjs     (tests/it/test_shop.py runs it with this environment)
//     COURSE_URL   http://127.0.0.1:PORT of nginx
//     PHONE, CODE  a phone and the login code just sent to it
//     VOUCHER      the id of a flash-sale voucher of shop 1, on sale now, with stock
//     OUT_DIR      where the screenshots go
//     CHROMIUM     the browser binary (default /usr/bin/chromium)
//
// Steps, in one tab (the token lives in sessionStorage, per tab, as in the course): log
// in on login.html; index.html shows the ten shop types and no error toast; a type leads
// to shop-list.html with shop 1; shop-detail.html?id=1 shows the shop's name in the
// header and the voucher in the list, with no error toast; 限时抢购 gives the toast
// 抢购成功，订单id：<id>. Any error toast, JavaScript error or failed request fails the
// run. Prints one JSON line of findings at the end; exit 0 = all held.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import path from "node:path";

const env = (k, d) => {
  const v = process.env[k] ?? d;
  if (v === undefined) throw new Error(`${k} is not set`);
  return v;
};
const url = env("COURSE_URL");
const voucher = Number(env("VOUCHER"));
const out = env("OUT_DIR");
mkdirSync(out, { recursive: true });

const errors = [];
const found = {};
function check(cond, what) {
  if (!cond) throw new Error("check failed: " + what);
}
const shot = (page, name) => page.screenshot({ path: path.join(out, name), fullPage: true });
const errorToasts = (page) =>
  page.$$eval(".el-message--error .el-message__content", (els) => els.map((e) => e.textContent));

const browser = await chromium.launch({
  executablePath: env("CHROMIUM", "/usr/bin/chromium"),
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  const ctx = await browser.newContext({ viewport: { width: 480, height: 800 } });
  const page = await ctx.newPage();
  page.on("pageerror", (e) => errors.push("pageerror: " + e.message));
  page.on("console", (m) => { if (m.type() === "error") errors.push("console: " + m.text()); });
  page.on("response", (r) => {
    if (r.status() >= 400) errors.push(`HTTP ${r.status()} for ${r.request().method()} ${r.url()}`);
  });

  // Log in.
  await page.goto(url + "/login.html");
  await page.fill("#phone", env("PHONE"));
  await page.fill("#code", env("CODE"));
  await Promise.all([page.waitForURL(url + "/index.html"), page.click("#login")]);
  check(/^[0-9a-f]{32}$/.test(await page.evaluate(() => sessionStorage.getItem("token"))),
        "a token in sessionStorage after login");

  // The home page: shop types and the (empty) notes, no error.
  await page.waitForFunction(() => document.querySelectorAll("#types .type-item").length === 10);
  await page.waitForSelector("#blogs .empty");
  found.types = await page.$$eval("#types .type-item", (els) => els.map((e) => e.textContent));
  check(found.types[0] === "美食", "first type 美食: " + found.types[0]);
  await shot(page, "course-index.png");
  found.index_errors = await errorToasts(page);

  // A type -> the shop list -> shop 1.
  await Promise.all([page.waitForURL(/shop-list\.html/), page.click("#types .type-item >> nth=0")]);
  await page.waitForSelector("#shops .shop-item");
  found.list = await page.$$eval("#shops .shop-item", (els) => els.map((e) => e.textContent));
  await shot(page, "course-shop-list.png");
  found.list_errors = await errorToasts(page);
  await Promise.all([page.waitForURL(/shop-detail\.html\?id=1$/),
                     page.click('#shops .shop-item[href="/shop-detail.html?id=1"]')]);

  // The shop page: header and voucher list.
  await page.waitForFunction(() => document.getElementById("shop-name").textContent.length > 0);
  found.header = await page.textContent("#shop-name");
  check(found.header === "103茶餐厅", "header shows shop 1's name: " + found.header);
  found.score = await page.textContent("#shop-score");
  check(!found.score.includes("NaN"), "no NaN in the header: " + found.score);
  const row = `#vouchers .voucher[data-id="${voucher}"]`;
  await page.waitForSelector(row);
  found.voucher_row = await page.textContent(row);
  check(found.voucher_row.includes("限时抢购"), "the voucher has its 限时抢购 button");
  found.detail_errors = await errorToasts(page);
  await shot(page, "course-shop-detail.png");

  // Buy.
  await page.click(`${row} button`);
  const ok = await page.waitForSelector(".el-message--success .el-message__content, .el-message--error .el-message__content");
  found.toast = await ok.textContent();
  const m = found.toast.match(/^抢购成功，订单id：(\d+)$/);
  check(m, "success toast after 限时抢购: " + found.toast);
  found.orderId = Number(m[1]);
  await shot(page, "course-seckill.png");

  for (const k of ["index_errors", "list_errors", "detail_errors"])
    if (found[k].length) errors.push(`${k}: ${found[k].join(" | ")}`);
} catch (e) {
  errors.push(String(e && e.stack ? e.stack : e));
} finally {
  await browser.close();
}
found.errors = errors;
console.log(JSON.stringify(found));
process.exit(errors.length ? 1 : 0);
