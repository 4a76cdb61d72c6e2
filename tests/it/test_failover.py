"""test_failover.py -- a master's failover under --redis-wait-replicas 1 (docs/redis-cluster.md,
"A master died and did not come back").

A cluster of 3 masters + 3 replicas (cluster-node-timeout 1.5 s), one seckill with
--redis-wait-replicas 1, several vouchers spread over the masters, buyers retrying every
503 until a final answer. Mid-sale the master of the first voucher is killed with kill -9:
  - the orphaned master: it never comes back, so its promoted replica has no replica.
    Admissions there must be refused before they take stock (min-replicas-to-write), so per
    voucher Redis's buyers equal SQL's orders once the writer is done, and the other
    masters' vouchers sell out; the board and /metrics name the unsellable master. When a
    replica attaches to it again (CLUSTER REPLICATE of a fresh node), its vouchers sell out
    by themselves;
  - the master that returns (a supervisor restarts it: it rejoins as the promoted one's
    replica): every voucher sells exactly its stock, all in SQL, every stream's group ends
    with lag 0 and pending 0, and `seckill audit --wait-drain 60` exits 0 in seconds
    (the replica restarts mid-sale first: its full resync is what leaves Redis 7.0's
    entries-read counter stale on it; the writer sets it again);
  - the audit alone on one Redis: a stale counter made by hand does not keep a drained
    stream from counting as drained.

SQLite only: the Redis side is what these tests are about.
"""

import os
import threading
import time

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)
# run alone under tests/run.py -j: a master killed mid-sale, failed over in cluster-node-timeout
SERIAL = True

NODE_TIMEOUT_MS = 1500


def _setup(nvouchers, stock, users):
    cluster = H.start_redis_cluster(node_timeout_ms=NODE_TIMEOUT_MS)
    settings = {"rate_user_seckill": "0", "redis_timeout_ms": 1000, "redis_wait_replicas": 1}
    srv = H.start_server(cluster.url, name="inst-1", threads=2, settings=settings)
    tokens = H.login_many(srv, cluster, users)
    vids = [H.create_seckill(srv, stock=stock) for _ in range(nvouchers)]
    owner = {v: cluster.node_for(H.k_voucher(v)).port for v in vids}
    return cluster, srv, tokens, vids, owner


class Sale:
    """One RetryingBuyers per voucher, all at once."""

    def __init__(self, srv, vids, tokens, deadline_s):
        dl = time.monotonic() + deadline_s
        self.b = {v: H.RetryingBuyers(srv.port, v, tokens, nthreads=3, pace=0.02, deadline=dl)
                  for v in vids}

    def successes(self, v=None):
        vs = [v] if v is not None else list(self.b)
        return sum(1 for x in vs for r in self.b[x].snapshot() if r.ok)

    def join(self):
        for b in self.b.values():
            b.join()
        return {v: b.snapshot() for v, b in self.b.items()}


def _group(node, vid):
    """XINFO GROUPS g1 and XINFO STREAM of the voucher's stream on node, for the log."""
    g = dict()
    for x in node.cmd("XINFO", "GROUPS", H.k_stream(vid)):
        d = dict(zip(x[::2], x[1::2]))
        if d.get("name") == "g1":
            g = d
    s = node.cmd("XINFO", "STREAM", H.k_stream(vid))
    s = dict(zip(s[::2], s[1::2]))
    return {"pending": g.get("pending"), "lag": g.get("lag"),
            "entries-read": g.get("entries-read"),
            "last-delivered-id": g.get("last-delivered-id"),
            "last-generated-id": s.get("last-generated-id"),
            "entries-added": s.get("entries-added"), "length": s.get("length")}


def _replica_synced(master, replica):
    """The replica's link is up and it has everything the master wrote (ROLE offsets)."""
    try:
        role = master.cmd("ROLE")
    except (H.RedisError, OSError):
        return False
    return any(int(r[1]) == replica.port and int(r[2]) >= int(role[1]) for r in role[2])


def _kill_master_mid_sale(cluster, sale, vids, owner, stock, resync_replica=False):
    master = next(r for r in cluster.nodes if r.port == owner[vids[0]])
    replica = cluster.replica_of(master)
    H.wait_until(lambda: sale.successes(vids[0]) >= stock // 4, 30,
                 what="a quarter of the first voucher sold")
    if resync_replica:
        # the replica restarts mid-sale (kill -9, a supervisor starts it again): it loads
        # the master's snapshot (a full resync), the sale goes on once it is back
        replica.kill()
        replica.start()
        H.wait_until(lambda: _replica_synced(master, replica), 30, interval=0.1,
                     what="replica %d in sync again" % replica.port)
        # the restart forgot CONFIG SET: the writer gives the promise to it again, so it
        # keeps it once promoted
        H.wait_until(lambda: replica.cmd("CONFIG", "GET", "min-replicas-to-write")[1] == "1",
                     15, interval=0.1, what="min-replicas-to-write on the restarted replica")
        def buyers():
            return int(master.cmd("HLEN", H.k_buyers(vids[0])))
        n = buyers()
        H.wait_until(lambda: buyers() >= min(stock, n + stock // 4), 30,
                     what="the first voucher selling after the replica's return")
    master.kill()
    H.log("master %d killed (replica %d); %d successes so far" % (
        master.port, replica.port, sale.successes()))
    H.wait_until(lambda: replica.cmd("ROLE")[0] == "master", 30, interval=0.1,
                 what="replica %d promoted" % replica.port)
    return master, replica


@H.timeout(150)
def test_failover_master_returns_streams_drained():
    """The dead master returns as the promoted one's replica: every voucher exact, every
    group lag 0 / pending 0 on the promoted master, audit --wait-drain exits 0 quickly."""
    stock = 80
    cluster, srv, tokens, vids, owner = _setup(6, stock, 200)
    sale = Sale(srv, vids, tokens, 60)
    master, promoted = _kill_master_mid_sale(cluster, sale, vids, owner, stock,
                                             resync_replica=True)
    master.start()   # back as a replica of the promoted one (its nodes.conf says so)
    cluster.wait_ok(30)
    recs = sale.join()
    db = srv.db()
    for v in vids:
        # every unit sold and in SQL; an answer lost with the master (the admission had
        # reached the replica) leaves an order whose buyer heard 不能重复下单 on retry
        H.wait_until(lambda: db.order_count(v) == stock, 30, what="voucher %d in SQL" % v)
        H.check_sale_consistency(srv, cluster, v, stock, recs[v], tokens,
                                 require_all_answered=False)
        eq(int(cluster.cmd("HLEN", H.k_buyers(v))), stock, "voucher %d buyers in Redis" % v)
    moved = [v for v in vids if owner[v] == master.port]
    check(moved, "no voucher on the killed master")

    def settled():
        return all(H.group_settled(cluster, v) for v in vids)
    try:
        H.wait_until(settled, 15, interval=0.2, what="every group lag 0 and pending 0")
    finally:
        for v in moved:
            H.log("voucher %d on %d: %r" % (v, promoted.port, _group(promoted, v)))
    t0 = time.monotonic()
    st, out = H.audit(cluster, srv.db_url, wait_drain=60)
    took = time.monotonic() - t0
    H.log("audit took %.1f s" % took)
    check(st == 0 and "audit: 0 violations" in out, "audit: exit %d\n%s", st, out[-3000:])
    check(took < 20, "audit --wait-drain took %.1f s", took)
    H.finish(srv)


@H.timeout(180)
def test_failover_orphaned_master_refuses_then_resumes():
    """The dead master does not come back: its promoted replica has no replica. Its
    vouchers take no stock (every admission there is refused before it runs: Redis buyers
    stay equal to SQL orders), the other masters' vouchers sell out, /metrics and the board
    name it. A replica attaches (the old node restarted): its vouchers sell out by
    themselves, every voucher exact, audit clean."""
    stock = 40
    cluster, srv, tokens, vids, owner = _setup(6, stock, 120)
    sale = Sale(srv, vids, tokens, 90)
    master, promoted = _kill_master_mid_sale(cluster, sale, vids, owner, stock)
    orphaned = [v for v in vids if owner[v] == master.port]
    others = [v for v in vids if owner[v] != master.port]
    check(others, "every voucher on the killed master")
    db = srv.db()

    # on the orphaned master nothing is admitted that cannot be persisted: from the
    # promotion on, its vouchers' buyers stay what the replica had (the entries replicated
    # before the kill: in SQL, or pending until a replica attaches), while buyers ask
    def buyers(v):
        return int(promoted.cmd("HLEN", H.k_buyers(v)))
    cluster.wait_ok(30)
    before = {v: buyers(v) for v in orphaned}
    H.log("orphaned vouchers %r: buyers at the promotion %r" % (orphaned, before))
    n = len(sale.b[orphaned[0]].snapshot())
    H.wait_until(lambda: len(sale.b[orphaned[0]].snapshot()) >= n + 100, 20,
                 what="buyers asking the orphaned master's voucher")
    # the other masters' vouchers sell out meanwhile
    for v in others:
        H.wait_until(lambda: db.order_count(v) == stock, 60, interval=0.2,
                     what="voucher %d sold out in SQL" % v)
    unwritten = {}
    for v in orphaned:
        eq(buyers(v), before[v], "voucher %d buyers while its master has no replica" % v)
        check(before[v] < stock, "voucher %d sold out before its master died", v)
        # an entry the writer put into SQL whose ack had not reached the replica at the
        # kill stays pending here (the orphaned master refuses the ack too): written, not
        # stranded -- so the unacked orders are counted by id, less those SQL has
        in_sql = {o for o, _ in db.orders(v)}
        unwritten[v] = len(H.unacked_orders(promoted, v, ids=True) - in_sql)
        eq(buyers(v), len(in_sql) + unwritten[v], "voucher %d buyers = SQL + unwritten" % v)
    H.log("orphaned vouchers: unwritten (stranded) %r" % unwritten)
    H.wait_until(lambda: H.metric(srv, "seckill_redis_masters_short_of_replicas") == 1, 15,
                 what="the orphaned master in /metrics")
    _, board = srv.http().api("GET", "/admin/api/board", admin=srv.admin_token,
                              expect_status=200)
    short = {s["id"]: s.get("replicasShort") for s in board["data"]["sales"]}
    for v in vids:
        eq(short.get(v), v in orphaned, "voucher %d replicasShort on the board" % v)

    # the board's event log tells it once (the promotion, and the replicas below the
    # promise), not once per refused request
    def kinds():
        _, b = srv.http().api("GET", "/admin/api/board", admin=srv.admin_token,
                              expect_status=200)
        return [e.get("kind") for e in b["data"].get("events", [])]
    H.wait_until(lambda: "replicas_low" in kinds() and "failover" in kinds(), 10,
                 interval=0.2, what="the failover and the replicas below the promise in "
                                    "the board's events")
    eq(kinds().count("replicas_low"), 1, "replicas_low events while the master is short")
    for v in orphaned:
        st, out = H.audit(cluster, srv.db_url, voucher_id=v, wait_drain=0)
        row = [l for l in out.splitlines() if "stranded" in l]
        check(row, "no stranded row in the audit of voucher %d:\n%s", v, out[-2000:])
        if unwritten[v]:
            check(st == 1 and "FAIL" in row[0], "stranded admissions not a violation: %s",
                  row[0])
        H.log("audit of voucher %d: %s" % (v, row[0].strip()))

    # a replica attaches: selling resumes by itself
    master.start()
    cluster.wait_ok(30)
    H.wait_until(lambda: H.metric(srv, "seckill_redis_masters_short_of_replicas") == 0, 30,
                 what="the master with a replica again in /metrics")
    recs = sale.join()
    for v in vids:
        H.wait_until(lambda: db.order_count(v) == stock, 30, interval=0.2,
                     what="voucher %d in SQL" % v)
        H.check_sale_consistency(srv, cluster, v, stock, recs[v], tokens,
                                 require_all_answered=False)
        eq(int(cluster.cmd("HLEN", H.k_buyers(v))), stock, "voucher %d buyers in Redis" % v)
    st, out = H.audit(cluster, srv.db_url, wait_drain=60)
    check(st == 0 and "audit: 0 violations" in out, "audit: exit %d\n%s", st, out[-3000:])
    H.finish(srv)


@H.timeout(90)
def test_audit_drained_despite_a_stale_lag_counter():
    """The audit's side of the stale counter alone (one Redis, no writer running): a
    finished sale whose g1 reports lag > 0 with every entry delivered and acked -- what a
    promoted Redis 7.0 replica shows (docs/redis-cluster.md, "Drained after a promotion") --
    is drained: `seckill audit --wait-drain` exits 0 at once. The counter is set stale by
    hand (XGROUP SETID to the same id with ENTRIESREAD 0)."""
    r, srv = H.setup(settings={"rate_user_seckill": "0"})
    tokens = H.login_many(srv, r, 30)
    vid = H.create_seckill(srv, stock=20)
    recs = H.run_sale(srv, vid, tokens, attempts=1)
    H.wait_drained(srv, r, vid, timeout=30)
    H.check_sale_consistency(srv, r, vid, 20, recs, tokens)
    srv.stop()
    g = [dict(zip(x[::2], x[1::2])) for x in r.cmd("XINFO", "GROUPS", H.k_stream(vid))][0]
    r.cmd("XGROUP", "SETID", H.k_stream(vid), "g1", g["last-delivered-id"], "ENTRIESREAD", "0")
    g = [dict(zip(x[::2], x[1::2])) for x in r.cmd("XINFO", "GROUPS", H.k_stream(vid))][0]
    check(g["pending"] == 0 and g["lag"] > 0, "no stale counter made: %r", g)
    t0 = time.monotonic()
    st, out = H.audit(r, srv.db_url, voucher_id=vid, wait_drain=20)
    took = time.monotonic() - t0
    check(st == 0 and "audit: 0 violations" in out, "audit (lag %r): exit %d\n%s", g["lag"], st,
          out[-3000:])
    check(took < 10, "audit --wait-drain took %.1f s on a drained stream", took)
