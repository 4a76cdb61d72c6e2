// boardline.mjs -- what the board's line checks (board_life.mjs, board_room.mjs) share: the
// environment, Debian's chromium, the admin login, a CSP-safe wait, and the one JSON line
// they print (with every page or console error: any fails the run).
//
//   import { env, checkBoardLine } from "./boardline.mjs";
//   await checkBoardLine("board-x.png", async ({ page, waitFor, found }) => { ... return line });
//
// Environment: BOARD_URL, ADMIN_TOKEN, OUT_DIR (the screenshot's folder), CHROMIUM
// (default /usr/bin/chromium).
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import path from "node:path";

export const env = (k, d) => {
  const v = process.env[k] ?? d;
  if (v === undefined) throw new Error(`${k} is not set`);
  return v;
};

// Logs in to /admin/, runs look (which fills found and returns the CSS selector of the line
// it looked at), screenshots the page scrolled to that line, prints found, exits 0 or 1.
export async function checkBoardLine(shot, look) {
  const url = env("BOARD_URL"), token = env("ADMIN_TOKEN"), out = env("OUT_DIR");
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
    const line = await look({ page, waitFor, found });
    await page.locator(line).scrollIntoViewIfNeeded();
    await page.screenshot({ path: path.join(out, shot), fullPage: true });
  } catch (e) {
    errors.push(String(e));
  } finally {
    await browser.close();
  }
  found.errors = errors;
  console.log(JSON.stringify(found));
  process.exit(errors.length ? 1 : 0);
}
