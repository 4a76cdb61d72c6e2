#!/usr/bin/env python3
"""perf/life_lua.py -- what a payment-deadline sweep's `life.lua expire` calls cost inside
Redis per order timed out, on an idle redis-server of its own (docs/lifecycle.md, "What it
costs"): the figure a timeout wave adds to the sale's Redis.

    python3 perf/life_lua.py [--orders N] [--per-call K] [--rounds R] [OLD_LIFE_LUA]

Starts redis-server on a unix socket in a temp dir (AOF on, fsync every second, as the
embedded default runs it), and per case fills a voucher's keys as admission leaves them --
the buyers hash (N users -> their orders), the stock, the order stream -- then sends every
order to `EVALSHA life.lua 'expire'` in calls of K (32, the sweep's SWEEP_CALL_ORDERS)
through `redis-cli --pipe`, and prints Redis's time inside those calls per order (INFO
commandstats, evalsha's usec over the orders) and the commands run inside them per order;
--eval sends EVAL with the script's text each call instead.

With OLD_LIFE_LUA (a life.lua file, e.g. `git show REV:src/order/life.lua > old.lua`) it
runs the two scripts in the order A B B A, R rounds (1), each case on a voucher of its own
with the same sizes, and prints the ratio of the means: a drift of the host weighs on both
alike. Exit status 2 when it could not run.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "perf"))
from room_lua import private_redis  # noqa: E402  (the same private redis-server)


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orders", type=int, default=100000)
    ap.add_argument("--per-call", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--eval", action="store_true",
                    help="send EVAL with the script's text each call instead of EVALSHA")
    ap.add_argument("old", nargs="?", help="another life.lua to compare (A B B A)")
    a = ap.parse_args()
    scripts = {"now": open(os.path.join(ROOT, "src/order/life.lua"), "rb").read()}
    if a.old:
        scripts["old"] = open(a.old, "rb").read()
    tmp = tempfile.mkdtemp(prefix="sklife.")
    srv, sock = private_redis(tmp, aof=True)
    try:
        def cli(*args):
            r = subprocess.run(["redis-cli", "-s", sock] + [str(x) for x in args],
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                sys.exit("life_lua: redis-cli %s: %s" % (args[:2], r.stderr))
            return r.stdout.strip()

        def pipe(data):
            r = subprocess.run(["redis-cli", "-s", sock, "--pipe"], input=data,
                               capture_output=True, timeout=600)
            if r.returncode != 0 or b"errors: 0" not in r.stdout:
                sys.exit("life_lua: --pipe: %s %s" % (r.stdout[-300:], r.stderr[-300:]))

        def stats():
            out = {}
            for ln in cli("INFO", "commandstats").splitlines():
                if ln.startswith("cmdstat_"):
                    name, rest = ln[8:].split(":", 1)
                    f = dict(kv.split("=") for kv in rest.split(","))
                    out[name] = (int(f["calls"]), int(f["usec"]))
            return out

        shas = {k: cli("SCRIPT", "LOAD", v.decode()) for k, v in scripts.items()}
        n, k = a.orders, a.per_call
        vid = [0]

        def case(name):
            vid[0] += 1
            v = vid[0]
            kv, kb, kst, ks, kc = ("seckill:voucher:{%d}" % v, "seckill:order:{%d}" % v,
                                   "seckill:ostate:{%d}" % v, "seckill:stream:{%d}" % v,
                                   "seckill:paysweep:{%d}" % v)
            base = v * 10 ** 9
            fill = [resp("HSET", kv, "stock", 0, "ep", 0)]
            for i in range(0, n, 1000):
                pairs = []
                for u in range(i, min(n, i + 1000)):
                    pairs += [u + 1, base + u + 1]
                fill.append(resp("HSET", kb, *pairs))
                fill.append(resp("XADD", ks, "*", "os", "0 0 " + " ".join(map(str, pairs))))
            pipe(b"".join(fill))
            calls = []
            for i in range(0, n, k):
                args = []
                for u in range(i, min(n, i + k)):
                    args += [base + u + 1, u + 1]
                head = ("EVAL", scripts[name]) if a.eval else ("EVALSHA", shas[name])
                calls.append(resp(*head, 5, kv, kb, kst, ks, kc, "expire", "", *args))
            cli("CONFIG", "RESETSTAT")
            pipe(b"".join(calls))
            st = stats()
            done = int(cli("HGET", kv, "returned") or 0)
            if done != n:
                sys.exit("life_lua: %s timed out %d of %d" % (name, done, n))
            ev = st["eval" if a.eval else "evalsha"]
            us = ev[1] / n
            inner = ", ".join("%s %.2f" % (c, st[c][0] / n) for c in sorted(st)
                              if c not in ("eval", "evalsha", "config", "info", "script"))
            print("life_lua: %-3s %d orders in calls of %d: %.2f us of Redis per order (%.1f us "
                  "a call); per order inside: %s" % (name, n, k, us, ev[1] / ev[0], inner),
                  flush=True)
            cli("DEL", kv, kb, kst, ks, kc)
            cli("BGREWRITEAOF")
            return us

        res = {name: [] for name in scripts}
        order = ["old", "now", "now", "old"] if a.old else ["now"]
        for _ in range(max(1, a.rounds)):
            for name in order:
                res[name].append(case(name))
        if a.old:
            mo = sum(res["old"]) / len(res["old"])
            mn = sum(res["now"]) / len(res["now"])
            print("life_lua: per order timed out, now / old = %.2f (%.2f us / %.2f us)" % (
                mn / mo, mn, mo))
        return 0
    finally:
        srv.terminate()
        srv.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
