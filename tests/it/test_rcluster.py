"""test_rcluster.py -- seckill on a Redis Cluster (redis+cluster://, src/rds_cluster.c).

A cluster of 3 masters + 3 replicas on loopback (harness.start_redis_cluster, formed by
deploy/redis-cluster.sh; cluster-node-timeout 1 s), one seckill against it:
  - a sale over 30 vouchers whose slots spread over every master: every voucher sells
    exactly its stock, one order per user, every answered order is in SQL, and
    `seckill audit` (reading each voucher on its node) reports no violation.

SQLite only: the Redis side is what these tests are about, and each cluster costs ~6 s to
form, so running them twice would only double the CI cost.
"""

import threading

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)


def _sale_many(srv, cluster, vids, stock, tokens, attempts=2):
    """Every voucher's sale at once (one run_sale per voucher, in parallel)."""
    recs = {}
    errors = []

    def one(v):
        try:
            recs[v] = H.run_sale(srv, v, tokens, attempts=attempts, nthreads=4)
        except Exception as e:   # reported below, not swallowed
            errors.append("%d: %r" % (v, e))
    ts = [threading.Thread(target=one, args=(v,)) for v in vids]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(not errors, "sales failed: %s", errors[:3])
    return recs


@H.timeout(180)
def test_cluster_sale_30_vouchers_audits_clean():
    cluster = H.start_redis_cluster()
    # each buyer tries 30 vouchers at once: the per-user rate limit is not under test
    srv = H.start_server(cluster.url, name="inst-1", threads=2,
                         settings={"rate_user_seckill": "0"})
    tokens = H.login_many(srv, cluster, 40)
    stock = 12
    vids = [H.create_seckill(srv, stock=stock) for _ in range(30)]
    owners = {v: cluster.node_for(H.k_voucher(v)).port for v in vids}
    masters = {r.port for r in cluster.masters()}
    eq(set(owners.values()), masters, "masters holding the 30 vouchers")

    recs = _sale_many(srv, cluster, vids, stock, tokens)
    for v in vids:
        s = H.summarize(recs[v])
        eq(s.get("success", 0), stock, "voucher %d sold (outcomes %r)" % (v, s))
        check(set(s) <= {"success", H.MSG_SOLD_OUT, H.MSG_DUPLICATE},
              "voucher %d: unexpected answers %r", v, s)
    for v in vids:
        H.wait_drained(srv, cluster, v, timeout=60)
        H.check_sale_consistency(srv, cluster, v, stock, recs[v], tokens)
    st, out = H.audit(cluster, srv.db_url)
    check(st == 0 and "audit: 0 violations" in out, "audit on the cluster: exit %d\n%s", st,
          out[-3000:])
    H.finish(srv)
