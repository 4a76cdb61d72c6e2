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
import { env, checkBoardLine } from "./boardline.mjs";

const sale = Number(env("SALE"));

await checkBoardLine("board-life.png", async ({ page, found }) => {
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
  return line;
});
