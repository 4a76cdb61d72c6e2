"""test_cancel_frees.py -- --cancel-frees-buyer (docs/lifecycle.md, "A cancelled buyer"):
off, a buyer whose order was cancelled may not buy that voucher again (不能重复下单); on,
the cancel (or the payment timeout) frees the buyer -- out of Redis's buyers hash, the
cancelled row moved to tb_voucher_order_cancelled -- and the buyer's next order is a new
one. Stock is counted exactly either way: buyers cancelling and buying again in a loop
never oversell (SQL's live orders <= stock, `seckill audit` clean), also through a kill -9
of the server in the middle of a cancel storm. Stream mode, and sync mode's cancel."""

import threading

import harness as H
import test_lifecycle as L
import test_lifecycle_faults as F
from harness import check, eq

FREE = dict(L.FAST, **{"cancel-frees-buyer": "1"})


def _where(db, oid):
    """(table, status) of order oid: the course's table or the cancelled orders' one."""
    for t in ("tb_voucher_order", "tb_voucher_order_cancelled"):
        s = db.scalar("SELECT status FROM %s WHERE id=?" % t, oid)
        if s is not None:
            return t, s
    return None, None


def _live(db, vid):
    return db.scalar("SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id=? "
                     "AND status IN (1, 2, 3)", vid)


def _buy_and_cancel(settings, phone, stock):
    """A server with settings; buyer a (phone) buys one unit of a new voucher and cancels:
    (r, srv, h, a, vid, orderId)."""
    r, srv = H.setup(settings=settings)
    h = srv.http()
    a = H.login(srv, r, phone, h)
    vid = H.create_seckill(srv, stock=stock, http=h)
    oa = H.seckill(srv, a, vid, h)[1]["data"]
    st, j = L._cancel(h, a, oa)
    check(j["success"], "a cancels: %r", j)
    return r, srv, h, a, vid, oa


def test_flag_off_a_cancelled_buyer_may_not_buy_again():
    r, srv, h, a, vid, oa = _buy_and_cancel(L.FAST, "13712345601", 3)
    st, j = H.seckill(srv, a, vid, h)
    eq(j.get("errorMsg"), "不能重复下单", "a buys again after cancelling (flag off)")
    H.wait_drained(srv, r, vid, 30)
    db = srv.db()
    H.wait_until(lambda: _where(db, oa) == ("tb_voucher_order", 4), 30,
                 what="a's order cancelled in the course's table")
    eq(r.cmd("HGET", H.k_buyers(vid), str(H.user_ids(r, [a])[0])), str(oa),
       "a is still a buyer in Redis")
    eq(r.cmd("HGET", H.k_voucher(vid), "freed"), None, "nobody freed")
    L._audit(r, srv, vid, 3)
    H.finish(srv)


def test_flag_on_cancel_then_buy_again():
    """a buys, cancels, buys again: a new order; the first one is status 4 in the side
    table (GET answers it), a late payment of it is refunded there (4 -> 5 -> 6); one order per
    user still holds for live orders (a third grab: 不能重复下单)."""
    r, srv = H.setup(settings=L._pay_settings({"cancel-frees-buyer": "1"}))
    h = srv.http()
    a = H.login(srv, r, "13712345611", h)
    b = H.login(srv, r, "13712345612", h)
    vid = H.create_seckill(srv, stock=3, http=h)
    o1 = H.seckill(srv, a, vid, h)[1]["data"]
    ob = H.seckill(srv, b, vid, h)[1]["data"]
    st, j = L._cancel(h, a, o1)
    check(j["success"], "a cancels: %r", j)
    eq(r.cmd("HGET", H.k_voucher(vid), "freed"), "1", "Redis: freed")
    eq(r.cmd("HGET", H.k_voucher(vid), "returned"), "1", "Redis: returned")
    # in the same stream, behind the cancel: the writer must apply the cancel first
    o2 = L._grab_until(srv, h, a, vid, "a buys again")
    check(o2 != o1, "a new order id: %r %r", o1, o2)
    st, j = H.seckill(srv, a, vid, h)
    eq(j.get("errorMsg"), "不能重复下单", "a third grab of a (one live order per user)")
    H.wait_drained(srv, r, vid, 30)
    db = srv.db()
    H.wait_until(lambda: _where(db, o1) == ("tb_voucher_order_cancelled", 4), 30,
                 what="a's first order moved to the cancelled orders")
    eq(_where(db, o2), ("tb_voucher_order", 1), "a's second order")
    eq(_where(db, ob), ("tb_voucher_order", 1), "b's order")
    eq(db.stock(vid), 1, "SQL stock")
    eq(db.scalar("SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id=?", vid), 2,
       "orders in the course's table")
    st, j = h.api("GET", "/voucher-order/%d" % o1, token=a)
    check(j["success"] and j["data"]["status"] == 4, "GET a's cancelled order: %r", j)
    st, j = h.api("GET", "/voucher-order/of/me", token=a)
    ids = sorted(int(o["id"]) for o in j["data"])
    eq(ids, sorted([o1, o2]), "a's orders (/of/me)")
    st, j = L._cancel(h, a, o1)
    check(j["success"], "the cancelled order cancelled again: %r", j)
    eq(r.cmd("HGET", H.k_voucher(vid), "freed"), "1", "freed once")
    # a late payment of the cancelled order: refunded, 4 -> 5 in the side table, 6 once
    # sent (without --refund-command: logged and marked sent)
    st, j = L._notify(h, o1, "LATE-F", 8000)
    check(j["success"] and j["data"] == "REFUNDED", "a late payment: %r", j)
    H.wait_until(lambda: _where(db, o1) == ("tb_voucher_order_cancelled", 6), 30,
                 what="the cancelled order refunded in the side table")
    st, j = L._notify(h, o2, "PAY-2", 8000)
    check(j["data"] == "PAID", "a pays the second order: %r", j)
    H.wait_until(lambda: _where(db, o2) == ("tb_voucher_order", 2), 30, what="o2 paid")
    L._audit(r, srv, vid, 3)
    # b cancels and does not buy again; then b's order entry is read again (as after a
    # crash between the writer's commit and its ack): the moved order is not written again
    st, j = L._cancel(h, b, ob)
    check(j["success"], "b cancels: %r", j)
    H.wait_until(lambda: _where(db, ob) == ("tb_voucher_order_cancelled", 4), 30,
                 what="b's order moved aside")
    ents = r.cmd("XRANGE", H.k_stream(vid), "-", "+")
    fields = next(f for _, f in ents
                  if f[0] == "os" and str(ob) in f[1].split()[2::2])
    r.cmd("XADD", H.k_stream(vid), "*", *fields)
    H.wait_until(lambda: H.group_settled(r, vid), 30, what="the replayed entry read and acked")
    eq(_where(db, ob), ("tb_voucher_order_cancelled", 4), "b's order after the replay")
    eq(db.scalar("SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id=?", vid), 1,
       "orders in the course's table after the replay")
    eq(db.stock(vid), 2, "SQL stock after the replay")
    H.finish(srv)


@H.timeout(180)
def test_flag_on_rebuy_loop_never_oversells():
    """stock 5, 12 buyers each grabbing, cancelling and grabbing again 6 times at once:
    every admitted order is either cancelled or live, SQL's live orders <= 5, SQL stock +
    live orders = 5, Redis's stock + buyers - returned + freed = 5, audit clean."""
    # no sold-out memory: a unit a cancel gave back is on sale to the next grab at once
    r, srv = H.setup(settings=dict(FREE, **{"soldout-cache-ms": "0"}))
    stock, n, loops = 5, 12, 6
    vid = H.create_seckill(srv, stock=stock)
    toks = H.login_many(srv, r, n, prefix="137", start=50000)
    got, cancelled, errors = [], [], []
    lock = threading.Lock()

    def buyer(tok):
        h = H.Http(srv.port, timeout=10, connect=False)
        try:
            for i in range(loops):
                st, j = H.seckill(srv, tok, vid, h)
                if not j.get("success"):
                    if j.get("errorMsg") not in ("库存不足",):
                        with lock:
                            errors.append(j)
                    continue
                with lock:
                    got.append(j["data"])
                if i == loops - 1:
                    return
                st, c = L._cancel(h, tok, j["data"])
                with lock:
                    (cancelled if c.get("success") else errors).append(
                        j["data"] if c.get("success") else c)
        finally:
            h.close()
    ts = [threading.Thread(target=buyer, args=(t,)) for t in toks]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    check(not errors, "unexpected answers: %r", errors[:5])
    check(len(got) > stock, "the loop sold the units more than once: %d orders", len(got))
    H.wait_drained(srv, r, vid, 60)
    db = srv.db()
    live = len(got) - len(cancelled)
    H.wait_until(lambda: db.scalar("SELECT COUNT(*) FROM tb_voucher_order_cancelled "
                                   "WHERE voucher_id=?", vid) == len(cancelled), 60,
                 what="%d cancels in SQL" % len(cancelled))
    eq(_live(db, vid), live, "live orders in SQL")
    check(live <= stock, "oversold: %d live orders of %d units", live, stock)
    eq(db.stock(vid), stock - live, "SQL stock")
    eq(sorted(o for o, _ in db.query("SELECT id, 1 FROM tb_voucher_order_cancelled "
                                     "WHERE voucher_id=?", vid)), sorted(cancelled),
       "the cancelled orders, each once")
    eq(sorted(o for o, _ in db.query("SELECT id, 1 FROM tb_voucher_order WHERE voucher_id=?",
                                     vid)), sorted(set(got) - set(cancelled)),
       "the live orders (none lost)")
    rs = int(r.cmd("HGET", H.k_voucher(vid), "stock"))
    buyers = int(r.cmd("HLEN", H.k_buyers(vid)))
    ret = int(r.cmd("HGET", H.k_voucher(vid), "returned") or 0)
    freed = int(r.cmd("HGET", H.k_voucher(vid), "freed") or 0)
    eq((ret, freed), (len(cancelled), len(cancelled)), "Redis: returned, freed")
    eq(rs + buyers - ret + freed, stock, "Redis: stock + buyers - returned + freed")
    L._audit(r, srv, vid, stock)
    H.finish(srv)


def test_flag_on_timeout_frees_the_buyer():
    r, srv = H.setup(settings=dict(FREE, **{"pay-timeout-s": "2"}))
    h = srv.http()
    a = H.login(srv, r, "13712345621", h)
    vid = H.create_seckill(srv, stock=1, http=h)
    o1 = H.seckill(srv, a, vid, h)[1]["data"]
    db = srv.db()
    H.wait_until(lambda: _where(db, o1) == ("tb_voucher_order_cancelled", 4), 15,
                 what="a's unpaid order timed out and moved aside")
    eq(r.cmd("HGET", H.k_voucher(vid), "freed"), "1", "Redis: freed by the timeout")
    o2 = L._grab_until(srv, h, a, vid, "a buys again after the timeout")
    check(o2 != o1, "a new order: %r %r", o1, o2)
    H.wait_until(lambda: _where(db, o2)[0] == "tb_voucher_order", 15, what="o2 in SQL")
    L._audit(r, srv, vid, 1)
    H.finish(srv)


def test_flag_on_sync_mode():
    r, srv, h, a, vid, o1 = _buy_and_cancel(dict(FREE, mode="sync"), "13712345631", 1)
    db = srv.db()
    eq(_where(db, o1), ("tb_voucher_order_cancelled", 4), "a's order moved aside")
    eq(db.stock(vid), 1, "SQL stock after the cancel")
    st, j = H.seckill(srv, a, vid, h)
    check(j["success"] and j["data"] != o1, "a buys again: %r", j)
    eq(db.stock(vid), 0, "SQL stock after a's second order")
    st, j = L._cancel(h, a, o1)
    check(j["success"], "the first order cancelled again: %r", j)
    eq(db.stock(vid), 0, "SQL stock: nothing returned twice")
    H.finish(srv)


@H.timeout(240)
def test_flag_on_kill9_server_mid_cancel_storm():
    """kill -9 of the server while 4 threads cancel half of 240 orders (flag on): after the
    restart the cancels are sent again, then the cancelled buyers buy again: each unit came
    back once, every cancel is in the side table once, no order lost, audit clean."""
    # the dead instance's pending events are adopted after --claim-idle-ms (short here)
    settings = dict(FREE, **{"claim-idle-ms": "2000"})
    r, srv = H.setup(settings=settings)
    n, initial = 240, 300
    vid = H.create_seckill(srv, stock=initial)
    pairs = F._sale(srv, r, vid, n, 60000)
    victims = pairs[::2]
    storm = F._Storm(srv.port, victims, nthreads=4)
    H.wait_until(lambda: len(storm.ok) >= len(victims) // 4, 60, interval=0.005,
                 what="a quarter of the cancels answered")
    srv.kill9()
    storm.join()
    H.log("killed after %d cancels answered success" % len(storm.ok))
    check(len(storm.ok) < len(victims), "the storm ended before the kill")
    srv = H.restart_server(srv, settings=settings)
    F._cancel_all(srv, victims, "after the restart")
    again = []
    h = srv.http()
    for tok, _ in victims:
        again.append(L._grab_until(srv, h, tok, vid, "a freed buyer buys again"))
    H.wait_drained(srv, r, vid, 60)
    db = srv.db()
    cancelled = sorted(o for _, o in victims)
    H.wait_until(lambda: sorted(o for o, _ in db.query(
        "SELECT id, status FROM tb_voucher_order_cancelled WHERE voucher_id=?", vid)) ==
        cancelled, 60, what="every cancel moved aside once")
    live = sorted([o for _, o in pairs[1::2]] + again)
    eq(sorted(o for o, _ in db.query("SELECT id, status FROM tb_voucher_order "
                                     "WHERE voucher_id=?", vid)), live, "live orders in SQL")
    check(set(storm.ok) <= set(cancelled), "cancels answered but not cancelled")
    eq(db.stock(vid), initial - len(live), "SQL stock")
    eq(int(r.cmd("HGET", H.k_voucher(vid), "stock")), initial - len(live), "Redis stock")
    eq(int(r.cmd("HGET", H.k_voucher(vid), "returned")), len(cancelled), "returned once each")
    F._audit(r, srv, vid, initial)
    H.finish(srv)
