"""test_rcluster_ops.py -- the operations side of seckill on a Redis Cluster.

Each test forms its own cluster of 3 masters (harness.start_redis_cluster, as
test_rcluster.py does) and checks one feature that used to need a single Redis:
  - the sale board (/admin/api/board): both instances listed, every sale's stock and buyer
    count read on the master owning its voucher (vouchers on every master), and a voucher
    with 3 stock buckets (one per master) shown with its summed stock and buyers;
  - sync mode's locks (src/sale/lockmap.c: rlock routed to the master owning each lock's slot):
    two `seckill redis lock-check` processes contend for 12 locks spread over every master;
    each critical section is a non-atomic GET/sleep/SET of a counter beside its lock, so the
    counters must equal the acquisitions the processes report, with no overlap seen. A
    control run with a lease shorter than the critical section must see the overlaps (the
    check can fail); a lock sent to the wrong master would be refused (MOVED) and show as
    errors and locks never acquired;
  - a lock's master dies before its replica has the lock (replication link broken, then
    kill -9; the replica is promoted): a process that saw the failover grants no lock of
    those slots for one lease (quarantine), so the dead master's holder, still inside, is
    never joined by a second holder (hold intervals on CLOCK_MONOTONIC compared across the
    processes). The control, the same failover with --quarantine-ms 0, must see the two
    holders overlap;
  - resharding a lock's slot while two processes contend for it (`redis-cli --cluster
    reshard`): the lock follows its slot (MIGRATE carries it; MOVED leads to the new
    owner), no overlap, the counter equals the acquisitions, acquisitions go on after the
    move, and the move is not taken for a failover (no quarantine);
  - a sync-mode sale (per-user lock on the cluster, each acquire WAITing for its master's
    replica, then SQL) across two instances: exactly the stock sold, one order per user, in
    SQL; no lock key left on any master;
  - Redis data loss on a cluster (src/rebuild/rebuild.c, rebuild_watch.c): FLUSHALL of the master
    holding a voucher's slot after orders were written, then of every master: the service
    republishes the vouchers from SQL (stock = SQL's, buyers = SQL's orders), the sale goes
    on to exactly its stock, one order per user, audit clean; `seckill redis rebuild
    --dry-run` against a flushed cluster writes nothing, the real run rebuilds once;
  - the stream registry seckill:streams lives on one master: FLUSHALL of that master alone
    (two vouchers' streams on the other masters, untouched) -- the rebuild watch lists
    their streams again, and a sale after it puts every admitted order in SQL, audit clean.
"""

import json
import os
import subprocess
import threading
import time

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
    # A voucher with 3 stock buckets, one on each master: the board sums the buckets.
    bvid = H.create_seckill(s1, stock=12, stockBuckets=3)
    for u in range(6):
        st, j = H.seckill(s2 if u % 2 else s1, tokens[u], bvid)
        check(j.get("success"), "buy bucketed %d by user %d: %r", bvid, u, j)

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
        eq(set(sales), set(vids) | {bvid}, "sales on the board")
        eq((sales[bvid]["stock"], sales[bvid]["buyers"]), (6, 6),
           "bucketed voucher %d: stock and buyers over its masters" % bvid)
        eq(sales[bvid].get("buckets"), 3, "bucketed voucher %d: buckets" % bvid)
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


@H.serial   # the control run needs a lease shorter than a timed section
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


def _prefix_on(cluster, master):
    """A lock-check prefix P whose lock P:0 lives on master."""
    for k in range(2000):
        if cluster.node_for("rlock:{fo%d:0}" % k).port == master.port:
            return "fo%d" % k
    raise H.TestFailure("no lock name found on master %d" % master.port)


def _intervals(path):
    with open(path) as f:
        return [(int(a), int(b)) for _, a, b in (line.split() for line in f)]


def _lock_check_proc(cluster, out, *extra):
    argv = [H.binary(), "redis", "lock-check", "--redis", cluster.url, "--json", "--locks", "1",
            "--lease-ms", "12000", "--timeout-ms", "1000", "--intervals", out] + \
        [str(x) for x in extra]
    H.log("run: " + " ".join(argv[1:]))
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=H.san_env(), cwd=H.tmpdir())


def _failover_under_lock(cluster, master, quarantine):
    """A holds P:0 on master, which dies before its replica has the lock; B, started
    before the promotion, wants P:0. Returns (overlap of A's and B's holds in us, B's
    report)."""
    prefix = _prefix_on(cluster, master)
    replica = cluster.replica_of(master)
    d = H.tmpdir()
    fa, fb = os.path.join(d, prefix + "-a"), os.path.join(d, prefix + "-b")
    # The replication link breaks (the replica cannot log in again) before A takes the
    # lock, so the promoted replica will not know it.
    replica.cmd("CONFIG", "SET", "masterauth", "not-the-password")
    master.cmd("CLIENT", "KILL", "TYPE", "replica")
    a = _lock_check_proc(cluster, fa, "--prefix", prefix, "--threads", 1, "--seconds", 1,
                         "--hold-ms", 6000)
    H.wait_until(lambda: master.cmd("EXISTS", "seckill:lockcheck:{%s:0}:in" % prefix) == 1,
                 20, what="A inside its critical section")
    master.kill()
    b = _lock_check_proc(cluster, fb, "--prefix", prefix, "--threads", 2, "--seconds", 5,
                         "--hold-ms", 10, "--wait-ms", 1000,
                         *(["--quarantine-ms", 0] if not quarantine else []))
    H.wait_until(lambda: replica.cmd("ROLE")[0] == "master", 30, interval=0.1,
                 what="replica %d promoted" % replica.port)
    replica.cmd("CONFIG", "SET", "masterauth", "")
    master.start()          # back as a replica of the promoted one
    outs = []
    for p in (a, b):
        out, err = p.communicate(timeout=90)
        outs.append(out.decode())
        for m in H.SANITIZER_MARKERS:
            check(m not in err.decode(), "sanitizer report from lock-check:\n%s", err.decode())
    cluster.wait_ok(30)
    ia, ib = _intervals(fa), _intervals(fb)
    check(ia, "A never held the lock: %s", outs[0])
    overlap = sum(max(0, min(a1, b1) - max(a0, b0)) for a0, a1 in ia for b0, b1 in ib)
    jb = json.loads(outs[1])
    H.log("quarantine %s: A held %r, B held %d times (%r); overlap %d us" % (
        quarantine, ia, len(ib), {k: jb[k] for k in ("acquired", "failovers", "quarantined",
                                                     "errors")}, overlap))
    return overlap, jb


@H.serial   # leases against a failover in cluster-node-timeout
@H.timeout(150)
def test_rlock_failover_never_two_holders():
    cluster = H.start_redis_cluster(masters=3, replicas=1)
    x, y = cluster.masters()[:2]
    # The control first: without the quarantine the promoted replica grants the lock the
    # dead master's holder still has.
    overlap, _ = _failover_under_lock(cluster, x, quarantine=False)
    check(overlap > 0, "the control saw no second holder: the scenario does not test anything")
    overlap, jb = _failover_under_lock(cluster, y, quarantine=True)
    eq(overlap, 0, "microseconds two processes held the same lock across the failover")
    check(jb["failovers"] >= 1 and jb["quarantined"] > 0,
          "the failover was not noticed or no acquire was held back: %r", jb)


def _overlaps(paths):
    """Holds of one lock (every process's --intervals file) that began before another
    ended."""
    iv = sorted(x for p in paths for x in _intervals(p))
    bad, end = 0, 0
    for a, b in iv:
        bad += a < end
        end = max(end, b)
    return bad, iv


@H.timeout(150)
def test_rlock_reshard_lock_follows_its_slot():
    cluster = H.start_redis_cluster(masters=3, replicas=0)
    # A lock whose slot is near the start of its master's range, so that moving the first
    # slots of that master (what reshard moves) moves it, and not thousands more.
    prefix = offset = src = None
    for k in range(3000):
        slot = cluster.cmd("CLUSTER", "KEYSLOT", "rlock:{rs%d:0}" % k)
        for lo, hi, port, nid in cluster.slot_ranges():
            if lo <= slot <= hi and slot - lo < 300:
                prefix, offset, src = "rs%d" % k, slot - lo, (port, nid)
        if prefix:
            break
    check(prefix is not None, "no lock name near the start of a slot range")
    dst = next((port, nid) for _, _, port, nid in cluster.slot_ranges() if port != src[0])
    d = H.tmpdir()
    files = [os.path.join(d, "%s-%d" % (prefix, i)) for i in range(2)]
    procs = [_lock_check_proc(cluster, f, "--prefix", prefix, "--threads", 4, "--seconds", 8,
                              "--hold-ms", 5, "--wait-ms", 2000, "--lease-ms", 5000)
             for f in files]
    counter = "seckill:lockcheck:{%s:0}:n" % prefix
    H.wait_until(lambda: int(cluster.cmd("GET", counter) or 0) >= 20, 20,
                 what="the lock changing hands")
    p = subprocess.run(["redis-cli", "--cluster", "reshard", "127.0.0.1:%d" % src[0],
                        "--cluster-from", src[1], "--cluster-to", dst[1],
                        "--cluster-slots", str(offset + 1), "--cluster-yes"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    check(p.returncode == 0, "reshard failed: %s", p.stdout.decode(errors="replace")[-2000:])
    moved_at = time.monotonic_ns() // 1000
    eq(cluster.node_for("rlock:{%s:0}" % prefix).port, dst[0], "owner of the lock's slot")
    outs = []
    for pr in procs:
        out, err = pr.communicate(timeout=90)
        for m in H.SANITIZER_MARKERS:
            check(m not in err.decode(), "sanitizer report from lock-check:\n%s", err.decode())
        outs.append(json.loads(out.decode()))
    H.log("reshard of %d slots; lock-check: %r" % (offset + 1, outs))
    bad, iv = _overlaps(files)
    eq(bad, 0, "holds that began before the previous one ended")
    eq(int(cluster.cmd("GET", counter) or 0), sum(j["acquired"] for j in outs),
       "counter (moved with the slot) vs acquisitions")
    after = sum(1 for a, _ in iv if a > moved_at)
    check(after > 0, "no acquisition after the slot moved")
    for j in outs:
        eq((j["overlaps"], j["failovers"], j["quarantined"]), (0, 0, 0),
           "overlaps, failovers seen, quarantined acquires (a reshard is not a failover)")
    check(sum(j["retries"] for j in outs) > 0, "no acquire was redirected: the test did "
          "not exercise the move")


@H.timeout(180)
def test_sync_mode_sale_on_cluster_two_instances():
    # With replicas and --redis-wait-replicas 1: every lock acquire also WAITs for its
    # master's replica (rlock's replica sync), the path that keeps locks across failover.
    cluster = H.start_redis_cluster(masters=3, replicas=1)
    settings = {"mode": "sync", "rate_user_seckill": "0", "redis_wait_replicas": 1}
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
    waits = 0
    for r in cluster.masters():
        eq(r.cmd("KEYS", "rlock:*}"), [], "lock keys left on master %d" % r.port)
        for line in r.cmd("INFO", "commandstats").splitlines():
            if line.startswith("cmdstat_wait:"):
                waits += int(line.split("calls=")[1].split(",")[0])
    check(waits >= stock, "WAITs on the masters: %d, fewer than the orders", waits)
    H.finish(s1)
    H.finish(s2)


# ---------------------------------------------------------------------------------------
# Redis data loss on a cluster: rebuild from SQL

def _buy(srv, vid, tokens, users, attempts=2):
    recs = H.run_sale(srv, vid, tokens, attempts=attempts, users=users, nthreads=8)
    bad = [x for x in recs if not x.ok and x.msg not in (H.MSG_SOLD_OUT, H.MSG_DUPLICATE)]
    check(not bad, "unexpected answers: %r", bad[:5])
    return {x.user for x in recs if x.ok}


def _rebuilt(cluster, srv, vid, stock, sold, epoch):
    H.wait_until(lambda: H.voucher_present(cluster, vid), 20, what="voucher %d republished" % vid)
    eq(int(cluster.cmd("HGET", H.k_voucher(vid), "stock")), stock - sold,
       "voucher %d rebuilt stock" % vid)
    eq(cluster.cmd("HLEN", H.k_buyers(vid)), sold, "voucher %d rebuilt buyers" % vid)
    eq(H.rebuild_epoch(srv, vid), epoch, "voucher %d SQL generation" % vid)


def _sold_out_clean(cluster, srv, vid, stock, before, after):
    db = srv.db()
    eq(H.wait_drained(srv, cluster, vid, 60), stock, "voucher %d orders (sold out)" % vid)
    eq(db.per_user_max(vid), 1, "voucher %d orders per user at most" % vid)
    check(not (before & after), "voucher %d: buyers with an order bought again: %r", vid,
          sorted(before & after)[:5])
    rc, out = H.audit(cluster, srv.db_url, vid, wait_drain=30)
    check(rc == 0, "audit of voucher %d after the rebuild:\n%s", vid, out[-3000:])


@H.timeout(180)
def test_rebuild_after_master_flush_on_cluster():
    cluster = H.start_redis_cluster(masters=3, replicas=0)
    srv = H.start_server(cluster.url, name="rb-c1", settings={"rate_user_seckill": "0"})
    users, stock = 90, 30
    tokens = H.login_many(srv, cluster, users)
    vids = [H.create_seckill(srv, stock=stock) for _ in range(12)]
    homes = {v: cluster.node_for(H.k_voucher(v)) for v in vids}
    hot = vids[0]
    other = next(v for v in vids if homes[v].port != homes[hot].port)
    before = {hot: _buy(srv, hot, tokens, range(20), attempts=1),
              other: _buy(srv, other, tokens, range(10, 22), attempts=1)}
    eq((len(before[hot]), len(before[other])), (20, 12), "first round buyers")
    for v in (hot, other):
        H.wait_drained(srv, cluster, v, 60)

    # 1. The master holding the hot voucher's slot loses everything; the other is untouched.
    homes[hot].cmd("FLUSHALL")
    _rebuilt(cluster, srv, hot, stock, 20, 1)
    eq(H.rebuild_epoch(srv, other), 0, "the other master's voucher was not rebuilt")
    tokens = H.login_many(srv, cluster, users)     # logins on that master went too
    after = _buy(srv, hot, tokens, range(users))
    _sold_out_clean(cluster, srv, hot, stock, before[hot], after)

    # 2. Every master loses everything: both vouchers come back from SQL.
    for r in cluster.masters():
        r.cmd("FLUSHALL")
    _rebuilt(cluster, srv, other, stock, 12, 1)
    _rebuilt(cluster, srv, hot, stock, stock, 2)
    tokens = H.login_many(srv, cluster, users)
    after = _buy(srv, other, tokens, range(users))
    _sold_out_clean(cluster, srv, other, stock, before[other], after)
    H.finish(srv)


@H.timeout(150)
def test_stream_registry_lost_with_its_master_on_cluster():
    cluster = H.start_redis_cluster(masters=3, replicas=0)
    srv = H.start_server(cluster.url, name="rb-c3", settings={"rate_user_seckill": "0"})
    users, stock = 15, 10
    reg = cluster.node_for("seckill:streams")
    vids = []
    while len(vids) < 2:    # two vouchers whose streams live on other masters than the registry
        v = H.create_seckill(srv, stock=stock)
        if cluster.node_for(H.k_stream(v)).port != reg.port:
            vids.append(v)

    def listed():
        return all(reg.cmd("SISMEMBER", "seckill:streams", str(v)) == 1 for v in vids)

    check(listed(), "vouchers %r not in seckill:streams after their creation", vids)
    # Only the registry's master loses its data: the vouchers' own keys are untouched, so
    # nothing is rebuilt; the watch must list their streams again or no writer reads them.
    reg.cmd("FLUSHALL")
    H.wait_until(listed, 15, what="seckill:streams listing vouchers %r again" % vids)
    tokens = H.login_many(srv, cluster, users)     # logins on that master went too
    for v in vids:
        bought = _buy(srv, v, tokens, range(users))
        eq(len(bought), stock, "voucher %d buyers" % v)
        _sold_out_clean(cluster, srv, v, stock, set(), bought)
        eq(H.rebuild_epoch(srv, v), 0, "voucher %d was not rebuilt" % v)
    H.finish(srv)


@H.timeout(150)
def test_operator_rebuild_dry_run_on_cluster():
    cluster = H.start_redis_cluster(masters=3, replicas=0)
    srv = H.start_server(cluster.url, name="rb-c2", settings={"rate_user_seckill": "0"})
    tokens = H.login_many(srv, cluster, 10)
    vids = [H.create_seckill(srv, stock=8) for _ in range(6)]
    masters = {cluster.node_for(H.k_voucher(v)).port for v in vids}
    check(len(masters) >= 2, "vouchers on %d masters only", len(masters))
    for i, v in enumerate(vids):
        _buy(srv, v, tokens, range(i % 4), attempts=1)
        H.wait_drained(srv, cluster, v, 60)
    srv.stop()
    for r in cluster.masters():
        r.cmd("FLUSHALL")

    def tool(*extra):
        p = subprocess.run([H.binary(), "redis", "rebuild", "--redis", cluster.url, "--db",
                            srv.db_url] + list(extra), capture_output=True, env=H.san_env(),
                           timeout=60)
        return p.returncode, p.stdout.decode() + p.stderr.decode()

    rc, out = tool("--dry-run")
    eq(rc, 0, "dry run exit: " + out)
    for i, v in enumerate(vids):
        check("would be rebuilt: stock %d, %d buyers" % (8 - i % 4, i % 4) in out,
              "dry run output for voucher %d:\n%s", v, out)
    for r in cluster.masters():
        eq(r.cmd("DBSIZE"), 0, "keys on master %d after a dry run" % r.port)
    eq(sum(H.rebuild_epoch(srv, v) for v in vids), 0, "generations after a dry run")
    rc, out = tool()
    eq(rc, 0, "rebuild exit: " + out)
    for v in vids:
        eq(H.rebuild_epoch(srv, v), 1, "voucher %d generation after the rebuild" % v)
        eq(cluster.cmd("HLEN", H.k_buyers(v)), vids.index(v) % 4, "voucher %d buyers" % v)
    rc, out = tool()
    check(rc == 0 and "nothing to do" in out, "second run:\n%s", out)
    rc, out = H.audit(cluster, srv.db_url, wait_drain=10)
    check(rc == 0, "audit after the operator's rebuild:\n%s", out[-3000:])
