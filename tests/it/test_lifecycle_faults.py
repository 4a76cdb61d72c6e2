"""test_lifecycle_faults.py -- the order lifecycle (docs/lifecycle.md) under faults: kill -9
of the server in the middle of a cancel storm and in the middle of a payment-timeout wave,
kill -9 of redis-server (AOF, appendfsync always) in the middle of a cancel storm, and the
database locked for 5 s while orders are cancelled. Each ends with the units counted
against SQL and Redis -- every cancelled order at status 4 in SQL, each unit returned once
(Redis's `returned`, its stock and SQL's stock agree with the cancelled orders), no order
lost -- and `seckill audit` clean."""

import json
import os
import subprocess
import threading
import time

import harness as H
import test_lifecycle as L
from harness import check, eq

# claim-idle-ms: a killed instance's pending entries are adopted after 1 s, not 30 s
FAST = {"rate-user-seckill": "1000/s:1000", "rate-user-lookup": "1000/s:1000",
        "claim-idle-ms": "1000"}


def _sale(srv, r, vid, n, start):
    """n buyers grab one unit each of voucher vid: [(token, orderId)] once all are in SQL."""
    toks = H.login_many(srv, r, n, prefix="139", start=start)
    out = [None] * n
    idx = iter(range(n))
    lock = threading.Lock()

    def run():
        while True:
            with lock:
                i = next(idx, None)
            if i is None:
                return
            st, j = H.seckill(srv, toks[i], vid)
            out[i] = (toks[i], j.get("data"))
    ts = [threading.Thread(target=run) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    bad = [o for o in out if not isinstance(o[1], int)]
    check(not bad, "%d grabs not admitted, e.g. %r", len(bad), bad[:3])
    H.wait_drained(srv, r, vid, 60)
    return out


class _Storm:
    """Threads cancelling the given orders, each once; answers kept by order id (an error
    of transport while the server or Redis is down counts as no answer)."""

    def __init__(self, port, pairs, nthreads=8):
        self.port = port
        self.pairs = list(pairs)
        self.ok = set()
        self.failed = {}
        self.done = 0
        self.lock = threading.Lock()
        self.idx = iter(range(len(self.pairs)))
        self.ts = [threading.Thread(target=self._run) for _ in range(nthreads)]
        for t in self.ts:
            t.start()

    def _run(self):
        h = H.Http(self.port, timeout=10, connect=False)
        try:
            while True:
                with self.lock:
                    i = next(self.idx, None)
                if i is None:
                    return
                tok, oid = self.pairs[i]
                try:
                    st, j = h.api("POST", "/voucher-order/%d/cancel" % oid, token=tok)
                    res = j.get("success") and st == 200
                    err = None if res else "%s %s" % (st, j.get("errorMsg"))
                except Exception as e:   # the server or Redis went away under it
                    h.close()
                    h = H.Http(self.port, timeout=10, connect=False)
                    res, err = False, repr(e)[:120]
                with self.lock:
                    self.done += 1
                    if res:
                        self.ok.add(oid)
                    else:
                        self.failed[oid] = err
        finally:
            h.close()

    def join(self, timeout=120):
        for t in self.ts:
            t.join(timeout)
        check(not any(t.is_alive() for t in self.ts), "cancel storm still running")
        return self


def _cancel_all(srv, pairs, what):
    """Every order of pairs cancelled (again): each answer success -- a cancel answered
    before is answered the same, never a second unit. An unavailable answer (503, no
    answer: the server's connections still coming back) is asked again; a refusal fails."""
    left = {p[1]: p for p in pairs}

    def attempt():
        s = _Storm(srv.port, list(left.values())).join()
        for oid in s.ok:
            del left[oid]
        refused = {o: e for o, e in s.failed.items() if e.startswith("200 ")}
        check(not refused, "%s: %d cancels refused, e.g. %r", what, len(refused),
              list(refused.items())[:3])
        return not left
    H.wait_until(attempt, 30, interval=0.1, what="%s: every cancel answered" % what)


def _audit(r, srv, vid, stock):
    p = subprocess.run([H.binary(), "audit", "--redis", r.url, "--db", srv.db_url,
                        "--wait-drain", "30", "--voucher", str(vid), "--stock", str(stock)],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, env=H.san_env(), timeout=150)
    out = p.stdout.decode("utf-8", "replace")
    H.log(out)
    eq(p.returncode, 0, "seckill audit exit status:\n%s" % out)


def _counted(r, srv, vid, initial, orders, cancelled, acked=()):
    """The units counted against SQL and Redis once the writer is done: the cancelled
    orders (and only they) at status 4 in SQL, the others at 1, no order lost; Redis's
    `returned` and its decision states name each cancelled order once; stock in Redis and
    in SQL = initial - live orders; the cancels answered success (acked) among them."""
    db = srv.db()
    cancelled = set(cancelled)
    H.wait_until(lambda: db.scalar("SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id=? "
                                   "AND status=4", vid) == len(cancelled), 60,
                 what="%d cancels applied in SQL" % len(cancelled))
    H.wait_drained(srv, r, vid, 60)
    rows = dict(db.query("SELECT id, status FROM tb_voucher_order WHERE voucher_id=?", vid))
    eq(sorted(rows), sorted(orders), "orders in SQL (none lost, none extra)")
    eq(sorted(o for o, s in rows.items() if s == 4), sorted(cancelled), "cancelled in SQL")
    eq(sorted(o for o, s in rows.items() if s != 4), sorted(set(orders) - cancelled),
       "live in SQL")
    check(set(acked) <= cancelled, "cancels answered success but not cancelled: %r",
          sorted(set(acked) - cancelled)[:5])
    live = len(orders) - len(cancelled)
    eq(int(r.cmd("HGET", H.k_voucher(vid), "returned") or 0), len(cancelled),
       "units returned in Redis (once each)")
    eq(int(r.cmd("HGET", H.k_voucher(vid), "stock")), initial - live, "Redis stock")
    eq(db.stock(vid), initial - live, "SQL stock")
    eq(int(r.cmd("HLEN", H.k_buyers(vid))), len(orders), "buyers in Redis")
    st = r.cmd("HGETALL", "seckill:ostate:{%d}" % vid)
    states = dict(zip(st[::2], st[1::2]))
    decided = sorted(int(k) for k, v in states.items() if "/" not in k and v[0] in "ct")
    eq(decided, sorted(cancelled), "orders decided cancelled in Redis's state hash")
    _audit(r, srv, vid, initial)


@H.timeout(240)
def test_kill9_server_mid_cancel_storm():
    """kill -9 of the server while 8 threads cancel half of 160 orders: after the restart
    the same cancels are sent again; each unit came back once, every cancel is in SQL."""
    r, srv = H.setup(settings=FAST)
    n, initial = 160, 200
    vid = H.create_seckill(srv, stock=initial)
    pairs = _sale(srv, r, vid, n, 10000)
    victims = pairs[::2]
    storm = _Storm(srv.port, victims, nthreads=4)
    H.wait_until(lambda: len(storm.ok) >= len(victims) // 4, 60, interval=0.005,
                 what="a quarter of the cancels answered")
    srv.kill9()
    storm.join()
    H.log("killed after %d cancels answered success, %d not" % (len(storm.ok),
                                                               len(storm.failed)))
    check(len(storm.ok) < len(victims), "the storm ended before the kill")
    srv = H.restart_server(srv, settings=FAST)
    _cancel_all(srv, victims, "after the restart")
    _counted(r, srv, vid, initial, [o for _, o in pairs], [o for _, o in victims], storm.ok)
    H.finish(srv)


def unpaid_wave(n):
    """n buyers' unpaid orders of a new voucher (seckill bench, with --pay-timeout-s 3600),
    every one in SQL, the server stopped and every deadline of --pay-timeout-s 1 passed:
    (redis, the stopped server, the voucher). A restart with --pay-timeout-s 1 is the wave."""
    r, srv = H.setup(settings=dict(FAST, **{"pay-timeout-s": "3600"}))
    vid = H.create_seckill(srv, stock=n)
    js = os.path.join(H.tmpdir(), "wave.json")
    argv = [H.binary(), "bench", "--target", "http://127.0.0.1:%d" % srv.port,
            "--redis", r.url, "--db", srv.db_url, "--admin-token", srv.admin_token,
            "--quiet", "--seed-tokens", "--users", str(n), "--voucher", str(vid),
            "--stock", str(n), "--dup", "0", "--burst-share", "0", "--json", js]
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=H.san_env(),
                       cwd=H.tmpdir(), timeout=240)
    eq(p.returncode, 0, "bench: %s" % p.stderr.decode("utf-8", "replace")[-2000:])
    eq(json.load(open(js))["outcomes"]["success"], n, "orders sold")
    H.wait_drained(srv, r, vid, 60)
    srv.stop()
    time.sleep(1.1)   # every order past --pay-timeout-s 1 (wall-clock deadlines)
    return r, srv, vid


@H.timeout(300)
def test_kill9_server_mid_timeout_wave():
    """2,000 unpaid orders past their deadline together (a restart with --pay-timeout-s 1);
    kill -9 of the server while the writer applies the wave's events; after the next
    restart every order is cancelled once, in Redis and in SQL."""
    n = 2000
    r, srv, vid = unpaid_wave(n)
    settings = dict(FAST, **{"pay-timeout-s": "1"})
    srv = H.restart_server(srv, settings=settings)
    db = srv.db()
    q = "SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id=? AND status=4"
    H.wait_until(lambda: db.scalar(q, vid) >= 1, 60, interval=0.005,
                 what="the first timeout in SQL")
    srv.kill9()
    in_sql = db.scalar(q, vid)
    ret = int(r.cmd("HGET", H.k_voucher(vid), "returned") or 0)
    H.log("killed with %d timed out in Redis, %d in SQL" % (ret, in_sql))
    check(in_sql < n, "the wave was in SQL before the kill")
    srv = H.restart_server(srv, settings=settings)
    orders = [o for o, _ in srv.db().orders(vid)]
    _counted(r, srv, vid, n, orders, orders)
    H.finish(srv)


@H.timeout(240)
def test_redis_kill9_mid_cancel_storm():
    """redis-server killed -9 (AOF, appendfsync always) while cancels run, then started
    again from its AOF: no cancel answered success is lost, none is applied twice."""
    r = H.start_redis(extra=("--appendfsync", "always"))
    srv = H.start_server(r, settings=FAST)
    n, initial = 160, 160
    vid = H.create_seckill(srv, stock=initial)
    pairs = _sale(srv, r, vid, n, 20000)
    victims = pairs[1::2]
    storm = _Storm(srv.port, victims, nthreads=4)
    H.wait_until(lambda: len(storm.ok) >= len(victims) // 4, 60, interval=0.005,
                 what="a quarter of the cancels answered")
    r.kill()
    acked = set(storm.ok)   # answered before the kill: in the AOF
    r.start()
    storm.join()
    H.log("redis killed after %d cancels answered; the storm ended with %d ok, %d not" % (
        len(acked), len(storm.ok), len(storm.failed)))
    H.wait_until(lambda: H.voucher_present(r, vid), 30, what="Redis back with the voucher")
    _cancel_all(srv, victims, "after Redis came back")
    _counted(r, srv, vid, initial, [o for _, o in pairs], [o for _, o in victims], acked)
    H.finish(srv)


@H.timeout(240)
def test_database_locked_5s_mid_cancels():
    """The database held for 5 s (SQLite: an exclusive lock on the file; MariaDB: the
    voucher's row FOR UPDATE, which the writer's transaction needs): the cancels are
    decided in Redis (answered success) while the writer cannot apply them; after the
    lock, SQL gets each once."""
    r, srv = H.setup(settings=FAST)
    n, initial = 120, 150
    vid = H.create_seckill(srv, stock=initial)
    pairs = _sale(srv, r, vid, n, 30000)
    victims = pairs[::3]
    db = srv.db()
    lock = L._hold_writer(srv, vid)
    t_lock = time.monotonic()
    try:
        storm = _Storm(srv.port, victims).join()
        check(not storm.failed, "cancels refused while SQL is locked: %r",
              list(storm.failed.items())[:3])
        eq(db.scalar("SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id=? AND status=4",
                     vid), 0, "cancels in SQL through the lock")
        eq(int(r.cmd("HGET", H.k_voucher(vid), "returned")), len(victims),
           "units back in Redis while SQL is locked")
        H.wait_until(lambda: time.monotonic() - t_lock >= 5, 10, interval=0.1,
                     what="the 5 s outage")
        _cancel_all(srv, victims, "again while SQL is locked")
    finally:
        lock.rollback()
        lock.close()
    _counted(r, srv, vid, initial, [o for _, o in pairs], [o for _, o in victims], storm.ok)
    H.finish(srv)
