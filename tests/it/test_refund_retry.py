"""test_refund_retry.py -- the refunds' leftovers of issue #27 (docs/lifecycle.md):

- sync mode's refunds (payment rows at 5 in SQL) are sent by the order writer under a lease
  per row (tb_refund_lease), retried with back-off until --refund-command exits 0, then 6
  with refund_time -- and with two instances on one database never by both at once;
- GET /voucher-order/{id} and /of/me show refundTime (SQL's refund_time) once refunded;
- a rebuild of Redis from SQL brings back the payments' answers (<orderId>/<paymentId> in
  the state hash) and puts the refunds still at 5 back in their bucket's outbox.

Both SQL backends (the runner's --db)."""

import os
import time

import harness as H
from harness import check, eq
from test_backstop import _buy, _get, _of_me
from test_lifecycle import _cancel, _notify, _pay_settings
from test_refunds import _lines, _order, _pay_row


def _paths(tag):
    d = H.subdir("refund-retry-" + tag)
    return {k: os.path.join(d, k) for k in ("runs", "sent", "lock", "overlap", "go")}


def _flaky(p, fails, hold_s=0.0):
    """A refund command that logs each run (runs), fails its first `fails` runs (exit 1)
    and logs the refund it sent (sent). A run that finds another one of it running (the
    lock directory exists) logs it in overlap."""
    return ('echo "$SECKILL_PAYMENT_ID" >> {runs}; '
            'mkdir {lock} 2>/dev/null || {{ echo "$SECKILL_PAYMENT_ID" >> {overlap}; exit 1; }}; '
            'sleep {hold}; n=$(wc -l < {runs}); rmdir {lock}; '
            '[ "$n" -gt {fails} ] || exit 1; '
            'echo "$SECKILL_ORDER_ID $SECKILL_PAYMENT_ID $SECKILL_AMOUNT" >> {sent}'
            ).format(fails=fails, hold=hold_s, **p)


def _late_payment_sync(srv, r, h, vid, phone, pid):
    """A buyer of vid (sync mode) who cancels, then pays: REFUNDED. The order id."""
    tok = H.login(srv, r, phone, h)
    st, j = H.seckill(srv, tok, vid, h)
    check(j.get("success"), "the grab: %r %r", st, j)
    oid = j["data"]
    check(_cancel(h, tok, oid)[1]["success"], "the cancel")
    st, j = _notify(h, oid, pid, 8000)
    check(j["success"] and j["data"] == "REFUNDED", "the late payment: %r %r", st, j)
    return tok, oid


def _sent_and_stays(srv, db, p, oid, pid, runs):
    """The refund reaches 6 (row and order, refund_time), the command ran `runs` times,
    sent it once, and runs no more after it succeeded (two SQL passes later)."""
    H.wait_until(lambda: _pay_row(db, pid) == (oid, 8000, 6, 1) and
                 _order(db, oid) == (6, 1), 60,
                 what="payment %s and its order refunded (6, refund_time)" % pid)
    eq(_lines(p["sent"]), ["%d %s 8000" % (oid, pid)], "the refund sent once")
    eq(_lines(p["runs"]), [pid] * runs, "the command's runs until it succeeded")
    time.sleep(2.5)   # nothing to await: no run may come (the pass looks every second)
    eq(_lines(p["runs"]), [pid] * runs, "the command's runs after it succeeded")
    eq(db.scalar("SELECT tries FROM tb_refund_lease WHERE payment_id=?", pid), runs,
       "the lease's tries")


@H.timeout(120)
def test_sync_refund_retried_until_sent():
    """--order-mode sync: a late payment's refund whose command fails twice is tried again
    with back-off; the third run sends it, the row and the order go 5 -> 6 with
    refund_time, and the command never runs for it again."""
    p = _paths("sync")
    r, srv = H.setup(settings=_pay_settings({"mode": "sync", "refund-command": _flaky(p, 2)}))
    h = srv.http()
    vid = H.create_seckill(srv, stock=2, http=h)
    db = srv.db()
    _, oid = _late_payment_sync(srv, r, h, vid, "13612346001", "PAY-SR1")
    H.wait_until(lambda: len(_lines(p["runs"])) >= 1, 30, what="the first run")
    eq(_pay_row(db, "PAY-SR1")[2], 5, "the payment after a failed run (退款中)")
    _sent_and_stays(srv, db, p, oid, "PAY-SR1", 3)
    eq(_lines(p["overlap"]), [], "runs that overlapped")
    check(H.metric(srv, "seckill_refunds_failed_total") >= 2, "seckill_refunds_failed_total")
    eq(H.metric(srv, "seckill_refunds_sent_total"), 1, "seckill_refunds_sent_total")
    H.finish(srv)


@H.timeout(150)
def test_sync_refund_one_sender_of_two_instances():
    """Two sync-mode instances on one database and Redis, a refund command that takes
    0.5 s and fails three times: each run holds the row's lease, so the runs never
    overlap, and the refund is sent once, by one of them."""
    p = _paths("two")
    settings = _pay_settings({"mode": "sync", "refund-command": _flaky(p, 3, 0.5)})
    r, srv = H.setup(settings=settings)
    other = H.start_server(r, settings=settings, db_path=srv.db_path,
                           data_dir=H.subdir("seckill-data-2"), name="second")
    h = srv.http()
    vid = H.create_seckill(srv, stock=2, http=h)
    db = srv.db()
    _, oid = _late_payment_sync(srv, r, h, vid, "13612346011", "PAY-SR2")
    _sent_and_stays(srv, db, p, oid, "PAY-SR2", 4)
    eq(_lines(p["overlap"]), [], "runs that overlapped (two senders at once)")
    eq(H.metric(srv, "seckill_refunds_sent_total") + H.metric(other, "seckill_refunds_sent_total"),
       1, "refunds marked sent by the two instances")
    H.finish(other)
    H.finish(srv)


# ---------------------------------------------------------------- refundTime in the reads

def _sql_time(v):
    """A datetime from either backend as the API shows it (createTime's format)."""
    return str(v).replace(" ", "T")[:19]


def _reads_show_refund_time(frees):
    """a cancels and pays late (refunded: 6 with refund_time, in tb_voucher_order_cancelled
    when the cancel freed a); b pays (2); c is unpaid. By id and in /of/me: a shows
    refundTime = SQL's refund_time and no payTime; b payTime and no refundTime; c neither."""
    p = _paths("reads-%d" % frees)
    extra = {"refund-command": _flaky(p, 0), "pay-timeout-s": "900"}
    if frees:
        extra["cancel-frees-buyer"] = "1"
    r, srv = H.setup(settings=_pay_settings(extra))
    h = srv.http()
    vid = H.create_seckill(srv, stock=4, http=h)
    a, b, c = (H.login(srv, r, "13612346%03d" % (100 + 10 * frees + i), h) for i in range(3))
    oa, ob, oc = (_buy(srv, h, t, vid) for t in (a, b, c))
    H.wait_drained(srv, r, vid, 30)
    check(_cancel(h, a, oa)[1]["success"], "a cancels")
    check(_notify(h, oa, "PAY-RT%d" % frees, 8000)[1]["data"] == "REFUNDED", "a pays late")
    check(_notify(h, ob, "PAY-RB%d" % frees, 8000)[1]["data"] == "PAID", "b pays")
    db = srv.db()
    table = "tb_voucher_order_cancelled" if frees else "tb_voucher_order"
    row = lambda: db.query("SELECT status, refund_time FROM %s WHERE id=?" % table, oa)
    H.wait_until(lambda: row() and row()[0][0] == 6 and row()[0][1] is not None, 30,
                 what="a's refund sent (6 with refund_time in %s)" % table)
    H.wait_until(lambda: db.scalar("SELECT status FROM tb_voucher_order WHERE id=?", ob) == 2,
                 30, what="b's payment in SQL")
    want = _sql_time(row()[0][1])
    mine = _of_me(h, a)
    for o in (_get(h, a, oa), mine[oa]):
        eq((o["status"], o.get("refundTime"), "payTime" in o), (6, want, False),
           "a, refunded: %r" % o)
    for o in (_get(h, b, ob), _of_me(h, b)[ob]):
        check(o["status"] == 2 and "payTime" in o and "refundTime" not in o, "b, paid: %r", o)
    for o in (_get(h, c, oc), _of_me(h, c)[oc]):
        check(o["status"] == 1 and "payTime" not in o and "refundTime" not in o,
              "c, unpaid: %r", o)
    H.finish(srv)


def test_reads_show_refund_time():
    _reads_show_refund_time(0)


def test_reads_show_refund_time_of_a_freed_buyer():
    """The same with --cancel-frees-buyer: a's refunded order is in
    tb_voucher_order_cancelled."""
    _reads_show_refund_time(1)


# ---------------------------------------------------------------- a rebuild of Redis from SQL

def _answers(r, vid):
    """The payment answers in the voucher's state hash: {"<orderId>/<paymentId>": answer}."""
    h = r.cmd("HGETALL", "seckill:ostate:{%d}" % vid) or []
    return {f: v for f, v in zip(h[::2], h[1::2]) if "/" in f}


def _outbox(r, vid):
    """The payment ids in the voucher's refund outbox, in entry order."""
    out = []
    for _, f in r.cmd("XRANGE", "seckill:refunds:{%d}" % vid, "-", "+") or []:
        d = dict(zip(f[::2], f[1::2]))
        out.append((int(d["order"]), d["payment"], int(d["amount"]), int(d["user"])))
    return out


@H.timeout(150)
def test_rebuild_restores_answers_and_requeues_refunds():
    """Stream mode: a pays (row 2); b cancels and pays late (row 5, the refund command
    failing). Redis then loses the voucher hash alone (the outbox kept), and later
    everything (FLUSHALL): each rebuild from SQL brings back both payments' answers in the
    state hash (0 taken, 2 refunded) and leaves b's refund in the outbox once -- the kept
    entry, or one put back. After the restart the same notices answer as before and change
    nothing, and once the command works b's refund is sent, exactly once."""
    from test_rebuild_life import _rebuild
    p = _paths("rebuild")
    cmd = ('[ -e {go} ] || {{ echo "$SECKILL_PAYMENT_ID" >> {runs}; exit 1; }}; '
           'echo "$SECKILL_ORDER_ID $SECKILL_PAYMENT_ID $SECKILL_AMOUNT" >> {sent}').format(**p)
    settings = _pay_settings({"refund-command": cmd})
    r, srv = H.setup(settings=settings)
    h = srv.http()
    vid = H.create_seckill(srv, stock=3, http=h)
    phones = ["13612346201", "13612346202"]
    a, b = (H.login(srv, r, ph, h) for ph in phones)
    oa, ob = (_buy(srv, h, t, vid) for t in (a, b))
    H.wait_drained(srv, r, vid, 30)
    check(_notify(h, oa, "PAY-A", 8000)[1]["data"] == "PAID", "a pays")
    check(_cancel(h, b, ob)[1]["success"], "b cancels")
    check(_notify(h, ob, "PAY-B", 8000)[1]["data"] == "REFUNDED", "b pays late")
    db = srv.db()
    H.wait_until(lambda: _pay_row(db, "PAY-A") == (oa, 8000, 2, 0) and
                 _pay_row(db, "PAY-B") == (ob, 8000, 5, 0) and _order(db, ob) == (5, 0), 30,
                 what="both payments in SQL, b's refund due")
    H.wait_until(lambda: len(_lines(p["runs"])) >= 1, 30, what="b's refund tried and failed")
    want = {"%d/PAY-A" % oa: "0", "%d/PAY-B" % ob: "2"}
    eq(_answers(r, vid), want, "the answers before the loss")
    srv.stop()

    # the voucher hash and the state hash lost, the outbox kept: its entry is not doubled
    r.cmd("DEL", "seckill:voucher:{%d}" % vid, "seckill:ostate:{%d}" % vid)
    _rebuild(r, srv)
    eq(_answers(r, vid), want, "the answers rebuilt from SQL (outbox kept)")
    eq([x[1] for x in _outbox(r, vid)], ["PAY-B"], "b's refund in the outbox, once")

    # everything lost: the refund put back in the outbox
    r.cmd("FLUSHALL")
    _rebuild(r, srv)
    eq(_answers(r, vid), want, "the answers rebuilt from SQL (FLUSHALL)")
    user_b = db.scalar("SELECT user_id FROM tb_voucher_order WHERE id=?", ob)
    eq(_outbox(r, vid), [(ob, "PAY-B", 8000, user_b)], "b's refund back in the outbox")

    runs = len(_lines(p["runs"]))
    srv = H.restart_server(srv, settings=settings)
    h = srv.http()
    st, j = _notify(h, oa, "PAY-A", 8000)
    check(j.get("success") and j["data"] == "PAID", "a's notice again: %r %r", st, j)
    st, j = _notify(h, ob, "PAY-B", 8000)
    check(j.get("success") and j["data"] == "REFUNDED", "b's notice again: %r %r", st, j)
    eq(db.scalar("SELECT COUNT(*) FROM tb_voucher_payment"), 2, "payment rows")
    eq(_answers(r, vid), want, "the answers after the notices")
    eq([x[1] for x in _outbox(r, vid)], ["PAY-B"], "refunds in the outbox after the notices")
    H.wait_until(lambda: len(_lines(p["runs"])) > runs, 30,
                 what="the re-queued refund tried (the command still failing)")
    open(p["go"], "w").close()
    H.wait_until(lambda: _pay_row(db, "PAY-B") == (ob, 8000, 6, 1) and
                 _order(db, ob) == (6, 1), 60,
                 what="b's refund sent after the rebuild (6, refund_time)")
    H.wait_until(lambda: _outbox(r, vid) == [], 10, what="the outbox acked")
    eq(_lines(p["sent"]), ["%d PAY-B 8000" % ob], "b's refund sent once")
    eq(_pay_row(db, "PAY-A"), (oa, 8000, 2, 0), "a's payment, taken")
    H.finish(srv)
