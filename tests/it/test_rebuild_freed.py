"""test_rebuild_freed.py -- a rebuild from SQL of a sale run with --cancel-frees-buyer
(docs/lifecycle.md "After Redis lost the voucher's keys", src/rebuild/rebuild_life.h): the
orders moved aside to tb_voucher_order_cancelled, and those a surviving stream's `free 1`
events freed, come back in the state hash and in `returned` and `freed`, not as buyers. A
freed buyer may buy again after the rebuild, a buyer who bought again may not buy a third
time, a cancel of the freed order answers as before the loss, `seckill audit` is clean, and
the sale board's unpaid and sold figures equal SQL's."""

import json
import os
import subprocess

import harness as H
import test_lifecycle as L
import test_rebuild_life as RL
from harness import check, eq
from test_board import BROWSER_DIR, _browser_tools
from test_cancel_frees import _where
from test_room_board import board_sales

SETTINGS = L._pay_settings({"cancel-frees-buyer": "1"})
STOCK = 6


def _board_matches_sql(srv, db, vid):
    """The board's unpaid, and its units sold as the page counts them (web/board.js: the
    buyers plus the freed orders, less the returned ones), equal SQL's unpaid and live
    orders."""
    s = board_sales(srv)[vid]
    life = s["life"]
    unpaid = db.scalar("SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id=? "
                       "AND status = 1", vid)
    live = db.scalar("SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id=? "
                     "AND status IN (1, 2, 3)", vid)
    sold = s["buyers"] + life.get("freed", 0) - life["returned"]
    eq((life["unpaid"], sold), (unpaid, live), "board unpaid, sold vs SQL: %r" % s)


def _page_matches_sql(srv, db, vid):
    """The same in the page itself (tests/browser/board_life.mjs, chromium): its "sold /
    initial" column and its unpaid figure. Once, on SQLite: the page does not see the
    backend."""
    if not srv.db_url.startswith("sqlite"):
        return
    node, chromium = _browser_tools()
    env = dict(os.environ, BOARD_URL="http://127.0.0.1:%d" % srv.port,
               ADMIN_TOKEN=srv.admin_token, SALE=str(vid),
               OUT_DIR=os.path.join(H.ROOT, "build", "browser"), CHROMIUM=chromium)
    p = subprocess.run([node, os.path.join(BROWSER_DIR, "board_life.mjs")], env=env,
                       capture_output=True, text=True, timeout=120, cwd=BROWSER_DIR)
    check(p.returncode == 0, "board_life.mjs failed (exit %d):\n%s\n%s", p.returncode,
          p.stdout[-3000:], p.stderr[-3000:])
    found = json.loads(p.stdout.strip().splitlines()[-1])
    live = db.scalar("SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id=? "
                     "AND status IN (1, 2, 3)", vid)
    unpaid = db.scalar("SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id=? "
                       "AND status = 1", vid)
    eq((found["errors"], found["sold"], found["parts"]["unpaid"]),
       ([], "%d / %d" % (live, STOCK), "%d unpaid" % unpaid), "the page: %r" % found)


def _freed_state(r, vid):
    v = r.cmd("HMGET", H.k_voucher(vid), "stock", "returned", "freed")
    return [int(x) if x is not None else None for x in v]


def _tokens(srv, r, phones, h):
    return [H.login(srv, r, p, h) for p in phones]


def test_rebuild_keeps_freed_buyers_free():
    """a buys, cancels, buys again; b buys and cancels (both freed); c pays; d is unpaid.
    The voucher hash, buyers and states are lost with the stream kept, then (b freed a
    second time) everything is lost (FLUSHALL): after each rebuild b is no buyer and buys
    again, a may not buy a third time, the freed orders' cancels and payments answer as
    before, `returned` and `freed` are as before the loss, the board matches SQL and the
    audit is clean."""
    phones = ["137400000%02d" % i for i in range(4)]
    r, srv = H.setup(settings=SETTINGS)
    h = srv.http()
    a, b, c, d = _tokens(srv, r, phones, h)
    vid = H.create_seckill(srv, stock=STOCK, http=h)
    oa1, ob1, oc, od = [H.seckill(srv, t, vid, h)[1]["data"] for t in (a, b, c, d)]
    check(all(isinstance(o, int) for o in (oa1, ob1, oc, od)), "grabs")
    check(L._cancel(h, a, oa1)[1]["success"], "a cancels")
    check(L._cancel(h, b, ob1)[1]["success"], "b cancels")
    oa2 = L._grab_until(srv, h, a, vid, "a buys again")
    db = srv.db()
    H.wait_drained(srv, r, vid, 30)   # a payment reads its order from SQL
    eq(L._notify(h, oc, "PC", 8000)[1]["data"], "PAID", "c pays")
    H.wait_until(lambda: _where(db, oa1)[0] == _where(db, ob1)[0] ==
                 "tb_voucher_order_cancelled", 30, what="the freed orders moved aside")
    H.wait_until(lambda: L._status(db, oc) == 2, 30, what="c paid in SQL")
    _board_matches_sql(srv, db, vid)
    before = _freed_state(r, vid)
    eq(before, [STOCK - 3, 2, 2], "stock, returned, freed before the loss")

    # 1. the voucher hash, buyers and states lost, the stream kept: the stream still holds
    # the freed orders' entries (b's only order among them)
    srv.stop()
    r.cmd("DEL", H.k_voucher(vid), H.k_buyers(vid), "seckill:ostate:{%d}" % vid)
    RL._rebuild(r, srv)
    eq(_freed_state(r, vid), before, "stock, returned, freed after the rebuild (stream kept)")
    uid = dict(zip("abcd", H.user_ids(r, [a, b, c, d])))
    eq(r.cmd("HGET", H.k_buyers(vid), str(uid["b"])), None, "b (freed) is no buyer")
    eq(r.cmd("HGET", H.k_buyers(vid), str(uid["a"])), str(oa2), "a's buyer order")
    srv = H.restart_server(srv, settings=SETTINGS)
    h = srv.http()
    _board_matches_sql(srv, db, vid)
    eq(H.seckill(srv, a, vid, h)[1].get("errorMsg"), "不能重复下单", "a a third time")
    check(L._cancel(h, a, oa1)[1]["success"], "a's freed order cancelled again")
    ob2 = L._grab_until(srv, h, b, vid, "b buys again after the rebuild")
    H.wait_drained(srv, r, vid, 30)
    _board_matches_sql(srv, db, vid)
    L._audit(r, srv, vid, STOCK)

    # 2. b cancels again (freed a second time), then Redis loses everything
    check(L._cancel(h, b, ob2)[1]["success"], "b cancels the second order")
    H.wait_drained(srv, r, vid, 30)
    H.wait_until(lambda: _where(db, ob2)[0] == "tb_voucher_order_cancelled", 30,
                 what="b's second order moved aside")
    before = _freed_state(r, vid)
    eq(before, [STOCK - 3, 3, 3], "stock, returned, freed before FLUSHALL")
    srv.stop()
    r.cmd("FLUSHALL")
    RL._rebuild(r, srv)
    eq(_freed_state(r, vid), before, "stock, returned, freed after the rebuild (FLUSHALL)")
    _, st = RL._life(r, vid)
    eq({o: st.get(o) for o in (oa1, ob1, ob2, oc, oa2, od)},
       {oa1: "c", ob1: "c", ob2: "c", oc: "p", oa2: None, od: None}, "order states")
    srv = H.restart_server(srv, settings=SETTINGS)
    h = srv.http()
    a, b, c, d = _tokens(srv, r, phones, h)   # FLUSHALL took them
    _board_matches_sql(srv, db, vid)
    check(L._cancel(h, b, ob1)[1]["success"], "b's first order cancelled again")
    check(L._cancel(h, b, ob2)[1]["success"], "b's second order cancelled again")
    eq(L._notify(h, ob2, "PB", 8000)[1]["data"], "REFUNDED", "a payment of b's freed order")
    eq(H.seckill(srv, a, vid, h)[1].get("errorMsg"), "不能重复下单", "a after FLUSHALL")
    L._grab_until(srv, h, b, vid, "b buys a third time")
    H.wait_drained(srv, r, vid, 30)
    H.wait_until(lambda: _where(db, ob2) == ("tb_voucher_order_cancelled", 6), 30,
                 what="b's refund in SQL")
    _board_matches_sql(srv, db, vid)
    eq(db.stock(vid), STOCK - 4, "SQL stock")
    _page_matches_sql(srv, db, vid)
    L._audit(r, srv, vid, STOCK)
    H.finish(srv)


def test_lost_bucket_beside_freed_buyers():
    """Stock buckets (K = 2): a buyer of each bucket cancels and is freed; bucket 0's keys
    are lost, bucket 1 kept. The kept bucket accounts for its freed buyer's unit in its
    stock (stock + buyers - returned + freed), so the lost bucket gets back exactly its own
    stock, its freed buyer (from the side table) is no buyer and buys again, and the audit
    is clean."""
    import test_buckets as B
    r, srv = H.setup(settings=dict(L.FAST, **{"cancel-frees-buyer": "1"}))
    k, stock = 2, 6
    vid = H.create_seckill(srv, stock=stock, stockBuckets=k)
    uids = B.users_with_home(k, 0, 2) + B.users_with_home(k, 1, 2)
    toks = B.tokens_for(srv, uids)
    h = srv.http()
    oids = [H.seckill(srv, t, vid, h)[1]["data"] for t in toks]   # each in its home bucket
    check(all(isinstance(o, int) for o in oids), "grabs: %r", oids)
    B.wait_bucket_drain(srv, r, vid, k, len(uids))
    db = srv.db()
    for i in (0, 2):   # uids[0] is bucket 0's, uids[2] bucket 1's
        oid = oids[i]
        check(L._cancel(h, toks[i], oid)[1]["success"], "cancel of user %d", uids[i])
        H.wait_until(lambda: _where(db, oid)[0] == "tb_voucher_order_cancelled", 30,
                     what="user %d's order moved aside" % uids[i])
    before = B.bucket_stock(r, vid, k)
    eq(sum(before), stock - 2, "buckets' stock before the loss")
    kk = B.keys(vid, 0, k)
    r.cmd("DEL", kk["voucher"], kk["buyers"], kk["stream"],
          "seckill:ostate:{%s}" % H.bucket_tag(vid, 0, k))
    H.wait_until(lambda: r.cmd("HGET", kk["voucher"], "stock") is not None, 15,
                 what="bucket 0 rebuilt")
    eq(B.bucket_stock(r, vid, k), before, "buckets' stock after bucket 0 was rebuilt")
    eq([r.cmd("HGET", kk["voucher"], f) for f in ("returned", "freed")], ["1", "1"],
       "bucket 0's returned, freed")
    check(uids[0] not in B.bucket_buyers(r, vid, k), "bucket 0's freed buyer is no buyer")
    L._grab_until(srv, h, toks[0], vid, "bucket 0's freed buyer buys again")
    B.audit_clean(r, srv, vid, stock)
    H.finish(srv)


def test_rebuild_takes_free_events_sql_lacks():
    """a's cancel frees a, and a buys again, while the writer cannot commit (SQL has a's
    first order at 1, neither the move nor the new order); the server is killed, the
    voucher hash, buyers and states lost, the stream kept: the rebuild takes the `free 1`
    event from the stream -- a's buyer order is the new one, the first is cancelled and
    freed -- and once the writer caught up the audit is clean and a may not buy again."""
    settings = dict(L.FAST, **{"cancel-frees-buyer": "1", "claim-idle-ms": "500"})
    r, srv = H.setup(settings=settings)
    h = srv.http()
    a, b = _tokens(srv, r, ["13741000001", "13741000002"], h)
    vid = H.create_seckill(srv, stock=4, http=h)
    oa1, _ = [H.seckill(srv, t, vid, h)[1]["data"] for t in (a, b)]
    H.wait_drained(srv, r, vid, 30)
    lock = L._hold_writer(srv, vid)
    try:
        check(L._cancel(h, a, oa1)[1]["success"], "a cancels")
        oa2 = L._grab_until(srv, h, a, vid, "a buys again")
        srv.kill9()
        RL._end_sessions(srv, lock)
    finally:
        lock.rollback()
        lock.close()
    db = srv.db()
    eq((_where(db, oa1), _where(db, oa2)), (("tb_voucher_order", 1), (None, None)),
       "SQL before the writer caught up")
    r.cmd("DEL", H.k_voucher(vid), H.k_buyers(vid), "seckill:ostate:{%d}" % vid)
    RL._rebuild(r, srv)
    ua = H.user_ids(r, [a])[0]
    eq(r.cmd("HGET", H.k_buyers(vid), str(ua)), str(oa2), "a's buyer order: the new one")
    eq(_freed_state(r, vid), [2, 1, 1], "stock, returned, freed")
    srv = H.restart_server(srv, settings=settings)
    h = srv.http()
    H.wait_until(lambda: _where(db, oa1) == ("tb_voucher_order_cancelled", 4) and
                 _where(db, oa2) == ("tb_voucher_order", 1), 30, what="the writer caught up")
    eq(H.seckill(srv, a, vid, h)[1].get("errorMsg"), "不能重复下单", "a a third time")
    check(L._cancel(h, a, oa1)[1]["success"], "a's first order cancelled again")
    _board_matches_sql(srv, db, vid)
    L._audit(r, srv, vid, 4)
    H.finish(srv)
