"""test_board.py -- the sale board at /admin/: its data endpoint, and the page in chromium.

Two instances on one Redis and one SQLite file (a small cluster): the data endpoint must
refuse a missing or wrong x-admin-token, list both instances (each announces itself in
Redis with a TTL; a stopped one drops off), and report each sale's live stock and buyers
(for a voucher with stock buckets, the sums over its buckets and the units in transit, and
each bucket's own stock and buyers). Then
tests/browser/board.mjs drives Debian's chromium through playwright-core (pinned in
tests/browser/package.json, installed by `sh tools/deps.sh test`), through nginx at /api/admin/:
wrong token refused, log in, the form's own checks at Create (stock 0, pay above worth, an
end in the past or before the begin: refused without a request),
create a sale in 3 stock buckets through the form (each bucket's share shown under its
row; its title, countdown and window with the year), sell it out with `seckill bench`
while pausing and resuming it from the page (the stock stands still while paused), and see
admissions/s, the stock and every bucket's stock change on the page with no reload and no
JavaScript error; then end it (two clicks) and extend it from the page, and see its totals
by outcome (the same after a reload) and its events. Screenshots land in build/browser/
for a person to look at. test_board_ops.py checks the same through the API.
"""

import json
import os
import re
import shutil
import subprocess

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)      # the board reads Redis; one backend is enough
BROWSER_DIR = os.path.join(H.ROOT, "tests", "browser")
TRANSFER_LUA = open(os.path.join(H.ROOT, "src", "sale", "transfer.lua")).read()


def _cluster(n=2):
    redis = H.start_redis()
    first = H.start_server(redis, name="board-1", threads=2)
    servers = [first]
    for i in range(2, n + 1):
        servers.append(H.start_server(redis, name="board-%d" % i, threads=1,
                                      data_dir=H.subdir("inst-%d" % i), db_path=first.db_path,
                                      admin_token=first.admin_token))
    return redis, servers


def _board(srv, token=None):
    h = H.Http(srv.port)
    try:
        return h.api("GET", "/admin/api/board", admin=token)
    finally:
        h.close()


def test_board_data_endpoint():
    redis, (s1, s2) = _cluster(2)
    # The page itself is public and self-contained.
    h = H.Http(s1.port)
    for path, ctype in (("/admin/", "text/html"), ("/admin/board.js", "text/javascript"),
                        ("/admin/board.css", "text/css")):
        st, hd, body = h.request("GET", path)
        eq(st, 200, "GET " + path)
        check(hd.get("content-type", "").startswith(ctype), "%s content-type %r", path,
              hd.get("content-type"))
        body = body.replace(b"http://www.w3.org/2000/svg", b"")    # a namespace, not a fetch
        check(b"http://" not in body and b"https://" not in body, "%s refers to another site",
              path)
    h.close()
    # Data needs the token.
    st, j = _board(s1)
    eq(st, 403, "board data without a token")
    st, j = _board(s1, "x" + s1.admin_token)
    eq(st, 403, "board data with a wrong token")

    vid = H.create_seckill(s1, stock=5)
    tokens = [H.login(s1, redis, H.phone_for(i)) for i in range(3)]
    for t in tokens:
        st, j = H.seckill(s2, t, vid)
        check(st == 200 and j["success"], "order: %r", j)

    def both_listed():
        st, j = _board(s1, s1.admin_token)
        names = sorted(i["name"] for i in j["data"]["instances"])
        return j if names == ["board-1", "board-2"] else None
    j = H.wait_until(both_listed, 10, 0.2, "both instances on the board")
    d = j["data"]
    eq(d["self"], "board-1", "self")
    sale = [s for s in d["sales"] if s["id"] == vid]
    eq(len(sale), 1, "the sale on the board")
    eq((sale[0]["stock"], sale[0]["buyers"]), (2, 3), "stock left and buyers")
    # A voucher with 4 stock buckets: the board sums them (each bucket's stock and buyers,
    # plus units a transfer took from one bucket and has not yet added to another), so it
    # shows the sale's true totals, not bucket 0's share.
    k, bstock = 4, 20
    bvid = H.create_seckill(s1, stock=bstock, stockBuckets=k)
    btokens = [H.login(s1, redis, H.phone_for(i)) for i in range(3, 9)]
    for t in btokens:
        st, j = H.seckill(s2, t, bvid)
        check(st == 200 and j["success"], "order of the bucketed voucher: %r", j)
    bk = H.bucket_keys(bvid, 1, k)
    taken = redis.cmd("EVAL", TRANSFER_LUA, "2", bk["voucher"], bk["log"], "take", "board-t1",
                      "2", "1")[0]
    eq(taken > 0, True, "a transfer taken from bucket 1, not applied")
    st, j = _board(s1, s1.admin_token)
    bsale = [s for s in j["data"]["sales"] if s["id"] == bvid]
    eq(len(bsale), 1, "the bucketed sale on the board (once)")
    eq((bsale[0]["stock"], bsale[0]["buyers"]), (bstock - len(btokens), len(btokens)),
       "stock left and buyers summed over the buckets")
    eq(bsale[0].get("buckets"), k, "the sale's stock buckets")
    # and each bucket's own figures: buyers in their home buckets, the units taken from
    # bucket 1 in transit (not in bucket 1's stock any more, counted in the sum)
    per = bsale[0].get("perBucket")
    check(isinstance(per, list) and len(per) == k, "perBucket: %r", per)
    h = s1.http()
    homes = [H.bucket_home(h.api("GET", "/user/me", token=t)[1]["data"]["id"], k)
             for t in btokens]
    eq([p["buyers"] for p in per], [homes.count(b) for b in range(k)], "buyers per bucket")
    eq([p["stock"] for p in per],
       [int(redis.cmd("HGET", H.bucket_keys(bvid, b, k)["voucher"], "stock")) for b in range(k)],
       "stock per bucket")
    eq(bsale[0].get("inTransit"), taken, "units in transit")
    check("perBucket" not in sale[0], "an unbucketed sale has no perBucket: %r", sale[0])
    by = {i["name"]: i for i in d["instances"]}
    eq(by["board-2"]["seckill"]["ok"], 3, "admissions counted by the instance that made them")
    eq(by["board-1"]["seckill"]["ok"], 0, "admissions of board-1")
    eq((by["board-2"]["redis_up"], by["board-2"]["workers"], by["board-2"]["sql_up"]), (1, 1, 1),
       "board-2 up")
    check(len(by["board-1"]["lat"]) == 16 and sum(by["board-2"]["lat"]) == 3,
          "latency buckets: %r", by["board-2"]["lat"])

    # A stopped instance drops off within the TTL (5 s).
    s2.stop()
    H.wait_until(lambda: [i["name"] for i in _board(s1, s1.admin_token)[1]["data"]["instances"]]
                 == ["board-1"], 12, 0.3, "board-2 to drop off the board")
    H.finish(s1)


def _browser_tools():
    node = shutil.which("node")
    chromium = shutil.which("chromium")
    check(node is not None, "node not installed (sh tools/deps.sh test installs nodejs)")
    check(chromium is not None, "chromium not installed (sh tools/deps.sh test installs it)")
    check(os.path.isdir(os.path.join(BROWSER_DIR, "node_modules", "playwright-core")),
          "playwright-core not installed in tests/browser (sh tools/deps.sh test runs npm ci there)")
    return node, chromium


def test_board_in_chromium():
    node, chromium = _browser_tools()
    redis, (s1, s2) = _cluster(2)
    stock = 300
    bench = [H.binary(), "bench", "--target", "http://127.0.0.1:%d" % s2.port,
             "--redis", redis.url, "--db", s1.db_url, "--admin-token", s1.admin_token,
             "--voucher", "{voucher}", "--stock", str(stock), "--seed-tokens",
             "--users", "900", "--rate", "60", "--conns", "16", "--quiet"]
    out_dir = os.path.join(H.ROOT, "build", "browser")
    # Through nginx under the course's /api prefix (deploy/nginx.conf.in), as a cluster's
    # operator would open it: the page's URLs are relative, so it works there too.
    nginx = H.start_nginx(["127.0.0.1:%d" % s.port for s in (s1, s2)])
    env = dict(os.environ, BOARD_URL="http://127.0.0.1:%d/api" % nginx.port,
               ADMIN_TOKEN=s1.admin_token, INSTANCES="2", BENCH=json.dumps(bench),
               STOCK=str(stock), BUCKETS="3", OUT_DIR=out_dir, CHROMIUM=chromium)
    env.update(H.san_env())
    p = subprocess.run([node, os.path.join(BROWSER_DIR, "board.mjs")], env=env,
                       capture_output=True, text=True, timeout=240, cwd=BROWSER_DIR)
    H.log("board.mjs:", p.stdout[-2000:], p.stderr[-3000:])
    check(p.returncode == 0, "board.mjs failed (exit %d):\n%s\n%s", p.returncode,
          p.stdout[-3000:], p.stderr[-3000:])
    found = json.loads(p.stdout.strip().splitlines()[-1])
    eq(found["errors"], [], "JavaScript errors")
    eq(sorted(found["instances"]), ["board-1", "board-2"], "instances on the page")
    check(found["validation"] and not found["validation"].startswith("HTTP"),
          "validation message from the API: %r", found["validation"])
    check(float(found["admissions_per_s"].replace(",", "")) > 0, "admissions/s %r",
          found["admissions_per_s"])
    eq(found["stock_after"], "0", "stock on the page after the sale")
    # the sale in 3 stock buckets: each bucket's share shown, and all empty at the end
    eq(found.get("bucket_texts"), ["#%d %d left, 0 sold" % (b, stock // 3) for b in range(3)],
       "per-bucket figures on the page after the create")
    eq([t.split(" left")[0] for t in found.get("bucket_texts_after", [])],
       ["#0 0", "#1 0", "#2 0"], "per-bucket stock on the page after the sale")
    eq(found["state_after"], "sold out", "state after the sale")
    # running and reviewing the sale (test_board_ops.py checks the same through the API)
    eq(found["page_validation"], ["Stock must be a whole number of at least 1.",
                                  "Pay must not be above Worth.", "Ends must be in the future.",
                                  "Ends must be after Begins."], "the form's own checks")
    eq(found["page_validation_requests"], 0, "creates sent while the form refused")
    eq(found["title"], "浏览器测试券", "the sale's title on the page")
    check(re.match(r"^ends in (59 m \d\d s|1 h 00 m)$", found["countdown"]), "countdown %r",
          found["countdown"])
    check(re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d → \d{4}-\d\d-\d\d \d\d:\d\d$", found["window"]),
          "window with the year: %r", found["window"])
    eq(found["stock_paused"][0], found["stock_paused"][1], "stock while paused")
    check(int(found["stock_paused"][0].replace(",", "")) > 0, "paused before the sale sold out: %r",
          found["stock_paused"])
    eq((found["state_ended"], found["state_extended"]), ("ended", "sold out"),
       "state after End and after Extend")
    check(found["control_msg"].startswith("Sale #%d extended to " % found["voucher"]),
          "control message %r", found["control_msg"])
    t = found["totals"]
    check(t["ok"] == stock and t["paused"] > 0 and t["sold_out"] + t["duplicate"] > 0,
          "totals on the page: %r", t)
    eq(found["totals_after_reload"], t, "totals after a reload")
    for k in ("sale_paused", "sale_resumed", "sale_ended", "sale_extended", "sale_sold_out"):
        check(k in found["events"], "event %s on the page: %r", k, found["events"])
    eq(found["events"].index("sale_extended") < found["events"].index("sale_paused"), True,
       "events newest first")
    eq(found["bench_exit"], 0, "seckill bench exit status (its audit)")
    eq(found["navigations"], 1, "page loads (live updates without reloads)")
    check(found["phone_overflow"] <= 0, "horizontal overflow at phone width: %rpx",
          found["phone_overflow"])
    eq(H.Db(s1.db_url).order_count(found["voucher"]), stock, "orders in SQL")
    H.finish(s1)
    H.finish(s2)
