"""test_affinity.py -- connections steered by CPU (--steer-connections, on by default): a new
connection handed to the worker of the CPU that processed its handshake (SO_INCOMING_CPU on
the workers' SO_REUSEPORT listeners), and connections that all came from one CPU spread
again by the workers themselves (steer.h: idle connections handed to the least loaded
worker); the workers are not pinned. With fewer CPUs than workers no worker is steered;
with --steer-connections false the kernel spreads connections by hash. docs/http.md.
"""

import os
import re

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)   # the HTTP layer only: one SQL backend is enough
# run alone under tests/run.py -j: the CPU that takes a handshake decides the steering
SERIAL = True


def _allowed():
    return sorted(os.sched_getaffinity(0))


def _two_cpus():
    """The CPUs this process may use, or None (logged as skipped) when fewer than 2."""
    cpus = _allowed()
    if len(cpus) < 2:
        H.log("skipped: needs 2 CPUs, this process may use %d" % len(cpus))
        return None
    return cpus


def _worker_cpus(pid):
    """{thread name: its Cpus_allowed_list} for the worker threads w0, w1, ..."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            comm = open("/proc/%d/task/%s/comm" % (pid, tid)).read().strip()
            status = open("/proc/%d/task/%s/status" % (pid, tid)).read()
        except OSError:
            continue
        if re.fullmatch(r"w\d+", comm):
            out[comm] = re.search(r"Cpus_allowed_list:\s*(\S+)", status).group(1)
    return out


def _conns_per_worker(mh):
    st, _, body = mh.request("GET", "/metrics")
    eq(st, 200, "/metrics")
    return {int(m.group(1)): int(m.group(2)) for m in
            re.finditer(r'^seckill_http_connections\{worker="(\d+)"\} (\d+)$', body.decode(), re.M)}


class _Counts:
    """New connections per worker since it was made, by /metrics; wait() logs the last
    reading when the condition never came."""

    def __init__(self, mh):
        self.mh = mh
        self.before = _conns_per_worker(mh)
        self.seen = []

    def delta(self):
        now = _conns_per_worker(self.mh)
        self.seen.append({k: now[k] - self.before.get(k, 0) for k in now})
        return self.seen[-1]

    def wait(self, pred, what):
        try:
            return H.wait_until(lambda: (lambda d: d if pred(d) else None)(self.delta()), 10,
                                what=what)
        except H.TestFailure:
            H.log("%s: last seen %s" % (what, self.seen[-1:]))
            raise


def _open_from(cpu, port, n=1):
    """n kept-alive connections opened (and each used once) from CPU cpu: the calling
    thread moves there first, so the kernel processes the handshakes on that CPU, and
    back to where it may run afterwards."""
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        out = []
        for _ in range(n):
            h = H.Http(port)
            eq(h.request("GET", "/health")[0], 200, "GET /health from CPU %d" % cpu)
            out.append(h)
        return out
    finally:
        os.sched_setaffinity(0, mine)


def _still_answers(conns):
    """Every connection answers one more request on its own socket (no reconnect)."""
    for i, h in enumerate(conns):
        s = h.sock
        eq(h.request("GET", "/health")[0], 200, "connection %d answers again" % i)
        check(h.sock is s, "connection %d answered on the same socket, not a new one" % i)


def _whole(pid):
    status = open("/proc/%d/status" % pid).read()
    return re.search(r"Cpus_allowed_list:\s*(\S+)", status).group(1)


def _pin_workers(pid, cpus):
    """The test pins worker i's thread to cpus[i] from outside (the service never pins its
    workers): where a test needs the CPU a worker runs on to be fixed."""
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            comm = open("/proc/%d/task/%s/comm" % (pid, tid)).read().strip()
        except OSError:
            continue
        if re.fullmatch(r"w\d+", comm):
            os.sched_setaffinity(int(tid), {cpus[int(comm[1:])]})


def _steered_server(cpus, pinned=False, **settings):
    """A server on the defaults (steered, its workers not pinned), its /metrics on a
    listener of its own: those connections are not the public ones steer.h balances, so
    the test's own scrapes move nothing. pinned: the test pins worker i to cpus[i]. Returns
    (server, a connection to its /metrics)."""
    mport = H.free_port()
    settings.update({"metrics_listen": "127.0.0.1:%d" % mport, "log_level": "debug"})
    r, srv = H.setup(settings=settings, threads=2)
    whole = _whole(srv.proc.pid)
    eq(_worker_cpus(srv.proc.pid), {"w0": whole, "w1": whole},
       "the workers' CPUs (the service pins none)")
    if pinned:
        _pin_workers(srv.proc.pid, cpus)
        eq(_worker_cpus(srv.proc.pid), {"w0": str(cpus[0]), "w1": str(cpus[1])},
           "the workers' CPUs, pinned by the test")
    mh = H.Http(mport)
    # The harness's readiness probe has closed its connection; the server may not have
    # seen that yet. Only the scrape's own connection (worker 0's) may be left.
    H.wait_until(lambda: _conns_per_worker(mh) == {0: 1, 1: 0}, 10,
                 what="no connection but the /metrics one")
    return srv, mh


def _alternate(cpus, srv, mh, n=12):
    """n connections opened alternately from the two CPUs; returns them and whether each
    one landed on its CPU's worker (alternating keeps the workers level, so nothing is
    moved: each connection stays where the kernel put it)."""
    counts = _Counts(mh)
    conns, steered = [], True
    for i in range(n):
        w = i % 2
        conns += _open_from(cpus[w], srv.port)
        got = counts.delta()
        want = {0: (i + 2) // 2, 1: (i + 1) // 2}
        H.log("after the %d-th connection, from worker %d's CPU: %s" % (i + 1, w, got))
        steered = steered and got == want
    return conns, steered


def test_default_steers_connections_without_pinning():
    """The defaults: the workers keep the process's CPU set (the scheduler may move them),
    and each connection still goes to the worker of the CPU that processed its handshake
    (fails without the listeners' SO_INCOMING_CPU: the hash puts some elsewhere)."""
    cpus = _two_cpus()
    if not cpus:
        return
    srv, mh = _steered_server(cpus)
    conns, steered = _alternate(cpus, srv, mh)
    check(steered, "every connection on its CPU's worker, the workers not pinned")
    _still_answers(conns)
    H.finish(srv)


def test_steer_connections_false_leaves_it_to_the_hash():
    """--steer-connections false: the kernel's hash spreads connections, whatever CPU
    opened them: 16 connections alternating between the CPUs do not all land on their
    CPU's worker (by chance with odds of 1 in 65,536)."""
    cpus = _two_cpus()
    if not cpus:
        return
    srv, mh = _steered_server(cpus, steer_connections=0)
    conns, steered = _alternate(cpus, srv, mh, n=16)
    check(not steered, "connections spread by hash, not by CPU")
    _still_answers(conns)
    H.finish(srv)


def test_connections_from_one_cpu_are_spread():
    """On the defaults (steered, not pinned): 16 connections from one CPU all reach its
    worker (worker 0), and balancing gives about half to the other: the spread is the
    balancing's, not the kernel's hash (worker 0's log says it gave them)."""
    cpus = _two_cpus()
    if not cpus:
        return
    srv, mh = _steered_server(cpus)
    counts = _Counts(mh)
    n = 16
    conns = _open_from(cpus[0], srv.port, n)
    got = counts.wait(lambda d: sum(d.values()) == n and min(d.values()) >= n // 2 - 2,
                      "16 connections from CPU %d spread over both workers" % cpus[0])
    H.log("16 connections opened from CPU %d: per worker %s" % (cpus[0], got))
    check("http: worker 0 gave " in srv.stderr_text(), "worker 0 gave no connections: the "
          "spread is not the balancing's")
    # The moved connections keep working, on their own sockets, with nothing lost.
    _still_answers(conns)
    eq(sum(counts.delta().values()), n, "connections open after the requests")
    H.finish(srv)


def test_split_connections_follow_their_cpu():
    """8 connections from CPU a are split by balancing (3 or 4 move to worker b); then 8
    from CPU b arrive at worker b, which gives those back, since their packets come from CPU
    a: in the end every connection sits on its own CPU's worker. Closing CPU a's eight
    empties worker a and leaves worker b's count as it was. The test pins the workers: with
    the workers free to run anywhere a connection's incoming CPU also follows the worker
    (the client's delayed ACK of an answer is sent from the CPU that processed the answer,
    and an unpinned worker woken by CPU a's request often runs on CPU a), so which worker
    a connection follows depends on the scheduler (steer.h)."""
    cpus = _two_cpus()
    if not cpus:
        return
    srv, mh = _steered_server(cpus, pinned=True)
    counts = _Counts(mh)
    a = _open_from(cpus[0], srv.port, 8)
    counts.wait(lambda d: min(d.values()) >= 3, "the first 8 split")
    b = _open_from(cpus[1], srv.port, 8)
    counts.wait(lambda d: d == {0: 8, 1: 8}, "8 / 8 after the second burst")
    _still_answers(a + b)
    for h in a:
        h.close()
    got = counts.wait(lambda d: sum(d.values()) == 8, "CPU %d's connections closed" % cpus[0])
    eq(got, {0: 0, 1: 8}, "connections per worker once CPU %d's eight are closed" % cpus[0])
    for h in b:
        h.close()
    H.finish(srv)


def test_more_workers_than_cpus_are_not_steered():
    """With more workers than CPUs no worker gets a CPU: the log says so, and every worker
    keeps the process's CPU set."""
    n = len(_allowed()) + 1
    r, srv = H.setup(threads=n)
    whole = _whole(srv.proc.pid)
    # /health answers once one worker serves: the others may name their threads a moment later
    def named():
        c = _worker_cpus(srv.proc.pid)
        return c if len(c) == n else None
    cpus = H.wait_until(named, 10, 0.01, "%d named worker threads" % n)
    eq(cpus, {"w%d" % i: whole for i in range(n)},
       "the CPUs of %d workers on %d CPUs" % (n, n - 1))
    check("%d workers on %d CPUs: connections are not steered by CPU" % (n, n - 1)
          in srv.stderr_text(), "the log says the connections are not steered")
    H.finish(srv)
