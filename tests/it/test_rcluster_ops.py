"""test_rcluster_ops.py -- the operations side of seckill on a Redis Cluster.

Each test forms its own cluster of 3 masters (harness.start_redis_cluster, as
test_rcluster.py does) and checks one feature that used to need a single Redis:
  - the sale board (/admin/api/board): both instances listed, every sale's stock and buyer
    count read on the master owning its voucher (vouchers on every master);
  - sync mode's locks (src/lockmap.c: rlock routed to the master owning each lock's slot):
    two `seckill redis lock-check` processes contend for 12 locks spread over every master;
    each critical section is a non-atomic GET/sleep/SET of a counter beside its lock, so the
    counters must equal the acquisitions the processes report, with no overlap seen. A
    control run with a lease shorter than the critical section must see the overlaps (the
    check can fail); a lock sent to the wrong master would be refused (MOVED) and show as
    errors and locks never acquired;
  - a sync-mode sale (per-user lock on the cluster, then SQL) across two instances: exactly
    the stock sold, one order per user, in SQL; no lock key left on any master;
"""

import json
import threading

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)   # the Redis side is under test; a cluster costs ~6 s to form


def _spread_vouchers(srv, cluster, n, stock):
    """n vouchers whose slots cover every master; returns (ids, {id: master port})."""
    vids = [H.create_seckill(srv, stock=stock) for _ in range(n)]
    owners = {v: cluster.node_for(H.k_voucher(v)).port for v in vids}
    eq(set(owners.values()), {r.port for r in cluster.masters()}, "masters of the vouchers")
    return vids, owners


def _board(srv):
    h = H.Http(srv.port)
    try:
        return h.api("GET", "/admin/api/board", admin=srv.admin_token)
    finally:
        h.close()


@H.timeout(120)
def test_board_on_redis_cluster():
    cluster = H.start_redis_cluster(masters=3, replicas=0)
    s1 = H.start_server(cluster.url, name="board-c1", settings={"rate_user_seckill": "0"})
    s2 = H.start_server(cluster.url, name="board-c2", threads=1,
                        data_dir=H.subdir("inst-2"), db_path=s1.db_path,
                        admin_token=s1.admin_token)
    tokens = H.login_many(s1, cluster, 12)
    vids, owners = _spread_vouchers(s1, cluster, 9, stock=5)
    bought = {}
    for i, v in enumerate(vids):
        n = i % 4                                   # 0..3 buyers: a different count each
        for u in range(n):
            st, j = H.seckill(s1 if u % 2 else s2, tokens[u], v)
            check(j.get("success"), "buy %d by user %d: %r", v, u, j)
        bought[v] = n

    # Both instances announce (once a second) on the {board} slot's master.
    def both():
        st, j = _board(s1)
        return st == 200 and {i["name"] for i in j["data"]["instances"]} == {"board-c1",
                                                                              "board-c2"}
    H.wait_until(both, 15, what="both instances on the board")
    for srv in (s1, s2):
        st, j = _board(srv)
        eq(st, 200, "board data on a Redis Cluster via %s" % srv.name)
        sales = {s["id"]: s for s in j["data"]["sales"]}
        eq(set(sales), set(vids), "sales on the board")
        for v in vids:
            eq(sales[v]["stock"], 5 - bought[v], "voucher %d stock (master %d)" % (v, owners[v]))
            eq(sales[v]["buyers"], bought[v], "voucher %d buyers" % v)
            check(sales[v]["begin"] is not None and sales[v]["end"] is not None,
                  "voucher %d window: %r", v, sales[v])
    board_keys = cluster.cmd("SMEMBERS", "seckill:{board}:instances")
    eq(sorted(board_keys), ["board-c1", "board-c2"], "announcement set")
    h = H.Http(s1.port)
    st, j = h.api("GET", "/admin/api/board")
    h.close()
    eq(st, 403, "no data without the token")
    H.finish(s1)
    H.finish(s2)


# ---------------------------------------------------------------------------------------
# sync mode's locks on the cluster

def _lock_check(cluster, nprocs, *extra):
    """nprocs `seckill redis lock-check --json` at once; their parsed reports."""
    outs, errs = [None] * nprocs, []

    def one(i):
        try:
            rc, out, err = H.run_tool(["redis", "lock-check", "--redis", cluster.url, "--json",
                                       "--locks", 12] + list(extra), timeout=90)
            outs[i] = (rc, json.loads(out), err)
        except Exception as e:      # reported below
            errs.append(repr(e))
    ts = [threading.Thread(target=one, args=(i,)) for i in range(nprocs)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(not errs, "lock-check runs failed: %s", errs)
    return outs


def _counters(cluster, n, prefix="lockcheck"):
    return {"%s:%d" % (prefix, i): int(cluster.cmd("GET", "seckill:lockcheck:{%s:%d}:n" %
                                                   (prefix, i)) or 0)
            for i in range(n)}


@H.timeout(150)
def test_rlock_mutual_exclusion_on_cluster():
    cluster = H.start_redis_cluster(masters=3, replicas=0)
    names = ["lockcheck:%d" % i for i in range(12)]
    homes = {n: cluster.node_for("rlock:{%s}" % n).port for n in names}
    eq(set(homes.values()), {r.port for r in cluster.masters()}, "masters of the 12 locks")

    runs = _lock_check(cluster, 2, "--threads", 6, "--seconds", 4, "--hold-ms", 2)
    got = _counters(cluster, 12)
    total = {n: sum(j["locks"][n] for _, j, _ in runs) for n in names}
    H.log("lock-check: %r" % ([j for _, j, _ in runs],))
    for rc, j, err in runs:
        eq((j["overlaps"], j["lost"], j["errors"], j["section_errors"]), (0, 0, 0, 0),
           "overlaps, lost locks, errors of one process (stderr %s)" % err[-500:])
        eq(rc, 0, "lock-check exit status")
    for n in names:
        check(total[n] > 0, "lock %s (master %d) never acquired", n, homes[n])
        eq(got[n], total[n], "counter of %s vs acquisitions of both processes" % n)
    check(sum(total.values()) >= 100, "too few critical sections to mean anything: %d",
          sum(total.values()))
    for r in cluster.masters():
        # every lock released; each lock's fencing counter (rlock keeps it) on the master
        # that owns the lock's slot, and nowhere else
        eq(r.cmd("KEYS", "rlock:*}"), [], "lock keys left on master %d" % r.port)
        eq(sorted(r.cmd("KEYS", "rlock:*:fence")),
           sorted("rlock:{%s}:fence" % n for n in names if homes[n] == r.port),
           "lock fencing counters on master %d" % r.port)

    # The control: leases shorter than the critical section let two holders in; the same
    # check must see it.
    bad = _lock_check(cluster, 2, "--prefix", "leaky", "--threads", 6, "--seconds", 2,
                      "--hold-ms", 30, "--lease-ms", 5)
    got = _counters(cluster, 12, "leaky")
    sums = sum(j["acquired"] for _, j, _ in bad)
    overlaps = sum(j["overlaps"] for _, j, _ in bad)
    H.log("control: %d overlaps, %d sections, counters sum %d" % (overlaps, sums,
                                                                   sum(got.values())))
    check(overlaps > 0 and sum(got.values()) < sums,
          "leases shorter than the section: no overlap seen (%d) or no lost increment "
          "(%d counted, %d acquisitions)", overlaps, sum(got.values()), sums)


@H.timeout(180)
def test_sync_mode_sale_on_cluster_two_instances():
    cluster = H.start_redis_cluster(masters=3, replicas=0)
    settings = {"mode": "sync", "rate_user_seckill": "0"}
    s1 = H.start_server(cluster.url, name="sync-c1", settings=settings)
    s2 = H.start_server(cluster.url, name="sync-c2", settings=settings,
                        data_dir=H.subdir("inst-2"), db_path=s1.db_path,
                        admin_token=s1.admin_token)
    users, stock = 150, 60
    tokens = H.login_many(s1, cluster, users)
    uids = H.user_ids(cluster, tokens)
    lock_homes = {cluster.node_for("rlock:{order:%d}" % u).port for u in uids}
    eq(lock_homes, {r.port for r in cluster.masters()}, "masters holding the users' locks")
    vid = H.create_seckill(s1, stock=stock)
    recs = H.run_sale(s1, vid, tokens, attempts=3, ports=[s1.port, s2.port, s2.port])
    H.log("sync mode on the cluster: %r" % H.summarize(recs))
    bad = [x for x in recs if not x.ok and (x.status != 200 or
                                            x.msg not in (H.MSG_SOLD_OUT, H.MSG_DUPLICATE))]
    check(not bad, "%d unexpected replies, e.g. %r", len(bad), bad[:5])
    succ = [x for x in recs if x.ok]
    eq(len(succ), stock, "requests answered success")
    eq(len({x.user for x in succ}), stock, "distinct users answered success")
    db = s1.db()
    rows = db.orders(vid)
    eq(len(rows), stock, "orders in SQL")
    eq(db.per_user_max(vid), 1, "orders of the busiest user")
    eq({x.j["data"] for x in succ}, {row[0] for row in rows}, "answered ids vs SQL orders")
    eq(db.stock(vid), 0, "SQL stock")
    for r in cluster.masters():
        eq(r.cmd("KEYS", "rlock:*}"), [], "lock keys left on master %d" % r.port)
    H.finish(s1)
    H.finish(s2)
