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
import { env, checkBoardLine } from "./boardline.mjs";

const room = Number(env("ROOM")), plain = Number(env("PLAIN"));

await checkBoardLine("board-room.png", async ({ page, waitFor, found }) => {
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
  return line;
});
