// board_room.mjs -- the sale board's waiting-room line in Debian's chromium (playwright-core).
//
//   node tests/browser/board_room.mjs   (tests/it/test_room_board.py runs it with this environment)
//     BOARD_URL    http://127.0.0.1:PORT of one instance
//     ADMIN_TOKEN  the right token
//     ROOM         the id of a sale with a room whose buyers are joining while the page watches
//     PLAIN        the id of a sale without a room
//     OUT_DIR      where the screenshot goes (board-room.png)
//     CHROMIUM     the browser binary (default /usr/bin/chromium)
//
// Logs in, waits for the room's line under its sale (none under the plain sale), until the
// measured passes per second is above zero, and prints one JSON line of what the line
// says. The page runs under its CSP: any JavaScript or console error fails the run.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import path from "node:path";

const env = (k, d) => {
  const v = process.env[k] ?? d;
  if (v === undefined) throw new Error(`${k} is not set`);
  return v;
};
const url = env("BOARD_URL"), token = env("ADMIN_TOKEN"), out = env("OUT_DIR");
const room = Number(env("ROOM")), plain = Number(env("PLAIN"));
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
  // the CSP forbids eval, which waitForFunction uses: poll with evaluate (board.mjs does too)
  const waitFor = async (fn, arg, ms = 20000) => {
    const deadline = Date.now() + ms;
    for (;;) {
      const v = await page.evaluate(fn, arg);
      if (v) return v;
      if (Date.now() > deadline) throw new Error(`timed out: ${fn}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  await page.goto(url + "/admin/");
  await page.waitForSelector("#login-form", { state: "visible" });
  await page.fill("#token", token);
  await page.click("#login-form button");
  await page.waitForSelector("#board", { state: "visible" });
  const line = `#sales tr[data-room-of="${room}"]`;
  await waitFor((sel) => document.querySelector(sel) !== null, line);
  found.rate = await waitFor((sel) => {
    const t = document.querySelector(sel + ' span[data-room="rate"]')?.textContent ?? "";
    const m = t.match(/· ([\d.,]+)\/s passes issued/);
    return m && parseFloat(m[1].replace(/,/g, "")) > 0 ? t : null;
  }, line);
  found.parts = await page.$$eval(line + " span[data-room]",
    (els) => Object.fromEntries(els.map((e) => [e.dataset.room, e.textContent])));
  found.plain_has_line = await page.evaluate((v) => document.querySelector(`#sales tr[data-room-of="${v}"]`) !== null, plain);
  found.row_after_sale = await page.evaluate((v) => {
    const r = document.querySelector(`#sales tr[data-id="${v}"]`);
    return r?.nextElementSibling?.dataset.roomOf ?? null;
  }, room);
  await page.locator(line).scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(out, "board-room.png"), fullPage: true });
} catch (e) {
  errors.push(String(e));
} finally {
  await browser.close();
}
found.errors = errors;
console.log(JSON.stringify(found));
process.exit(errors.length ? 1 : 0);
