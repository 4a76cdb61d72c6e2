#!/usr/bin/env python3
"""perf/grab_ab.py -- server CPU per grab, A/B between seckill binaries, in one command.

    python3 perf/grab_ab.py [--rounds N] [--duration S] [--users U] [--drains K] [--callgrind]
                            [--soldout] VARIANT [VARIANT ...]

A VARIANT is a seckill binary, optionally followed by serve flags after commas, as in
perf/sale_ab.py: `/tmp/old`, `build/seckill,--steer-connections=false`.

Starts one `seckill serve` per binary on its embedded default (private redis-server +
SQLite, a temp data dir each), then alternates between them for N rounds: each round runs
`seckill bench` (closed loop, seeded tokens, every request a new buyer, stock that never
runs out, the bench's drain wait: every order is in SQL when it returns) against each
binary in turn. The servers are idle while the other is measured.

Per round and binary it prints the grabs and the server's CPU per grab from
/proc/PID/task/*/stat over the whole bench run (load + drain), split into the workers
(threads w0, w1, ...), the order writer (thread "writer") and the rest, plus redis-server's
CPU per grab; then the writer alone ("drain": the orders deleted from SQL and the consumer
group rewound, the writer thread's CPU per order until all are back; --drains K: K times,
their median); and the orders per commit of the writer over the bench run (/metrics:
writer_batch_orders / writer_batches). At the end: the median of each column per binary. The CPU figures include
the kernel's share (utime + stime) -- the same figure `make perf` reports.

--callgrind: each server runs under valgrind's callgrind instead (this VM has no hardware
counters for `perf stat -e instructions`), and the table is the server's user-space
instructions per grab over each bench run (counters zeroed before it, dumped after;
all threads: workers, writer and the rest; then the HTTP workers' threads alone), then
per order over the drain of the same orders (the writer alone, in full batches): counts
that the host's load does not move, for changes too small for the CPU times' noise. Slow (~50x): use a short --duration and
few --users; the batches are smaller than at full speed, so compare binaries, not runs.

--soldout: the same for a sale with no stock (a new buyer per request, every answer
库存不足 from memory): CPU or instructions per sold-out answer (the "grabs" column counts
the answers; no orders, no drain). perf/soldout_ab.sh measures the same answer with wrk
beside nginx.
"""
import argparse
import glob
import json
import os
import re
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

# /metrics is private by default: each server serves it on --listen with this token.
METRICS_TOKEN = "seckill-perf-metrics"

TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


SPLIT = os.environ.get("SPLIT", "all")   # all | user | sys: which CPU time to count


def threads(pid):
    """{tid: (comm, ticks)} of every thread of pid."""
    out = {}
    for d in glob.glob("/proc/%d/task/*" % pid):
        try:
            with open(d + "/stat") as f:
                s = f.read()
        except OSError:
            continue
        comm = s[s.index("(") + 1:s.rindex(")")]
        rest = s[s.rindex(")") + 2:].split()
        ut, st = int(rest[11]), int(rest[12])
        out[int(os.path.basename(d))] = (comm, ut if SPLIT == "user" else st if SPLIT == "sys"
                                         else ut + st)
    return out


def group(comm):
    if comm.startswith("w") and comm[1:].isdigit():
        return "workers"
    if comm == "writer":
        return "writer"
    return "other"


def split(before, after):
    g = {"workers": 0, "writer": 0, "other": 0}
    for tid, (comm, t) in after.items():
        t0 = before.get(tid, (comm, 0))[1]
        g[group(comm)] += t - t0
    return g


def proc_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        s = f.read()
    rest = s[s.rindex(")") + 2:].split()
    return int(rest[11]) + int(rest[12])


class Server:
    def __init__(self, variant, tmp, i, callgrind=False):
        binary, *flags = variant.split(",")
        self.bin = binary
        self.name = variant
        self.dir = os.path.join(tmp, "d%d" % i)
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log = open(os.path.join(tmp, "serve%d.log" % i), "w")
        self.cg = os.path.join(tmp, "cg%d" % i) if callgrind else None
        pre = (["valgrind", "--tool=callgrind", "--separate-threads=yes",
                "--callgrind-out-file=" + self.cg + ".%p"] if callgrind else [])
        self.p = subprocess.Popen(pre + [binary, "serve", "--data-dir", self.dir, "--listen",
                                         "127.0.0.1:%d" % self.port, "--log-level", "warn",
                                         "--metrics-token", METRICS_TOKEN] + flags,
                                  stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + (180 if callgrind else 30)
        while True:
            if self.p.poll() is not None:
                sys.exit("grab_ab: %s serve exited" % binary)
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    if b'"success":true' in r.read():
                        break
            except OSError:
                pass
            if time.time() > deadline:
                sys.exit("grab_ab: %s serve not healthy" % binary)
            time.sleep(0.1)
        info = subprocess.run(["redis-cli", "-s", os.path.join(self.dir, "redis", "redis.sock"),
                               "info", "server"], capture_output=True, text=True).stdout
        self.rpid = int([ln.split(":")[1] for ln in info.splitlines()
                         if ln.startswith("process_id:")][0])

    def instructions(self, zero=False):
        """callgrind only: zeroes the counters, or dumps them and returns the instructions
        executed since the last zeroing: (every thread, the HTTP workers alone). A dump is
        one file per thread; a worker's is the one that ran the HTTP engine (conn_run)."""
        if zero:
            subprocess.run(["callgrind_control", "-z", str(self.p.pid)], capture_output=True,
                           check=True)
            return 0, 0
        before = set(glob.glob(self.cg + ".*"))
        subprocess.run(["callgrind_control", "-d", str(self.p.pid)], capture_output=True,
                       check=True)
        total = workers = 0
        for f in set(glob.glob(self.cg + ".*")) - before:
            n, worker = 0, False
            with open(f) as fh:
                for line in fh:
                    m = re.match(r"(?:summary|totals): (\d+)", line)
                    if m and not n:
                        n = int(m.group(1))
                    if re.match(r"c?fn=\(\d+\) conn_run$", line):
                        worker = True
            total += n
            workers += n if worker else 0
        return total, workers

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()


def commits(s):
    """(orders, commits) the order writer has committed so far (/metrics)."""
    req = urllib.request.Request(s.url + "/metrics",
                                 headers={"authorization": "Bearer " + METRICS_TOKEN})
    with urllib.request.urlopen(req, timeout=5) as r:
        m = dict(ln.split()[:2] for ln in r.read().decode().splitlines()
                 if ln.startswith("seckill_writer_batch"))
    return (int(float(m.get("seckill_writer_batch_orders_total", 0))),
            int(float(m.get("seckill_writer_batches_total", 0))))


def drain(s, vid):
    """The writer alone: the voucher's orders deleted from SQL (stock given back) and its
    consumer group rewound; the writer thread's CPU per order until all are back."""
    db = os.path.join(s.dir, "seckill.db")
    c = sqlite3.connect(db, timeout=30, isolation_level=None)
    q = "select count(*) from tb_voucher_order where voucher_id=?"
    n = c.execute(q, (vid,)).fetchone()[0]
    c.execute("begin immediate")
    c.execute("delete from tb_voucher_order where voucher_id=?", (vid,))
    c.execute("update tb_seckill_voucher set stock = stock + ? where voucher_id=?", (n, vid))
    c.execute("commit")
    t0 = threads(s.p.pid)
    subprocess.run(["redis-cli", "-s", os.path.join(s.dir, "redis", "redis.sock"), "xgroup",
                    "setid", "seckill:stream:{%d}" % vid, "g1", "0"], capture_output=True)
    deadline = time.time() + 120
    while c.execute(q, (vid,)).fetchone()[0] < n and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    t1 = threads(s.p.pid)
    c.close()
    return split(t0, t1)["writer"] * TICK_US / n if n else 0


def bench(s, a, rnd, js):
    r = subprocess.run([s.bin, "bench", "--target", s.url, "--data-dir", s.dir,
                        "--seed-tokens", "--users", str(a.users),
                        "--user-base", str(rnd * a.users),
                        "--stock", "0" if a.soldout else "100000000",
                        "--dup", "0", "--burst-share", "0", "--conns", str(a.conns),
                        "--duration", str(a.duration), "--quiet", "--json", js],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout[-2000:], r.stderr[-2000:])
        sys.exit("grab_ab: bench failed (%d)" % r.returncode)
    with open(js) as f:
        return json.load(f)


def answers(d, a):
    """The requests a run is measured per: grabs, or with --soldout sold-out answers."""
    return d["outcomes"]["sold_out" if a.soldout else "success"]


def instr_rounds(a, servers, tmp):
    """--callgrind: instructions per grab, alternating binaries as the CPU rounds do."""
    rows = {s.name: [] for s in servers}
    print("%-28s %5s %8s %12s %12s %12s" % ("binary", "round", "grabs", "instr/grab",
                                             "workers", "drain/order"))
    for rnd in range(a.rounds):
        for s in servers:
            s.instructions(zero=True)
            d = bench(s, a, rnd, os.path.join(tmp, "b.json"))
            n = answers(d, a)
            tot, wrk = s.instructions()
            ipg, ipw = (tot / n, wrk / n) if n else (0.0, 0.0)
            # the writer alone over the same orders, in full batches (drain())
            ipo = 0.0
            if not a.soldout:
                s.instructions(zero=True)
                drain(s, d["voucher"])
                ipo = s.instructions()[0] / n if n else 0.0
            rows[s.name].append((ipg, ipw, ipo))
            print("%-28s %5d %8d %12.0f %12.0f %12.0f" % (s.name[-28:], rnd, n, ipg, ipw, ipo),
                  flush=True)
    print("median")
    for s in servers:
        print("%-28s %5s %8s %12.0f %12.0f %12.0f" % ((s.name[-28:], "", "") + tuple(
            statistics.median(c) for c in zip(*rows[s.name]))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=4)
    ap.add_argument("--users", type=int, default=150000)
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--drains", type=int, default=1,
                    help="drains per round and binary (their median is the drain column)")
    ap.add_argument("--callgrind", action="store_true",
                    help="user-space instructions per grab under valgrind (see above)")
    ap.add_argument("--soldout", action="store_true",
                    help="a sale with no stock: per sold-out answer (see above)")
    ap.add_argument("bins", nargs="+")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="skab.")
    servers = []
    rows = {b: [] for b in a.bins}
    try:
        for i, b in enumerate(a.bins):
            servers.append(Server(b, tmp, i, a.callgrind))
        if a.callgrind:
            return instr_rounds(a, servers, tmp)
        hdr = "%-28s %5s %8s %7s %7s %7s %7s %7s %7s %7s" % (
            "binary", "round", "grabs", "total", "workers", "writer", "other", "redis",
            "drain", "ord/cmt")
        print(hdr + "   (CPU us per grab; orders per writer commit in the bench run)")
        for rnd in range(a.rounds):
            for s in servers:
                js = os.path.join(tmp, "b.json")
                t0, r0, c0 = threads(s.p.pid), proc_ticks(s.rpid), commits(s)
                d = bench(s, a, rnd, js)
                t1, r1, c1 = threads(s.p.pid), proc_ticks(s.rpid), commits(s)
                n = answers(d, a)
                g = split(t0, t1)
                tot = sum(g.values())
                row = [n] + [x * TICK_US / n for x in (tot, g["workers"], g["writer"], g["other"],
                                                       r1 - r0)]
                row.append(0.0 if a.soldout else
                           statistics.median(drain(s, d["voucher"]) for _ in range(a.drains)))
                row.append((c1[0] - c0[0]) / max(1, c1[1] - c0[1]))
                rows[s.name].append(row)
                print("%-28s %5d %8d %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f %7.0f" % (
                    (s.name[-28:], rnd) + tuple(row)), flush=True)
        print("median")
        for b in a.bins:
            med = [statistics.median(c) for c in zip(*rows[b])]
            print("%-28s %5s %8d %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f %7.0f" % (
                (b[-28:], "") + tuple(med)))
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
