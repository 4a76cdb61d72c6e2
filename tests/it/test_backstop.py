"""test_backstop.py -- the payment timeout where the stream sweep cannot reach, and what the
order reads show of the lifecycle (docs/lifecycle.md):

- the writer's SQL scan on a Redis Cluster: orders the stream sweep cannot reach time out
  through the scan, each expire routed to its bucket's master, each unit returned once;
- sync mode (orders in SQL alone): an unpaid order past its deadline becomes 4 by a SQL CAS
  with its unit back, within 2 s, exactly once with two instances scanning, and the unit
  sells again;
- GET /voucher-order/{id} and /of/me: status, payTime, payDeadline, and a decision Redis
  made that the writer has not applied yet."""

import time

import harness as H
from harness import check, eq
from test_lifecycle import (FAST, _audit, _cancel, _hold_writer, _notify, _pay_settings,
                            _status)

ORDERID_EPOCH = 1640995200   # 2022-01-01T00:00:00Z (src/sale/orderid.h)


def _deadline(oid, timeout_s):
    """The payment deadline an order shows: its creation second + the timeout."""
    return (oid >> 32) + ORDERID_EPOCH + timeout_s


def _buy(srv, h, token, vid):
    """A grab that must succeed: its order id."""
    st, j = H.seckill(srv, token, vid, h)
    check(j.get("success"), "buy: %r", j)
    return j["data"]


def _get(h, token, oid):
    st, j = h.api("GET", "/voucher-order/%d" % oid, token=token)
    check(j.get("success"), "GET /voucher-order/%d: %r", oid, j)
    return j["data"]


def _of_me(h, token):
    st, j = h.api("GET", "/voucher-order/of/me", token=token)
    check(j.get("success"), "GET /voucher-order/of/me: %r", j)
    return {o["id"]: o for o in j["data"]}


# ---------------------------------------------------------------- Redis Cluster

def _settled(redis, stream):
    """g1 of stream has nothing pending and nothing undelivered (one XINFO GROUPS)."""
    for g in redis.cmd("XINFO", "GROUPS", stream):
        d = dict(zip(g[::2], g[1::2]))
        if d.get("name") == "g1":
            return int(d["pending"]) == 0 and d.get("lag") == 0
    return False


@H.timeout(200)
def test_scan_times_out_on_every_master():
    """Three masters, a voucher in 3 stock buckets (one per master), each bucket's sweep
    cursor past its orders (as after a failover to a replica whose cursor was ahead): the
    stream sweep cannot reach them, and the writer's SQL scan times out every order on its
    own bucket's master, each unit returned once; the audit is clean."""
    timeout = 5
    settings = dict(FAST, **{"pay-timeout-s": str(timeout)})
    cluster = H.start_redis_cluster(masters=3, replicas=0)
    srv = H.start_server(cluster.url, name="backstop-c", settings=settings)
    h = srv.http()
    tokens = H.login_many(srv, cluster, 9)
    stock, k = 12, 3
    vid = H.create_seckill(srv, stock=stock, stockBuckets=k, http=h)
    oids = [_buy(srv, h, t, vid) for t in tokens]
    db = srv.db()
    keys = [H.bucket_keys(vid, b, k) for b in range(k)]
    H.wait_until(lambda: db.order_count(vid) == len(oids) and
                 all(_settled(cluster, keys[b]["stream"]) for b in range(k)), 30,
                 what="the orders in SQL, every stream written")
    srv.stop()
    users = dict(db.query("SELECT id, user_id FROM tb_voucher_order WHERE voucher_id=?", vid))
    per_home = [sum(1 for o in oids if H.bucket_home(users[o], k) == b) for b in range(k)]
    masters = {cluster.node_for(keys[b]["voucher"]).port for b in range(k) if per_home[b]}
    eq(len(masters), 3, "the orders' buckets on three masters (%r)" % per_home)
    eq([cluster.cmd("HGET", keys[b]["voucher"], "timedout") for b in range(k)],
       [None] * k, "nothing timed out yet")
    for b in range(k):
        cluster.cmd("SET", keys[b]["stream"].replace("stream", "paysweep"), "99999999999999-0")
    srv = H.restart_server(srv, name="backstop-c", settings=settings)
    H.wait_until(lambda: all(_status(db, o) == 4 for o in oids), 30,
                 what="every order timed out through the SQL scan")
    timedout = [int(cluster.cmd("HGET", keys[b]["voucher"], "timedout") or 0)
                for b in range(k)]
    returned = [int(cluster.cmd("HGET", keys[b]["voucher"], "returned") or 0)
                for b in range(k)]
    eq(timedout, per_home, "orders timed out on each bucket's master")
    eq(returned, per_home, "units returned on each bucket's master (once each)")
    H.wait_until(lambda: db.stock(vid) == stock, 30, what="SQL stock back to %d" % stock)
    # each call went to its bucket's master, and only there: no reply out of place
    eq(srv.log_lines(r"MOVED|connection lost"), [], "redirected or lost connections")
    _audit(cluster, srv, vid, stock)
    H.finish(srv)


# ---------------------------------------------------------------- sync mode

@H.serial   # each timeout within 2 s of its deadline
def test_sync_mode_times_out_once_with_two_instances():
    """--order-mode sync, two instances on one database: every unpaid order becomes 4 within
    2 s of its deadline, its unit back once (the CAS decides between the instances); the
    returned units sell again, the timed-out buyers stay refused."""
    timeout, stock = 2, 4
    settings = dict(FAST, mode="sync", **{"pay-timeout-s": str(timeout)})
    r = H.start_redis()
    s1 = H.start_server(r, name="sync-1", settings=settings)
    s2 = H.start_server(r, name="sync-2", settings=settings, data_dir=H.subdir("sync-2"),
                        db_path=s1.db_path, admin_token=s1.admin_token)
    h1, h2 = s1.http(), s2.http()
    tokens = H.login_many(s1, r, stock + 2)
    vid = H.create_seckill(s1, stock=stock, http=h1)
    oids = [_buy(s1, h1, t, vid) if i % 2 else _buy(s2, h2, t, vid)
            for i, t in enumerate(tokens[:stock])]
    st, j = H.seckill(s1, tokens[stock], vid, h1)
    eq(j.get("errorMsg"), "库存不足", "sold out before the timeouts: %r" % j)
    o = _get(h1, tokens[0], oids[0])
    eq((o["status"], o["payDeadline"] > o["createTime"]), (1, True), "unpaid: %r" % o)
    db = s1.db()
    seen = {}
    t_end = time.time() + 20
    while len(seen) < stock and time.time() < t_end:
        now = time.time()
        for oid in oids:
            if oid not in seen and _status(db, oid) == 4:
                seen[oid] = now
        time.sleep(0.05)
    eq(len(seen), stock, "orders timed out")
    late = {oid: round(seen[oid] - _deadline(oid, timeout), 2) for oid in oids}
    H.log("seconds after the deadline: %r" % late)
    check(all(-0.1 <= x <= 2.0 for x in late.values()),
          "each within 2 s of the deadline it shows (createTime + timeout): %r", late)
    eq(db.stock(vid), stock, "SQL stock: every unit back once")
    o = _get(h2, tokens[0], oids[0])
    check(o["status"] == 4 and "payDeadline" not in o, "timed out: %r", o)
    for t, h, srv in ((tokens[stock], h1, s1), (tokens[stock + 1], h2, s2)):
        st, j = H.seckill(srv, t, vid, h)
        check(j.get("success"), "a returned unit sells again: %r", j)
    st, j = H.seckill(s1, tokens[0], vid, h1)
    eq(j.get("errorMsg"), "不能重复下单", "the timed-out buyer: %r" % j)
    eq(db.stock(vid), stock - 2, "SQL stock after the two new orders")
    eq(db.scalar("SELECT count(*) FROM tb_voucher_order WHERE voucher_id=? AND status=4", vid),
       stock, "orders at 4")
    H.finish(s2)
    H.finish(s1)


# ---------------------------------------------------------------- the reads

def test_reads_show_pay_time():
    """Stream mode: an unpaid order shows its payDeadline; a paid one payTime (as createTime
    is shown) and no payDeadline, by id and in /of/me."""
    r, srv = H.setup(settings=_pay_settings({"pay-timeout-s": "900"}))
    h = srv.http()
    a = H.login(srv, r, "13612347001", h)
    vid = H.create_seckill(srv, stock=4, http=h)
    oa = _buy(srv, h, a, vid)
    H.wait_drained(srv, r, vid, 30)
    o = _get(h, a, oa)
    eq((o["status"], "payTime" in o, o["payDeadline"] > o["createTime"]), (1, False, True),
       "unpaid: %r" % o)
    check(_notify(h, oa, "PA", 8000)[1]["data"] == "PAID", "pay a")
    db = srv.db()
    H.wait_until(lambda: _status(db, oa) == 2, 30, what="a's payment in SQL")
    o = _get(h, a, oa)
    check(o["status"] == 2 and len(o.get("payTime", "")) == len(o["createTime"]) and
          o["payTime"] >= o["createTime"] and "payDeadline" not in o, "paid: %r", o)
    eq(_of_me(h, a)[oa].get("payTime"), o["payTime"], "of/me: a's payTime")
    H.finish(srv)


def test_reads_show_redis_decisions():
    """Stream mode, while the writer cannot commit: an order cancelled in Redis shows 4,
    one paid there 2 with its payTime, and one admitted and cancelled before it reached SQL
    4 -- by id and in /of/me; afterwards SQL agrees."""
    r, srv = H.setup(settings=_pay_settings({"pay-timeout-s": "900"}))
    h = srv.http()
    b, c, d = (H.login(srv, r, "136123471%02d" % i, h) for i in range(3))
    vid = H.create_seckill(srv, stock=4, http=h)
    ob, oc = (_buy(srv, h, t, vid) for t in (b, c))
    H.wait_drained(srv, r, vid, 30)
    db = srv.db()
    hold = _hold_writer(srv, vid)
    try:
        check(_cancel(h, b, ob)[1]["success"], "cancel b")
        check(_notify(h, oc, "PC", 8000)[1]["data"] == "PAID", "pay c")
        od = _buy(srv, h, d, vid)
        check(_cancel(h, d, od)[1]["success"], "cancel d (not in SQL yet)")
        eq((_status(db, ob), _status(db, oc), _status(db, od)), (1, 1, None),
           "SQL has not applied them")
        for tok, oid, want in ((b, ob, 4), (c, oc, 2), (d, od, 4)):
            for o in (_get(h, tok, oid), _of_me(h, tok)[oid]):
                eq(o["status"], want, "order %d shows Redis's decision: %r" % (oid, o))
                check("payDeadline" not in o, "no deadline once decided: %r", o)
        o = _get(h, c, oc)
        check(len(o.get("payTime", "")) == len(o["createTime"]), "c's payTime: %r", o)
    finally:
        hold.rollback()
        hold.close()
    H.wait_until(lambda: (_status(db, ob), _status(db, oc), _status(db, od)) == (4, 2, 4), 30,
                 what="SQL applied the decisions")
    eq(_get(h, c, oc)["payTime"], o["payTime"], "c's payTime from SQL")
    H.finish(srv)


@H.serial   # applied within 4 s of the deadline
def test_timeout_after_the_sale_drained():
    """The sale ended and its stream is in the drained set (every order written) before the
    unpaid order's deadline: the sweep's timeout takes the stream out of the set, so the
    writer applies the t event at once (not at the drained sweep, --writer-drain-sweep-ms,
    set to 10 minutes here) and /of/me asks the bucket again."""
    timeout = 9
    r, srv = H.setup(settings=dict(FAST, **{"pay-timeout-s": str(timeout),
                                            "writer-drain-sweep-ms": "600000"}))
    h = srv.http()
    a = H.login(srv, r, "13612347201", h)
    vid = H.create_seckill(srv, stock=2, end=time.time() + 2, http=h)
    oa = _buy(srv, h, a, vid)
    H.wait_until(lambda: str(vid) in r.cmd("SMEMBERS", "{seckill:streams}:drained"), 30,
                 what="the sale's stream marked drained")
    check(time.time() < _deadline(oa, timeout), "drained before the deadline")
    db = srv.db()
    H.wait_until(lambda: _status(db, oa) == 4, 8, what="the timeout in SQL")
    late = time.time() - _deadline(oa, timeout)
    check(late < 4, "applied %.1f s after the deadline", late)
    eq(_of_me(h, a)[oa]["status"], 4, "of/me")
    eq(db.stock(vid), 2, "SQL stock")
    H.finish(srv)
