"""test_affinity.py -- --cpu-affinity (off by default): each worker thread pinned to its own
CPU, a new connection handed to the worker on the CPU that processed its handshake
(SO_INCOMING_CPU on the workers' SO_REUSEPORT listeners), and connections that all came
from one CPU spread again by the workers themselves (steer.h: idle connections handed to
the least loaded worker). With fewer CPUs than workers, or --cpu-affinity false, no worker
is pinned and the kernel spreads connections by hash, as without the flag. docs/bench.md, "Workers' kernel and
scheduling cost" and "Connections steered by CPU, balanced".
"""

import os
import re

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)   # the HTTP layer only: one SQL backend is enough


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


def _pinned_server(cpus):
    """A server with --cpu-affinity, its /metrics on a listener of its own: those connections
    are not the public ones steer.h balances, so the test's own scrapes move nothing.
    Returns (server, a connection to its /metrics)."""
    mport = H.free_port()
    r, srv = H.setup(settings={"cpu_affinity": 1, "metrics_listen": "127.0.0.1:%d" % mport,
                               "log_level": "debug"}, threads=2)
    eq(_worker_cpus(srv.proc.pid), {"w0": str(cpus[0]), "w1": str(cpus[1])}, "the workers' CPUs")
    mh = H.Http(mport)
    # The harness's readiness probe has closed its connection; the server may not have
    # seen that yet. Only the scrape's own connection (worker 0's) may be left.
    H.wait_until(lambda: _conns_per_worker(mh) == {0: 1, 1: 0}, 10,
                 what="no connection but the /metrics one")
    return srv, mh


def test_cpu_affinity_pins_workers_and_steers_connections():
    cpus = _two_cpus()
    if not cpus:
        return
    srv, mh = _pinned_server(cpus)
    counts = _Counts(mh)
    conns = []
    # Alternating CPUs keeps the workers level, so nothing is moved: each connection
    # stays where the kernel put it, on its CPU's worker.
    for i in range(12):
        w = i % 2
        conns += _open_from(cpus[w], srv.port)
        eq(counts.delta(), {0: (i + 2) // 2, 1: (i + 1) // 2},
           "connections per worker after the %d-th, opened from worker %d's CPU" % (i + 1, w))
    _still_answers(conns)
    H.finish(srv)


def test_connections_from_one_cpu_are_spread():
    cpus = _two_cpus()
    if not cpus:
        return
    srv, mh = _pinned_server(cpus)
    counts = _Counts(mh)
    n = 16
    conns = _open_from(cpus[0], srv.port, n)
    got = counts.wait(lambda d: sum(d.values()) == n and min(d.values()) >= n // 2 - 2,
                      "16 connections from CPU %d spread over both workers" % cpus[0])
    H.log("16 connections opened from CPU %d: per worker %s" % (cpus[0], got))
    # The moved connections keep working, on their own sockets, with nothing lost.
    _still_answers(conns)
    eq(sum(counts.delta().values()), n, "connections open after the requests")
    H.finish(srv)


def test_split_connections_follow_their_cpu():
    """8 connections from CPU a are split by balancing (3 or 4 move to worker b); then 8
    from CPU b arrive at worker b, which gives those back, since their packets come from CPU
    a: in the end every connection sits on its own CPU's worker. Closing CPU a's eight
    empties worker a and leaves worker b's count as it was."""
    cpus = _two_cpus()
    if not cpus:
        return
    srv, mh = _pinned_server(cpus)
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


def test_cpu_affinity_off_by_default():
    r, srv = H.setup(threads=2)
    status = open("/proc/%d/status" % srv.proc.pid).read()
    whole = re.search(r"Cpus_allowed_list:\s*(\S+)", status).group(1)
    eq(_worker_cpus(srv.proc.pid), {"w0": whole, "w1": whole},
       "the workers' CPUs without --cpu-affinity (the process's own)")
    H.finish(srv)


def test_more_workers_than_cpus_are_not_pinned():
    n = len(_allowed()) + 1
    r, srv = H.setup(settings={"cpu_affinity": 1}, threads=n)
    status = open("/proc/%d/status" % srv.proc.pid).read()
    whole = re.search(r"Cpus_allowed_list:\s*(\S+)", status).group(1)
    eq(_worker_cpus(srv.proc.pid), {"w%d" % i: whole for i in range(n)},
       "the CPUs of %d workers on %d CPUs (none pinned)" % (n, n - 1))
    H.finish(srv)
