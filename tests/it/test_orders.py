"""test_orders.py -- order lookups (GET /voucher-order/{id}, GET /voucher-order/of/me):
admitted orders visible before the writer has persisted them -- also after their sale
ended, with the writer stopped, and across a rebuild of the voucher's Redis keys --, a lookup's Redis reads bounded by the buckets that may
hold such orders (not by every voucher ever sold), a grab that writes nothing for lookups,
and the per-user lookup limit.

SQLite only: the unpersisted case holds the database's write lock, which MariaDB's
LOCK TABLES would also hold against the lookup's own read; the lookup code is the same for
both backends (test_api.py::test_order_lookup runs on both)."""

import os
import time

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)

ENDED = 58       # vouchers whose sale is over and whose orders are all in SQL
LIVE = 2         # vouchers on sale
LOOKUPS = 10
DRAINED = "{seckill:streams}:drained"   # keys.h: the writers' drained set


def _hash_reads(r):
    """Calls of the hash-reading commands since CONFIG RESETSTAT. The writer reads no
    hashes; the lookups' token checks (auth) and the lookups themselves do."""
    stats = r.cmd("INFO", "commandstats")
    total = 0
    for line in stats.splitlines():
        name, _, rest = line.partition(":")
        if name in ("cmdstat_hget", "cmdstat_hmget", "cmdstat_hgetall", "cmdstat_hscan"):
            total += int(rest.split(",")[0].split("=")[1])
    return total


def _drained(r):
    """The voucher ids in the drained set (a bucket b >= 1 is "<id>.<b>.<K>": left out)."""
    return set(int(x) for x in r.cmd("SMEMBERS", DRAINED) if x.isdigit())


def test_lookup_cost_bounded_by_live_buckets():
    """A lookup reads the buyer hash of each bucket that may hold an order not yet in SQL:
    the vouchers on sale, not the ENDED ones whose orders the writer has all written (the
    writer marks those drained). One HGET per voucher ever made would be
    2 * LOOKUPS * (ENDED + 2 + LIVE) reads."""
    r, srv = H.setup(settings={"rate-user-lookup": "1000/s:1000"})
    h = srv.http()
    tok = H.login(srv, r, "13512345601", h)
    past = time.time() - 60
    ended = [H.create_seckill(srv, stock=5, begin=past - 3600, end=past, http=h)
             for _ in range(ENDED)]
    # two sales that end in a few seconds, with one order each
    soon = time.time() + 6   # time for the two grabs on a busy host
    v1 = H.create_seckill(srv, stock=5, end=soon, http=h)
    v2 = H.create_seckill(srv, stock=5, end=soon, http=h)
    o1 = H.seckill(srv, tok, v1, h)[1]["data"]
    o2 = H.seckill(srv, tok, v2, h)[1]["data"]
    check(isinstance(o1, int) and isinstance(o2, int), "the grabs: %r %r", o1, o2)
    live = [H.create_seckill(srv, stock=5, http=h) for _ in range(LIVE)]
    H.wait_until(lambda: _drained(r) >= set(ended) | {v1, v2}, 60,
                 what="the ended vouchers marked drained")
    check(not (_drained(r) & set(live)), "a voucher on sale marked drained: %r", _drained(r))
    eq(r.cmd("KEYS", "seckill:orders-of:*"), [], "per-buyer order index keys")
    r.cmd("CONFIG", "RESETSTAT")
    for _ in range(LOOKUPS):
        st, j = h.api("GET", "/voucher-order/of/me", token=tok)
        check(st == 200 and j["success"], "of/me: %r %r", st, j)
        eq(sorted((o["id"], o["persisted"]) for o in j["data"]),
           sorted([(o1, True), (o2, True)]), "of/me orders")
        # an id not in SQL goes on to Redis (and SQL once more)
        st, j = h.api("GET", "/voucher-order/%d" % (o2 + 1), token=tok)
        check(st == 200 and not j["success"], "unknown order: %r %r", st, j)
    reads = _hash_reads(r)
    # one HGET per live voucher per lookup, plus at most one token check each
    check(reads <= 2 * LOOKUPS * (LIVE + 1), "%d hash reads for %d lookups with %d live of "
          "%d vouchers", reads, 2 * LOOKUPS, LIVE, ENDED + 2 + LIVE)
    H.finish(srv)


def test_lookup_sees_unpersisted_orders():
    r, srv = H.setup()
    h = srv.http()
    a = H.login(srv, r, "13512345611", h)
    b = H.login(srv, r, "13512345612", h)
    v1 = H.create_seckill(srv, stock=5, http=h)
    v2 = H.create_seckill(srv, stock=5, http=h)
    o1 = H.seckill(srv, a, v1, h)[1]["data"]
    H.wait_drained(srv, r, v1, 30)
    lock = H.hold_db_lock(srv)   # the writer cannot persist o2 while this is held
    try:
        o2 = H.seckill(srv, a, v2, h)[1]["data"]
        st, j = h.api("GET", "/voucher-order/of/me", token=a)
        check(st == 200 and j["success"], "of/me: %r %r", st, j)
        eq([(o["id"], o["persisted"]) for o in j["data"]], [(o2, False), (o1, True)],
           "of/me: the unpersisted order first, then the persisted one")
        eq(j["data"][0]["voucherId"], v2, "voucherId of the unpersisted order")
        st, j = h.api("GET", "/voucher-order/%d" % o2, token=a)
        check(j["success"] and j["data"]["id"] == o2 and j["data"]["persisted"] is False,
              "GET of the unpersisted order: %r", j)
        st, j = h.api("GET", "/voucher-order/%d" % o2, token=b)
        check(not j["success"], "B reads A's unpersisted order: %r", j)
        st, j = h.api("GET", "/voucher-order/of/me", token=b)
        eq(j["data"], [], "B's of/me")
    finally:
        lock.rollback()
        lock.close()
    H.wait_drained(srv, r, v2, 30)
    st, j = h.api("GET", "/voucher-order/of/me", token=a)
    eq([(o["id"], o["persisted"]) for o in j["data"]], [(o2, True), (o1, True)],
       "of/me once both are persisted: each once")
    H.finish(srv)


def test_lookup_rate_limited():
    r, srv = H.setup(settings={"rate-user-lookup": "1/m:5"})
    h = srv.http()
    a = H.login(srv, r, "13512345621", h)
    b = H.login(srv, r, "13512345622", h)
    codes = []
    for i in range(8):
        path = "/voucher-order/of/me" if i % 2 else "/voucher-order/123"
        st, j = h.api("GET", path, token=a)
        codes.append(st)
        if st == 429:
            eq(j.get("code"), "RATE_LIMITED", "code of a limited lookup")
    eq(codes, [200] * 5 + [429] * 3, "lookups of one user under 1/m:5")
    st, j = h.api("GET", "/voucher-order/of/me", token=b)
    eq(st, 200, "another user's lookup")
    H.finish(srv)


def test_unpersisted_order_of_an_ended_sale_stays_visible():
    """The writer cannot write (SQL locked) while the sale ends: an hour or a second later
    the admitted order is still shown to its buyer -- by this instance and by a second one
    whose writer is free and keeps marking drained sales -- because its bucket is marked
    drained only once SQL has its orders. The control voucher, same end and no orders,
    shows the free writer has judged both."""
    r, srv = H.setup()
    h = srv.http()
    a = H.login(srv, r, "13512345651", h)
    end = time.time() + 6   # time for the grab on a busy host
    va = H.create_seckill(srv, stock=5, end=end, http=h)
    vb = H.create_seckill(srv, stock=5, end=end, http=h)   # the control: no orders
    lock = H.hold_db_lock(srv)   # the writers cannot persist oa while this is held
    srv2 = None
    try:
        st, j = H.seckill(srv, a, va, h)
        check(st == 200 and j["success"], "the grab: %r %r", st, j)
        oa = j["data"]
        # a second instance; its writer claims nothing from the first for 10 minutes
        srv2 = H.start_server(r, name="inst-2", db_url=srv.db_url,
                              settings={"claim-idle-ms": "600000"})
        H.wait_until(lambda: vb in _drained(r), 60, what="the control voucher marked drained")
        check(va not in _drained(r), "a sale with an unwritten order marked drained")
        for s in (srv, srv2):
            hs = s.http()
            st, j = hs.api("GET", "/voucher-order/of/me", token=a)
            check(st == 200 and j["success"], "of/me: %r %r", st, j)
            eq([(o["id"], o["voucherId"], o["persisted"]) for o in j["data"]],
               [(oa, va, False)], "of/me after the sale ended, unwritten")
            st, j = hs.api("GET", "/voucher-order/%d" % oa, token=a)
            check(j["success"] and j["data"]["id"] == oa and j["data"]["persisted"] is False,
                  "GET of the unwritten order: %r", j)
    finally:
        lock.rollback()
        lock.close()
    H.wait_until(lambda: va in _drained(r), 60, what="the voucher marked once written")
    eq(srv.db().order_count(va), 1, "orders in SQL")
    st, j = h.api("GET", "/voucher-order/of/me", token=a)
    eq([(o["id"], o["persisted"]) for o in j["data"]], [(oa, True)], "of/me once written")
    if srv2 is not None:
        H.finish(srv2)
    H.finish(srv)


def test_unpersisted_order_visible_across_a_rebuild():
    """Redis loses the voucher's hash and buyer hash (not its stream) while the writer
    cannot write: the rebuild from SQL puts the stream's unwritten orders back into the
    buyer hash (rebuild.h), so the buyer still sees the order -- before SQL has it."""
    r, srv = H.setup()
    h = srv.http()
    a = H.login(srv, r, "13512345661", h)
    vid = H.create_seckill(srv, stock=5, http=h)
    lock = H.hold_db_lock(srv)
    try:
        st, j = H.seckill(srv, a, vid, h)
        check(st == 200 and j["success"], "the grab: %r %r", st, j)
        oid = j["data"]
        H.wait_until(lambda: H.unacked_orders(r, vid, pending_only=True) == 1, 20,
                     what="the writer holding the order")
        r.cmd("DEL", H.k_voucher(vid), H.k_buyers(vid))
        H.wait_until(lambda: H.voucher_present(r, vid), 30, what="the voucher rebuilt")
        eq(r.cmd("HGET", H.k_buyers(vid), str(H.user_ids(r, [a])[0])), str(oid),
           "the rebuilt buyer hash")
        st, j = h.api("GET", "/voucher-order/of/me", token=a)
        eq([(o["id"], o["persisted"]) for o in j["data"]], [(oid, False)],
           "of/me after the rebuild, unwritten")
    finally:
        lock.rollback()
        lock.close()
    H.wait_drained(srv, r, vid, 30)
    st, j = h.api("GET", "/voucher-order/of/me", token=a)
    eq([(o["id"], o["persisted"]) for o in j["data"]], [(oid, True)], "of/me once written")
    H.finish(srv)


def test_grab_writes_nothing_for_lookups():
    """A grab's Redis work is the admission script's, nothing per buyer for lookups: no
    command outside the script names an order index, none is written inside it, and the
    orders are visible at once all the same (the writer held off)."""
    r, srv = H.setup()
    h = srv.http()
    a = H.login(srv, r, "13512345631", h)
    vids = [H.create_seckill(srv, stock=5, http=h) for _ in range(3)]
    mon = r.client(timeout=10)
    mon.send("MONITOR")
    eq(mon._read(), "OK", "MONITOR")
    lock = H.hold_db_lock(srv)
    try:
        oids = [H.seckill(srv, a, v, h)[1]["data"] for v in vids]
        r.cmd("ECHO", "end-of-grabs")
        seen = []
        while True:
            line = mon._read()
            if "end-of-grabs" in line:
                break
            seen.append(line)
        mon.close()
        eq([x for x in seen if "orders-of" in x], [], "commands naming an order index")
        top = [x for x in seen if "[0 lua]" not in x and '"HSET"' in x.upper()]
        eq(top, [], "HSETs outside the script")
        eq(r.cmd("KEYS", "seckill:orders-of:*"), [], "order index keys")
        st, j = h.api("GET", "/voucher-order/of/me", token=a)
        eq(sorted((o["id"], o["persisted"]) for o in j["data"]),
           sorted((o, False) for o in oids), "of/me right after the grabs")
    finally:
        lock.rollback()
        lock.close()
    H.finish(srv)


def test_lookup_finds_orders_in_every_bucket():
    """A voucher sold from 4 stock buckets: each buyer's unwritten order is in the buyer
    hash of their home bucket (its own hash tag), and the lookup asks every bucket."""
    r, srv = H.setup()
    h = srv.http()
    vid = H.create_seckill(srv, stock=40, stockBuckets=4, http=h)
    toks = [H.login(srv, r, "135123457%02d" % i, h) for i in range(8)]
    lock = H.hold_db_lock(srv)
    try:
        oids = []
        for t in toks:
            st, j = H.seckill(srv, t, vid, h)
            check(st == 200 and j["success"], "the grab: %r %r", st, j)
            oids.append(j["data"])
        homes = [k for k in r.cmd("KEYS", "seckill:order:{*") if int(r.cmd("HLEN", k)) > 0]
        check(len(homes) >= 2, "buyers in %d bucket(s): %r", len(homes), homes)
        for t, o in zip(toks, oids):
            st, j = h.api("GET", "/voucher-order/of/me", token=t)
            eq([(x["id"], x["voucherId"], x["persisted"]) for x in j["data"]],
               [(o, vid, False)], "of/me of a bucketed buyer")
            st, j = h.api("GET", "/voucher-order/%d" % o, token=t)
            check(j["success"] and j["data"]["id"] == o, "GET of a bucketed order: %r", j)
    finally:
        lock.rollback()
        lock.close()
    H.finish(srv)


def test_cluster_node_behind_a_plain_address_refused():
    """A Redis with cluster mode on, addressed as redis://: as a single Redis the order
    writer's one XREADGROUP over every voucher's stream is refused there (CROSSSLOT) once
    there are two vouchers, and on a cluster of several nodes most keys answer MOVED. So
    seckill serve and the tools refuse it at connect, saying to use redis+cluster://
    (docs/redis-cluster.md); with that address the same one-node cluster sells two
    vouchers, shows each order to its buyer at once and gets every order into SQL."""
    r = H.start_one_node_cluster()
    d = H.subdir("seckill-data")
    db_url = H.db_url_for(os.path.join(d, "seckill.db"))
    argv = H.server_argv(H.free_port(), r.url, db_url, "adm" + H.rand_hex(29), d)
    rc, out, err = H.run_tool(argv[1:], timeout=60)
    check(rc != 0 and "cluster mode" in err and "redis+cluster://" in err,
          "seckill serve on a cluster node behind redis://: exit %d\n%s", rc, err[-2000:])

    srv = H.start_server("redis+cluster://127.0.0.1:%d" % r.port)
    h = srv.http()
    a = H.login(srv, r, "13512345641", h)
    vids = [H.create_seckill(srv, stock=5, http=h) for _ in range(2)]
    for v in vids:
        st, j = H.seckill(srv, a, v, h)
        check(st == 200 and j["success"], "the grab of %d: %r %r", v, st, j)
        # at once, persisted or not: the lookup asks the buyer hashes on their nodes
        st, m = h.api("GET", "/voucher-order/of/me", token=a)
        check(j["data"] in [o["id"] for o in m["data"]], "of/me after the grab: %r", m)
        eq(H.seckill(srv, a, v, h)[1].get("code"), "DUPLICATE", "the second try")
    db = srv.db()
    H.wait_until(lambda: all(db.order_count(v) == 1 for v in vids), 30,
                 what="both vouchers' orders in SQL")
    # the per-node writer marks an ended sale drained through the cluster client
    past = time.time() - 60
    over = H.create_seckill(srv, stock=5, begin=past - 3600, end=past, http=h)
    H.wait_until(lambda: over in _drained(r), 30, what="the ended sale marked drained")
    check(not (_drained(r) & set(vids)), "a sale on sale marked drained: %r", _drained(r))
    st, out = H.audit(r, srv.db_url)
    check(st == 2 and "redis+cluster://" in out, "audit behind redis://: exit %d\n%s", st,
          out[-2000:])
    st, out = H.audit("redis+cluster://127.0.0.1:%d" % r.port, srv.db_url)
    check(st == 0 and "audit: 0 violations" in out, "audit: exit %d\n%s", st, out[-3000:])
    H.finish(srv)
