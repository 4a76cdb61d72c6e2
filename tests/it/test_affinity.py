"""test_affinity.py -- --cpu-affinity: each worker thread pinned to its own CPU, and a new
connection handed to the worker on the CPU that processed its handshake (SO_INCOMING_CPU on
the workers' SO_REUSEPORT listeners; docs/bench.md, "Workers' kernel and scheduling cost").
Off by default: then the workers may run on every CPU and the kernel spreads connections by
hash.
"""

import os
import re
import threading

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)   # the HTTP layer only: one SQL backend is enough
CONNS = 8


def _allowed():
    return sorted(os.sched_getaffinity(0))


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


def _connect_from(cpu, port, n):
    """n kept-alive connections opened (and each used once) by a thread pinned to cpu."""
    out, errs = [], []

    def run():
        try:
            os.sched_setaffinity(0, {cpu})   # this thread only
            for _ in range(n):
                h = H.Http(port)
                eq(h.request("GET", "/health")[0], 200, "GET /health from CPU %d" % cpu)
                out.append(h)
        except Exception as e:   # reported by the caller's thread
            errs.append(e)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    if errs:
        raise errs[0]
    return out


def test_cpu_affinity_pins_workers_and_steers_connections():
    cpus = _allowed()
    if len(cpus) < 2:
        H.log("skipped: needs 2 CPUs, this process may use %d" % len(cpus))
        return
    r, srv = H.setup(settings={"cpu_affinity": 1}, threads=2)
    pinned = _worker_cpus(srv.proc.pid)
    eq(pinned, {"w0": str(cpus[0]), "w1": str(cpus[1])}, "the workers' CPUs")
    mh = srv.http()
    for w in (0, 1):
        before = _conns_per_worker(mh)
        conns = _connect_from(cpus[w], srv.port, CONNS)
        after = _conns_per_worker(mh)
        got = {i: after[i] - before.get(i, 0) for i in after}
        H.log("connections opened from CPU %d went to workers %s" % (cpus[w], got))
        eq(got, {w: CONNS, 1 - w: 0}, "new connections per worker, opened from worker %d's CPU" % w)
        for h in conns:
            h.close()
        H.wait_until(lambda: _conns_per_worker(mh) == before, 10, what="the connections closed")
    H.finish(srv)


def test_cpu_affinity_off_by_default():
    r, srv = H.setup(threads=2)
    status = open("/proc/%d/status" % srv.proc.pid).read()
    whole = re.search(r"Cpus_allowed_list:\s*(\S+)", status).group(1)
    eq(_worker_cpus(srv.proc.pid), {"w0": whole, "w1": whole},
       "the workers' CPUs without --cpu-affinity (the process's own)")
    H.finish(srv)
