"""test_refunds.py -- payments in SQL and the refund outbox (docs/lifecycle.md, "Payments in
SQL" and "The refund outbox"): every payment answered has its row in tb_voucher_payment
(paymentId, amount, status 2 taken / 5 to refund / 6 refunded), written with its order's
status change; a duplicate notice is answered from what was decided and makes no second
row. A refund goes out through --refund-command exactly once: the order (or the payment)
is 5 (退款中) until the command exited 0, then 6 with refund_time; a failing command is
retried with back-off until it succeeds, and a refund whose server died (kill -9) before
its command finished is sent after the restart. Sync mode takes payments in one SQL
transaction. With --cancel-frees-buyer a late payment's refund finds its order moved to
tb_voucher_order_cancelled and moves it there. Both SQL backends (the runner's --db)."""

import os
import signal
import threading

import harness as H
from harness import check, eq
from test_lifecycle import (FAST, _audit, _cancel, _grab_until, _hold_writer, _notify,
                            _pay_settings)


def _pay_row(db, pid):
    rows = db.query("SELECT order_id, amount, status, refund_time IS NOT NULL "
                    "FROM tb_voucher_payment WHERE payment_id=?", pid)
    return tuple(rows[0]) if rows else None


def _order(db, oid):
    return tuple(db.query("SELECT status, refund_time IS NOT NULL FROM tb_voucher_order "
                          "WHERE id=?", oid)[0])


def _lines(path):
    return open(path).read().split("\n")[:-1] if os.path.exists(path) else []


def _paths(tag):
    d = H.subdir("refunds-" + tag)
    return (os.path.join(d, "sent.log"), os.path.join(d, "count"), os.path.join(d, "go"),
            os.path.join(d, "pid"))


# what a refund command writes once it succeeds: one line per refund sent
LINE = 'echo "$SECKILL_ORDER_ID $SECKILL_PAYMENT_ID $SECKILL_AMOUNT" >> %s'


def _outbox_empty(r, vid):
    return int(r.cmd("XLEN", "seckill:refunds:{%d}" % vid) or 0) == 0


def _buyers(srv, r, h, vid, phones):
    toks = [H.login(srv, r, p, h) for p in phones]
    oids = [H.seckill(srv, t, vid, h)[1]["data"] for t in toks]
    H.wait_drained(srv, r, vid, 30)
    return toks, oids


def _late_payment(srv, r, phone, pid):
    """A voucher with one buyer, who cancels, then pays: refunded. (vid, orderId)"""
    h = srv.http()
    vid = H.create_seckill(srv, stock=2, http=h)
    (a,), (oa,) = _buyers(srv, r, h, vid, [phone])
    check(_cancel(h, a, oa)[1]["success"], "a cancels")
    st, j = _notify(h, oa, pid, 8000)
    check(j["success"] and j["data"] == "REFUNDED", "a's late payment: %r %r", st, j)
    return vid, oa


def test_payment_rows_and_refund_status():
    """a pays (row 2, once for two notices); b cancels, then pays late: b's order is 5 while
    the refund command waits, 6 with refund_time once it exited 0, its row 5 then 6, and
    the command ran once; a's second payment is refunded with a staying paid."""
    log, _, go, _ = _paths("rows")
    cmd = "while [ ! -e %s ]; do sleep 0.05; done; " % go + LINE % log
    r, srv = H.setup(settings=_pay_settings({"refund-command": cmd}))
    h = srv.http()
    vid = H.create_seckill(srv, stock=3, http=h)
    (a, b), (oa, ob) = _buyers(srv, r, h, vid, ["13612345701", "13612345702"])
    db = srv.db()
    st, j = _notify(h, oa, "PAY-A1", 8000)
    check(j["success"] and j["data"] == "PAID", "a pays: %r %r", st, j)
    st, j = _notify(h, oa, "PAY-A1", 8000)
    check(j["success"] and j["data"] == "PAID", "the same notice again: %r %r", st, j)
    H.wait_until(lambda: _pay_row(db, "PAY-A1") == (oa, 8000, 2, 0), 30,
                 what="a's payment row (order, amount, status 2)")
    eq(db.scalar("SELECT COUNT(*) FROM tb_voucher_payment WHERE order_id=?", oa), 1,
       "payment rows of a's order after a duplicate notice")
    check(_cancel(h, b, ob)[1]["success"], "b cancels")
    st, j = _notify(h, ob, "PAY-B1", 8000)
    check(j["success"] and j["data"] == "REFUNDED", "b's late payment: %r %r", st, j)
    st, j = _notify(h, oa, "PAY-A2", 8000)
    check(j["success"] and j["data"] == "REFUNDED", "a's second payment: %r %r", st, j)
    # the command waits for go: SQL says 退款中 meanwhile
    H.wait_until(lambda: _order(db, ob) == (5, 0) and _pay_row(db, "PAY-B1") == (ob, 8000, 5, 0)
                 and _pay_row(db, "PAY-A2") == (oa, 8000, 5, 0), 30,
                 what="b's order and both refunds at 5 (退款中)")
    H.wait_until(lambda: H.metric(srv, "seckill_refunds_pending") >= 2, 10,
                 what="seckill_refunds_pending counts them")
    eq(_lines(log), [], "refunds sent before go")
    eq(_order(db, oa), (2, 0), "a's order, paid")
    open(go, "w").close()
    H.wait_until(lambda: _order(db, ob) == (6, 1) and _pay_row(db, "PAY-B1")[2:] == (6, 1)
                 and _pay_row(db, "PAY-A2")[2:] == (6, 1), 30,
                 what="both refunds 6 with refund_time, b's order 6")
    H.wait_until(lambda: _outbox_empty(r, vid), 10, what="the outbox acked")
    H.wait_until(lambda: H.metric(srv, "seckill_refunds_pending") == 0, 10,
                 what="nothing pending")
    eq(sorted(_lines(log)), sorted(["%d PAY-B1 8000" % ob, "%d PAY-A2 8000" % oa]),
       "each refund sent exactly once")
    eq(_order(db, oa), (2, 0), "a's order stays paid")
    eq(db.scalar("SELECT COUNT(*) FROM tb_voucher_payment"), 3, "payment rows")
    st, j = _notify(h, ob, "PAY-B1", 8000)
    check(j["success"] and j["data"] == "REFUNDED", "b's late payment again: %r %r", st, j)
    eq(len(_lines(log)), 2, "refunds sent after the notice came again")
    H.finish(srv)


def test_failing_command_retried():
    """The refund command fails twice (exit 1), then succeeds: retried with back-off, the
    refund 6 once it went out, the command run three times and sent once -- not again."""
    log, count, _, _ = _paths("retry")
    cmd = ("n=$(cat %s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %s; "
           "[ $n -ge 3 ] || exit 1; " % (count, count)) + LINE % log
    r, srv = H.setup(settings=_pay_settings({"refund-command": cmd}))
    vid, oa = _late_payment(srv, r, "13612345711", "PAY-R1")
    db = srv.db()
    H.wait_until(lambda: _order(db, oa) == (6, 1), 60, what="the refund sent at the third run")
    H.wait_until(lambda: _outbox_empty(r, vid), 10, what="the outbox acked")
    eq(open(count).read().strip(), "3", "command runs")
    eq(_lines(log), ["%d PAY-R1 8000" % oa], "the refund sent once")
    check(H.metric(srv, "seckill_refunds_failed_total") >= 2, "seckill_refunds_failed_total")
    eq(H.metric(srv, "seckill_refunds_sent_total"), 1, "seckill_refunds_sent_total")
    H.finish(srv)


@H.timeout(180)
def test_kill9_before_the_command_finished():
    """kill -9 of the server while its refund command runs (decided, not sent): after the
    restart the refund goes out, exactly once in the command's log."""
    log, _, go, pidf = _paths("kill9")
    hang = "echo $$ > %s; while [ ! -e %s ]; do sleep 0.05; done; " % (pidf, go) + LINE % log
    settings = _pay_settings({"refund-command": hang, "claim-idle-ms": "1000"})
    r, srv = H.setup(settings=settings)
    vid, oa = _late_payment(srv, r, "13612345721", "PAY-K1")
    db = srv.db()
    H.wait_until(lambda: os.path.exists(pidf) and open(pidf).read().strip(), 30,
                 what="the refund command started")
    srv.kill9()
    os.killpg(int(open(pidf).read().strip()), signal.SIGKILL)   # it never finishes
    eq(_lines(log), [], "sent before the kill")
    eq(_order(db, oa), (5, 0), "a's order at the kill")
    settings["refund-command"] = LINE % log
    srv = H.restart_server(srv, settings=settings)
    H.wait_until(lambda: _order(db, oa) == (6, 1), 60, what="the refund sent after the restart")
    H.wait_until(lambda: _outbox_empty(r, vid), 10, what="the outbox acked")
    eq(_lines(log), ["%d PAY-K1 8000" % oa], "the refund sent exactly once")
    H.finish(srv)


def test_sync_mode_pay():
    """--order-mode sync: a payment is one SQL transaction (1 -> 2 with the payment row);
    the same notice again is answered from the row; a second payment and a payment after a
    cancel are refunded (5, then 6 once the command ran)."""
    log, _, _, _ = _paths("sync")
    r, srv = H.setup(settings=_pay_settings({"mode": "sync", "refund-command": LINE % log}))
    h = srv.http()
    vid = H.create_seckill(srv, stock=3, http=h)
    toks = [H.login(srv, r, p, h) for p in ["13612345731", "13612345732"]]
    (a, b) = toks
    oa, ob = [H.seckill(srv, t, vid, h)[1]["data"] for t in toks]
    db = srv.db()
    st, j = _notify(h, oa, "PAY-S1", 7000)
    check(not j["success"] and j["errorMsg"] == "支付金额不符", "a wrong amount: %r %r", st, j)
    st, j = _notify(h, oa, "PAY-S1", 8000)
    check(st == 200 and j["success"] and j["data"] == "PAID", "a pays: %r %r", st, j)
    eq(db.query("SELECT status, pay_time IS NOT NULL FROM tb_voucher_order WHERE id=?",
                oa)[0], (2, 1), "a's order at once")
    eq(_pay_row(db, "PAY-S1"), (oa, 8000, 2, 0), "a's payment row")
    st, j = _notify(h, oa, "PAY-S1", 8000)
    check(j["success"] and j["data"] == "PAID", "the same notice again: %r %r", st, j)
    st, j = _notify(h, oa, "PAY-S2", 8000)
    check(j["success"] and j["data"] == "REFUNDED", "a pays twice: %r %r", st, j)
    check(_cancel(h, b, ob)[1]["success"], "b cancels")
    st, j = _notify(h, ob, "PAY-S3", 8000)
    check(j["success"] and j["data"] == "REFUNDED", "b's late payment: %r %r", st, j)
    H.wait_until(lambda: len(_lines(log)) >= 2 and _order(db, ob) == (6, 1)
                 and _pay_row(db, "PAY-S2")[2:] == (6, 1), 30, what="both refunds sent")
    eq(sorted(_lines(log)), sorted(["%d PAY-S2 8000" % oa, "%d PAY-S3 8000" % ob]),
       "each refund sent once")
    eq(_order(db, oa), (2, 0), "a's order stays paid")
    eq(db.scalar("SELECT COUNT(*) FROM tb_voucher_payment"), 3, "payment rows")
    eq(db.stock(vid), 2, "SQL stock: b's unit back once")
    H.finish(srv)


def test_refunds_take_no_code_command_slot():
    """Refunds sent do not loosen --code-command-max: with a bound of 1 and one login code
    command running, a second /user/code is refused (503) after two refunds went out."""
    log, _, go, started = _paths("slots")
    code = ('[ "$SECKILL_PHONE" = 13612345743 ] || exit 0; touch %s; '
            'while [ ! -e %s ]; do sleep 0.05; done' % (started, go))
    r, srv = H.setup(settings=_pay_settings({"refund-command": LINE % log,
                                             "code-command": code, "code-command-max": "1"}))
    h = srv.http()
    vid = H.create_seckill(srv, stock=3, http=h)
    (a, b), (oa, ob) = _buyers(srv, r, h, vid, ["13612345741", "13612345742"])
    for tok, oid, pid in ((a, oa, "PAY-C1"), (b, ob, "PAY-C2")):
        check(_cancel(h, tok, oid)[1]["success"], "cancel")
        check(_notify(h, oid, pid, 8000)[1]["data"] == "REFUNDED", "a late payment")
    H.wait_until(lambda: len(_lines(log)) == 2, 30, what="two refunds sent")
    res = {}

    def first():
        res["st"] = srv.http(timeout=30).api("POST", "/user/code?phone=13612345743")[0]
    t = threading.Thread(target=first)
    t.start()
    H.wait_until(lambda: os.path.exists(started), 10, what="the first code command running")
    st, j = srv.http().api("POST", "/user/code?phone=13612345744")
    open(go, "w").close()
    t.join(30)
    eq(st, 503, "a second code command while one runs (--code-command-max 1): %r" % (j,))
    eq(res.get("st"), 200, "the first /user/code")
    H.finish(srv)


def test_refunds_in_stock_buckets_on_a_cluster_node():
    """A (one-node) Redis Cluster, a voucher in 4 stock buckets: each late payment's refund
    waits in its buyer's bucket outbox (seckill:refunds:{bucket tag}) and the node's
    sub-writer sends it once."""
    log, _, _, _ = _paths("cluster")
    r = H.start_one_node_cluster()
    srv = H.start_server("redis+cluster://127.0.0.1:%d" % r.port,
                         settings=_pay_settings({"refund-command": LINE % log}))
    h = srv.http()
    vid = H.create_seckill(srv, stock=8, http=h, stockBuckets=4)
    toks = [H.login(srv, r, "136123457%02d" % (50 + i), h) for i in range(4)]
    oids = [H.seckill(srv, t, vid, h)[1]["data"] for t in toks]
    db = srv.db()
    H.wait_until(lambda: db.order_count(vid) == 4, 20, what="4 orders in SQL")
    for i, (tok, oid) in enumerate(zip(toks, oids)):
        check(_cancel(h, tok, oid)[1]["success"], "cancel %d" % i)
        st, j = _notify(h, oid, "PAY-CL%d" % i, 8000)
        check(j["success"] and j["data"] == "REFUNDED", "late payment %d: %r %r", i, st, j)
    H.wait_until(lambda: all(_order(db, o) == (6, 1) for o in oids), 30,
                 what="the 4 orders refunded (6)")
    eq(sorted(_lines(log)), sorted("%d PAY-CL%d 8000" % (o, i) for i, o in enumerate(oids)),
       "each refund sent once")
    eq([_pay_row(db, "PAY-CL%d" % i) for i in range(4)], [(o, 8000, 6, 1) for o in oids],
       "the payment rows, refunded")
    tags = set(H.bucket_tag(vid, b, 4) for b in range(4))
    eq(sum(int(r.cmd("XLEN", "seckill:refunds:{%s}" % t) or 0) for t in tags), 0,
       "the bucket outboxes acked")
    H.finish(srv)


def test_answer_from_sql_when_redis_lost_it():
    """A payment SQL has (its row) is answered from there: with the answer gone from Redis's
    state hash (a lost Redis, rebuilt), the same notice again is still PAID -- not taken as
    a second payment and refunded -- and nothing new is sent or written."""
    log, _, _, _ = _paths("durable")
    r, srv = H.setup(settings=_pay_settings({"refund-command": LINE % log}))
    h = srv.http()
    vid = H.create_seckill(srv, stock=2, http=h)
    (a,), (oa,) = _buyers(srv, r, h, vid, ["13612345761"])
    db = srv.db()
    check(_notify(h, oa, "PAY-D1", 8000)[1]["data"] == "PAID", "a pays")
    H.wait_until(lambda: _pay_row(db, "PAY-D1") == (oa, 8000, 2, 0), 30,
                 what="a's payment row")
    eq(r.cmd("HDEL", "seckill:ostate:{%d}" % vid, "%d/PAY-D1" % oa), 1,
       "the payment's answer dropped from Redis")
    st, j = _notify(h, oa, "PAY-D1", 8000)
    check(j["success"] and j["data"] == "PAID", "the same notice again: %r %r", st, j)
    eq(int(r.cmd("XLEN", "seckill:refunds:{%d}" % vid) or 0), 0, "refunds decided")
    eq(db.scalar("SELECT COUNT(*) FROM tb_voucher_payment"), 1, "payment rows")
    eq(_lines(log), [], "refunds sent")
    H.finish(srv)


def _aside(db, oid):
    rows = db.query("SELECT status, refund_time IS NOT NULL FROM tb_voucher_order_cancelled "
                    "WHERE id=?", oid)
    return tuple(rows[0]) if rows else None


def test_cancel_frees_buyer_late_payment_refunded_aside():
    """--cancel-frees-buyer: a cancels (the order moves to tb_voucher_order_cancelled), pays
    it late (refunded: GET shows 5 before SQL has it), and buys again. The refund is 5 there and in its payment row while
    the command waits, 6 with refund_time in both once it ran, sent once; a's new order is
    live in the course's table and the audit is clean."""
    log, _, go, _ = _paths("free")
    cmd = "while [ ! -e %s ]; do sleep 0.05; done; " % go + LINE % log
    r, srv = H.setup(settings=_pay_settings({"refund-command": cmd,
                                             "cancel-frees-buyer": "1"}))
    h = srv.http()
    vid = H.create_seckill(srv, stock=2, http=h)
    (a,), (o1,) = _buyers(srv, r, h, vid, ["13612345771"])
    db = srv.db()
    hold = _hold_writer(srv, vid)
    try:
        check(_cancel(h, a, o1)[1]["success"], "a cancels")
        st, j = _notify(h, o1, "PAY-F1", 8000)
        check(j["success"] and j["data"] == "REFUNDED", "a's late payment: %r %r", st, j)
        # Redis decided, SQL has not applied it: the reads show 退款中 (5), not refunded
        st, j = h.api("GET", "/voucher-order/%d" % o1, token=a)
        eq(j["data"]["status"], 5, "GET of the refunded order before SQL has it: %r" % (j,))
        o2 = _grab_until(srv, h, a, vid, "a buys again")
    finally:
        hold.rollback()
        hold.close()
    check(o2 != o1, "a new order: %r %r", o1, o2)
    H.wait_until(lambda: _aside(db, o1) == (5, 0) and _pay_row(db, "PAY-F1") == (o1, 8000, 5, 0),
                 30, what="the order aside and its payment row at 5 (退款中)")
    eq(db.scalar("SELECT COUNT(*) FROM tb_voucher_order WHERE id=?", o1), 0,
       "the first order in the course's table")
    open(go, "w").close()
    H.wait_until(lambda: _aside(db, o1) == (6, 1) and _pay_row(db, "PAY-F1") == (o1, 8000, 6, 1),
                 30, what="the refund sent: the order aside and the payment row 6")
    H.wait_until(lambda: _outbox_empty(r, vid), 10, what="the outbox acked")
    eq(_lines(log), ["%d PAY-F1 8000" % o1], "the refund sent once")
    H.wait_until(lambda: db.scalar("SELECT status FROM tb_voucher_order WHERE id=?", o2) == 1,
                 30, what="a's new order in the course's table")
    check(_notify(h, o2, "PAY-F2", 8000)[1]["data"] == "PAID", "a pays the new order")
    H.wait_until(lambda: _pay_row(db, "PAY-F2") == (o2, 8000, 2, 0), 30,
                 what="the new order's payment row")
    _audit(r, srv, vid, 2)
    H.finish(srv)
