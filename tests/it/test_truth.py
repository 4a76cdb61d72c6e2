"""test_truth.py -- each order mode is audited and shown by what that mode keeps; and the
start-up text walks a newcomer to the board, to 不能重复下单 and to 库存不足.

Sync mode (and the lab's SQL steps) take the order in SQL alone: Redis holds only the
published voucher (its stock never moves) and no buyers, no stream. So `seckill audit` must
check SQL's stock + orders = initial and one order per user, and not ask Redis for
admissions that mode never makes; and the board must show SQL's stock and buyers for such a
sale. Stream mode keeps its Redis checks (test_bench_audit.py).
"""

import json
import os
import re
import subprocess

import harness as H
from harness import check, eq
from test_board import _board as board_data   # GET /admin/api/board with a token

DB_BACKENDS = ("sqlite", "mysql")


def db_url(srv):
    return getattr(srv, "db_url", None) or "sqlite:" + srv.db_path


def _board(srv):
    return board_data(srv, srv.admin_token)


def _bench(srv, r, js, *extra):
    """`seckill bench` on a new voucher with seeded buyers: (rc, stdout, stderr)."""
    rc, out, err = H.run_tool(["bench", "--target", "http://127.0.0.1:%d" % srv.port,
                               "--redis", r.url, "--db", db_url(srv), "--admin-token",
                               srv.admin_token, "--seed-tokens", "--json", js] + list(extra))
    H.log(out)
    return rc, out, err


@H.timeout(180)
def test_sync_bench_audit_and_board():
    """A correct sync-mode sale: `seckill bench` (which audits) exits 0, its audit checks
    SQL's stock and orders, and the board lists the sale with SQL's stock and buyers."""
    r, srv = H.setup(settings={"mode": "sync"})
    d = H.tmpdir()
    js = os.path.join(d, "sync.json")
    rc, out, err = _bench(srv, r, js, "--users", 100, "--stock", 20)
    j = json.load(open(js))
    eq(j["outcomes"]["success"], 20, "success answers")
    vid = j["voucher"]
    # The board: SQL's stock (0 left) and its 20 buyers, not Redis's untouched 20.
    def listed():
        st, b = _board(srv)
        if st != 200:
            return None
        sales = [s for s in b["data"]["sales"] if s["id"] == vid]
        return sales[0] if sales and b["data"]["instances"] else None
    s = H.wait_until(listed, 10, 0.2, "the sale on the board")
    eq(s["stock"], 0, "board stock (SQL's)")
    eq(s["buyers"], 20, "board buyers (SQL orders)")
    st, b = _board(srv)
    me = [i for i in b["data"]["instances"] if i["mode"] == "sync"]
    check(me, "no sync instance on the board: %r", b["data"]["instances"])
    eq(me[0]["seckill"]["ok"] - me[0]["persisted"], 0, "admitted - persisted")
    check(rc == 0, "sync-mode bench exit %d:\n%s\n%s", rc, out, err)
    eq(j["audit"], 0, "audit status")
    eq(srv.db().stock(vid), 0, "SQL stock")
    check("audit: 0 violations" in out, "no audit summary in:\n%s", out)
    check("mode:  sync (announced by the live instances): the sale is kept in SQL alone" in out,
          "the audit does not say which mode it checked:\n%s", out)

    # The audit on its own, with the mode found from the live instance: SQL's checks hold,
    # Redis's admission checks do not apply.
    rc, out, err = H.run_tool(["audit", "--redis", r.url, "--db", db_url(srv), "--voucher", vid,
                               "--stock", 20, "--json", "-"])
    eq(rc, 0, "audit exit status\n%s%s" % (out, err))
    ja = json.loads(out)
    v = ja["vouchers"][0]
    eq(v["mode"], "sync", "audited as")
    checks = {c["check"]: c["status"] for c in v["checks"]}
    for c in ("no-oversell", "sql-stock", "stock-agree", "dup-sql", "window", "redis-idle"):
        eq(checks.get(c), "ok", "check %s" % c)
    for c in ("redis-stock", "sql-admitted", "admitted-persisted", "stream-drained"):
        eq(checks.get(c), "skip", "check %s" % c)

    # The same data audited as a stream-mode sale is wrong: its orders never went
    # through Redis (the checks are the mode's, not a blanket pass).
    rc, out, err = H.run_tool(["audit", "--redis", r.url, "--db", db_url(srv), "--voucher", vid,
                               "--stock", 20, "--mode", "stream"])
    eq(rc, 1, "audit as stream mode: exit status\n%s%s" % (out, err))
    check("sql-admitted" in out, "no sql-admitted failure:\n%s", out)

    # An oversold sync sale (one SQL order too many, stock left as it was) fails.
    H.sql_write(srv, "UPDATE tb_seckill_voucher SET stock = stock + 1 WHERE voucher_id = ?", vid)
    rc, out, err = H.run_tool(["audit", "--redis", r.url, "--db", db_url(srv), "--voucher", vid,
                               "--stock", 20])
    eq(rc, 1, "audit of a broken sync sale: exit status\n%s%s" % (out, err))
    check("FAIL" in out and "sql-stock" in out, "no sql-stock failure:\n%s", out)
    H.sql_write(srv, "UPDATE tb_seckill_voucher SET stock = stock - 1 WHERE voucher_id = ?", vid)

    H.finish(srv)


@H.timeout(180)
def test_lab_sql_step_audit_and_board():
    """A lab SQL step (naive) run one request at a time sells correctly: its audit checks
    SQL (the lab's order table), and the board shows SQL's stock and buyers."""
    r, srv = H.setup(settings={"mode": "naive"})
    d = H.tmpdir()
    js = os.path.join(d, "naive.json")
    rc, out, err = _bench(srv, r, js, "--users", 30, "--stock", 10, "--conns", 1, "--dup", 0,
                          "--burst-share", 0)
    check(rc == 0, "naive-mode bench (one connection) exit %d:\n%s\n%s", rc, out, err)
    j = json.load(open(js))
    eq(j["outcomes"]["success"], 10, "success answers")
    check("mode:  naive" in out and "kept in SQL alone" in out, "mode line:\n%s", out)
    vid = j["voucher"]
    st, b = _board(srv)
    eq(st, 200, "board status")
    s = [s for s in b["data"]["sales"] if s["id"] == vid][0]
    eq(s["stock"], 0, "board stock (SQL's)")
    eq(s["buyers"], 10, "board buyers (the lab's SQL orders)")
    H.finish(srv)


@H.timeout(120)
def test_startup_text_walkthrough():
    """The start-up text names the board (/admin/) and, followed as printed, shows both
    不能重复下单 and 库存不足 (its second voucher has stock 1); the embedded default's text
    says how to start afresh."""
    r, srv = H.setup()
    text = H.wait_until(lambda: "Try a flash sale" in srv.stdout_text() and srv.stdout_text(),
                        10, 0.1, "the start-up text")
    H.log(text)
    url = "http://127.0.0.1:%d" % srv.port
    check(("sale board:  %s/admin/" % url) in text, "no board URL in:\n%s", text)
    check("admin token" in text, "no admin token hint in:\n%s", text)
    check(("bench --target %s" % url) in text, "no bench one-liner in:\n%s", text)
    bodies = [json.loads(b) for b in re.findall(r"-d '(\{\"shopId\".*?\})'", text)]
    eq(sorted(b["stock"] for b in bodies), [1, 100], "the vouchers the text creates")
    h = H.Http(srv.port)
    ids = {}
    for b in bodies:
        st, j = h.api("POST", "/voucher/seckill", b, admin=srv.admin_token)
        check(st == 200 and j["success"], "create as printed: %r", j)
        ids[b["stock"]] = j["data"]
    token = H.login(srv, r, "13800000000")
    for stock, second in ((100, "不能重复下单"), (1, "库存不足")):
        st, j = H.seckill(srv, token, ids[stock])
        check(st == 200 and j["success"], "first order of the stock-%d voucher: %r", stock, j)
        st, j = H.seckill(srv, token, ids[stock])
        check(not j["success"] and j.get("errorMsg") == second,
              "second order of the stock-%d voucher: %r (want %s)", stock, j, second)
    h.close()
    H.finish(srv)

    # The embedded default: the board, and how to start afresh.
    d = H.subdir("embedded")
    port = H.free_port()
    emb = H.Server([H.binary(), "serve", "--data-dir", d, "--listen", "127.0.0.1:%d" % port],
                   d, port, None, os.path.join(d, "seckill.db"), None)
    emb.start(ready_timeout=60)
    text = H.wait_until(lambda: "Start afresh" in emb.stdout_text() and emb.stdout_text(), 10,
                        0.1, "the embedded start-up text")
    check("sale board:  http://127.0.0.1:%d/admin/" % port in text, "no board URL:\n%s", text)
    check("make reset" in text and ("remove %s" % d) in text, "no way to start afresh:\n%s",
          text)
    check(("bench --data-dir %s --seed-tokens" % d) in text, "no bench one-liner:\n%s", text)

    # make reset: refused while the instance serves, asks (no answer: kept), YES=1 removes.
    def reset(*extra):
        p = subprocess.run(["make", "-s", "-C", H.ROOT, "reset", "VAR=" + d] + list(extra),
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        H.log("make reset %s: %d %s%s" % (" ".join(extra), p.returncode, p.stdout, p.stderr))
        return p.returncode, p.stdout + p.stderr
    rc, out = reset("YES=1")
    check(rc != 0 and "stop it first" in out and os.path.isdir(d),
          "make reset while serving: %d %s", rc, out)
    emb.stop()
    rc, out = reset()
    check(rc != 0 and "kept" in out and os.path.isdir(d), "make reset unanswered: %d %s", rc, out)
    rc, out = reset("YES=1")
    check(rc == 0 and not os.path.exists(d), "make reset YES=1: %d %s", rc, out)
