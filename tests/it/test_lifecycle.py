"""test_lifecycle.py -- an order's lifecycle after the grab (docs/lifecycle.md):
POST /voucher-order/{id}/cancel. An unpaid order becomes status 4 and its unit goes back
on sale -- in Redis at once (src/order/life.lua), in SQL by the order writer applying the
stream's event -- exactly once, whoever asks how often; someone else's order, a paid one,
and an order not yet written to SQL; stream mode (also with stock buckets) and sync mode;
`seckill audit` clean afterwards."""

import sqlite3
import subprocess

import harness as H
from harness import check, eq

# the grabs and cancels of one user in a test come faster than the default limits
FAST = {"rate-user-seckill": "1000/s:1000", "rate-user-lookup": "1000/s:1000"}


def _sql_write(srv, sql, *args):
    """One write of the test's own (the harness's Db reads only)."""
    url = srv.db_url
    if url.startswith(("mysql:", "mariadb:")):
        c = H.mysql_connect(url)
        try:
            c.cursor().execute(sql.replace("?", "%s"), args)
            c.commit()
        finally:
            c.close()
        return
    c = sqlite3.connect(url[len("sqlite:"):] if url.startswith("sqlite:") else url, timeout=10)
    try:
        c.execute(sql, args)
        c.commit()
    finally:
        c.close()


class _RowLock:
    """MariaDB: the voucher's tb_seckill_voucher row held FOR UPDATE -- the writer's
    batch locks it first (the Redis generation's fence) and waits, while the lookups'
    plain reads go on (H.hold_db_lock's LOCK TABLES would stop them too)."""

    def __init__(self, url, vid):
        self.c = H.mysql_connect(url)
        cur = self.c.cursor()
        cur.execute("START TRANSACTION")
        cur.execute("SELECT stock FROM tb_seckill_voucher WHERE voucher_id=%s FOR UPDATE",
                    (vid,))

    def rollback(self):
        self.c.rollback()

    def close(self):
        self.c.close()


def _hold_writer(srv, vid):
    """Keeps the order writer from committing voucher vid's orders until .rollback()."""
    if srv.db_url.startswith(("mysql:", "mariadb:")):
        return _RowLock(srv.db_url, vid)
    return H.hold_db_lock(srv)   # SQLite: BEGIN EXCLUSIVE; WAL readers go on


def _cancel(h, token, oid):
    return h.api("POST", "/voucher-order/%d/cancel" % oid, token=token)


def _status(db, oid):
    return db.scalar("SELECT status FROM tb_voucher_order WHERE id=?", oid)


def _wait_sql(db, oid, status, stock, vid, what):
    """SQL has order oid at status and voucher vid's stock at stock (the writer's work)."""
    H.wait_until(lambda: _status(db, oid) == status and db.stock(vid) == stock, 30,
                 what=what)


def _audit(redis, srv, vid, stock):
    url = redis.url
    p = subprocess.run([H.binary(), "audit", "--redis", url, "--db", srv.db_url,
                        "--wait-drain", "30", "--voucher", str(vid), "--stock", str(stock)],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, env=H.san_env(), timeout=150)
    out = p.stdout.decode("utf-8", "replace")
    eq(p.returncode, 0, "seckill audit exit status:\n%s" % out)
    H.log(out)
    return out


def _grab_until(srv, h, token, vid, what):
    """A grab that the sold-out memory (--soldout-cache-ms) may refuse for a moment after
    a unit came back: tried until it is admitted."""
    got = {}

    def ok():
        st, j = H.seckill(srv, token, vid, h)
        got["j"] = j
        return j.get("success") and isinstance(j.get("data"), int)
    H.wait_until(ok, 10, interval=0.1, what=what)
    return got["j"]["data"]


def test_cancel_returns_the_unit_once():
    r, srv = H.setup(settings=FAST)
    h = srv.http()
    a = H.login(srv, r, "13612345601", h)
    b = H.login(srv, r, "13612345602", h)
    c = H.login(srv, r, "13612345603", h)
    vid = H.create_seckill(srv, stock=2, http=h)
    oa = H.seckill(srv, a, vid, h)[1]["data"]
    ob = H.seckill(srv, b, vid, h)[1]["data"]
    st, j = H.seckill(srv, c, vid, h)
    eq(j.get("errorMsg"), "库存不足", "a third buyer of two units")
    H.wait_drained(srv, r, vid, 30)
    db = srv.db()

    st, j = _cancel(h, b, oa)
    check(st == 200 and not j["success"] and j.get("errorMsg") == "订单不存在",
          "b cancels a's order: %r %r", st, j)
    eq(r.cmd("HGET", H.k_voucher(vid), "stock"), "0", "Redis stock after b's refused cancel")

    st, j = _cancel(h, a, oa)
    check(st == 200 and j["success"] and "data" not in j, "a cancels: %r %r", st, j)
    eq(r.cmd("HGET", H.k_voucher(vid), "stock"), "1", "Redis stock after the cancel")
    st, j = _cancel(h, a, oa)
    check(st == 200 and j["success"], "a cancels again: %r %r", st, j)
    eq(r.cmd("HGET", H.k_voucher(vid), "stock"), "1", "Redis stock after the second cancel")
    _wait_sql(db, oa, 4, 1, vid, "the cancel in SQL")

    st, j = h.api("GET", "/voucher-order/%d" % oa, token=a)
    check(j["success"] and j["data"]["status"] == 4, "a's order after the cancel: %r", j)

    # the unit is on sale again: c buys it, then nobody else can
    oc = _grab_until(srv, h, c, vid, "c buys the returned unit")
    d = H.login(srv, r, "13612345604", h)
    st, j = H.seckill(srv, d, vid, h)
    eq(j.get("errorMsg"), "库存不足", "a fourth buyer")
    H.wait_drained(srv, r, vid, 30)
    eq(_status(db, oc), 1, "c's order in SQL")
    eq(db.stock(vid), 0, "SQL stock once c's order is written")
    eq(db.scalar("SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id=? AND status=4", vid),
       1, "cancelled orders")
    # a cancelled buyer does not buy again (one order per user and voucher)
    st, j = H.seckill(srv, a, vid, h)
    check(not j["success"], "a buys again after cancelling: %r", j)
    _audit(r, srv, vid, 2)
    H.finish(srv)


def test_cancel_paid_order_refused():
    r, srv = H.setup(settings=FAST)
    h = srv.http()
    a = H.login(srv, r, "13612345611", h)
    vid = H.create_seckill(srv, stock=3, http=h)
    oa = H.seckill(srv, a, vid, h)[1]["data"]
    H.wait_drained(srv, r, vid, 30)
    db = srv.db()
    _sql_write(srv, "UPDATE tb_voucher_order SET status=2 WHERE id=?", oa)
    st, j = _cancel(h, a, oa)
    check(st == 200 and not j["success"] and j.get("errorMsg") == "订单已支付，无法取消",
          "cancel of a paid order: %r %r", st, j)
    eq(r.cmd("HGET", H.k_voucher(vid), "stock"), "2", "Redis stock after the refused cancel")
    eq(db.stock(vid), 2, "SQL stock after the refused cancel")
    st, j = _cancel(h, a, 123456789)
    check(not j["success"] and j.get("errorMsg") == "订单不存在", "cancel of no order: %r", j)
    H.finish(srv)


def test_cancel_before_the_writer_wrote_it():
    """The writer cannot commit (SQL locked): the order is only admitted; its cancel is
    decided in Redis all the same, and SQL gets the order and then its cancel, in order."""
    r, srv = H.setup(settings=FAST)
    h = srv.http()
    a = H.login(srv, r, "13612345621", h)
    b = H.login(srv, r, "13612345622", h)
    vid = H.create_seckill(srv, stock=1, http=h)
    db = srv.db()
    lock = _hold_writer(srv, vid)
    try:
        oa = H.seckill(srv, a, vid, h)[1]["data"]
        check(isinstance(oa, int), "a's grab: %r", oa)
        st, j = _cancel(h, b, oa)
        check(not j["success"] and j.get("errorMsg") == "订单不存在",
              "b cancels a's unwritten order: %r", j)
        st, j = _cancel(h, a, oa)
        check(st == 200 and j["success"], "a cancels the unwritten order: %r %r", st, j)
        eq(r.cmd("HGET", H.k_voucher(vid), "stock"), "1", "Redis stock after the cancel")
        ob = _grab_until(srv, h, b, vid, "b buys the returned unit")
        eq(db.order_count(vid), 0, "SQL orders while the writer is held")
    finally:
        lock.rollback()
        lock.close()
    _wait_sql(db, oa, 4, 0, vid, "a's order and its cancel in SQL")
    H.wait_drained(srv, r, vid, 30)
    eq(_status(db, ob), 1, "b's order in SQL")
    _audit(r, srv, vid, 1)
    H.finish(srv)


def test_cancel_in_a_stock_bucket():
    """A voucher sold from 4 stock buckets: the unit goes back to the buyer's home bucket
    (the bucket that admitted the order), and the bucket's writer applies the event."""
    r, srv = H.setup(settings=FAST)
    h = srv.http()
    vid = H.create_seckill(srv, stock=8, http=h, stockBuckets=4)
    toks = [H.login(srv, r, "136123456%02d" % (30 + i), h) for i in range(3)]
    uids = H.user_ids(r, toks)
    oids = [H.seckill(srv, t, vid, h)[1]["data"] for t in toks]
    check(all(isinstance(o, int) for o in oids), "grabs: %r", oids)
    db = srv.db()
    H.wait_until(lambda: db.order_count(vid) == 3, 30, what="3 orders in SQL")
    home = H.bucket_home(uids[0], 4)
    kv = H.bucket_keys(vid, home, 4)["voucher"]
    before = int(r.cmd("HGET", kv, "stock"))
    st, j = _cancel(h, toks[0], oids[0])
    check(j["success"], "cancel in a bucket: %r", j)
    eq(int(r.cmd("HGET", kv, "stock")), before + 1, "the home bucket's stock")
    _wait_sql(db, oids[0], 4, 8 - 2, vid, "the bucket's cancel in SQL")
    H.finish(srv)


def test_cancel_sync_mode():
    r, srv = H.setup(settings=dict(FAST, mode="sync"))
    h = srv.http()
    a = H.login(srv, r, "13612345641", h)
    b = H.login(srv, r, "13612345642", h)
    vid = H.create_seckill(srv, stock=1, http=h)
    oa = H.seckill(srv, a, vid, h)[1]["data"]
    db = srv.db()
    st, j = _cancel(h, b, oa)
    check(not j["success"] and j.get("errorMsg") == "订单不存在", "b cancels a's: %r", j)
    st, j = _cancel(h, a, oa)
    check(j["success"], "a cancels: %r", j)
    st, j = _cancel(h, a, oa)
    check(j["success"], "a cancels again: %r", j)
    eq(_status(db, oa), 4, "a's order in SQL")
    eq(db.stock(vid), 1, "SQL stock after the cancel")
    st, j = H.seckill(srv, b, vid, h)
    check(j["success"], "b buys the returned unit: %r", j)
    eq(db.stock(vid), 0, "SQL stock after b's order")
    H.finish(srv)
