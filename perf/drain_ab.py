#!/usr/bin/env python3
"""perf/drain_ab.py -- the order writer's idle Redis work with many ended sales, A/B
between seckill binaries in one command.

    python3 perf/drain_ab.py [--ended N] [--rounds R] [--window S] BIN [BIN ...]

One redis-server (AOF everysec) and one SQLite file, N vouchers whose sale has ended (one
stream each, drained once a writer has marked them) and one on sale. Then, for R rounds,
each binary in turn is started on that data alone, left until the drained set holds the N
ended vouchers and 2 s more, and measured for S seconds with no traffic: redis-server's
CPU (utime + stime from /proc, 10 ms ticks: coarse) per second; the time Redis spent in
commands (INFO commandstats' usec, reset at the window's start) per second and per writer
poll (one poll = one XREADGROUP, the writer's BLOCK read, 1 s when idle); the calls per
second of XINFO GROUPS, XAUTOCLAIM and XREADGROUP; and the stream keys XREADGROUP and XINFO
named per second (MONITOR, 2 s just before the window). The
server is stopped before the next binary starts. At the end the median of each column per
binary.
"""
import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "it"))
import harness as H  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
DRAINED = "{seckill:streams}:drained"



def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def commandstats(r):
    """{command: (calls, usec)}"""
    out = {}
    for line in r.cmd("INFO", "commandstats").splitlines():
        name, _, rest = line.partition(":")
        if name.startswith("cmdstat_"):
            f = dict(kv.split("=") for kv in rest.split(","))
            out[name[8:]] = (int(f["calls"]), int(f["usec"]))
    return out


def keys_named(r, seconds):
    """Stream keys named by XREADGROUP / XINFO per second, by MONITOR."""
    mon = r.client(timeout=seconds + 5)
    mon.send("MONITOR")
    mon._read()
    n = 0
    end = time.time() + seconds
    mon.sock.settimeout(0.2)
    while time.time() < end:
        try:
            line = mon._read()
        except OSError:
            continue
        if '"XREADGROUP"' in line or '"XINFO"' in line:
            n += sum(1 for w in line.split('"') if w.startswith("seckill:stream:{"))
    mon.close()
    return n / seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ended", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=10)
    ap.add_argument("bins", nargs="+")
    a = ap.parse_args()
    bins = [os.path.abspath(b) for b in a.bins]
    r = H.start_redis()
    data = H.subdir("seckill-data")
    token = "drain-ab-admin-token-0123456789"
    settings = {"writer-nice": 0}

    def start(b):
        os.environ["SECKILL_BIN"] = b
        return H.start_server(r, data_dir=data, admin_token=token, settings=settings)

    srv = start(bins[0])
    h = srv.http()
    past = time.time() - 600
    for _ in range(a.ended):
        H.create_seckill(srv, stock=5, begin=past - 3600, end=past, http=h)
    H.create_seckill(srv, stock=5, http=h)
    H.wait_until(lambda: int(r.cmd("SCARD", DRAINED)) >= a.ended, 120,
                 what="the ended vouchers drained")
    srv.stop()
    rpid = r.proc.pid
    rows = {b: [] for b in bins}
    tops = {}   # the last round's commands that took most Redis time, usec per second
    print("%d ended (drained) vouchers + 1 on sale; window %.0f s; redis-server pid %d"
          % (a.ended, a.window, rpid), flush=True)
    hdr = ("%-28s %5s %10s %9s %9s %8s %8s %8s %8s" %
           ("binary", "round", "cpu_ms/s", "cmd_us/s", "us/poll", "keys/s", "xinfo/s",
            "xclaim/s", "xread/s"))
    print(hdr, flush=True)
    for rnd in range(a.rounds):
        for b in bins:
            srv = start(b)
            H.wait_until(lambda: int(r.cmd("SCARD", DRAINED)) >= a.ended, 60,
                         what="the drained set")
            time.sleep(2)   # the writer's start-up passes done
            keys = keys_named(r, 2.0)   # before the window: MONITOR costs Redis CPU
            r.cmd("CONFIG", "RESETSTAT")
            c0, t0 = cpu_s(rpid), time.time()
            time.sleep(a.window)
            c1, t1 = cpu_s(rpid), time.time()
            st = commandstats(r)
            srv.stop()
            dt = t1 - t0
            calls = lambda c: st.get(c, (0, 0))[0]   # noqa: E731
            usec = sum(u for c, (n, u) in st.items() if c not in ("info", "config|resetstat"))
            polls = max(1, calls("xreadgroup"))
            row = ((c1 - c0) * 1000 / dt, usec / dt, usec / polls, keys,
                   calls("xinfo|groups") / dt, calls("xautoclaim") / dt,
                   calls("xreadgroup") / dt)
            rows[b].append(row)
            top = sorted(((u, c) for c, (n, u) in st.items()
                          if c not in ("info", "config|resetstat")), reverse=True)[:4]
            tops[b] = " ".join("%s %.0f" % (c, u / dt) for u, c in top)
            print("%-28s %5d %10.2f %9.1f %9.1f %8.1f %8.1f %8.1f %8.2f" %
                  ((b[-28:], rnd + 1) + row), flush=True)
    print("medians:", flush=True)
    print(hdr, flush=True)
    for b in bins:
        med = [statistics.median(x[i] for x in rows[b]) for i in range(7)]
        print("%-28s %5s %10.2f %9.1f %9.1f %8.1f %8.1f %8.1f %8.2f" %
              ((b[-28:], "med") + tuple(med)), flush=True)
    print("the last round's commands by Redis time (usec per second):", flush=True)
    for b in bins:
        print("  %s: %s" % (b, tops[b]), flush=True)
    r.shutdown()


if __name__ == "__main__":
    main()
