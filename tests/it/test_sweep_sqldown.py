"""test_sweep_sqldown.py -- payment deadlines are not held back by a database outage
(docs/lifecycle.md "Payment timeout"; src/writer/writer.c sql_wait): while the order writer
retries a batch of orders that SQL does not take, it still sweeps the streams' deadlines in
its waits -- the decision is Redis's, its `t` event waits in the stream for SQL.

SQL is made unavailable to the writer by an exclusive lock on the SQLite file (its
commits wait on it, WAL readers go on); an order admitted meanwhile puts the writer into
its retries. An order that passes its deadline inside the outage is timed out in Redis
within 2 s of it, its unit sells again to another buyer before SQL is back, and once the
lock goes SQL gets the cancel once: the audit is clean.

The SQL scan's gap after a rebuild (src/writer/writer_life.c scan_rebuilt): an order
timed out in Redis while SQL was locked, its event then lost with Redis (FLUSHALL) after
the scan's cursor had passed it, comes back unpaid from the rebuild; the rebuild's mark
sends the scan back to SQL's first order, and the order is timed out again -- once."""

import time

import harness as H
import test_lifecycle as L
from harness import check, eq

DB_BACKENDS = ("sqlite",)   # the lock is SQLite's; test_lifecycle_sqldown.py stops MariaDB
TIMEOUT_S = 3


@H.timeout(90)
@H.serial   # timed out within 2 s of its deadline
def test_deadline_decided_while_sql_is_down():
    settings = L._pay_settings({"pay-timeout-s": str(TIMEOUT_S), "sql-timeout-ms": "500",
                                "claim-idle-ms": "500"})
    r, srv = H.setup(settings=settings)
    h = srv.http()
    a, b, c = (H.login(srv, r, "136400000%02d" % i, h) for i in range(3))
    vid = H.create_seckill(srv, stock=2, http=h)
    oa = H.seckill(srv, a, vid, h)[1]["data"]
    check(isinstance(oa, int), "a's grab: %r", oa)
    H.wait_drained(srv, r, vid, 30)
    # a's deadline: its entry's millisecond (Redis's clock, the sweep's index) + the timeout
    first = r.cmd("XRANGE", H.k_stream(vid), "-", "+", "COUNT", "1")[0][0]
    due = int(first.split("-")[0]) / 1000.0 + TIMEOUT_S
    db = srv.db()
    lock = H.hold_db_lock(srv)
    try:
        oc = H.seckill(srv, c, vid, h)[1]["data"]   # the writer's batch SQL will not take
        check(isinstance(oc, int), "c's grab: %r", oc)
        eq(H.seckill(srv, b, vid, h)[1].get("errorMsg"), "库存不足", "b before a's deadline")
        check(time.time() < due - 1, "the outage began %.1f s before a's deadline, not 1 s",
              due - time.time())
        ostate = "seckill:ostate:{%d}" % vid
        H.wait_until(lambda: (r.cmd("HGET", ostate, str(oa)) or "").startswith("t"),
                     due + 2 - time.time(), interval=0.05,
                     what="a timed out in Redis within 2 s of its deadline, SQL locked")
        H.log("a timed out %.2f s after its deadline" % (time.time() - due))
        ob = L._grab_until(srv, h, b, vid, "b buying a's unit while SQL is locked")
        eq(db.order_count(vid), 1, "orders in SQL during the outage (the writer held)")
        eq(L._status(db, oa), 1, "a in SQL during the outage")
    finally:
        lock.rollback()
        lock.close()
    want = {oa: 4, ob: 1, oc: 1}
    H.wait_until(lambda: {o: L._status(db, o) for o in want} == want, 30,
                 what="SQL: a cancelled, b and c unpaid")
    H.wait_drained(srv, r, vid, 30)
    eq(db.stock(vid), 0, "SQL stock (a's unit back once, sold to b)")
    v = r.cmd("HMGET", H.k_voucher(vid), "stock", "returned", "timedout")
    eq([int(x) for x in v], [0, 1, 1], "Redis stock, returned, timedout")
    L._audit(r, srv, vid, 2)
    H.finish(srv)


ORDERID_EPOCH = 1640995200   # src/sale/orderid.h: order ids begin with their second since


@H.timeout(90)
def test_scan_reads_again_after_a_rebuild():
    settings = L._pay_settings({"pay-timeout-s": "2", "sql-timeout-ms": "500",
                                "claim-idle-ms": "500"})
    r, srv = H.setup(settings=settings)
    h = srv.http()
    a = H.login(srv, r, "13640000100", h)
    vid = H.create_seckill(srv, stock=2, http=h)
    oa = H.seckill(srv, a, vid, h)[1]["data"]
    check(isinstance(oa, int), "a's grab: %r", oa)
    H.wait_drained(srv, r, vid, 30)
    db = srv.db()
    lock = H.hold_db_lock(srv)
    try:
        H.wait_until(lambda: (r.cmd("HGET", "seckill:ostate:{%d}" % vid, str(oa)) or "")
                     .startswith("t"), 10, interval=0.05, what="a timed out in Redis")
        # The scan (every second at this timeout) moves its cursor to the second
        # now - timeout - 1 - 2 - the SQL deadline's whole seconds: past a's once that is
        # after a's creation second (its id's); a's status is 1 there, so each pass before
        # that read it and got the script's "already". Its cursor is a function of the
        # clock alone: this waits for the clock.
        past = (oa >> 32) + ORDERID_EPOCH + 2 + 1 + 2 + 2
        H.wait_until(lambda: time.time() >= past, 15, interval=0.1,
                     what="the scan's cursor past a")
        eq(H.metric(srv, "seckill_writer_streams_live"), 1, "streams the writer reads")
        r.cmd("FLUSHALL")   # a's state and its t event, not yet in SQL, lost
        # the writer's loop found the registry empty: any event it was applying is done
        H.wait_until(lambda: H.metric(srv, "seckill_writer_streams_live") == 0, 10,
                     what="the writer's loop after the FLUSHALL")
        eq(L._status(db, oa), 1, "a in SQL (its event lost before SQL had it)")
    finally:
        lock.rollback()
        lock.close()
    H.wait_until(lambda: r.cmd("HGET", H.k_voucher(vid), "stock") is not None, 15,
                 what="the voucher rebuilt from SQL")
    H.wait_until(lambda: L._status(db, oa) == 4, 10,
                 what="a timed out again after the rebuild (SQL 4)")
    check(srv.log_lines("SQL scan: a voucher was rebuilt from SQL"), "the scan told of it")
    H.wait_drained(srv, r, vid, 30)
    v = r.cmd("HMGET", H.k_voucher(vid), "stock", "returned", "timedout")
    eq([int(x) for x in v], [2, 1, 1], "Redis stock, returned, timedout")
    eq(db.stock(vid), 2, "SQL stock (a's unit back once)")
    L._audit(r, srv, vid, 2)
    H.finish(srv)
