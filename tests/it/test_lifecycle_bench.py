"""test_lifecycle_bench.py -- the order lifecycle on the sale board (issue #27; docs/lifecycle.md,
"On the sale board"): GET /admin/api/board's per-sale "life" figures.

  - paid, cancelled (by the buyer), expired (timed out), unpaid (the rest of the buyers) and
    returned (units given back), summed over a sale's stock buckets;
  - dueNextMinute: the unpaid orders whose payment deadline passes within the next minute;
  - the page shows them in an "orders:" line under the sale (chromium, board_life.mjs);
  - seckill bench --pay-share P --cancel-share C --pay-timeout S rehearses pays, cancels and
    timeouts after the sale, checks them against Redis and SQL (and the server's timeout
    against S), and its --html report charts them over time (chromium, report.mjs);
  - the cost: one EVAL (life.lua's read-only board op) per sale and bucket per board
    request.
"""

import json
import os
import subprocess
import time

import harness as H
from harness import check, eq

from test_bench_html import _open_in_chromium
from test_board import BROWSER_DIR, _browser_tools
from test_lifecycle import _cancel, _notify, _pay_settings, _status
from test_room_board import board_sales, calls

# The board's figures and the bench's rehearsal read Redis and drive the API; the SQL side of
# each lifecycle step runs on both backends in test_lifecycle.py, test_refunds.py and
# test_backstop.py.
DB_BACKENDS = ("sqlite",)


def _life(srv, vid):
    s = board_sales(srv)[vid]
    check("life" in s, "a stream-mode sale carries life: %r", s)
    return s["life"]


def test_board_life_figures_and_due():
    """--pay-timeout-s 45: every unpaid order's deadline is within the next minute."""
    r, srv = H.setup(settings=_pay_settings({"pay-timeout-s": "45"}))
    h = srv.http()
    users = [H.login(srv, r, "136123457%02d" % i, h) for i in range(4)]
    vid = H.create_seckill(srv, stock=5, http=h)
    bucketed = H.create_seckill(srv, stock=8, http=h, stockBuckets=4)
    oids = [H.seckill(srv, t, vid, h)[1]["data"] for t in users]
    for t in users[:3]:
        check(H.seckill(srv, t, bucketed, h)[1]["success"], "grab in the bucketed sale")
    db = srv.db()
    H.wait_drained(srv, r, vid, 30)
    H.wait_until(lambda: db.order_count(bucketed) == 3, 30, what="the bucketed orders in SQL")
    st, j = _notify(h, oids[0], "P0", 8000)
    check(j["data"] == "PAID", "pay: %r", j)
    st, j = _cancel(h, users[1], oids[1])
    check(j["success"], "cancel: %r", j)
    before = calls(r, "eval")
    life = _life(srv, vid)
    eq(calls(r, "eval") - before, 1 + 4, "EVALs per board request (1 + 4 buckets)")
    eq((life["paid"], life["cancelled"], life["expired"], life["returned"], life["unpaid"]),
       (1, 1, 0, 1, 2), "life of the sale: %r" % life)
    eq((life["dueNextMinute"], life["dueCapped"]), (2, False), "due within a minute: %r" % life)
    bl = _life(srv, bucketed)
    eq((bl["paid"], bl["unpaid"], bl["dueNextMinute"]), (0, 3, 3),
       "bucketed sale, summed over its buckets: %r" % bl)
    H.finish(srv)


def test_board_life_expired():
    """--pay-timeout-s 2: an unpaid order times out; the board counts it expired and
    returned, and nothing is due any more."""
    r, srv = H.setup(settings=_pay_settings({"pay-timeout-s": "2"}))
    h = srv.http()
    a = H.login(srv, r, "13612345801", h)
    b = H.login(srv, r, "13612345802", h)
    vid = H.create_seckill(srv, stock=3, http=h)
    oa = H.seckill(srv, a, vid, h)[1]["data"]
    ob = H.seckill(srv, b, vid, h)[1]["data"]
    db = srv.db()
    H.wait_until(lambda: db.order_count(vid) == 2, 10, what="both orders in SQL")
    st, j = _notify(h, ob, "PB", 8000)
    check(j["data"] == "PAID", "b pays in time: %r", j)
    H.wait_until(lambda: _status(db, oa) == 4, 15, what="a's order timed out")
    life = _life(srv, vid)
    eq((life["paid"], life["cancelled"], life["expired"], life["returned"], life["unpaid"],
        life["dueNextMinute"]), (1, 0, 1, 1, 0, 0), "after the timeout: %r" % life)
    H.finish(srv)


def test_board_life_without_timeout():
    """--pay-timeout-s 0: the figures without dueNextMinute."""
    r, srv = H.setup(settings=_pay_settings({"pay-timeout-s": "0"}))
    h = srv.http()
    t = H.login(srv, r, "13612345811", h)
    vid = H.create_seckill(srv, stock=2, http=h)
    oid = H.seckill(srv, t, vid, h)[1]["data"]
    H.wait_drained(srv, r, vid, 30)
    st, j = _notify(h, oid, "P1", 8000)
    check(j["data"] == "PAID", "pay: %r", j)
    life = _life(srv, vid)
    check("dueNextMinute" not in life, "no timeout, no due figure: %r", life)
    eq((life["paid"], life["unpaid"]), (1, 0), "paid: %r" % life)
    H.finish(srv)


@H.timeout(200)
def test_board_life_on_redis_cluster():
    """Three masters, a voucher in 3 stock buckets: each bucket's EVAL goes to its own
    master (the key's slot), and the board sums them."""
    cluster = H.start_redis_cluster(masters=3, replicas=0)
    srv = H.start_server(cluster.url, name="life-c1",
                         settings=_pay_settings({"pay-timeout-s": "40"}))
    h = srv.http()
    tokens = H.login_many(srv, cluster, 6)
    vid = H.create_seckill(srv, stock=12, stockBuckets=3, http=h)
    oids = []
    for t in tokens:
        st, j = H.seckill(srv, t, vid, h)
        check(j.get("success"), "buy: %r", j)
        oids.append(j["data"])
    db = srv.db()
    H.wait_until(lambda: db.order_count(vid) == 6, 30, what="the orders in SQL")
    check(_notify(h, oids[0], "P0", 8000)[1]["data"] == "PAID", "pay")
    check(_cancel(h, tokens[1], oids[1])[1]["success"], "cancel")
    before = sum(calls(n, "eval") for n in cluster.nodes)
    life = _life(srv, vid)
    eq(sum(calls(n, "eval") for n in cluster.nodes) - before, 3, "one EVAL per bucket")
    eq((life["paid"], life["cancelled"], life["unpaid"], life["dueNextMinute"]), (1, 1, 4, 4),
       "summed over the masters: %r" % life)
    H.finish(srv)


def test_board_life_in_chromium():
    """The page's "orders:" line under its sale, under the board's CSP:
    tests/browser/board_life.mjs; screenshot build/browser/board-life.png."""
    node, chromium = _browser_tools()
    r, srv = H.setup(settings=_pay_settings({"pay-timeout-s": "50"}))
    h = srv.http()
    users = [H.login(srv, r, "136123458%02d" % i, h) for i in range(3)]
    vid = H.create_seckill(srv, stock=5, http=h)
    oids = [H.seckill(srv, t, vid, h)[1]["data"] for t in users]
    H.wait_drained(srv, r, vid, 30)
    check(_notify(h, oids[0], "P0", 8000)[1]["data"] == "PAID", "pay")
    check(_cancel(h, users[1], oids[1])[1]["success"], "cancel")
    env = dict(os.environ, BOARD_URL="http://127.0.0.1:%d" % srv.port,
               ADMIN_TOKEN=srv.admin_token, SALE=str(vid),
               OUT_DIR=os.path.join(H.ROOT, "build", "browser"), CHROMIUM=chromium)
    p = subprocess.run([node, os.path.join(BROWSER_DIR, "board_life.mjs")], env=env,
                       capture_output=True, text=True, timeout=120, cwd=BROWSER_DIR)
    H.log("board_life.mjs:", p.stdout[-2000:], p.stderr[-3000:])
    check(p.returncode == 0, "board_life.mjs failed (exit %d):\n%s\n%s", p.returncode,
          p.stdout[-3000:], p.stderr[-3000:])
    found = json.loads(p.stdout.strip().splitlines()[-1])
    eq(found["errors"], [], "JavaScript errors")
    eq(found["row_before"], str(vid), "the line right under its sale")
    eq(found["sold"], "2 / 5", "sold / initial: the cancelled order's unit is not sold")
    eq(found["parts"], {"head": "orders:", "paid": "1 paid", "unpaid": "1 unpaid",
                        "cancelled": "1 cancelled", "expired": "0 expired",
                        "returned": "1 returned", "due": "1 due back in 1 min"},
       "the orders line")
    H.finish(srv)


# ---------------------------------------------------------------- the rehearsal (seckill bench)

def _bench(r, srv, key_file, timeout_s, *extra):
    js = os.path.join(H.tmpdir(), "bench-life-%d-%d.json" % (os.getpid(), time.time_ns()))
    cmd = [H.binary(), "bench", "--target", "http://127.0.0.1:%d" % srv.port,
           "--redis", r.url, "--db", srv.db_url, "--admin-token", srv.admin_token,
           "--seed-tokens", "--users", "300", "--stock", "200", "--dup", "0",
           "--burst-share", "0", "--quiet", "--pay-key-file", key_file,
           "--pay-timeout", str(timeout_s), "--json", js] + list(extra)
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, env=H.san_env(), timeout=180)
    out = p.stdout.decode("utf-8", "replace")
    H.log(out)
    j = json.load(open(js)) if os.path.exists(js) else None
    return p.returncode, out, j


def test_bench_rehearses_pay_cancel_timeout():
    """seckill bench --pay-share 0.3 --cancel-share 0.2 --pay-timeout 3 against a server with
    --pay-timeout-s 3: every order gets its fate, Redis and SQL agree, the audit is clean."""
    settings = _pay_settings({"pay-timeout-s": "3"})
    r, srv = H.setup(settings=settings)
    page = os.path.join(H.tmpdir(), "life-report-%d.html" % os.getpid())
    rc, out, j = _bench(r, srv, settings["pay-key-file"], 3, "--pay-share", "0.3",
                        "--cancel-share", "0.2", "--html", page)
    eq(rc, 0, "bench exit status:\n%s" % out[:3000])
    life = j["lifecycle"]
    n = j["outcomes"]["success"]
    eq(n, 200, "orders sold")
    eq(life["to_pay"] + life["to_cancel"] + life["to_expire"], n, "a fate per order")
    check(40 <= life["to_pay"] <= 80 and 20 <= life["to_cancel"] <= 60,
          "shares 0.3 / 0.2 of 200: %r", life)
    eq((life["paid"], life["cancelled"], life["refused"]),
       (life["to_pay"], life["to_cancel"], 0), "answers: %r" % life)
    eq((life["redis"]["paid"], life["redis"]["timedout"], life["redis"]["returned"]),
       (life["to_pay"], life["to_expire"], life["to_cancel"] + life["to_expire"]),
       "Redis's counters: %r" % life)
    check(life["ok"] and life["timeout_ok"] and life["expired_after_s"] >= 3, "%r", life)
    eq(j["audit"], 0, "the audit")
    db = srv.db()
    vid = j["voucher"]
    H.wait_until(lambda: db.scalar("SELECT count(*) FROM tb_voucher_order WHERE voucher_id=? "
                                   "AND status=4", vid) == life["to_cancel"] + life["to_expire"],
                 30, what="SQL: the cancelled and timed-out orders at status 4")
    eq(db.scalar("SELECT count(*) FROM tb_voucher_order WHERE voucher_id=? AND status=2", vid),
       life["to_pay"], "SQL: the paid orders at status 2")
    # the HTML report: paid, cancelled and expired over time (chromium, report.mjs)
    found = _open_in_chromium(page, "bench-lifecycle.png")
    eq(found["errors"], [], "JavaScript errors")
    eq(found["drawn"], found["plots"], "every chart drawn")
    ch = [c for c in found["charts"] if c["labels"] == ["seconds", "paid", "cancelled",
                                                        "expired"]]
    eq(len(ch), 1, "the lifecycle chart: %r" % [c["labels"] for c in found["charts"]])
    eq(ch[0]["rows"][-1][1:], [life["to_pay"], life["to_cancel"], life["to_expire"]],
       "the chart's last point")
    check(ch[0]["rows"][0][3] < life["to_expire"], "expired rise over time: %r", ch[0]["rows"])
    H.finish(srv)


def test_bench_finds_a_different_timeout():
    """The server's --pay-timeout-s is 60, bench says 1: the orders left unpaid have not
    timed out when bench's bound passes -- bench says so and exits 1."""
    settings = _pay_settings({"pay-timeout-s": "60"})
    r, srv = H.setup(settings=settings)
    rc, out, j = _bench(r, srv, settings["pay-key-file"], 1, "--pay-share", "0.5",
                        "--no-audit")
    eq(rc, 1, "bench exit status:\n%s" % out)
    check("NOT all timed out" in out, "the report says why:\n%s", out)
    check(not j["lifecycle"]["ok"] and not j["lifecycle"]["timeout_ok"], "%r", j["lifecycle"])
    H.finish(srv)


@H.timeout(240)
def test_bench_rehearsal_on_redis_cluster():
    """Three masters, the sale in 3 stock buckets (one per master): bench reads each
    bucket's counters on its own master; the rehearsal and the audit come out clean."""
    cluster = H.start_redis_cluster(masters=3, replicas=0)
    settings = _pay_settings({"pay-timeout-s": "3"})
    srv = H.start_server(cluster.url, name="life-b1", settings=settings)
    rc, out, j = _bench(cluster, srv, settings["pay-key-file"], 3, "--pay-share", "0.3",
                        "--cancel-share", "0.2", "--buckets", "3")
    eq(rc, 0, "bench exit status:\n%s" % out[:3000])
    life = j["lifecycle"]
    check(life["ok"] and life["to_pay"] > 0 and life["to_cancel"] > 0 and life["to_expire"] > 0,
          "%r", life)
    eq(j["audit"], 0, "the audit")
    H.finish(srv)

