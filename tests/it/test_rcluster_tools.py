"""test_rcluster_tools.py -- the blocking tools (`seckill audit`, `seckill bench`) on a
Redis Cluster through a failover, and a stock-bucketed voucher through one master's data loss (src/redis/rcl_sync.c: rcl_sync_route_key and rcl_sync_route_retry).

One cluster of 3 masters + 3 replicas (cluster-node-timeout 1 s), one seckill on it, a few
vouchers sold on every master (one of them in 3 stock buckets, one per master). Then the
master of the first seed is killed with kill -9 and its replica promoted. The tools get a
seed list that still names the dead node first, as an operator's configuration would:
  - `seckill audit` reads every voucher, each bucket on the master that owns it now, and
    reports 0 violations (before: it failed on the dead node or on a stale map);
  - a short `seckill bench` (API logins, a sale, the drain and its own audit) succeeds;
  - an audit started the moment the master dies (before the promotion) waits for the new
    map within its deadline and succeeds too;
  - then a master loses its data (FLUSHALL): the bucketed voucher's bucket(s) there come
    back alone (src/rebuild/rebuild.c, K from SQL) with exactly the units the other buckets do not
    account for and their home buyers; the sale sells exactly the rest, audit clean.
"""

import json
import os

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)   # the Redis side is under test; a cluster costs ~6 s to form
# run alone under tests/run.py -j: a master killed and failed over while the tools run
SERIAL = True


@H.timeout(200)
def test_tools_follow_a_failover():
    cluster = H.start_redis_cluster(masters=3, replicas=1)
    srv = H.start_server(cluster.url, name="tools-1", settings={"rate_user_seckill": "0"})
    tokens = H.login_many(srv, cluster, 30)
    vids = [H.create_seckill(srv, stock=12) for _ in range(6)]
    vids.append(H.create_seckill(srv, stock=12, stockBuckets=3))
    for v in vids:
        recs = H.run_sale(srv, v, tokens[:10], attempts=1, nthreads=4)
        check(all(r.ok for r in recs), "voucher %d: %r", v, H.summarize(recs))
    for v in vids[:-1]:
        H.wait_drained(srv, cluster, v, timeout=60)
    db = srv.db()
    H.wait_until(lambda: db.order_count(vids[-1]) == 10, 60, what="bucketed voucher in SQL")

    dead = cluster.node_for(H.k_voucher(vids[-1]))
    replica = cluster.replica_of(dead)
    seeds = [dead] + [r for r in cluster.nodes if r is not dead]
    url = "redis+cluster://" + ",".join("127.0.0.1:%d" % r.port for r in seeds)
    dead.kill()
    # At once: the dead master still owns its slots in every live node's map until its
    # replica is promoted (~1-2 s); the audit waits for that within its deadline.
    st, out = H.audit(url, srv.db_url)
    promoted = replica.cmd("ROLE")[0] == "master"
    check(st == 0 and "audit: 0 violations" in out, "audit during the failover: exit %d\n%s",
          st, out[-3000:])
    check(promoted, "the audit ended before the replica was promoted")
    cluster.wait_ok(30)
    st, out = H.audit(url, srv.db_url)
    check(st == 0 and "audit: 0 violations" in out, "audit after the failover: exit %d\n%s",
          st, out[-3000:])

    js = os.path.join(H.tmpdir(), "bench.json")
    rc, out, err = H.run_tool(["bench", "--target", "http://127.0.0.1:%d" % srv.port,
                               "--redis", url, "--db", srv.db_url,
                               "--admin-token", srv.admin_token, "--quiet", "--stock", 40,
                               "--users", 60, "--conns", 8, "--json", js])
    check(rc == 0, "bench after the failover: exit %d:\n%s\n%s", rc, out, err)
    j = json.load(open(js))
    eq(j["outcomes"]["success"], 40, "bench success answers")
    eq(j["audit"], 0, "bench's audit status")

    # One master loses its data (FLUSHALL): the bucketed voucher's bucket there comes back
    # alone, with what SQL's initial stock leaves beside the other buckets (stock +
    # buyers) and its home buyers from SQL; the sale then sells exactly the rest.
    bvid, k = vids[-1], 3
    bk = [H.bucket_keys(bvid, b, k) for b in range(k)]
    sold = 10
    db = srv.db()

    def units(b):
        return (int(cluster.cmd("HGET", bk[b]["voucher"], "stock") or 0) +
                int(cluster.cmd("HLEN", bk[b]["buyers"])))
    before = [units(b) for b in range(k)]
    eq(sum(before), 12, "units over the buckets before the loss")
    flushed = cluster.node_for(bk[1]["voucher"])
    lost = [b for b in range(k) if cluster.node_for(bk[b]["voucher"]) is flushed]
    flushed.cmd("FLUSHALL")
    H.wait_until(lambda: all(cluster.cmd("HEXISTS", bk[b]["voucher"], "stock") == 1
                             for b in range(k)), 20, what="buckets %r rebuilt" % lost)
    eq([units(b) for b in range(k)], before, "units per bucket after the rebuild of %r" % lost)
    more = H.login_many(srv, cluster, 30, start=100)
    # The flush may take the revocation set, and with it the trust in every token issued
    # before (src/auth/revoke.h: such a token is looked up, and its login hash may have
    # been on the flushed master): the earlier buyers log in again.
    again = H.login_many(srv, cluster, 10)
    recs = H.run_sale(srv, bvid, again + more, attempts=1, nthreads=4)
    s = H.summarize(recs)
    eq(s.get("success", 0), 12 - sold, "sold after the rebuild (answers %r)" % s)
    early = H.summarize(r for r in recs if r.user < 10)
    check(set(early) <= {H.MSG_DUPLICATE, H.MSG_SOLD_OUT},
          "earlier buyers after the rebuild: %r", early)
    H.wait_until(lambda: db.order_count(bvid) == 12, 60, what="the bucketed voucher sold out in SQL")
    eq(db.per_user_max(bvid), 1, "orders per user")
    st, out = H.audit(cluster, srv.db_url, voucher_id=bvid)
    check(st == 0 and "audit: 0 violations" in out, "audit after the rebuild: exit %d\n%s",
          st, out[-3000:])
    H.finish(srv)
