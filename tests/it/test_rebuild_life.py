"""test_rebuild_life.py -- a rebuild from SQL after Redis lost a voucher's keys brings back
the order lifecycle's state (docs/lifecycle.md "Rebuild from SQL", src/rebuild/rebuild_life.h):
the state hash (c, t from status 4; p from 2, 3; r from 5, 6), the board's counters
(paid, timedout, returned), the decisions still in a surviving stream that SQL does not
have yet, and, for lost stock buckets beside kept ones, a kept bucket's cancelled buyers
holding no unit. Afterwards a cancel of a cancelled order returns nothing, a payment of a
paid order is refunded, nothing is timed out twice, and `seckill audit` is clean."""

import subprocess

import harness as H
import test_lifecycle as L
from harness import check, eq


def _rebuild(r, srv, *extra):
    p = subprocess.run([H.binary(), "redis", "rebuild", "--redis", r.url, "--db", srv.db_url]
                       + list(extra), capture_output=True, env=H.san_env(), timeout=60)
    out = p.stdout.decode() + p.stderr.decode()
    eq(p.returncode, 0, "rebuild exit: " + out)
    H.log(out)
    return out


def _life(r, vid, tag=None):
    """The voucher hash's stock and life counters, and its state hash {orderId: state}."""
    tag = tag or str(vid)
    v = r.cmd("HMGET", "seckill:voucher:{%s}" % tag, "stock", "returned", "paid", "timedout")
    h = r.cmd("HGETALL", "seckill:ostate:{%s}" % tag) or []
    st = {int(f): x.split()[0] for f, x in zip(h[::2], h[1::2]) if "/" not in f}
    return [int(x) if x is not None else None for x in v], st


def _end_sessions(srv, lock):
    """MariaDB: the killed server's sessions may still wait for the row lock, and would
    apply their statement once it goes: they are ended first (their work rolls back)."""
    if not srv.db_url.startswith(("mysql:", "mariadb:")):
        return
    c = H.mysql_connect(srv.db_url)
    try:
        cur = c.cursor()
        cur.execute("SELECT id FROM information_schema.processlist WHERE db = DATABASE() "
                    "AND id NOT IN (CONNECTION_ID(), %s)", (lock.c.thread_id(),))
        for (sid,) in cur.fetchall():
            try:
                cur.execute("KILL %d" % sid)
            except Exception:   # it ended meanwhile
                pass
    finally:
        c.close()


def _sale(settings, phones, stock):
    """A server, buyers logged in with these phones, a voucher, one order each in SQL."""
    r, srv = H.setup(settings=settings)
    h = srv.http()
    toks = [H.login(srv, r, p, h) for p in phones]
    vid = H.create_seckill(srv, stock=stock, http=h)
    oids = [H.seckill(srv, t, vid, h)[1]["data"] for t in toks]
    check(all(isinstance(o, int) for o in oids), "grabs: %r", oids)
    H.wait_drained(srv, r, vid, 30)
    return r, srv, h, toks, vid, oids


def test_rebuild_restores_states_and_counters():
    """Every decision applied in SQL (c, p, r, t), then FLUSHALL and a rebuild: the states
    and the board's counters are back; a cancel again returns no unit, a payment of the
    paid order is refunded, and the audit is clean."""
    settings = L._pay_settings({"pay-timeout-s": "3"})
    phones = ["136300000%02d" % i for i in range(4)]
    r, srv, h, toks, vid, oids = _sale(settings, phones, 6)
    eq(L._cancel(h, toks[0], oids[0])[1]["success"], True, "cancel 0")
    eq(L._notify(h, oids[1], "P1", 8000)[1]["data"], "PAID", "pay 1")
    eq(L._cancel(h, toks[2], oids[2])[1]["success"], True, "cancel 2")
    eq(L._notify(h, oids[2], "P2", 8000)[1]["data"], "REFUNDED", "pay 2 after its cancel")
    db = srv.db()
    want = {oids[0]: 4, oids[1]: 2, oids[2]: 6, oids[3]: 4}   # 3 times out (3 s)
    H.wait_until(lambda: all(L._status(db, o) == s for o, s in want.items()), 30,
                 what="every decision in SQL")
    H.wait_drained(srv, r, vid, 30)
    srv.stop()
    r.cmd("FLUSHALL")
    _rebuild(r, srv, "--pay-timeout-s", "3")
    (stock, returned, paid, timedout), st = _life(r, vid)
    eq(st, {oids[0]: "c", oids[1]: "p", oids[2]: "r", oids[3]: "t"}, "states rebuilt")
    eq([stock, returned, paid, timedout], [5, 3, 1, 1], "stock, returned, paid, timedout")
    srv = H.restart_server(srv, settings=settings)
    h = srv.http()
    toks = [H.login(srv, r, p, h) for p in phones]   # FLUSHALL took them
    # answered from the state: no unit back twice, no second payment taken
    eq(L._cancel(h, toks[0], oids[0])[1]["success"], True, "cancel 0 again")
    eq(L._cancel(h, toks[3], oids[3])[1]["success"], True, "cancel of the timed-out order")
    eq(L._notify(h, oids[1], "P3", 8000)[1]["data"], "REFUNDED", "a second payment of 1")
    eq(L._notify(h, oids[3], "P4", 8000)[1]["data"], "REFUNDED", "a payment after the timeout")
    (stock, returned, paid, timedout), _ = _life(r, vid)
    eq([stock, returned, paid, timedout], [5, 3, 1, 1], "after the repeated decisions")
    H.wait_until(lambda: L._status(db, oids[3]) == 6, 30, what="order 3 refunded in SQL")
    eq(db.stock(vid), 5, "SQL stock")
    L._audit(r, srv, vid, 6)
    H.finish(srv)


def test_rebuild_counts_events_still_in_the_stream():
    """A cancel and a payment decided in Redis whose events the writer has not applied
    (SQL held, the server killed); the voucher hash, buyers and states are lost, the stream
    kept: the rebuild takes the decisions from the stream's events -- the cancelled unit is
    in the stock (not one short), the payment is paid -- and once the events reach SQL the
    audit is clean."""
    settings = L._pay_settings({"claim-idle-ms": "500"})
    r, srv, h, toks, vid, oids = _sale(settings, ["136310000%02d" % i for i in range(3)], 5)
    lock = L._hold_writer(srv, vid)
    try:
        eq(L._cancel(h, toks[0], oids[0])[1]["success"], True, "cancel 0")
        eq(L._notify(h, oids[1], "P1", 8000)[1]["data"], "PAID", "pay 1")
        srv.kill9()
        _end_sessions(srv, lock)
    finally:
        lock.rollback()
        lock.close()
    db = srv.db()
    eq([L._status(db, o) for o in oids], [1, 1, 1], "SQL statuses (events not applied)")
    r.cmd("DEL", H.k_voucher(vid), H.k_buyers(vid), "seckill:ostate:{%d}" % vid)
    _rebuild(r, srv)
    (stock, returned, paid, timedout), st = _life(r, vid)
    eq(st, {oids[0]: "c", oids[1]: "p"}, "states from the stream's events")
    eq([stock, returned, paid], [3, 1, 1], "stock, returned, paid")
    srv = H.restart_server(srv, settings=settings)
    h = srv.http()
    H.wait_until(lambda: [L._status(db, o) for o in oids] == [4, 2, 1], 30,
                 what="the events applied in SQL")
    eq(L._cancel(h, toks[0], oids[0])[1]["success"], True, "cancel 0 again")
    eq(int(r.cmd("HGET", H.k_voucher(vid), "stock")), 3, "Redis stock")
    eq(db.stock(vid), 3, "SQL stock")
    L._audit(r, srv, vid, 5)
    H.finish(srv)


def test_rebuild_lost_bucket_beside_a_cancel():
    """Stock buckets (K = 2): a buyer of bucket 1 cancels; bucket 0's keys are lost, bucket
    1 kept. The lost bucket gets the units the kept one does not hold -- the cancelled
    buyer of bucket 1 holds none -- so the buckets' stock adds up to SQL's, and the audit is
    clean."""
    import test_buckets as B
    r, srv = H.setup(settings=L.FAST)
    k, stock = 2, 6
    vid = H.create_seckill(srv, stock=stock, stockBuckets=k)
    uids = B.users_with_home(k, 0, 2) + B.users_with_home(k, 1, 2)
    toks = B.tokens_for(srv, uids)
    final, _ = B.buy_all(srv, vid, toks)
    check(all(x.ok for x in final.values()), "buyers: %r", [x.msg for x in final.values()])
    B.wait_bucket_drain(srv, r, vid, k, len(uids))
    h = srv.http()
    oid = B.bucket_buyers(r, vid, k)[uids[2]][1]
    eq(L._cancel(h, toks[2], oid)[1]["success"], True, "cancel of a bucket 1 buyer")
    db = srv.db()
    L._wait_sql(db, oid, 4, stock - 3, vid, "the cancel in SQL")
    before = B.bucket_stock(r, vid, k)
    eq(sum(before), stock - 3, "buckets' stock before the loss")
    kk = B.keys(vid, 0, k)
    r.cmd("DEL", kk["voucher"], kk["buyers"], kk["stream"])
    H.wait_until(lambda: r.cmd("HGET", kk["voucher"], "stock") is not None, 15,
                 what="bucket 0 rebuilt")
    eq(B.bucket_stock(r, vid, k), before, "buckets' stock after bucket 0 was rebuilt")
    B.audit_clean(r, srv, vid, stock)
    H.finish(srv)
