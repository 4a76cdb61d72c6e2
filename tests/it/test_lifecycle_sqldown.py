"""test_lifecycle_sqldown.py -- the order lifecycle (docs/lifecycle.md) with MariaDB down for
5 s (kill -9 of mariadbd, restarted after 5 s; not a lock): cancels, payments and payment
timeouts go on across the outage. A cancel or payment that cannot read its order answers
an error and is sent again; the timeouts are decided in Redis meanwhile and their events
wait in the stream. Afterwards every unit is counted against SQL and Redis -- none returned
twice, none lost, every decided order at its status in SQL -- and `seckill audit` is clean.

The server is a private mariadbd (the run's MariaDB is shared with other tests); on SQLite
test_lifecycle_faults.py's "database locked 5 s" is the case."""

import threading
import time

import harness as H
import test_lifecycle as L
from harness import check, eq

DB_BACKENDS = ("mysql",)
OUTAGE_S = 5.0
N = 8          # orders per group


class _Until:
    """Threads sending each order's decision until it is answered with success; every
    answer kept, by order id."""

    def __init__(self, port, jobs, deadline):
        self.jobs, self.deadline = list(jobs), deadline
        self.answers = {}
        self.lock = threading.Lock()
        self.ts = [threading.Thread(target=self._run, args=(j, port)) for j in self.jobs]
        for t in self.ts:
            t.start()

    def _run(self, job, port):
        kind, tok, oid = job
        h = H.Http(port, timeout=10, connect=False)
        seen = []
        while time.monotonic() < self.deadline:
            try:
                if kind == "cancel":
                    st, j = L._cancel(h, tok, oid)
                    ok = st == 200 and j.get("success")
                else:
                    st, j = L._notify(h, oid, "P%d" % oid, 8000)
                    ok = st == 200 and j.get("data") == "PAID"
                seen.append((st, j.get("data") if ok else j.get("errorMsg")))
            except Exception as e:   # the server answers on; a reset is a retry
                h.close()
                h = H.Http(port, timeout=10, connect=False)
                ok = False
                seen.append(("exc", repr(e)[:80]))
            if ok:
                break
            time.sleep(0.1)   # a client's retry pace, not a wait for a condition
        with self.lock:
            self.answers[oid] = seen

    def join(self):
        for t in self.ts:
            t.join()


@H.timeout(240)
def test_mariadb_down_5s_mid_lifecycle():
    """Four groups of N orders, all admitted and in SQL before the outage: D cancelled right
    before it, T timed out inside it (--pay-timeout-s 10: admitted 6.5 s before it), C and
    P (admitted 1 s before it) cancelled / paid from its start until they succeed, after
    it."""
    maria = H.start_mariadb()
    settings = L._pay_settings({"pay-timeout-s": "10", "sql-timeout-ms": "1000",
                                "claim-idle-ms": "1000"})
    r = H.start_redis()
    srv = H.start_server(r, settings=settings, db_url=maria.url("sqldown"))
    stock = 5 * N
    vid = H.create_seckill(srv, stock=stock)
    toks = H.login_many(srv, r, 4 * N, prefix="137")
    h = srv.http()

    def grab(ts):
        got = [H.seckill(srv, t, vid, h)[1]["data"] for t in ts]
        check(all(isinstance(o, int) for o in got), "grabs: %r", got)
        H.wait_drained(srv, r, vid, 30)
        return got

    def at(t0, s):
        H.wait_until(lambda: time.monotonic() - t0 >= s, s + 1, interval=0.05)
    t_admit = time.monotonic()
    first = grab(toks[:2 * N])
    late, gone = first[:N], first[N:]     # T: due at t_admit + 10 s, inside the outage
    at(t_admit, 5.5)
    more = grab(toks[2 * N:])            # C, P: due at t_admit + 15.5 s, after it
    at(t_admit, 6.5)
    for t, o in zip(toks[N:2 * N], gone):
        eq(L._cancel(h, t, o)[1]["success"], True, "cancel before the outage")
    maria.kill()
    t_down = time.monotonic()
    H.log("kill -9 mariadbd")
    cancel = list(zip(toks[2 * N:3 * N], more[:N]))
    paid = more[N:]
    jobs = [("cancel", t, o) for t, o in cancel] + [("pay", None, o) for o in paid]
    storm = _Until(srv.port, jobs, time.monotonic() + 60)
    ostate = "seckill:ostate:{%d}" % vid

    def timed_out():
        return sum(1 for o in late if (r.cmd("HGET", ostate, str(o)) or "").startswith("t"))
    at(t_down, OUTAGE_S)
    during = timed_out()
    maria.start()
    H.log("mariadbd restarted after %.1fs; %d of %d timeouts decided while it was down" % (
        time.monotonic() - t_down, during, N))
    storm.join()
    failed_during = sum(1 for a in storm.answers.values() for x in a if x[0] != 200)
    H.log("decisions answered with an error (sent again): %d" % failed_during)
    check(during > 0, "no timeout was decided while SQL was down: the test saw no outage")
    check(failed_during > 0, "no cancel or payment met the outage")
    undecided = [o for o, a in storm.answers.items() if not a or a[-1][0] != 200]
    check(not undecided, "cancels/payments never answered with success: %r",
          [(o, storm.answers[o][-3:]) for o in undecided[:3]])
    db = srv.db()
    want = dict([(o, 4) for o in late + gone] + [(o, 4) for _, o in cancel] +
                [(o, 2) for o in paid])
    H.wait_until(lambda: {o: L._status(db, o) for o in want} == want, 60,
                 what="every decision in SQL")
    H.wait_drained(srv, r, vid, 60)
    # each unit counted once: 3N returned (cancels and timeouts), N paid, in both stores
    eq(db.order_count(vid), 4 * N, "orders in SQL (none lost, none twice)")
    eq(db.stock(vid), stock - N, "SQL stock: the initial less the paid orders")
    v = r.cmd("HMGET", H.k_voucher(vid), "stock", "returned", "paid", "timedout")
    eq([int(x) for x in v], [stock - N, 3 * N, N, N], "Redis stock, returned, paid, timedout")
    L._audit(r, srv, vid, stock)
    H.finish(srv)
    maria.stop()
