#!/usr/bin/env python3
"""perf/sale_ab.py -- the open-loop sale's tail, A/B between binaries or settings, in one command.

    python3 perf/sale_ab.py [--rounds N] [--rate R] [--stock S] [--users U] [--rt] VARIANT [VARIANT ...]

A VARIANT is a seckill binary, optionally followed by serve flags after commas:
`build/seckill`, `/tmp/old`, `build/seckill,--writer-nice=0`;
or `nginx`: the control (perf/nginx_sale.py, which `make perf` runs after each sale too),
nginx answering every request with the course's sold-out body, driven by the same bench
(--bench, else build/seckill) -- a tail it shows too is the
machine's or the bench's, not the service's.
Each round runs every variant in turn, each on a fresh `seckill serve` on its embedded
default (private redis-server + SQLite, AOF everysec, synchronous=FULL): the sale of
`make perf` (S in stock, 10x buyers, +10 % repeats, 5 % sent three times at once, open
loop at R req/s over 256 connections; seeded tokens), with the timeline. Its Redis makes no
automatic AOF rewrite (in a fresh instance the seeding alone would start one right at the
sale in some runs); `make perf` rewrites the AOF before each sale instead.

Per run it prints p99 from the due time overall and per phase (selling / sold out), the
selling phase's p99 from the send and of "sent late", the CPU / run-queue wait (% of a
core) of the writer, the workers, redis-server and the bench in the selling phase, the
fdatasync calls the server made during the sale (SQLite commits; `perf stat` on the
syscall tracepoint), Redis's stalls above 2 ms (LATENCY LATEST) and the other processes'
CPU (the neighbours), the machine's own CPU slow spells that the bench's probe saw and the
p99s of the requests that met none of them (bench_cpuprobe.h); with --sched S, S seconds of the selling phase's scheduler events:
how long w0, w1, redis-server and bench0 waited runnable and how much of it behind the
order writer (perf/sched_blame.py). Then the medians per variant. The p99s move with the neighbours on
a shared host; the run-queue waits and the fsync counts are the steadier signals.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nginx_sale  # noqa: E402
import sched_blame  # noqa: E402
from grab_ab import free_port  # noqa: E402


def wait_health(port, proc, err):
    for _ in range(300):
        if proc.poll() is not None:
            sys.exit("server exited: " + open(err).read()[-2000:])
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=1) as r:
                if b'"success":true' in r.read():
                    return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit("server did not come up")


def redis_cli(sock, *args):
    return subprocess.run(["redis-cli", "-s", sock] + list(args), capture_output=True,
                          text=True).stdout


def nginx_run(a, tmp):
    """The control (perf/nginx_sale.py): nginx (2 workers) answering every request with the
    course's sold-out body, driven by the same bench at the same rate. What its tail shows
    is not the service's."""
    return nginx_sale.run(a.rate, a.stock, a.users, a.bench or "build/seckill", a.rt,
                          tmp), 0, "n/a", None


def one_run(variant, a, tmp):
    if variant == "nginx":
        return nginx_run(a, tmp)
    parts = variant.split(",")
    binary, flags = parts[0], [f for f in parts[1:] if f]
    d = tempfile.mkdtemp(prefix="sab", dir=tmp)
    port = free_port()
    err = os.path.join(d, "serve.err")
    rt = ["chrt", "-f", "5"] if a.rt else []
    srv = subprocess.Popen(rt + [binary, "serve", "--data-dir", os.path.join(d, "d"), "--listen",
                            "127.0.0.1:%d" % port, "--log-level", "warn"] + flags,
                           stdout=subprocess.DEVNULL, stderr=open(err, "w"))
    try:
        wait_health(port, srv, err)
        sock = os.path.join(d, "d", "redis", "redis.sock")
        redis_cli(sock, "config", "set", "latency-monitor-threshold", "2")
        # no automatic AOF rewrite: the seeding's ~70 MB would start one (a fork, then a
        # child on a core) in some runs' selling phase and not in others'
        redis_cli(sock, "config", "set", "auto-aof-rewrite-percentage", "0")
        # the bench seeds its tokens first: count fsyncs from the load's start only is not
        # possible from outside, so the count covers seeding + sale (seeding writes no SQL)
        pst = subprocess.Popen(["perf", "stat", "-x,", "-e", "syscalls:sys_enter_fdatasync,"
                                "syscalls:sys_enter_fsync", "-p", str(srv.pid)],
                               stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        j = os.path.join(d, "sale.json")
        tl = os.path.join(d, "timeline.tsv")
        # the bench's own load is the same for every variant: take it from the first binary
        bench = subprocess.Popen(rt + [a.bench or binary, "bench", "--target", "http://127.0.0.1:%d" % port,
                        "--data-dir", os.path.join(d, "d"), "--seed-tokens", "--quiet",
                        "--users", str(a.users or a.stock * 10), "--stock", str(a.stock), "--rate",
                        str(a.rate), "--dup", "0.1", "--burst-share", "0.05", "--conns", "256",
                        "--json", j, "--timeline", tl, "--cpu-probe"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        blamed = None
        if a.sched:
            # the selling phase: from the first admission on, for a.sched seconds
            while bench.poll() is None and "evalsha" not in redis_cli(sock, "info", "commandstats"):
                time.sleep(0.05)
            sd = os.path.join(d, "sched.data")
            subprocess.run(["perf", "sched", "record", "-o", sd, "--", "sleep", str(a.sched)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            txt = subprocess.run(["perf", "script", "-i", sd, "-F", "cpu,time,event,trace"],
                                 capture_output=True, text=True).stdout
            blamed = sched_blame.blame(txt.splitlines())
            os.unlink(sd)
        bench.wait()
        pst.send_signal(2)
        fs = 0
        for line in pst.communicate()[1].splitlines():
            f = line.split(",")
            if len(f) > 2 and f[0].strip().isdigit():
                fs += int(f[0])
        lat = redis_cli(sock, "latency", "latest").split()
        stalls = " ".join("%s:%s" % (lat[i], lat[i + 3]) for i in range(0, len(lat) - 3, 4))
        dj = json.load(open(j))
        if a.keep:
            shutil.copy(tl, os.path.join(a.keep, "timeline-%s-%d.tsv" % (
                os.path.basename(binary), int(time.time()))))
        return dj, fs, stalls or "none", blamed
    finally:
        nginx_sale.stop(srv, d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=int, default=20000)
    ap.add_argument("--stock", type=int, default=20000)
    ap.add_argument("--users", type=int, default=0, help="buyers [10x the stock]")
    ap.add_argument("--bench", help="the seckill binary whose bench drives every run "
                    "[each variant's own]")
    ap.add_argument("--sched", type=float, default=0,
                    help="record S seconds of scheduler events from the first admission on "
                    "and blame the waits (perf/sched_blame.py)")
    ap.add_argument("--rt", action="store_true",
                    help="run the server (with its redis-server) and the bench in the real-time "
                    "class (chrt -f 5): the host's other processes cannot take their CPU, so a "
                    "shared host measures the service; every thread of it then ignores nice "
                    "(the order writer's --writer-nice and idle class do nothing)")
    ap.add_argument("--keep", help="copy each run's timeline into this directory")
    ap.add_argument("variants", nargs="+")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sab", dir="/tmp")
    names = ("server/writer", "server/w0", "server/w1", "redis/redis-server", "bench/bench0")
    rows = {v: [] for v in a.variants}
    sb = {v: [] for v in a.variants}
    slow = {v: [] for v in a.variants}
    try:
        for r in range(a.rounds):
            for v in a.variants:
                d, fs, stalls, blamed = one_run(v, a, tmp)
                ph = d.get("phases", {})
                s, o = ph.get("selling", {}), ph.get("sold_out", {})
                th = s.get("threads", {})
                cw = " ".join("%s %.0f/%.0f" % (n.split("/")[1], th[n]["cpu_pct"], th[n]["wait_pct"])
                              for n in names if n in th)
                row = (d["latency_us"]["p99"] / 1e3, s.get("p99_us", 0) / 1e3,
                       o.get("p99_us", 0) / 1e3, s.get("send_p99_us", 0) / 1e3,
                       s.get("late_p99_us", 0) / 1e3, fs, s.get("others_cpu_pct", -1))
                cp = d.get("cpu_probe", {})
                out = cp.get("outside", {})
                rows[v].append(row + tuple(th.get(n, {}).get("wait_pct", 0) for n in names))
                slow[v].append((out.get("p99_us", 0) / 1e3, out.get("selling_p99_us", 0) / 1e3,
                                out.get("sold_out_p99_us", 0) / 1e3, cp.get("slow_spells", 0),
                                cp.get("slow_ms", 0)))
                print("round %d %-50s p99 %7.2f ms  selling %7.2f  sold out %7.2f  (selling from send "
                      "%.2f, late %.2f)  fdatasync %d  selling CPU/wait %s  others %.0f  redis stalls %s"
                      % ((r + 1, v) + row[:6] + (cw, row[6], stalls)), flush=True)
                print("        the machine's CPU slow %d time(s), %.0f ms; outside those spells p99 %.2f ms, "
                      "selling %.2f, sold out %.2f" % (slow[v][-1][3:] + slow[v][-1][:3]), flush=True)
                if blamed is not None:
                    wb = sum(blamed.get(n, (0, {}))[1].get("writer", 0) for n in ("w0", "w1", "redis-server", "bench0"))
                    wt = sum(blamed.get(n, (0, {}))[0] for n in ("w0", "w1", "redis-server", "bench0"))
                    sb[v].append((wb * 1e3, wt * 1e3))
                    print("        selling, %ss of sched events: w0+w1+redis+bench0 waited %.1f ms, %.1f ms of it "
                          "behind the writer; %s" % (a.sched, wt * 1e3, wb * 1e3, "; ".join(
                              "%s %.0f (%s)" % (n, blamed[n][0] * 1e3, " ".join(
                                  "%s %.0f" % (k, x * 1e3) for k, x in blamed[n][1].most_common(4)))
                              for n in sched_blame.WATCHED if n in blamed)), flush=True)
        print("medians (p99 ms overall / selling / sold out, fdatasyncs, run-queue wait %% in the "
              "selling phase: %s)" % " ".join(n.split("/")[1] for n in names))
        for v, rs in rows.items():
            med = [statistics.median(x) for x in zip(*rs)]
            print("  %-50s %.2f / %.2f / %.2f  fdatasync %.0f  wait %s" % (
                v, med[0], med[1], med[2], med[5], " ".join("%.0f" % x for x in med[7:])))
            sm = [statistics.median(x) for x in zip(*slow[v])]
            print("  %-50s outside the CPU's slow spells %.2f / %.2f / %.2f  (spells %.0f, %.0f ms)" % (
                "", sm[0], sm[1], sm[2], sm[3], sm[4]))
            if sb[v]:
                print("  %-50s waits behind the writer %.1f ms of %.1f ms (median)" % (
                    "", statistics.median(x[0] for x in sb[v]), statistics.median(x[1] for x in sb[v])))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
