"""test_rebuild_buckets_life.py -- a rebuild from SQL of a voucher in stock buckets on a Redis
Cluster reads every bucket's surviving order stream (src/rebuild/rebuild.c, docs/lifecycle.md
"After Redis lost the voucher's keys"): the orders a bucket admitted that SQL does not have
yet come back as buyers, and the decisions still in its stream (a cancel whose event the
writer has not applied) as states, so nothing admitted or decided there is lost or counted
twice. SQL is held behind (an exclusive lock on the SQLite file while the orders and the
cancels come, then kill -9 of the server), some keys are lost, `seckill redis rebuild`
runs, the server starts again and writes the streams' backlog: SQL then has every admitted
order once, each at its status, no buyer buys twice and `seckill audit` is clean.

  - one bucket's hashes lost, its stream kept, the other bucket kept whole: the lost
    bucket comes back from SQL and its own stream (partial rebuild);
  - every bucket's hashes lost, bucket 0's stream too (its orders were all in SQL), bucket
    1's stream kept: a full rebuild reads bucket 1's stream, and does not raise the Redis
    generation (which would fence bucket 1's entries in the writer).
"""

import subprocess

import harness as H
import test_buckets as B
import test_lifecycle as L
from harness import check, eq

DB_BACKENDS = ("sqlite",)   # the SQLite file lock holds SQL behind; the rebuild's SQL
                            # reads are test_rebuild_life.py's on both backends
K, STOCK = 2, 10


def _cluster_url(r):
    return "redis+cluster://127.0.0.1:%d" % r.port


def _sale(written, behind, cancel):
    """A one-node cluster and a server; a voucher in K buckets. The users in written buy and
    reach SQL; then, with SQL held, the users in behind buy and the users in cancel (of
    either group) cancel their orders: decided in Redis, their events and the orders of
    behind only in their buckets' streams. The server is then killed. Returns
    (redis, server, vid, {user: order id}, its settings, {user: token})."""
    r = H.start_one_node_cluster()
    settings = dict(L.FAST, **{"claim-idle-ms": "500"})
    srv = H.start_server(_cluster_url(r), settings=settings)
    vid = H.create_seckill(srv, stock=STOCK, stockBuckets=K)
    toks = dict(zip(written + behind, B.tokens_for(srv, written + behind)))
    h = srv.http()
    oids = {u: L._grab_until(srv, h, toks[u], vid, "user %d's grab" % u) for u in written}
    B.wait_bucket_drain(srv, r, vid, K, len(written))
    lock = H.hold_db_lock(srv)
    try:
        for u in behind:
            oids[u] = L._grab_until(srv, h, toks[u], vid, "user %d's grab (SQL held)" % u)
        for u in cancel:
            eq(L._cancel(h, toks[u], oids[u])[1]["success"], True, "cancel of user %d" % u)
        srv.kill9()
    finally:
        lock.rollback()
        lock.close()
    db = srv.db()
    eq(db.order_count(vid), len(written), "orders in SQL (SQL behind)")
    eq([L._status(db, oids[u]) for u in written], [1] * len(written),
       "statuses in SQL (the cancels' events not applied)")
    return r, srv, vid, oids, settings, toks


def _rebuild(r, srv):
    p = subprocess.run([H.binary(), "redis", "rebuild", "--redis", _cluster_url(r), "--db",
                        srv.db_url], capture_output=True, env=H.san_env(), timeout=60)
    out = p.stdout.decode() + p.stderr.decode()
    H.log(out)
    eq(p.returncode, 0, "rebuild exit: " + out)
    return out


def _audit(r, srv, vid):
    p = subprocess.run([H.binary(), "audit", "--redis", _cluster_url(r), "--db", srv.db_url,
                        "--voucher", str(vid), "--stock", str(STOCK), "--wait-drain", "30"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=H.san_env(),
                       timeout=120)
    out = p.stdout.decode("utf-8", "replace")
    H.log(out)
    check(p.returncode == 0 and "audit: 0 violations" in out, "audit: exit %d\n%s",
          p.returncode, out[-3000:])


def _check_after(r, srv, vid, oids, cancel, settings, toks):
    """Redis right after the rebuild, then SQL once the restarted server wrote the backlog:
    every admitted order once, each buyer in their home bucket, the cancels' units back
    once; the audit clean; a buyer whose order SQL lacked at the rebuild cannot buy twice."""
    held = len(oids) - len(cancel)
    buyers = B.bucket_buyers(r, vid, K)
    eq({u: o for u, (_, o) in buyers.items()}, oids, "buyers (user -> order) after the rebuild")
    eq({u: b for u, (b, _) in buyers.items()}, {u: H.bucket_home(u, K) for u in oids},
       "buyers' buckets")
    eq(sum(B.bucket_stock(r, vid, K)), STOCK - held, "the buckets' stock after the rebuild")
    keys = [H.bucket_keys(vid, b, K)["voucher"] for b in range(K)]
    eq(sum(int(r.cmd("HGET", kv, "returned") or 0) for kv in keys), len(cancel),
       "returned over the buckets")
    srv = H.restart_server(srv, settings=settings)
    db = srv.db()
    want = {o: 4 if u in cancel else 1 for u, o in oids.items()}
    H.wait_until(lambda: db.order_count(vid) == len(oids) and
                 {o: L._status(db, o) for o in want} == want, 30,
                 what="every admitted order in SQL at its status")
    eq(db.per_user_max(vid), 1, "orders per user")
    eq(db.stock(vid), STOCK - held, "SQL stock")
    _audit(r, srv, vid)
    h = srv.http()
    for u in oids:
        if u not in cancel:
            eq(H.seckill(srv, toks[u], vid, h)[1].get("errorMsg"), H.MSG_DUPLICATE,
               "user %d buying again" % u)
    H.finish(srv)


@H.timeout(120)
def test_lost_bucket_reads_its_surviving_stream():
    """Bucket 1's voucher hash, buyers and states lost, its stream kept; bucket 0 whole. Of
    bucket 1, SQL has two orders (one cancelled since, in Redis only); its stream also has
    two orders SQL lacks (one cancelled)."""
    b0 = B.users_with_home(K, 0, 3, start=6100000)
    b1 = B.users_with_home(K, 1, 4, start=6100000)
    written, behind = [b0[0], b1[0], b1[1]], [b0[1], b0[2], b1[2], b1[3]]
    cancel = [b1[0], b1[2]]
    r, srv, vid, oids, settings, toks = _sale(written, behind, cancel)
    kk = H.bucket_keys(vid, 1, K)
    r.cmd("DEL", kk["voucher"], kk["buyers"], "seckill:ostate:{%s}" % H.bucket_tag(vid, 1, K))
    out = _rebuild(r, srv)
    _check_after(r, srv, vid, oids, cancel, settings, toks)
    check("2 entries of their surviving streams not yet in SQL" in out,
          "the plan names bucket 1's stream orders:\n%s", out)


@H.timeout(120)
def test_every_bucket_lost_but_one_stream():
    """Every bucket's hashes lost, and bucket 0's stream (its orders were all in SQL);
    bucket 1's stream kept, with an order SQL lacks, a cancel of it and a cancel of an
    order SQL has: the full rebuild takes them from there and keeps the generation."""
    b0 = B.users_with_home(K, 0, 2, start=6200000)
    b1 = B.users_with_home(K, 1, 4, start=6200000)
    written, behind = b0 + b1[:2], b1[2:]
    cancel = [b1[0], b1[2]]
    r, srv, vid, oids, settings, toks = _sale(written, behind, cancel)
    ep = int(r.cmd("HGET", H.k_voucher(vid), "ep") or 0)   # absent: generation 0
    lost = [H.bucket_keys(vid, 0, K)["stream"]]
    for b in range(K):
        kk = H.bucket_keys(vid, b, K)
        lost += [kk["voucher"], kk["buyers"], "seckill:ostate:{%s}" % H.bucket_tag(vid, b, K)]
    for key in lost:   # one slot each: one DEL per key on a cluster
        r.cmd("DEL", key)
    _rebuild(r, srv)
    _check_after(r, srv, vid, oids, cancel, settings, toks)
    eq(int(r.cmd("HGET", H.k_voucher(vid), "ep")), ep, "the Redis generation (bucket 1's entries "
       "are of it)")
