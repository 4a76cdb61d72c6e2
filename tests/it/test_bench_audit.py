"""test_bench_audit.py -- `seckill bench` runs small sales and `seckill audit` proves them
clean; then the audit is shown to catch each kind of damage on a corrupted copy of the data.

The corruption cases work on copies (SQLite backup + MIGRATE COPY of the voucher's keys into
a second redis-server), one fresh copy per case, and check that the expected checks FAIL
(exit status 1) while a clean copy passes (exit 0).

The sales and the live audit run on both SQL backends; the corruption cases edit a copy of
the SQLite file directly, so on MariaDB they only log that they do not apply.
"""

import json
import os
import re
import sqlite3
import subprocess
import time

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite", "mysql")


run_tool = H.run_tool


def fails(out):
    """Ids of the checks the audit report marks FAIL."""
    return set(re.findall(r"^\s+FAIL\s+\S+\s+(\S+)", out, re.M))


def db_url(srv):
    """The server's database URL (the harness knows it; older harnesses only SQLite)."""
    return getattr(srv, "db_url", None) or "sqlite:" + srv.db_path


def bench_args(srv, redis, *extra):
    return ["bench", "--target", "http://127.0.0.1:%d" % srv.port, "--redis", redis.url,
            "--db", db_url(srv), "--admin-token", srv.admin_token,
            "--quiet"] + list(extra)


@H.timeout(180)
def test_bench_sales_audit_clean():
    r, srv = H.setup()
    d = H.tmpdir()

    # 1. closed loop, users logged in through the API, repeats and concurrent copies
    rec1, js1 = os.path.join(d, "rec1.txt"), os.path.join(d, "b1.json")
    rc, out, err = run_tool(bench_args(srv, r, "--users", 300, "--stock", 100, "--conns", 16,
                                       "--dup", 0.3, "--burst-share", 0.2, "--burst", 3,
                                       "--record", rec1, "--json", js1, "--seed", 7))
    H.log(out)
    check(rc == 0, "bench exit %d:\n%s\n%s", rc, out, err)
    j = json.load(open(js1))
    eq(j["outcomes"]["success"], 100, "success answers")
    check(j["outcomes"]["sold_out"] > 0, "no sold-out answers: %r", j["outcomes"])
    eq(j["outcomes"]["no_answer"] + j["outcomes"]["other_answer"] + j["outcomes"]["503"]
       + j["outcomes"]["401"], 0, "errors")
    eq(j["requests"], sum(v for k, v in j["outcomes"].items() if k != "no_answer"),
       "requests = answers")
    check(j["requests"] > 300, "no repeats were sent: %d requests", j["requests"])
    eq(j["audit"], 0, "audit status")
    check(j["drain"]["drained"], "not drained: %r", j["drain"])
    check("audit: 0 violations" in out, "no audit summary in:\n%s", out)
    lines = [l for l in open(rec1) if not l.startswith(("#", "soldout ", "maybe "))]   # success lines
    eq(len(lines), 100, "record lines")
    eq(srv.db().user_count(), 300, "users created by API login")
    v1 = j["voucher"]

    # 2. open loop at a fixed rate, seeded tokens, the sale opening after creation
    js2 = os.path.join(d, "b2.json")
    # (the sale opens 1-2 s after creation: 4,000-8,000 buyers come too early, the rest sell
    # the 1,000 out)
    rc, out, err = run_tool(bench_args(srv, r, "--seed-tokens", "--users", 12000, "--stock", 1000,
                                       "--rate", 4000, "--conns", 32, "--dup", 0.1,
                                       "--begin-in", 2, "--json", js2))
    H.log(out)
    check(rc == 0, "bench exit %d:\n%s\n%s", rc, out, err)
    j2 = json.load(open(js2))
    eq(j2["outcomes"]["success"], 1000, "success answers (open loop)")
    check(j2["outcomes"]["not_started"] > 0, "nothing came before the sale opened: %r",
          j2["outcomes"])
    eq(j2["outcomes"]["no_answer"], 0, "unanswered")
    eq(j2["mode"], "open", "mode")
    check(0 < j2["latency_us"]["p50"] <= j2["latency_us"]["p99"] <= j2["latency_us"]["max"],
          "latency figures: %r", j2["latency_us"])

    # 3. the audit on its own: every voucher (no record, no stock), then one with its record
    rc, out, err = run_tool(["audit", "--redis", r.url, "--db", db_url(srv)])
    H.log(out)
    eq(rc, 0, "audit of every voucher: exit status\n%s%s" % (out, err))
    check(("voucher %d:" % v1) in out and ("voucher %d:" % j2["voucher"]) in out,
          "vouchers missing from the report:\n%s", out)
    rc, out, err = run_tool(["audit", "--redis", r.url, "--db", db_url(srv),
                             "--orders", rec1, "--wait-drain", 5, "--json", "-"])
    eq(rc, 0, "audit with the record: exit status\n%s%s" % (out, err))
    ja = json.loads(out)
    eq(ja["violations"], 0, "violations")
    checks = {c["check"]: c["status"] for c in ja["vouchers"][0]["checks"]}
    for c in ("no-oversell", "redis-stock", "sql-stock", "stock-agree", "dup-sql", "dup-answers",
              "sql-admitted", "admitted-persisted", "answered-persisted", "persisted-answered",
              "window", "stream-drained", "dead-letters"):
        eq(checks.get(c), "ok", "check %s" % c)
    H.finish(srv)


@H.timeout(120)
def test_audit_live_during_sale():
    """Read-only and safe while orders move from Redis to SQL: audits taken during a sale
    report no violation (in-flight orders are excused, never counted as lost)."""
    r, srv = H.setup()
    vid = H.create_seckill(srv, stock=3000)
    argv = [H.binary()] + [str(a) for a in bench_args(
        srv, r, "--seed-tokens", "--users", 8000, "--voucher", vid, "--stock", 3000, "--rate",
        3000, "--no-audit")]
    bench = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=H.san_env(), cwd=H.tmpdir())
    H.register_proc(bench)
    audits = 0
    try:
        t0 = time.monotonic()
        while bench.poll() is None and time.monotonic() - t0 < 60:
            rc, out, err = run_tool(["audit", "--redis", r.url, "--db", db_url(srv),
                                     "--voucher", vid, "--stock", 3000])
            check(rc == 0, "live audit %d: exit %d\n%s%s", audits, rc, out, err)
            audits += 1
        bout, berr = bench.communicate(timeout=60)
        eq(bench.returncode, 0, "bench exit status (%s)" % berr.decode()[-2000:])
    finally:
        if bench.poll() is None:
            bench.kill()
    H.log("%d audits during the sale" % audits)
    check(audits >= 2, "only %d audits ran during the sale", audits)
    H.wait_drained(srv, r, vid, 60)
    rc, out, err = run_tool(["audit", "--redis", r.url, "--db", db_url(srv),
                             "--voucher", vid, "--stock", 3000, "--wait-drain", 10])
    eq(rc, 0, "audit after drain\n%s%s" % (out, err))
    H.finish(srv)


# ---------------------------------------------------------------------------------------
# corruption


class Copy:
    """A fresh copy of one voucher's data: SQLite backup + its Redis keys (MIGRATE COPY)."""

    def __init__(self, src_db, src_redis, copy_redis, vid, n):
        self.vid = vid
        self.db_path = os.path.join(H.tmpdir(), "copy%d.db" % n)
        for ext in ("", "-wal", "-shm"):
            if os.path.exists(self.db_path + ext):
                os.remove(self.db_path + ext)
        s = sqlite3.connect(src_db)
        t = sqlite3.connect(self.db_path)
        s.backup(t)
        s.close()
        t.close()
        copy_redis.cmd("FLUSHALL")
        keys = [H.k_voucher(vid), H.k_buyers(vid), H.k_stream(vid), "seckill:streams"]
        res = src_redis.cmd("MIGRATE", "127.0.0.1", copy_redis.port, "", 0, 5000, "COPY",
                            "REPLACE", "KEYS", *keys)
        eq(res, "OK", "MIGRATE COPY")
        self.redis = copy_redis

    def sql(self, *stmts):
        c = sqlite3.connect(self.db_path)
        try:
            for s in stmts:
                c.execute(s)
            c.commit()
        finally:
            c.close()

    def one(self, q):
        c = sqlite3.connect(self.db_path)
        try:
            return c.execute(q).fetchone()
        finally:
            c.close()

    def audit(self, *extra):
        return run_tool(["audit", "--redis", self.redis.url, "--db", "sqlite:" + self.db_path]
                        + list(extra))


@H.timeout(180)
def test_audit_catches_each_corruption():
    if getattr(H, "DB_KIND", "sqlite") != "sqlite":
        H.log("the corruption cases copy and edit a SQLite file: SQLite only")
        return
    r, srv = H.setup()
    rec = os.path.join(H.tmpdir(), "rec.txt")
    rc, out, err = run_tool(bench_args(srv, r, "--seed-tokens", "--users", 400, "--stock", 150,
                                       "--conns", 16, "--record", rec, "--seed", 3))
    check(rc == 0, "bench exit %d:\n%s\n%s", rc, out, err)
    vid = int(re.search(r"voucher (\d+) \(stock", out).group(1))
    srv.stop()          # quiescent: nothing moves while the copies are taken
    copy_redis = H.start_redis("copy-redis")
    n = [0]

    def fresh():
        n[0] += 1
        return Copy(srv.db_path, r, copy_redis, vid, n[0])

    def expect(case, c, must, *extra):
        rc, out, err = c.audit("--orders", rec, *extra)
        got = fails(out)
        H.log("%s: exit %d, FAIL %s" % (case, rc, sorted(got)))
        eq(rc, 1, "%s: audit exit status (%s)\n%s%s" % (case, sorted(got), out, err))
        missing = set(must) - got
        check(not missing, "%s: expected FAIL on %s, got FAIL on %s:\n%s", case, sorted(missing),
              sorted(got), out)
        return got

    # the untouched copy is clean, with and without the record
    c = fresh()
    rc, out, err = c.audit("--orders", rec)
    eq(rc, 0, "clean copy with record\n%s%s" % (out, err))
    rc, out, err = c.audit("--voucher", vid)
    eq(rc, 0, "clean copy without stock or record\n%s%s" % (out, err))

    begin = c.one("SELECT begin_time FROM tb_seckill_voucher WHERE voucher_id=%d" % vid)[0]
    some = c.one("SELECT id, user_id, create_time FROM tb_voucher_order WHERE voucher_id=%d "
                 "ORDER BY id LIMIT 1" % vid)

    # an extra order: in SQL, never admitted, never answered, one more than the stock
    c = fresh()
    c.sql("INSERT INTO tb_voucher_order (id, user_id, voucher_id, create_time, update_time) "
          "VALUES (%d, 999999999, %d, '%s', '%s')" % (some[0] + 10**9, vid, some[2], some[2]))
    expect("extra order", c, ["no-oversell", "sql-admitted", "sql-stock", "stock-agree",
                              "persisted-answered"])

    # the same order, but its buyer was answered 503 (docs/api.md: the order may have been
    # taken): persisted-answered excuses it; the rest still fails
    maybe_rec = os.path.join(H.tmpdir(), "rec-maybe.txt")
    with open(rec) as src, open(maybe_rec, "w") as dst:
        dst.write(src.read() + "maybe 999999999\n")
    got = expect("extra order of a buyer answered 503", c,
                 ["no-oversell", "sql-admitted", "sql-stock", "stock-agree"], "--orders", maybe_rec)
    check("persisted-answered" not in got, "an order of a buyer answered 503 failed "
          "persisted-answered: %s", sorted(got))

    # a duplicate in SQL (the table rebuilt without its UNIQUE key, as a broken schema
    # or a careless migration would leave it), stock taken for it as the writer would
    c = fresh()
    cols = ("id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, voucher_id INTEGER NOT NULL, "
            "pay_type INTEGER NOT NULL DEFAULT 1, status INTEGER NOT NULL DEFAULT 1, "
            "create_time TEXT NOT NULL, pay_time TEXT, use_time TEXT, refund_time TEXT, "
            "update_time TEXT NOT NULL")
    c.sql("ALTER TABLE tb_voucher_order RENAME TO old_orders",
          "CREATE TABLE tb_voucher_order (%s)" % cols,
          "INSERT INTO tb_voucher_order SELECT * FROM old_orders",
          "DROP TABLE old_orders",
          "CREATE INDEX idx_order_voucher2 ON tb_voucher_order (voucher_id)",
          "INSERT INTO tb_voucher_order (id, user_id, voucher_id, create_time, update_time) "
          "VALUES (%d, %d, %d, '%s', '%s')" % (some[0] + 10**9, some[1], vid, some[2], some[2]),
          "UPDATE tb_seckill_voucher SET stock = stock - 1 WHERE voucher_id = %d" % vid)
    expect("duplicate in SQL", c, ["dup-sql"])

    # a duplicate admission in the stream: the same user queued twice
    c = fresh()
    c.redis.cmd("XADD", H.k_stream(vid), "*", "os",
                "%d 0 %d %d" % (int(time.time()), some[0] + 10**9, some[1]))
    expect("duplicate in the stream", c, ["dup-stream", "stream-entries"])

    # a missing order: admitted and answered, gone from SQL
    c = fresh()
    gone = c.one("SELECT max(id) FROM tb_voucher_order WHERE voucher_id = %d" % vid)[0]
    c.sql("DELETE FROM tb_voucher_order WHERE id = %d" % gone)
    expect("missing order", c, ["admitted-persisted", "answered-persisted", "sql-stock",
                                "stock-agree"])
    # ... and it names exactly which order vanished, in the text and in the JSON report
    jpath = os.path.join(H.tmpdir(), "missing.json")
    rc, out, err = c.audit("--orders", rec, "--json", jpath)
    m = re.search(r"answered success are in neither SQL nor the stream: ([\d ]+)", out)
    check(m is not None, "no list of vanished orders in:\n%s", out)
    eq([int(x) for x in m.group(1).split()], [gone], "vanished orders listed")
    with open(jpath) as f:
        rep = json.load(f)
    eq([v.get("vanished") for v in rep["vouchers"] if v["voucher"] == vid], [[gone]],
       "vanished orders in the JSON report")

    # stock drift, in Redis and in SQL; without --stock the cross-check still sees it
    c = fresh()
    c.redis.cmd("HINCRBY", H.k_voucher(vid), "stock", 1)
    expect("Redis stock drift", c, ["redis-stock", "stock-agree"])
    rc, out, err = c.audit("--voucher", vid)
    eq(rc, 1, "Redis stock drift without --stock: exit\n%s" % out)
    check("stock-agree" in fails(out), "stock-agree not failed without --stock:\n%s", out)
    c = fresh()
    c.sql("UPDATE tb_seckill_voucher SET stock = stock + 5 WHERE voucher_id = %d" % vid)
    expect("SQL stock drift", c, ["sql-stock", "stock-agree"])

    # an order outside the sale window
    c = fresh()
    c.sql("UPDATE tb_voucher_order SET create_time = datetime('%s', '-1 hour') WHERE id = %d"
          % (begin, some[0]))
    expect("order outside the window", c, ["window"])

    # something the writer could not write
    c = fresh()
    c.redis.cmd("XADD", "seckill:dead:{%d}" % vid, "*", "stream", H.k_stream(vid), "reason", "x")
    expect("dead letter", c, ["dead-letters"])


@H.timeout(120)
def test_bench_rerun_names_the_per_phone_code_limit():
    """A rehearsal run again at once asks codes for the same phones; past the per-phone code
    limit bench stops (exit 2) and says which limits refuse and how to go on (--user-base,
    --rate-phone-code 0, --seed-tokens), not only the per-IP one. Other phones then work."""
    r, srv = H.setup(settings={"rate_phone_code": "1/m:1"})
    args = ["--users", 20, "--stock", 5, "--conns", 4]
    rc, out, err = run_tool(bench_args(srv, r, *args))
    check(rc == 0, "first run: exit %d:\n%s\n%s", rc, out, err)
    rc, out, err = run_tool(bench_args(srv, r, *args))
    eq(rc, 2, "exit status of a rerun refused by the per-phone code limit")
    msg = out + err
    H.log(msg[-1500:])
    for hint in ("--rate-phone-code", "--user-base", "--seed-tokens"):
        check(hint in msg, "the refusal does not mention %s:\n%s", hint, msg[-1500:])
    rc, out, err = run_tool(bench_args(srv, r, "--user-base", 1000, *args))
    check(rc == 0, "run with other phones: exit %d:\n%s\n%s", rc, out, err)
    H.finish(srv)
