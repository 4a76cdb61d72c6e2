#!/usr/bin/env python3
"""perf/cluster.py -- `make perf-cluster`: seckill on a Redis Cluster of 1, 2 and 3 masters.

For each cluster (formed by deploy/redis-cluster.sh through the test harness, on loopback,
no replicas unless said), one optimised `seckill serve` (2 workers) and VOUCHERS vouchers
placed evenly over the masters (created until each master holds VOUCHERS/N of them), then
one `seckill bench` per voucher, all at once: a grab (stock = buyers, every request a new
seeded user, no repeats). Measured:

  - Redis CPU per admission: each master's utime+stime (/proc/PID/stat) over the run,
    divided by ALL admissions of the run (its share of the work) and by its own
    admissions (its cost per admission);
  - grab req/s: all admissions / the longest bench's duration; p99 of the benches;
  - the cost of --redis-wait-replicas 1: 3 masters + 3 replicas, the same run with and
    without it (req/s and p99);
  - one hot voucher ("hot"): a single voucher with stockBuckets HOT_BUCKETS (6), the same
    VOUCHERS benches all buying it (stock = all their buyers), on 1, 2 and 3 masters:
    each master's Redis CPU per admission of the run, and its own admissions (the buyers
    in the buckets it holds). Unbucketed, the single hot voucher lives on one master
    whatever N is; bucketed, its work divides like the many vouchers' does.

Everything runs on this machine at once (server, benches, every redis-server), so the
absolute req/s are this machine's; the per-admission CPU figures are what scale.
Results: stdout and build/perf/cluster.txt (docs/redis-cluster.md quotes them).

Env: BIN (build/seckill), VOUCHERS (6), USERS (buyers per voucher, 25000), CONNS (16 per
bench), HOT_BUCKETS (6), ONLY ("1,2,3,wait,hot": which runs).
"""

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "it"))
os.environ.setdefault("SECKILL_BIN", os.path.join(ROOT, os.environ.get("BIN", "build/seckill")))
import harness as H  # noqa: E402

VOUCHERS = int(os.environ.get("VOUCHERS", "6"))
USERS = int(os.environ.get("USERS", "25000"))
CONNS = int(os.environ.get("CONNS", "16"))
HOT_BUCKETS = int(os.environ.get("HOT_BUCKETS", "6"))
ONLY = os.environ.get("ONLY", "1,2,3,wait,hot").split(",")
TICK = os.sysconf("SC_CLK_TCK")
out_lines = []


def say(s):
    print(s, flush=True)
    out_lines.append(s)


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def placed_vouchers(srv, cluster, masters):
    """VOUCHERS vouchers, the same number on every master: voucher id -> master port."""
    want = VOUCHERS // len(masters)
    per = {m.port: [] for m in masters}
    for _ in range(VOUCHERS * 20):
        v = H.create_seckill(srv, stock=USERS)
        port = cluster.node_for(H.k_voucher(v)).port
        if len(per[port]) < want:
            per[port].append(v)
        if all(len(x) == want for x in per.values()):
            return {v: p for p, vs in per.items() for v in vs}
    raise SystemExit("could not place the vouchers evenly")


def run(masters, replicas=0, wait=0, hot=0):
    """One run; hot > 0: one voucher with hot stock buckets bought by every bench."""
    cluster = H.start_redis_cluster(masters=masters, replicas=replicas)
    settings = {"rate_user_seckill": "0", "redis_wait_replicas": wait, "log_level": "warn"}
    srv = H.start_server(cluster.url, name="perf", threads=2, settings=settings)
    ms = cluster.masters()
    if hot:
        hv = H.create_seckill(srv, stock=USERS * VOUCHERS, stockBuckets=hot)
        benches = [(hv, i) for i in range(VOUCHERS)]
        placed = {hv: None}
    else:
        placed = placed_vouchers(srv, cluster, ms)
        benches = [(v, i) for i, v in enumerate(sorted(placed))]
    d = H.tmpdir()
    # Buyers' tokens signed with the server's key and minted without Redis (seckill tokens
    # --no-redis): the service checks them locally, and nothing but the sale itself (the
    # admissions, the writer's reads and acks) touches Redis while CPU is measured.
    key = os.path.join(srv.data_dir, "token-key")
    # A new Redis gets a revocation epoch from the server (src/auth/revoke.h): a token issued
    # before it is not taken by its signature alone. Mint after it.
    def epoch_passed():
        es = [int(m.split(":")[1]) for m in
              cluster.cmd("ZRANGEBYSCORE", "seckill:revoked", "+inf", "+inf") or []
              if m.startswith("epoch:")]
        return es and time.time() >= max(es) + 1
    H.wait_until(epoch_passed, 10, 0.05, "the revocation epoch")
    for v, i in benches:
        with open(os.path.join(d, "tokens-%d.txt" % i), "w") as f:
            subprocess.run([H.binary(), "tokens", "--users", str(USERS), "--user-base",
                            str(i * USERS), "--key-file", key, "--no-redis"], stdout=f,
                           check=True)
    cpu0 = {m.port: cpu_s(m.proc.pid) for m in cluster.nodes}
    t0 = time.monotonic()
    procs = []
    for v, i in benches:
        js = os.path.join(d, "bench-%d.json" % i)
        argv = [H.binary(), "bench", "--target", "http://127.0.0.1:%d" % srv.port,
                "--redis", cluster.url, "--voucher", str(v), "--stock", str(USERS),
                "--tokens", os.path.join(d, "tokens-%d.txt" % i), "--users", str(USERS),
                "--conns", str(CONNS), "--dup", "0", "--burst-share", "0", "--no-audit",
                "--quiet", "--json", js]
        procs.append((i, js, subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.PIPE)))
    results = {}
    for i, js, p in procs:
        _, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit("bench %d failed: %s" % (i, err.decode()[-2000:]))
        results[i] = json.load(open(js))
    wall = time.monotonic() - t0
    cpu = {m.port: cpu_s(m.proc.pid) - cpu0[m.port] for m in cluster.nodes}
    total = sum(r["outcomes"]["success"] for r in results.values())
    if hot:
        # each master's own admissions: the buyers of the buckets it holds
        own_of = {m.port: 0 for m in ms}
        for b in range(hot):
            k = H.bucket_keys(hv, b, hot)
            own_of[cluster.node_for(k["voucher"]).port] += int(cluster.cmd("HLEN", k["buyers"]))
        transfers = sum(int(cluster.cmd("SCARD", H.bucket_keys(hv, b, hot)["applied"]))
                        for b in range(hot))
    else:
        admitted = {v: results[i]["outcomes"]["success"] for v, i in benches}
        own_of = {m.port: sum(a for v, a in admitted.items() if placed[v] == m.port) for m in ms}
    longest = max(r["seconds"] for r in results.values())
    p99 = max(r["latency_us"]["p99"] for r in results.values())
    p99_mean = sum(r["latency_us"]["p99"] for r in results.values()) / len(results)
    label = "%d master%s%s%s%s" % (masters, "" if masters == 1 else "s",
                                   " + %d replicas" % (masters * replicas) if replicas else "",
                                   ", wait-replicas %d" % wait if replicas else "",
                                   ", one hot voucher in %d stock buckets" % hot if hot else "")
    say("%s: %d admissions in %.2fs (wall %.2fs): %.0f grab req/s; p99 %.2f ms (mean of "
        "benches) / %.2f ms (worst)" % (label, total, longest, wall, total / longest,
                                        p99_mean / 1000, p99 / 1000))
    per_master = {}
    if hot:
        say("  %d transfers between buckets; answers other than success: %s" % (
            transfers, {k: v for r in results.values() for k, v in r["outcomes"].items()
                        if k != "success" and v}))
    for m in ms:
        own = own_of[m.port]
        per_master[m.port] = (cpu[m.port], own)
        say("  master %d: %d admissions; Redis CPU %.2fs = %.1f us per admission of the run, "
            "%.1f us per own admission" % (m.port, own, cpu[m.port], 1e6 * cpu[m.port] / total,
                                            1e6 * cpu[m.port] / own if own else 0))
    for r in cluster.nodes:
        if r.port not in per_master:
            say("  replica %d: Redis CPU %.2fs" % (r.port, cpu[r.port]))
    srv.stop()
    H.cleanup()
    return {"total": total, "rps": total / longest, "p99_ms": p99_mean / 1000,
            "cpu_per_adm_us": {p: 1e6 * c / total for p, (c, _) in per_master.items()}}


def main():
    say("perf/cluster.py: %d vouchers x %d buyers, %d conns per bench, %s" % (
        VOUCHERS, USERS, CONNS, time.strftime("%Y-%m-%d %H:%M")))
    res = {}
    for n in (1, 2, 3):
        if str(n) in ONLY:
            res[n] = run(n)
    if 1 in res:
        base = sum(res[1]["cpu_per_adm_us"].values())
        say("single node: %.1f us of Redis CPU per admission" % base)
        for n in (2, 3):
            if n in res:
                worst = max(res[n]["cpu_per_adm_us"].values())
                say("%d masters: busiest master %.1f us per admission of the run = %.2f x the "
                    "single node (bound 1/%d x 1.25 = %.2f)" % (n, worst, worst / base, n,
                                                                1.25 / n))
    if "hot" in ONLY:
        hot = {n: run(n, hot=HOT_BUCKETS) for n in (1, 2, 3)}
        base = sum(hot[1]["cpu_per_adm_us"].values())
        say("one hot voucher, %d stock buckets: single node %.1f us of Redis CPU per admission"
            % (HOT_BUCKETS, base))
        for n in (2, 3):
            worst = max(hot[n]["cpu_per_adm_us"].values())
            say("  %d masters: busiest master %.1f us per admission of the run = %.2f x the "
                "single node (bound 1/%d x 1.25 = %.2f); grab %.0f req/s (single node %.0f)"
                % (n, worst, worst / base, n, 1.25 / n, hot[n]["rps"], hot[1]["rps"]))
    if "wait" in ONLY:
        a = run(3, replicas=1, wait=0)
        b = run(3, replicas=1, wait=1)
        say("wait-replicas 1 vs 0 (3 masters + 3 replicas): req/s %.2fx, p99 %.2f -> %.2f ms" % (
            b["rps"] / a["rps"], a["p99_ms"], b["p99_ms"]))
    os.makedirs(os.path.join(ROOT, "build", "perf"), exist_ok=True)
    with open(os.path.join(ROOT, "build", "perf", "cluster.txt"), "w") as f:
        f.write("\n".join(out_lines) + "\n")


if __name__ == "__main__":
    try:
        main()
    finally:
        H.cleanup()
