"""test_cluster.py -- many `seckill serve` instances behind nginx on one Redis and one MariaDB.

The deployment of deploy/ (nginx from deploy/nginx.conf.in, upstream with keep-alive, the
course's /api prefix), on loopback: nginx + 3 instances (each its own name and port) + one
Redis + the run's MariaDB. Every sale goes through nginx, under /api as the course's pages
call it, and is checked afterwards in SQL and Redis (harness.check_sale_consistency) and by
`seckill audit`:
  - a sale: exact stock sold, one order per user across instances, every admitted order
    persisted once, and every instance took part;
  - kill -9 of one instance mid-sale while its writer holds pending entries: nginx serves
    on through the others, a live instance adopts the dead one's entries (XAUTOCLAIM);
  - a rolling restart of every instance, one by one, during a sale;
  - kill -9 of MariaDB itself mid-sale (a private one), restarted: the writers reconnect.

Order modes: each test body takes the mode, and runs for every mode that works on a
cluster: stream (Redis admission, stream, writers; checked against Redis and SQL and by the
audit) and sync (SQL under a per-user distributed lock; checked in SQL). queue keeps orders
in one process's memory, so it is not a cluster mode. A new mode gets one wrapper per body,
e.g. `def test_cluster_sale_<mode>(): _sale("<mode>")` -- the runner finds tests by their
top-level `def test_*`, so the wrappers are written out.
"""

import os
import time

import harness as H
from harness import check, eq

# A cluster needs a database many processes share: MariaDB (the run's, see tests/run.py).
DB_BACKENDS = ("mysql",)

FINAL = H.FINAL_MSGS
API = "/api"          # through nginx, as the course's pages call the API


class Cluster:
    """nginx + n instances + one Redis + one database. Looks like a Server to the API
    helpers (port, admin_token), so H.login_many(cluster, ...) goes through nginx."""

    def __init__(self, n=3, mode="stream", settings=None, threads=1, mariadb=None):
        self.redis = H.start_redis()
        self.admin_token = "adm" + H.rand_hex(29)
        if mariadb is not None:
            self.db_url = mariadb.url("cluster")
        else:
            self.db_url = H.db_url_for(os.path.join(H.subdir("cluster"), "seckill.db"))
        self.settings = dict(settings or {})
        self.settings["mode"] = mode
        self.threads = threads
        self.servers = [self.start_instance(i) for i in range(1, n + 1)]
        self.nginx = H.start_nginx(["127.0.0.1:%d" % s.port for s in self.servers])
        self.port = self.nginx.port

    def start_instance(self, i, port=None):
        return H.start_server(self.redis, name="inst-%d" % i, settings=self.settings,
                              threads=self.threads, data_dir=H.subdir("inst-%d" % i),
                              db_url=self.db_url, admin_token=self.admin_token, port=port)

    def restart(self, k):
        """Clean stop (exit 0 checked) and start again: same name, same port. Then wait
        until nginx takes it back: it left the instance out for NGINX_FAIL_TIMEOUT_S after
        the failed connection (no active health checks), so stopping the next instance
        sooner could leave nginx with none it trusts ("no live upstreams", 502). This is the
        rolling-restart procedure of docs/cluster.md."""
        old = self.servers[k]
        old.stop()
        self.servers[k] = H.restart_server(old, name=old.name, settings=self.settings,
                                           threads=self.threads)
        t0 = time.monotonic()
        H.wait_until(lambda: time.monotonic() - t0 > H.NGINX_FAIL_TIMEOUT_S + 0.5, 10)
        return self.servers[k]

    def db(self):
        return H.Db(self.db_url)

    def live(self):
        return [s for s in self.servers if s.running()]

    def metric(self, name):
        """Sum of a counter over the live instances."""
        total = 0
        for s in self.live():
            h = s.http()
            try:
                st, _, body = h.request("GET", "/metrics")
            finally:
                h.close()
            check(st == 200, "GET /metrics on %s: %d", s.name, st)
            for line in body.decode().splitlines():
                if line.startswith(name + " ") or line.startswith(name + "{"):
                    total += float(line.split()[-1])
        return total

    def finish(self):
        h = H.Http(self.port, timeout=10)
        try:
            st, _, body = h.request("GET", API + "/health")
        finally:
            h.close()
        check(st == 200, "GET /api/health through nginx at the end: %d %r", st, body[:200])
        for s in self.live():
            H.finish(s)
        self.nginx.stop()


def consumers(redis, vid):
    """{consumer name: pending} of the voucher's stream group."""
    out = {}
    for c in redis.cmd("XINFO", "CONSUMERS", H.k_stream(vid), "g1"):
        d = dict(zip(c[::2], c[1::2]))
        out[d["name"]] = int(d.get("pending", 0))
    return out


def stuck(redis, vid, name, idle_ms=200):
    """How many of consumer name's pending entries have been idle >= idle_ms: with the
    database locked, entries the writer cannot commit (one it is still acking after the
    commit that came just before the lock is not idle that long)."""
    return len(redis.cmd("XPENDING", H.k_stream(vid), "g1", "IDLE", idle_ms, "-", "+", 1000,
                         name))


def slot_of(order_id):
    return (order_id >> 22) & 1023


def check_audit(cl, vid):
    rc, out = H.audit(cl.redis, cl.db_url, vid)
    H.log("seckill audit: exit %d\n%s" % (rc, "\n".join(out.splitlines()[-15:])))
    eq(rc, 0, "seckill audit exit status (0 = every invariant holds)")


def verify(cl, mode, vid, stock, recs, tokens, all_answered=True):
    """After a sale: the invariants, for the mode. Returns the number of orders.
    stream: the writers drain the stream, then Redis and SQL must agree on everything
    (harness.check_sale_consistency) and `seckill audit` must pass. A mode without a stream
    (sync: orders are written in the request) is checked in SQL alone: no oversell, one
    order per user, every order answered success is there for the user who asked, and the
    SQL stock is what is left."""
    db = cl.db()
    if mode == "stream":
        H.wait_drained(db, cl.redis, vid, 90)
        n = H.check_sale_consistency(db, cl.redis, vid, stock, recs, tokens,
                                     require_all_answered=all_answered)
        check_audit(cl, vid)
        return n
    rows = db.orders(vid)
    n = len(rows)
    check(n <= stock, "OVERSELL: %d orders for stock %d", n, stock)
    check(db.per_user_max(vid) <= 1, "a user has more than one order")
    check(len({r[0] for r in rows}) == n, "duplicate order ids in SQL")
    sql_user = dict(rows)
    succ = [x for x in recs if x.ok]
    uids = H.user_ids(cl.redis, [tokens[x.user] for x in succ]) if succ else []
    wrong = [(x.j["data"], u, sql_user.get(x.j["data"])) for x, u in zip(succ, uids)
             if sql_user.get(x.j["data"]) != u]
    check(not wrong, "answered orders missing or stored for another user: %r", wrong[:5])
    if all_answered:
        eq(n, len(succ), "orders in SQL vs answered success")
    eq(db.stock(vid), stock - n, "SQL stock (initial - orders)")
    return n


def retry_sale(port, vid, tokens, users, nthreads, deadline, pace, timeout=10.0):
    """harness.RetryingBuyers through port (nginx) under /api: returns (threads, recs);
    recs fills while the threads run."""
    b = H.RetryingBuyers(port, vid, tokens, nthreads=nthreads, pace=pace,
                         client_timeout=timeout, users=users, deadline=deadline, prefix=API)
    return b.threads, b.recs


def final_answers(recs):
    final = {}
    for x in recs:
        if x.ok or x.msg in FINAL:
            final.setdefault(x.user, x.msg)
    return final


# ---------------------------------------------------------------------------------------
# bodies (one per scenario, parametrised by order mode)

def _sale(mode):
    cl = Cluster(3, mode)
    users, stock = 600, 200
    tokens = H.login_many(cl, cl.redis, users)          # through nginx (bare paths)
    vid = H.create_seckill(cl, stock=stock)
    recs = H.run_sale(cl.port, vid, tokens, attempts=2, nthreads=60, prefix=API)
    H.log("outcomes through nginx: %r" % H.summarize(recs))
    bad = [x for x in recs if not x.ok and (x.status != 200 or x.msg not in FINAL)]
    check(not bad, "%d unexpected replies, e.g. %r", len(bad), bad[:5])
    succ = [x for x in recs if x.ok]
    eq(len(succ), stock, "requests answered success")
    eq(len({x.user for x in succ}), stock, "distinct users answered success")
    slots = {slot_of(x.j["data"]) for x in succ}
    eq(len(slots), 3, "instances (order-id slots) that admitted orders")
    eq(verify(cl, mode, vid, stock, recs, tokens), stock, "orders in SQL")
    eq(cl.db().stock(vid), 0, "tb_seckill_voucher.stock")
    if mode == "stream":
        eq(cl.metric("seckill_orders_persisted_total"), stock,
           "orders persisted, summed over the instances' writers")
    cl.finish()


def _kill9_instance(mode):
    cl = Cluster(3, mode, settings={"claim_idle_ms": 1000})
    users, stock = 800, 600
    tokens = H.login_many(cl, cl.redis, users)
    vid = H.create_seckill(cl, stock=stock)
    victim = cl.servers[1]
    deadline = time.monotonic() + 120
    # ~200 admissions/s: the sale lasts seconds, long enough for all that follows
    ts, recs = retry_sale(cl.port, vid, tokens, list(range(users)), 20, deadline, 0.1)
    H.wait_until(lambda: sum(1 for x in list(recs) if x.ok) >= 40, 30,
                 interval=0.005, what="40 orders answered")
    held = 0
    if mode == "stream":
        # Stall every writer on SQL, so the victim is sure to die holding pending entries.
        lock = H.hold_db_lock(cl.db_url)
        try:
            # Entries idle 200 ms behind the lock, not merely pending: one read just
            # before the lock and committed with it is acked a moment later.
            H.wait_until(lambda: stuck(cl.redis, vid, victim.name), 20, interval=0.02,
                         what="entries stuck in %s's writer behind the lock" % victim.name)
            victim.kill9()
            t_kill = time.monotonic()
            # dead now: what it holds can only be adopted
            held = consumers(cl.redis, vid).get(victim.name, 0)
            H.log("kill -9 %s holding %d pending entries" % (victim.name, held))
            H.wait_until(lambda: time.monotonic() - t_kill > 1.0, 5)   # the sale runs on
        finally:
            lock.rollback()
            lock.close()
    else:
        victim.kill9()
        t_kill = time.monotonic()
        H.log("kill -9 %s" % victim.name)
    for t in ts:
        t.join()
    H.log("outcomes: %r" % H.summarize(recs))
    eq(len(final_answers(recs)), users, "users with a definitive answer")
    errors = [x for x in recs if not (x.ok or x.msg in FINAL)]
    late = [x for x in errors if x.t_send > t_kill + 2.0]
    check(not late, "nginx did not serve on through the others: %d failures more than 2 s "
          "after the kill, e.g. %r", len(late), late[:5])
    H.log("%d failed tries of %d (all within 2 s of the kill)" % (len(errors), len(recs)))
    # replies lost in the kill may leave orders nobody heard of: not all answered
    n = verify(cl, mode, vid, stock, recs, tokens, all_answered=False)
    eq(n, stock, "orders in SQL (demand exceeds stock)")
    if mode == "stream":
        # the dead consumer's entries were adopted by a live one
        eq(consumers(cl.redis, vid).get(victim.name, 0), 0,
           "entries left with the dead consumer")
        claimed = cl.metric("seckill_writer_claimed_total")
        check(claimed >= held, "live instances adopted %d entries, the dead one held %d",
              claimed, held)
    cl.finish()


def _rolling_restart(mode):
    cl = Cluster(3, mode)
    users, stock = 600, 400
    tokens = H.login_many(cl, cl.redis, users)
    vid = H.create_seckill(cl, stock=stock)
    deadline = time.monotonic() + 150
    # ~60 admissions/s: the sale outlasts three restarts (about 2 s each, the wait included)
    ts, recs = retry_sale(cl.port, vid, tokens, list(range(users)), 12, deadline, 0.2)
    for k in range(3):
        goal = 60 + 80 * k
        H.wait_until(lambda: sum(1 for x in list(recs) if x.ok) >= goal, 60,
                     interval=0.01, what="%d orders answered" % goal)
        t0 = time.monotonic()
        s = cl.restart(k)
        H.log("restarted %s (%.1fs) at %d orders answered" % (
            s.name, time.monotonic() - t0, sum(1 for x in list(recs) if x.ok)))
    check(any(t.is_alive() for t in ts), "the sale ended before the last restart: too short")
    for t in ts:
        t.join()
    H.log("outcomes: %r" % H.summarize(recs))
    eq(len(final_answers(recs)), users, "users with a definitive answer")
    errors = [x for x in recs if not (x.ok or x.msg in FINAL)]
    H.log("%d failed tries of %d during the rolling restart: %r" % (
        len(errors), len(recs), H.summarize(errors)))
    check(not errors, "%d tries failed during the rolling restart (nginx should have passed "
          "them to a live instance), e.g. %r", len(errors), errors[:5])
    n = verify(cl, mode, vid, stock, recs, tokens, all_answered=False)
    eq(n, stock, "orders in SQL (demand exceeds stock)")
    if mode == "stream":
        for name, pend in consumers(cl.redis, vid).items():
            eq(pend, 0, "pending entries of consumer %s" % name)
    cl.finish()


def _database_restart(mode):
    """kill -9 of MariaDB mid-sale (a private server: the run's is shared), restarted after
    a pause. stream: admissions go on from Redis, the writers fail, back off, reconnect (new
    connections, statements prepared again) and catch up; nothing lost, nothing twice. A
    mode that writes SQL in the request answers errors meanwhile, and must still be exact."""
    maria = H.start_mariadb()
    cl = Cluster(3, mode, mariadb=maria, settings={"sql_timeout_ms": 1000})
    users, stock = 400, 250
    tokens = H.login_many(cl, cl.redis, users)
    vid = H.create_seckill(cl, stock=stock)
    deadline = time.monotonic() + 120
    # Paced so the sale outlasts the outage (~3 s for 25 buyers a thread): orders answered
    # while mariadbd is down are what the writers must fail on and catch up with.
    ts, recs = retry_sale(cl.port, vid, tokens, list(range(users)), 16, deadline, 0.12)
    H.wait_until(lambda: sum(1 for x in list(recs) if x.ok) >= 50, 30,
                 interval=0.005, what="50 orders answered")
    maria.kill()
    t_down = time.monotonic()
    H.log("kill -9 mariadbd")
    H.wait_until(lambda: time.monotonic() - t_down > 2.0, 5)
    maria.start()
    H.log("mariadbd restarted after %.1fs" % (time.monotonic() - t_down))
    for t in ts:
        t.join()
    H.log("outcomes: %r" % H.summarize(recs))
    eq(len(final_answers(recs)), users, "users with a definitive answer")
    errors = [x for x in recs if not (x.ok or x.msg in FINAL)]
    if mode == "stream":   # admission is Redis only: the outage is the writers' business
        check(not errors, "the sale must not notice the database: %d failures, e.g. %r",
              len(errors), errors[:5])
    n = verify(cl, mode, vid, stock, recs, tokens, all_answered=(mode == "stream"))
    eq(n, stock, "orders in SQL (demand exceeds stock)")
    if mode == "stream":
        during = [x for x in recs if x.ok and x.t_send > t_down]
        check(during, "no order was answered while mariadbd was down: the test saw no outage")
        check(cl.metric("seckill_writer_failures_total") >= 1,
              "no writer noticed the database was gone")
    cl.finish()
    maria.stop()


# ---------------------------------------------------------------------------------------
# the modes that run on a cluster (see the module docstring to add one)

@H.timeout(300)
def test_cluster_sale_stream():
    _sale("stream")


@H.serial   # no failed try later than 2 s after the kill
@H.timeout(300)
def test_cluster_kill9_instance_stream():
    _kill9_instance("stream")


@H.timeout(300)
def test_cluster_rolling_restart_stream():
    _rolling_restart("stream")


@H.timeout(300)
def test_cluster_database_restart_stream():
    _database_restart("stream")


@H.timeout(300)
def test_cluster_sale_sync():
    _sale("sync")


@H.serial   # no failed try later than 2 s after the kill
@H.timeout(300)
def test_cluster_kill9_instance_sync():
    _kill9_instance("sync")


@H.timeout(300)
def test_cluster_rolling_restart_sync():
    _rolling_restart("sync")


@H.timeout(300)
def test_cluster_database_restart_sync():
    _database_restart("sync")
