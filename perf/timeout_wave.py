#!/usr/bin/env python3
"""perf/timeout_wave.py -- the payment timeout's sweep rate: N unpaid orders whose
deadlines pass together (docs/lifecycle.md, "Payment timeout").

    python3 perf/timeout_wave.py [--orders N] [--bound S] [--min-rate R] [BINARY]

Starts `seckill serve` on its embedded default (private redis-server + SQLite, a temp data
dir) with --pay-timeout-s 3600, sells N units to N buyers with `seckill bench` (every order
in SQL when it returns), stops the server and starts it again with --pay-timeout-s 1: every
order is then past its deadline at once. Prints how long the order writer took, from the
start of the process, until Redis had timed out all N (the voucher's `returned` = N: the
sweep's rate, the figure judged), how many the stream sweep decided and how many the SQL
backstop did (the restarted server's info log), and how long until SQL had all N at
status 4 (the writer applying the `t` events, one transaction per writer batch; reported,
waited for at most --sql-bound seconds). Exit status 1 when the sweep's rate is below
--min-rate (10,000 orders/s) or Redis was not done within --bound seconds, 2 when it could
not run.
"""
import argparse
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grab_ab import Server  # noqa: E402  (the same embedded-default server)


def die(msg):
    print("timeout_wave: " + msg, file=sys.stderr)
    sys.exit(2)


def serve(binary, tmp, timeout_s, level):
    """grab_ab's server (its data dir tmp/d0, its log tmp/serve0.log, rewritten)."""
    try:
        return Server("%s,--pay-timeout-s=%d,--log-level=%s" % (binary, timeout_s, level), tmp,
                      0)
    except SystemExit as e:
        die(str(e.code))


def redis(d, *args):
    r = subprocess.run(["redis-cli", "-s", os.path.join(d, "redis", "redis.sock")] +
                       [str(a) for a in args], capture_output=True, text=True, timeout=10)
    return r.stdout.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orders", type=int, default=100000)
    ap.add_argument("--bound", type=float, default=60,
                    help="seconds the wave may take in Redis from the restart")
    ap.add_argument("--sql-bound", type=float, default=120,
                    help="seconds to wait for SQL to have them all (reported, not judged)")
    ap.add_argument("--min-rate", type=float, default=10000)
    ap.add_argument("--keep", action="store_true",
                    help="keep the temp dir (serve0.log: the restart's, at level info)")
    ap.add_argument("binary", nargs="?", default="build/seckill")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="skwave.")
    d = os.path.join(tmp, "d0")
    srv = None
    try:
        srv = serve(a.binary, tmp, 3600, "warn")
        js = os.path.join(tmp, "bench.json")
        r = subprocess.run([a.binary, "bench", "--target", srv.url, "--data-dir", d,
                            "--seed-tokens", "--users", str(a.orders), "--stock",
                            str(a.orders), "--dup", "0", "--burst-share", "0", "--quiet",
                            "--json", js], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            print(r.stdout[-2000:], r.stderr[-2000:])
            die("bench failed (%d)" % r.returncode)
        with open(js) as f:
            b = json.load(f)
        vid, n = b["voucher"], b["outcomes"]["success"]
        print("timeout_wave: %d orders of voucher %d sold and in SQL" % (n, vid), flush=True)
        srv.stop()
        time.sleep(1.1)   # the restart's --pay-timeout-s 1 has every order past it
        srv = None
        t0 = time.time()
        srv = serve(a.binary, tmp, 1, "info")
        vkey = "seckill:voucher:{%d}" % vid
        db = sqlite3.connect(os.path.join(d, "seckill.db"), timeout=30)
        q = "select count(*) from tb_voucher_order where voucher_id=? and status=4"
        t_redis = t_sql = None
        first = None
        in_sql = 0
        while t_redis is None and time.time() - t0 < a.bound:
            ret = int(redis(d, "HGET", vkey, "returned") or 0)
            if ret and first is None:
                first = time.time() - t0
            if ret >= n:
                t_redis = time.time() - t0
            time.sleep(0.02)
        if t_redis is None:
            print("timeout_wave: Redis not done within %.0f s (%d of %d timed out)" % (
                a.bound, ret, n))
            return 1
        while t_sql is None and time.time() - t0 < a.sql_bound:
            in_sql = db.execute(q, (vid,)).fetchone()[0]
            if in_sql >= n:
                t_sql = time.time() - t0
            else:
                time.sleep(0.2)
        db.close()
        rate = n / t_redis
        print("timeout_wave: %d orders timed out in Redis %.2f s after the start "
              "(first at %.2f s): %.0f orders/s" % (n, t_redis, first, rate))
        if t_sql is not None:
            print("timeout_wave: in SQL (status 4) %.2f s after the start: %.0f orders/s" % (
                t_sql, n / t_sql))
        else:
            el = time.time() - t0
            print("timeout_wave: in SQL (status 4) %d of %d after %.0f s: %.0f orders/s" % (
                in_sql, n, el, in_sql / el))
        # who decided them: the stream sweep or the SQL backstop (the writer's info lines)
        by = {"stream": 0, "SQL scan": 0}
        srv.log.flush()
        with open(os.path.join(tmp, "serve0.log")) as f:
            for ln in f:
                m = re.search(r"writer: (.*): (\d+) unpaid orders timed out", ln)
                if m:
                    by["SQL scan" if m.group(1) == "SQL scan" else "stream"] += int(m.group(2))
        print("timeout_wave: decided by the stream sweep %d, by the SQL backstop %d" % (
            by["stream"], by["SQL scan"]))
        if rate < a.min_rate:
            print("timeout_wave: below %.0f orders/s" % a.min_rate)
            return 1
        return 0
    finally:
        if srv:
            srv.stop()
        if a.keep:
            print("timeout_wave: kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
