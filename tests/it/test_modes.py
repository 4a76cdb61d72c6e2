"""test_modes.py -- the course's order modes other than the default stream mode.

queue: admission in Redis, orders in an in-process queue. It must sell exactly the stock
       under concurrency like stream mode, and its documented limit -- admitted orders
       that are not yet written die with the process -- is shown, not hidden.
"""

import harness as H
from harness import check, eq

ALLOWED_FAIL = {H.MSG_SOLD_OUT, H.MSG_DUPLICATE}


def _sell_out(mode, users=500, stock=100, attempts=4):
    r, srv = H.setup(settings={"mode": mode})
    tokens = H.login_many(srv, r, users)
    vid = H.create_seckill(srv, stock=stock)
    recs = H.run_sale(srv, vid, tokens, attempts=attempts)
    H.log("%s mode outcomes: %r" % (mode, H.summarize(recs)))
    bad = [x for x in recs if not x.ok and (x.status != 200 or x.msg not in ALLOWED_FAIL)]
    check(not bad, "%d unexpected replies, e.g. %r", len(bad), bad[:5])
    eq(len([x for x in recs if x.ok]), stock, "requests answered success")
    eq(H.wait_drained(srv, r, vid, 90), stock, "orders in SQL after drain")
    H.check_sale_consistency(srv, r, vid, stock, recs, tokens)
    eq(srv.db().stock(vid), 0, "tb_seckill_voucher.stock")
    H.finish(srv)


@H.timeout(300)
def test_queue_mode_sells_out_exactly():
    _sell_out("queue")


@H.timeout(300)
def test_queue_mode_loses_queued_orders_on_kill9():
    """The course's in-process queue: kill -9 while orders wait for SQL, and they are gone
    -- Redis took the stock and recorded the buyers, SQL never hears of the orders."""
    r, srv = H.setup(settings={"mode": "queue"})
    users, stock = 60, 40
    tokens = H.login_many(srv, r, users)
    vid = H.create_seckill(srv, stock=stock)
    lock = H.hold_db_lock(srv)               # the queue's writer cannot commit
    try:
        recs = H.run_sale(srv, vid, tokens, attempts=2)
        eq(len([x for x in recs if x.ok]), stock, "admitted orders")
        srv.kill9()
    finally:
        lock.rollback()
        lock.close()
    eq(int(r.cmd("HLEN", H.k_buyers(vid))), stock, "buyers recorded in Redis")
    eq(r.cmd("XLEN", H.k_stream(vid)), 0, "stream entries (queue mode writes none)")
    # A new instance, in the durable mode, has nothing to recover them from.
    srv2 = H.restart_server(srv)
    eq(srv2.db().order_count(vid), 0, "orders in SQL: every admitted order was lost")
    H.log("queue mode lost %d of %d admitted orders to one kill -9" % (stock, stock))
    H.finish(srv2)


@H.timeout(300)
def test_sync_mode_sells_out_exactly():
    """sync: every request is an SQL transaction under a per-user rlock. Same sale, same
    invariants, checked in SQL alone (Redis holds no orders in this mode)."""
    r, srv = H.setup(settings={"mode": "sync"})
    users, stock, attempts = 300, 100, 4
    tokens = H.login_many(srv, r, users)
    vid = H.create_seckill(srv, stock=stock)
    recs = H.run_sale(srv, vid, tokens, attempts=attempts)
    H.log("sync mode outcomes: %r" % H.summarize(recs))
    bad = [x for x in recs if not x.ok and (x.status != 200 or x.msg not in ALLOWED_FAIL)]
    check(not bad, "%d unexpected replies, e.g. %r", len(bad), bad[:5])
    succ = [x for x in recs if x.ok]
    eq(len(succ), stock, "requests answered success")
    eq(len({x.user for x in succ}), stock, "distinct users answered success")
    db = srv.db()
    rows = db.orders(vid)                       # (order id, user id), already committed
    eq(len(rows), stock, "orders in SQL")
    eq(db.per_user_max(vid), 1, "orders of the busiest user")
    eq({x.j["data"] for x in succ}, {row[0] for row in rows},
       "order ids answered success vs SQL orders")
    eq(db.stock(vid), 0, "tb_seckill_voucher.stock")
    # the per-user locks were all released (nothing left behind in Redis)
    eq(r.cmd("KEYS", "rlock:*order:*}"), [], "lock keys left in Redis")
    H.finish(srv)


@H.timeout(240)
def test_sync_mode_window_and_unknown_voucher():
    import time
    r, srv = H.setup(settings={"mode": "sync"})
    tokens = H.login_many(srv, r, 3)
    now = time.time()
    future = H.create_seckill(srv, stock=5, begin=now + 3600, end=now + 7200)
    past = H.create_seckill(srv, stock=5, begin=now - 7200, end=now - 3600)
    for vid, msg in ((future, H.MSG_NOT_STARTED), (past, H.MSG_ENDED),
                     (999999, H.MSG_NO_VOUCHER)):
        status, j = H.seckill(srv, tokens[0], vid)
        eq((status, j.get("success"), j.get("errorMsg")), (200, False, msg),
           "reply for voucher %d" % vid)
    eq(srv.db().order_count(future) + srv.db().order_count(past), 0, "orders outside the window")
    # Stock buckets split the Redis admission: sync mode refuses them instead of
    # accepting a field that would mean nothing (K = 1 is the plain voucher).
    h = srv.http()
    st, j = h.api("POST", "/voucher/seckill", H.seckill_body(stock=6, stockBuckets=3),
                  admin=srv.admin_token)
    eq(st, 400, "stockBuckets 3 in sync mode: %r" % (j,))
    check("--mode stream" in j.get("errorMsg", "") and "sync" in j["errorMsg"],
          "the refusal says why: %r", j)
    one = H.create_seckill(srv, stock=6, stockBuckets=1, http=h)
    status, j = H.seckill(srv, tokens[1], one)
    check(status == 200 and j.get("success"), "a K = 1 voucher in sync mode: %r", j)
    H.finish(srv)
