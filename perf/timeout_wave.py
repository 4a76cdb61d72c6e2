#!/usr/bin/env python3
"""perf/timeout_wave.py -- the payment timeout's sweep rate: N unpaid orders whose
deadlines pass together (docs/lifecycle.md, "Payment timeout").

    python3 perf/timeout_wave.py [--orders N] [--rounds K] [--bound S] [--min-rate R] [BINARY]

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

The sale beside the wave: before the wave, on the same server restarted with the timeout
still 3600 s, a sale of --sale-users buyers for a tenth as many units, open loop at
--sale-rate requests/s (`seckill bench --rate`, latency from each request's due time):
its p99 is the baseline, with a third such sale's once the wave is over (their mean).
Then the server restarts with --pay-timeout-s 1 and the same sale
(a new voucher) starts at once, while the sweep decides the N orders: its p99 over the
baseline's is the ratio judged. Both sales' buyers' tokens are minted before the first
restart (`seckill tokens`, `seckill bench --tokens FILE`), so the wave sale's load begins
as soon as the restarted server answers and overlaps the sweep in Redis, not only the
writer's SQL part (exit status 1 above --max-ratio, 1.5, or when the sale's
load began after SQL had every order at status 4: the wave is the sweep in Redis and the
writer applying its events). The wave sale's own
orders are also past the 1 s timeout a second after their admission: a small wave of
their own, swept beside the big one. The lines say when the wave sale's load ran against
the wave's Redis and SQL phases.

--rounds K (3) runs all of the above K times in a row on the one data dir (each round a new
voucher's N orders, new buyers for its sales): a single round's ratio swings with the shared
host's noise as much as with the wave, so the verdict is the median round's ratio and the
median round's rate; every round's figures are printed.
"""
import argparse
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
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


class Sale:
    """One sale of a.sale_users buyers, a tenth as many units, open loop at a.sale_rate
    (a new voucher), run by `seckill bench` in the background; wait() gives its figures."""

    def __init__(self, a, srv, d, tmp, label, tokens):
        self.label, self.js = label, os.path.join(tmp, "sale-%s.json" % label)
        self.out = open(os.path.join(tmp, "sale-%s.txt" % label), "w")
        self.t_load = time.time()
        self.p = subprocess.Popen(
            [a.binary, "bench", "--target", srv.url, "--data-dir", d, "--tokens", tokens,
             "--conns", "256", "--quiet", "--users", str(a.sale_users), "--stock",
             str(max(1, a.sale_users // 10)), "--rate", str(a.sale_rate), "--dup", "0",
             "--burst-share", "0", "--no-audit", "--json", self.js],
            stdout=self.out, stderr=subprocess.STDOUT)
        # when the bench ended, not when wait() is called (after the wave's SQL part)
        self.t_end = None
        self.waiter = threading.Thread(target=self._reap, daemon=True)
        self.waiter.start()

    def _reap(self):
        self.rc = self.p.wait()
        self.t_end = time.time()

    def wait(self):
        self.waiter.join(timeout=600)
        if self.t_end is None:
            self.p.kill()
            die("the %s sale's bench did not end within 600 s" % self.label)
        rc = self.rc
        self.out.close()
        if rc >= 2 or not os.path.exists(self.js):
            with open(self.out.name) as f:
                print(f.read()[-2000:])
            die("the %s sale's bench failed (%d)" % (self.label, rc))
        with open(self.js) as f:
            j = json.load(f)
        # the load itself (after reading its tokens): its last `seconds` before the end
        self.t_load = max(self.t_load, self.t_end - float(j.get("seconds", 0)))
        r = {"p50": j["latency_us"]["p50"], "p99": j["latency_us"]["p99"]}
        # where its tail was: bench's worst 100 ms slot (seconds into the load)
        with open(self.out.name) as f:
            worst = [ln.strip() for ln in f if ln.strip().startswith("worst 100ms")]
        print("timeout_wave: sale %s: %d req/s open loop: p50 %d us, p99 %d us; %s" % (
            self.label, j.get("rate", 0) or 0, r["p50"], r["p99"],
            worst[0] if worst else "-"), flush=True)
        return r


def sale(a, srv, d, tmp, label, tokens):
    return Sale(a, srv, d, tmp, label, tokens).wait()


def mint(a, d, tmp, label, base):
    """a.sale_users buyers' tokens (users base..), in Redis and in tmp/tokens-label.txt."""
    path = os.path.join(tmp, "tokens-%s.txt" % label)
    with open(path, "w") as f:
        r = subprocess.run([a.binary, "tokens", "--users", str(a.sale_users), "--user-base",
                            str(base), "--key-file", os.path.join(d, "token-key"), "--redis",
                            "unix:" + os.path.join(d, "redis", "redis.sock")],
                           stdout=f, stderr=subprocess.PIPE, text=True, timeout=300)
    if r.returncode != 0:
        die("seckill tokens failed (%d): %s" % (r.returncode, r.stderr[-1000:]))
    return path


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class Box:
    """The running server, for main's cleanup."""
    srv = None


def one_round(a, tmp, d, k, box):
    """Round k: a new voucher's a.orders unpaid orders, the sale alone, the wave with the
    sale beside it, the sale again after it. Returns (ratio, rate, judged) or None when
    Redis was not done within a.bound."""
    if box.srv:   # the last round's, with --pay-timeout-s 1: this round's orders must wait
        box.srv.stop()
        box.srv = None
    srv = box.srv = serve(a.binary, tmp, 3600, "warn")
    js = os.path.join(tmp, "bench-%d.json" % k)
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
    print("timeout_wave: round %d: %d orders of voucher %d sold and in SQL; load average %s" % (
        k, n, vid, loadavg()), flush=True)
    # the three sales' buyers, new users (the wave's are from user 0 up)
    ub = 10 * a.orders + 3 * k * a.sale_users
    tok_alone = mint(a, d, tmp, "alone%d" % k, ub)
    tok_wave = mint(a, d, tmp, "wave%d" % k, ub + a.sale_users)
    tok_after = mint(a, d, tmp, "after%d" % k, ub + 2 * a.sale_users)
    srv.stop()
    box.srv = None
    srv = box.srv = serve(a.binary, tmp, 3600, "warn")
    base = sale(a, srv, d, tmp, "alone", tok_alone)
    srv.stop()
    box.srv = None
    time.sleep(1.1)   # the restart's --pay-timeout-s 1 has every order past it
    t0 = time.time()
    srv = box.srv = serve(a.binary, tmp, 1, "info")
    t_up = time.time() - t0
    during = Sale(a, srv, d, tmp, "wave", tok_wave)
    vkey = "seckill:voucher:{%d}" % vid
    db = sqlite3.connect(os.path.join(d, "seckill.db"), timeout=30)
    q = "select count(*) from tb_voucher_order where voucher_id=? and status=4"
    t_redis = t_sql = None
    first = None
    in_sql = ret = 0
    while t_redis is None and time.time() - t0 < a.bound:
        ret = int(redis(d, "HGET", vkey, "returned") or 0)
        if ret and first is None:
            first = time.time() - t0
        if ret >= n:
            t_redis = time.time() - t0
        time.sleep(0.02)
    if t_redis is None:
        during.wait()
        print("timeout_wave: Redis not done within %.0f s (%d of %d timed out)" % (
            a.bound, ret, n))
        return None
    while t_sql is None and time.time() - t0 < a.sql_bound:
        in_sql = db.execute(q, (vid,)).fetchone()[0]
        if in_sql >= n:
            t_sql = time.time() - t0
        else:
            time.sleep(0.2)
    db.close()
    wave = during.wait()
    # the baseline again, on the restarted server once the wave is over: a drift of the
    # shared host over the round weighs on both sides
    after = sale(a, srv, d, tmp, "after", tok_after)
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
    alone = (base["p99"] + after["p99"]) / 2
    ratio = wave["p99"] / alone if alone else float("inf")
    print("timeout_wave: the wave sale's load ran %.2f-%.2f s after the start (the "
          "server answered at %.2f s, Redis done at %.2f s, SQL at %s); load average %s" % (
              during.t_load - t0, during.t_end - t0, t_up, t_redis,
              "%.2f s" % t_sql if t_sql else "-", loadavg()))
    # the wave: from the restart until SQL has every t event (the writer's busiest)
    judged = t_sql is not None and during.t_load - t0 < t_sql
    print("timeout_wave: round %d: sale p99 during the wave / alone = %.2f (%d us / the mean "
          "of %d us before and %d us after)%s" % (
              k, ratio, wave["p99"], base["p99"], after["p99"],
              "" if judged else "; the load began after the wave: not judged"), flush=True)
    return ratio, rate, judged


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orders", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=3,
                    help="waves in a row (each a new voucher's orders); the verdict is the "
                         "median of their ratios and of their rates")
    ap.add_argument("--bound", type=float, default=60,
                    help="seconds the wave may take in Redis from the restart")
    ap.add_argument("--sql-bound", type=float, default=120,
                    help="seconds to wait for SQL to have them all (reported, not judged)")
    ap.add_argument("--min-rate", type=float, default=10000)
    ap.add_argument("--sale-users", type=int, default=50000)
    ap.add_argument("--sale-rate", type=int, default=5000)
    ap.add_argument("--max-ratio", type=float, default=1.5,
                    help="the median round's p99 during the wave over the baseline's, at most")
    ap.add_argument("--keep", action="store_true",
                    help="keep the temp dir (serve0.log: the last restart's, at level info)")
    ap.add_argument("binary", nargs="?", default="build/seckill")
    a = ap.parse_args()
    # perf/run.sh bounds the run with timeout(1): its SIGTERM stops the server too (finally)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(2))
    tmp = tempfile.mkdtemp(prefix="skwave.")
    d = os.path.join(tmp, "d0")
    box = Box()
    try:
        rounds = []
        for k in range(1, max(1, a.rounds) + 1):
            r = one_round(a, tmp, d, k, box)
            if r is None:
                return 1
            rounds.append(r)
        judged = [x for x in rounds if x[2]]
        ratios = sorted(x[0] for x in judged)
        rates = sorted(x[1] for x in rounds)
        rate = rates[len(rates) // 2]
        print("timeout_wave: sweep rate, median of %d rounds: %.0f orders/s (%s)   "
              "[target >= %.0f]" % (len(rates), rate, ", ".join("%.0f" % x for x in rates),
                                     a.min_rate))
        bad = 0
        if not ratios:
            print("timeout_wave: every round's sale load began after its wave: ratio not judged")
            return 1
        ratio = ratios[len(ratios) // 2]
        print("timeout_wave: sale p99 during the wave / alone, median of %d rounds = %.2f (%s)"
              "   [target <= %.1f]" % (len(ratios), ratio,
                                       ", ".join("%.2f" % x for x in ratios), a.max_ratio))
        if rate < a.min_rate:
            print("timeout_wave: below %.0f orders/s" % a.min_rate)
            bad = 1
        if ratio > a.max_ratio:
            print("timeout_wave: the sale's p99 during the wave above %.1fx" % a.max_ratio)
            bad = 1
        return bad
    finally:
        if box.srv:
            box.srv.stop()
        if a.keep:
            print("timeout_wave: kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
