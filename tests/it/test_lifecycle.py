"""test_lifecycle.py -- an order's lifecycle after the grab (docs/lifecycle.md):
POST /voucher-order/{id}/cancel and POST /pay/notify. An unpaid order becomes status 4 and its unit goes back
on sale -- in Redis at once (src/order/life.lua), in SQL by the order writer applying the
stream's event -- exactly once, whoever asks how often; someone else's order, a paid one,
and an order not yet written to SQL; stream mode (also with stock buckets) and sync mode;
`seckill audit` clean afterwards."""

import hashlib
import hmac
import json
import os
import subprocess
import time

import harness as H
from harness import check, eq

# the grabs and cancels of one user in a test come faster than the default limits
FAST = {"rate-user-seckill": "1000/s:1000", "rate-user-lookup": "1000/s:1000"}


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
    check(j["success"] and j["data"]["status"] == 4 and "payDeadline" not in j["data"],
          "a's order after the cancel: %r", j)
    st, j = h.api("GET", "/voucher-order/%d" % ob, token=b)
    d = j["data"]
    fmt = "%Y-%m-%dT%H:%M:%S"
    created = time.mktime(time.strptime(d["createTime"][:19], fmt))
    deadline = time.mktime(time.strptime(d["payDeadline"][:19], fmt))
    eq(deadline - created, 900, "b's unpaid order: payDeadline - createTime (--pay-timeout-s)")

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
    H.sql_write(srv, "UPDATE tb_voucher_order SET status=2 WHERE id=?", oa)
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


# ---------------------------------------------------------------- pay

PAY_KEY = "k3y-0f-the-payment-provider-under-test"


def _pay_settings(extra=None):
    path = H.pay_key_file(PAY_KEY)
    d = dict(FAST)
    d["pay-key-file"] = path
    d.update(extra or {})
    return d


def _notify(h, oid, pid, amount, key=PAY_KEY, body=None):
    raw = body if body is not None else json.dumps(
        {"orderId": oid, "paymentId": pid, "amount": amount}).encode()
    sig = hmac.new(key.encode(), raw, hashlib.sha256).hexdigest()
    return h.api("POST", "/pay/notify", body=raw, headers={"x-pay-signature": sig})


def _order_row(db, oid):
    return db.query("SELECT status, pay_time IS NOT NULL, refund_time IS NOT NULL "
                    "FROM tb_voucher_order WHERE id=?", oid)[0]


def test_pay_notify():
    r, srv = H.setup(settings=_pay_settings())
    h = srv.http()
    a = H.login(srv, r, "13612345651", h)
    vid = H.create_seckill(srv, stock=3, http=h)   # payValue 8000 (harness)
    oa = H.seckill(srv, a, vid, h)[1]["data"]
    H.wait_drained(srv, r, vid, 30)
    db = srv.db()
    # refused, nothing changes: a wrong key, no signature, a wrong amount, bad input
    st, j = _notify(h, oa, "P1", 8000, key="not-the-key-of-the-provider")
    check(st == 401 and j["code"] == "BAD_SIGNATURE", "a wrong key: %r %r", st, j)
    st, j = h.api("POST", "/pay/notify", body={"orderId": oa, "paymentId": "P1",
                                               "amount": 8000})
    check(st == 401, "no signature: %r %r", st, j)
    st, j = _notify(h, oa, "P1", 7999)
    check(st == 200 and not j["success"] and j["errorMsg"] == "支付金额不符",
          "a wrong amount: %r %r", st, j)
    st, j = _notify(h, oa, "P1;rm -rf /", 8000)
    check(st == 400, "a bad paymentId: %r %r", st, j)
    st, j = _notify(h, 0, "P1", 8000, body=b"[1,2]")
    check(st == 400, "not an object: %r %r", st, j)
    eq(_order_row(db, oa), (1, 0, 0), "the order after the refused notices")
    # taken once; the same notice again answers the same
    st, j = _notify(h, oa, "P1", 8000)
    check(st == 200 and j["success"] and j["data"] == "PAID", "the payment: %r %r", st, j)
    st, j = _notify(h, oa, "P1", 8000)
    check(st == 200 and j["success"] and j["data"] == "PAID", "the same again: %r %r", st, j)
    H.wait_until(lambda: _order_row(db, oa) == (2, 1, 0), 30, what="status 2 with pay_time")
    st, j = _cancel(h, a, oa)
    check(not j["success"] and j["errorMsg"] == "订单已支付，无法取消", "cancel after pay: %r", j)
    eq(db.stock(vid), 2, "SQL stock of a paid order's voucher")
    _audit(r, srv, vid, 3)
    H.finish(srv)


def test_pay_after_cancel_is_refunded():
    out = os.path.join(H.tmpdir(), "refunds-%d" % os.getpid())
    cmd = 'echo "$SECKILL_ORDER_ID $SECKILL_PAYMENT_ID $SECKILL_AMOUNT" >> %s' % out
    r, srv = H.setup(settings=_pay_settings({"refund-command": cmd}))
    h = srv.http()
    a = H.login(srv, r, "13612345661", h)
    b = H.login(srv, r, "13612345662", h)
    vid = H.create_seckill(srv, stock=2, http=h)
    oa = H.seckill(srv, a, vid, h)[1]["data"]
    ob = H.seckill(srv, b, vid, h)[1]["data"]
    H.wait_drained(srv, r, vid, 30)
    db = srv.db()
    st, j = _cancel(h, a, oa)
    check(j["success"], "a cancels: %r", j)
    st, j = _notify(h, oa, "LATE1", 8000)
    check(st == 200 and j["success"] and j["data"] == "REFUNDED", "a late payment: %r %r", st, j)
    st, j = _notify(h, oa, "LATE1", 8000)
    check(j["success"] and j["data"] == "REFUNDED", "the same late payment again: %r", j)
    # b pays; then a second payment of b's paid order is refunded too, the order stays paid
    st, j = _notify(h, ob, "B1", 8000)
    check(j["data"] == "PAID", "b pays: %r", j)
    st, j = _notify(h, ob, "B2", 8000)
    check(j["data"] == "REFUNDED", "b pays twice: %r", j)

    def lines():
        return open(out).read().split("\n")[:-1] if os.path.exists(out) else []
    H.wait_until(lambda: len(lines()) >= 2, 10, what="two refunds sent")
    eq(sorted(lines()), sorted(["%d LATE1 8000" % oa, "%d B2 8000" % ob]),
       "refunds sent: one per refunded payment")
    H.wait_until(lambda: _order_row(db, oa) == (6, 0, 1) and _order_row(db, ob)[0] == 2, 30,
                 what="a's order refunded (6, refund_time), b's paid")
    eq(db.stock(vid), 1, "SQL stock: a's unit came back with the cancel, once")
    st, j = _cancel(h, a, oa)
    check(j["success"], "cancel of a refunded order (cancelled before): %r", j)
    _audit(r, srv, vid, 2)
    H.finish(srv)


def test_pay_notify_without_key():
    r, srv = H.setup(settings=FAST)
    h = srv.http()
    st, j = _notify(h, 1, "P1", 8000)
    check(st == 503 and j["code"] == "PAY_DISABLED", "no pay key configured: %r %r", st, j)
    H.finish(srv)


# ---------------------------------------------------------------- payment deadlines

def test_unpaid_order_times_out():
    """--pay-timeout-s 2: a's order, unpaid, is cancelled about 2 s after its creation
    (within 2 s of the deadline), its unit sold again; b's, paid in time, stays paid; a's
    payment after the deadline is refunded. With two instances (two writers sweeping the
    same stream) each order is timed out once."""
    out = os.path.join(H.tmpdir(), "refunds-t-%d" % os.getpid())
    cmd = 'echo "$SECKILL_ORDER_ID $SECKILL_PAYMENT_ID" >> %s' % out
    settings = _pay_settings({"pay-timeout-s": "2", "refund-command": cmd})
    r, srv = H.setup(settings=settings)
    srv2 = H.start_server(r, name="second", settings=settings, db_url=srv.db_url)
    h = srv.http()
    a = H.login(srv, r, "13612345671", h)
    b = H.login(srv, r, "13612345672", h)
    c = H.login(srv, r, "13612345673", h)
    vid = H.create_seckill(srv, stock=2, http=h)
    db = srv.db()
    t0 = time.time()
    oa = H.seckill(srv, a, vid, h)[1]["data"]
    ob = H.seckill(srv, b, vid, h)[1]["data"]
    H.wait_until(lambda: db.order_count(vid) == 2, 10, what="both orders in SQL")
    st, j = _notify(h, ob, "PB", 8000)
    check(j["data"] == "PAID", "b pays in time: %r", j)
    db = srv.db()
    H.wait_until(lambda: _status(db, oa) == 4, 10, what="a's unpaid order timed out")
    late = time.time() - t0
    check(late < 2 + 2 + 1, "timed out %.1f s after the grab (deadline 2 s)", late)
    eq(r.cmd("HGET", H.k_voucher(vid), "stock"), "1", "Redis stock: a's unit is back")
    eq(r.cmd("HGET", H.k_voucher(vid), "returned"), "1", "returned once (two sweepers)")
    H.wait_until(lambda: _status(db, ob) == 2, 10, what="b's order paid")
    st, j = _notify(h, oa, "PA-LATE", 8000)
    check(j["data"] == "REFUNDED", "a pays after the deadline: %r", j)
    oc = _grab_until(srv, h, c, vid, "c buys the unit that came back")
    H.wait_until(lambda: os.path.exists(out) and open(out).read() == "%d PA-LATE\n" % oa, 10,
                 what="the late payment refunded")
    H.wait_until(lambda: _status(db, oa) == 6 and db.stock(vid) == 0, 10,
                 what="a's order refunded in SQL, c's unit taken")
    eq(_status(db, oc), 1, "c's order")
    H.finish(srv2)
    _audit(r, srv, vid, 2)
    H.finish(srv)


def test_rebuild_after_cancel():
    """Redis lost everything after a cancel the writer applied: the rebuild from SQL gives
    the voucher its stock without the cancelled order's unit counted as sold, keeps the
    cancelled buyer (no second order) and its `returned`, and the audit is clean."""
    r, srv = H.setup(settings=FAST)
    h = srv.http()
    toks = [H.login(srv, r, "136123456%02d" % (80 + i), h) for i in range(3)]
    vid = H.create_seckill(srv, stock=5, http=h)
    oids = [H.seckill(srv, t, vid, h)[1]["data"] for t in toks]
    st, j = _cancel(h, toks[0], oids[0])
    check(j["success"], "cancel: %r", j)
    db = srv.db()
    _wait_sql(db, oids[0], 4, 3, vid, "the cancel in SQL")
    H.wait_drained(srv, r, vid, 30)
    srv.stop()
    r.cmd("FLUSHALL")
    p = subprocess.run([H.binary(), "redis", "rebuild", "--redis", r.url, "--db", srv.db_url],
                       capture_output=True, env=H.san_env(), timeout=60)
    out = p.stdout.decode() + p.stderr.decode()
    eq(p.returncode, 0, "rebuild exit: " + out)
    eq(r.cmd("HGET", H.k_voucher(vid), "stock"), "3", "Redis stock after the rebuild")
    eq(r.cmd("HGET", H.k_voucher(vid), "returned"), "1", "returned after the rebuild")
    eq(r.cmd("HLEN", H.k_buyers(vid)), 3, "buyers after the rebuild (the cancelled one too)")
    _audit(r, srv, vid, 5)


@H.timeout(180)
def test_embedded_default_makes_a_pay_key():
    """The embedded default without --pay-key-file makes <data-dir>/pay-key (0600) once and
    keeps it across a restart; a notice signed with it is checked (an unknown order is
    not found, a wrong key is refused)."""
    import test_embedded as E
    d = H.subdir("embedded-pay")
    srv, red, child = E._start_embedded(d)
    path = os.path.join(d, "pay-key")
    check(os.path.exists(path), "no %s", path)
    eq(os.stat(path).st_mode & 0o777, 0o600, "mode of pay-key")
    key = open(path).read().strip()
    check(len(key) >= 32, "pay-key %r", key)
    h = srv.http()
    st, j = _notify(h, 123456789, "P1", 8000, key=key)
    check(st == 200 and not j["success"] and j["code"] == "NOT_FOUND", "signed with it: %r %r",
          st, j)
    st, j = _notify(h, 123456789, "P1", 8000)
    eq(st, 401, "signed with another key")
    E._stop_embedded(srv, red, child)
    srv, red, child = E._start_embedded(d)
    eq(open(path).read().strip(), key, "pay-key after a restart")
    E._stop_embedded(srv, red, child)


def test_timeout_backstop_scans_sql():
    """The stream sweep cannot reach the order (its cursor past it, as after a failover to
    a replica whose cursor was ahead): the writer's SQL scan still finds the unpaid order
    past its deadline and times it out, once."""
    settings = _pay_settings({"pay-timeout-s": "2"})
    r, srv = H.setup(settings=settings)
    h = srv.http()
    a = H.login(srv, r, "13612345691", h)
    vid = H.create_seckill(srv, stock=2, http=h)
    oa = H.seckill(srv, a, vid, h)[1]["data"]
    H.wait_drained(srv, r, vid, 30)
    srv.stop()
    eq(r.cmd("HGET", H.k_voucher(vid), "returned"), None, "nothing timed out yet")
    r.cmd("SET", "seckill:paysweep:{%d}" % vid, "99999999999999-0")
    srv = H.restart_server(srv, settings=settings)
    db = srv.db()
    H.wait_until(lambda: _status(db, oa) == 4, 15, what="the lost order timed out by the scan")
    _settled(r, srv, vid, 2, 2, 1)


def _settled(r, srv, vid, initial, stock, returned):
    """Redis's stock and returned units as expected, the stream drained, the audit clean,
    and the server stopped."""
    eq(r.cmd("HGET", H.k_voucher(vid), "stock"), str(stock), "Redis stock")
    eq(r.cmd("HGET", H.k_voucher(vid), "returned"), str(returned), "units returned (once each)")
    H.wait_drained(srv, r, vid, 30)
    _audit(r, srv, vid, initial)
    H.finish(srv)


def test_timeout_costs_no_command_per_order():
    """--pay-timeout-s on: writing orders costs the writer no Redis command for their
    deadlines (no ZADD, no script per order) -- the stream is the due index; before any
    deadline the sweep decides nothing."""
    r, srv = H.setup(settings=_pay_settings({"pay-timeout-s": "900"}))
    h = srv.http()
    toks = [H.login(srv, r, "136123457%02d" % i, h) for i in range(12)]
    vid = H.create_seckill(srv, stock=20, http=h)
    r.cmd("CONFIG", "RESETSTAT")
    oids = [H.seckill(srv, t, vid, h)[1]["data"] for t in toks]
    db = srv.db()
    H.wait_until(lambda: db.order_count(vid) == len(oids), 30, what="the orders in SQL")
    H.wait_drained(srv, r, vid, 30)
    stats = H.commandstats(r)
    H.log("commandstats: %r" % stats)
    # a worker may add the revocation epoch once (src/auth/revoke.h): at most that ZADD
    check(stats.get("zadd", 0) <= 1, "ZADDs while %d orders were written: %r", len(oids),
          stats)
    eq(r.cmd("EXISTS", "seckill:due:{%d}" % vid), 0, "a due-time set of the orders")
    check(stats.get("eval", 0) < len(oids), "a script per order: %r", stats)
    eq(r.cmd("EXISTS", "seckill:ostate:{%d}" % vid), 0, "no decision before any deadline")
    H.finish(srv)


def _sid(entry_id):
    """A stream entry id as a comparable pair."""
    ms, seq = (entry_id or "0-0").split("-")
    return int(ms), int(seq)


def test_timeout_sweep_resumes_after_a_restart():
    """The sweep's cursor (seckill:paysweep:{id}) is in Redis: b's order timed out before
    the stop; a's deadline passes while no instance runs and it is timed out after the
    start, b's unit is not given back twice, and the cursor stands at a's entry."""
    settings = _pay_settings({"pay-timeout-s": "3"})
    r, srv = H.setup(settings=settings)
    h = srv.http()
    a = H.login(srv, r, "13612345781", h)
    b = H.login(srv, r, "13612345782", h)
    vid = H.create_seckill(srv, stock=3, http=h)
    db = srv.db()
    ob = H.seckill(srv, b, vid, h)[1]["data"]
    H.wait_until(lambda: _status(db, ob) == 4, 15, what="b's unpaid order timed out")
    eb = r.cmd("XRANGE", H.k_stream(vid), "-", "+")[0][0]
    check(_sid(r.cmd("GET", "seckill:paysweep:{%d}" % vid)) >= _sid(eb),
          "the cursor at or past b's entry %s", eb)
    oa = H.seckill(srv, a, vid, h)[1]["data"]
    t_a = time.time()
    H.wait_until(lambda: _status(db, oa) == 1, 10, what="a's order in SQL")
    srv.stop()
    H.wait_until(lambda: time.time() > t_a + 4, 10, interval=0.2,
                 what="a's deadline passed while no instance runs")
    eq(r.cmd("HGET", H.k_voucher(vid), "returned"), "1", "only b's unit back so far")
    srv = H.restart_server(srv, settings=settings)
    db = srv.db()
    H.wait_until(lambda: _status(db, oa) == 4, 15, what="a's order timed out after the start")
    ea = [e[0] for e in r.cmd("XRANGE", H.k_stream(vid), "-", "+")
          if e[1][0] == "os"][-1]
    check(_sid(r.cmd("GET", "seckill:paysweep:{%d}" % vid)) >= _sid(ea),
          "the cursor at or past a's entry %s", ea)
    _settled(r, srv, vid, 3, 3, 2)


def test_timeout_in_stock_buckets_on_a_cluster_node():
    """A (one-node) Redis Cluster, a voucher in 4 stock buckets: the node's sub-writer
    sweeps each bucket's stream; every unpaid order is timed out once, its unit back in its
    home bucket, and each swept bucket keeps its own cursor."""
    r = H.start_one_node_cluster()
    srv = H.start_server("redis+cluster://127.0.0.1:%d" % r.port,
                         settings=_pay_settings({"pay-timeout-s": "2"}))
    h = srv.http()
    vid = H.create_seckill(srv, stock=8, http=h, stockBuckets=4)
    toks = [H.login(srv, r, "136123458%02d" % i, h) for i in range(4)]
    uids = H.user_ids(r, toks)
    oids = [H.seckill(srv, t, vid, h)[1]["data"] for t in toks]
    check(all(isinstance(o, int) for o in oids), "grabs: %r", oids)
    db = srv.db()
    H.wait_until(lambda: all(_status(db, o) == 4 for o in oids), 20,
                 what="the 4 unpaid orders timed out")
    homes = sorted(set(H.bucket_home(u, 4) for u in uids))
    keys = [H.bucket_keys(vid, b, 4) for b in range(4)]
    eq(sum(int(r.cmd("HGET", k["voucher"], "returned") or 0) for k in keys), 4,
       "units returned over the buckets")
    for b in homes:
        cur = "seckill:paysweep:{%s}" % H.bucket_tag(vid, b, 4)
        check(r.cmd("GET", cur) is not None, "bucket %d's cursor %s", b, cur)
    H.wait_until(lambda: db.stock(vid) == 8, 20, what="SQL stock back to 8")
    H.finish(srv)
