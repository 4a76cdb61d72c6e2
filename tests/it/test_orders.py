"""test_orders.py -- order lookups (GET /voucher-order/{id}, GET /voucher-order/of/me):
a constant number of Redis commands whatever the number of vouchers, admitted orders
visible before the writer has persisted them, and the per-user lookup limit.

SQLite only: the unpersisted case holds the database's write lock, which MariaDB's
LOCK TABLES would also hold against the lookup's own read; the lookup code is the same for
both backends (test_api.py::test_order_lookup runs on both)."""

import os

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)

VOUCHERS = 60
LOOKUPS = 10


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


def test_lookup_redis_commands_constant():
    r, srv = H.setup(settings={"rate-user-lookup": "1000/s:1000"})
    h = srv.http()
    tok = H.login(srv, r, "13512345601", h)
    vids = [H.create_seckill(srv, stock=5, http=h) for _ in range(VOUCHERS)]
    o1 = H.seckill(srv, tok, vids[0], h)[1]["data"]
    o2 = H.seckill(srv, tok, vids[-1], h)[1]["data"]
    H.wait_drained(srv, r, vids[0], 30)
    H.wait_drained(srv, r, vids[-1], 30)
    r.cmd("CONFIG", "RESETSTAT")
    for _ in range(LOOKUPS):
        st, j = h.api("GET", "/voucher-order/of/me", token=tok)
        check(st == 200 and j["success"], "of/me: %r %r", st, j)
        eq(sorted(o["id"] for o in j["data"]), sorted([o1, o2]), "of/me order ids")
        # an id not in SQL goes on to Redis: the costly case before
        st, j = h.api("GET", "/voucher-order/%d" % (o2 + 1), token=tok)
        check(st == 200 and not j["success"], "unknown order: %r %r", st, j)
    reads = _hash_reads(r)
    # one HGETALL of the buyer's index per lookup, plus at most one token check each;
    # one HGET per voucher would be 2 * LOOKUPS * VOUCHERS
    check(reads <= 2 * 2 * LOOKUPS, "%d hash reads for %d lookups with %d vouchers",
          reads, 2 * LOOKUPS, VOUCHERS)
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


def test_index_written_by_the_script():
    """On a single Redis the buyer's order index is written inside admit.lua, with the
    admission: no command of its own per grab (MONITOR shows script-issued commands as
    "lua"), and never an admission without its index entry."""
    r, srv = H.setup()
    h = srv.http()
    a = H.login(srv, r, "13512345631", h)
    vids = [H.create_seckill(srv, stock=5, http=h) for _ in range(3)]
    mon = r.client(timeout=10)
    mon.send("MONITOR")
    eq(mon._read(), "OK", "MONITOR")
    oids = [H.seckill(srv, a, v, h)[1]["data"] for v in vids]
    uid = h.api("GET", "/user/me", token=a)[1]["data"]["id"]
    key = "seckill:orders-of:{u%d}" % uid
    r.cmd("ECHO", "end-of-grabs")
    seen = []
    while True:
        line = mon._read()
        if "end-of-grabs" in line:
            break
        if key in line:
            seen.append(line)
    mon.close()
    # outside the script only the script call itself names the key (one of its KEYS)
    top = [x for x in seen if "[0 lua]" not in x and '"EVALSHA"' not in x.upper()]
    eq(top, [], "index commands outside the script")
    eq(len([x for x in seen if '"HSET"' in x.upper()]), 3, "index writes inside the script")
    eq(sorted(map(int, r.cmd("HGETALL", key)[1::2])), sorted(oids), "the index")
    H.finish(srv)


def test_cluster_node_behind_a_plain_address_refused():
    """A Redis with cluster mode on, addressed as redis://: as a single Redis the order
    writer's one XREADGROUP over every voucher's stream is refused there (CROSSSLOT) once
    there are two vouchers, and on a cluster of several nodes most keys answer MOVED. So
    seckill serve and the tools refuse it at connect, saying to use redis+cluster://
    (docs/redis-cluster.md); with that address the same one-node cluster sells two
    vouchers, writes the buyers' index and gets every order into SQL."""
    r = H.start_redis(extra=["--cluster-enabled", "yes", "--cluster-config-file",
                             os.path.join(H.subdir("cl"), "nodes.conf")])
    r.cmd("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
    H.wait_until(lambda: "cluster_state:ok" in r.cmd("CLUSTER", "INFO"), 20,
                 what="the one-node cluster")
    d = H.subdir("seckill-data")
    db_url = H.db_url_for(os.path.join(d, "seckill.db"))
    argv = H.server_argv(H.free_port(), r.url, db_url, "adm" + "0" * 29, d)
    rc, out, err = H.run_tool(argv[1:], timeout=60)
    check(rc != 0 and "cluster mode" in err and "redis+cluster://" in err,
          "seckill serve on a cluster node behind redis://: exit %d\n%s", rc, err[-2000:])

    srv = H.start_server("redis+cluster://127.0.0.1:%d" % r.port)
    h = srv.http()
    a = H.login(srv, r, "13512345641", h)
    vids = [H.create_seckill(srv, stock=5, http=h) for _ in range(2)]
    uid = h.api("GET", "/user/me", token=a)[1]["data"]["id"]
    for v in vids:
        st, j = H.seckill(srv, a, v, h)
        check(st == 200 and j["success"], "the grab of %d: %r %r", v, st, j)
        # on a cluster the server writes the index after the answer, on its own
        # connection (orders.h): a reader on another connection waits for it
        key = "seckill:orders-of:{u%d}" % uid
        H.wait_until(lambda: r.cmd("HGET", key, str(v)) is not None, 10, what="the index")
        eq(r.cmd("HGET", key, str(v)), str(j["data"]), "the index")
        eq(H.seckill(srv, a, v, h)[1].get("code"), "DUPLICATE", "the second try")
    db = srv.db()
    H.wait_until(lambda: all(db.order_count(v) == 1 for v in vids), 30,
                 what="both vouchers' orders in SQL")
    st, out = H.audit(r, srv.db_url)
    check(st == 2 and "redis+cluster://" in out, "audit behind redis://: exit %d\n%s", st,
          out[-2000:])
    st, out = H.audit("redis+cluster://127.0.0.1:%d" % r.port, srv.db_url)
    check(st == 0 and "audit: 0 violations" in out, "audit: exit %d\n%s", st, out[-3000:])
    H.finish(srv)
