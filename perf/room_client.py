#!/usr/bin/env python3
"""perf/room_client.py -- the waiting room's helpers for perf/room.sh.

    room_client.py passes TOKENS KEY_FILE VOUCHER OUT
        each "<token> <user id>" line of TOKENS (seckill tokens) as "<token> <user id> <pass>"
        in OUT: a pass for that user and voucher, valid an hour, signed as pass.h lays it
        out with the key derived from the token key in KEY_FILE (what the room issues);
        perf/grab.lua sends the third field as x-seckill-pass
    room_client.py polls PORT TOKENS VOUCHER N REDIS_SOCKET
        N users of TOKENS join the voucher's room, then each polls it once: prints
        "<polls> <commands sent> <EVALSHA calls> <commands in all> <EVALSHA us>" over the
        polls alone
        (INFO commandstats of the service's Redis; the script's inner commands are counted
        apart, as MONITOR would show them); the commands by name go to stderr
    room_client.py snap REDIS_SOCKET PID
        one JSON line of counters for `cost`: the time, PID's and the host's busy CPU
        seconds (/proc), Redis's
        CPU seconds (INFO cpu), ZRANK calls (room.lua runs one per poll or join of a queued
        buyer; nothing else does) and EVALSHA calls and microseconds (INFO commandstats)
    room_client.py cost A0 A1 [B0 B1]
        between two snaps: polls per second, Redis's, PID's and the host's CPU in % of a
        core, Redis's EVALSHA us per second, the host's steal time and its load average;
        with a second pair (a run with pollers, the first without): what the second run
        cost more per poll (Redis CPU us, EVALSHA us, PID's CPU us; the pollers' joins and
        the admitted ones' orders count too)
    room_client.py round DROP_MS OTHERS_MAX POLLERS_PCT A1 B1 B2 A2
        one A B B A round of sales (seckill bench --json --cpu-probe files; A alone, B with
        the pollers): "<ratio> <ratio outside slow spells> <kept 0/1> <text>", the ratio
        being the B sales' mean p99 over the A sales'; a round is dropped (kept 0) when
        the host's CPU ran slow for more than DROP_MS in any of its sales, or when other
        processes than the service, its Redis and the benches (bench's others_cpu_pct; in
        a B sale less POLLERS_PCT, the pollers' bench) took more than OTHERS_MAX % of a
        core in any of them
    room_client.py verdict ROUNDS_FILE
        the median of the kept rounds' ratios (both kinds) and what was dropped
"""
import hashlib
import hmac
import http.client
import json
import os
import subprocess
import sys
import time

PASS_LABEL = b"seckill waiting-room pass v2"
# what room.lua runs inside its one EVALSHA (not sent by a client)
INNER = {"hmget", "time", "zscore", "zrank", "hsetnx", "hget", "hset", "hincrby", "zadd",
         "hdel", "zrem"}


def passes(tokens, key_file, voucher, out):
    with open(key_file, "rb") as f:
        pk = hmac.new(f.read().rstrip(b" \t\r\n"), PASS_LABEL, hashlib.sha256).digest()
    start = int(time.time() * 1000) - 1000
    exp = start + 3600 * 1000
    with open(tokens) as src, open(out, "w") as dst:
        for line in src:
            tok, uid = line.split()[:2]
            body = "%s.%s.%d.%d" % (uid, voucher, start, exp)
            mac = hmac.new(pk, body.encode(), hashlib.sha256).digest()[:16].hex()
            dst.write("%s %s %s.%s\n" % (tok, uid, body, mac))


def stats(sock):
    out = subprocess.run(["redis-cli", "-s", sock, "info", "commandstats"], check=True,
                         capture_output=True, text=True).stdout
    calls = {}
    for ln in out.splitlines():
        if ln.startswith("cmdstat_"):
            name = ln.split(":")[0][len("cmdstat_"):]
            calls[name] = int(ln.split("calls=")[1].split(",")[0])
            if name == "evalsha":   # its microseconds, room.lua's inner commands included
                calls["evalsha usec"] = int(ln.split("usec=")[1].split(",")[0])
    return calls


def snap(sock, pid):
    info = subprocess.run(["redis-cli", "-s", sock, "info", "all"], check=True,
                          capture_output=True, text=True).stdout
    f = dict(ln.split(":", 1) for ln in info.splitlines() if ":" in ln)

    def cmd(name, field):
        v = f.get("cmdstat_" + name, "")
        return float(v.split(field + "=")[1].split(",")[0]) if field + "=" in v else 0.0
    with open("/proc/%s/stat" % pid) as st:
        ticks = st.read().rsplit(")", 1)[1].split()
    hz = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as st:   # the host's busy time: all but idle and iowait
        c = [int(x) for x in st.readline().split()[1:9]]
    print(json.dumps({"t": time.time(), "cpu": (int(ticks[11]) + int(ticks[12])) / hz,
                      "host": (sum(c) - c[3] - c[4]) / hz, "steal": c[7] / hz,
                      "load": float(open("/proc/loadavg").read().split()[0]),
                      "rcpu": float(f["used_cpu_user"]) + float(f["used_cpu_sys"]),
                      "zrank": cmd("zrank", "calls"), "evalsha": cmd("evalsha", "calls"),
                      "evalsha_us": cmd("evalsha", "usec")}))


def rates(f0, f1):
    a, b = (json.load(open(f)) for f in (f0, f1))
    dt = max(1e-3, b["t"] - a["t"])
    r = {k: (b[k] - a[k]) / dt for k in a if k not in ("t", "load")}
    r["load"] = max(a.get("load", 0), b.get("load", 0))
    return r


def cost(files):
    a = rates(*files[:2])
    if len(files) == 2:
        print("%.0f polls/s, Redis %.0f %% of a core (EVALSHA %.0f us/s), the service %.0f %%, "
              "the host %.0f %% (all cores), steal %.0f %%, load average %.1f"
              % (a["zrank"], 100 * a["rcpu"], a["evalsha_us"], 100 * a["cpu"], 100 * a["host"],
                 100 * a.get("steal", 0), a["load"]))
        return
    b = rates(*files[2:])
    n = max(1.0, b["zrank"] - a["zrank"])
    # (the pollers' polls, and also their joins and the admitted ones' orders)
    print("Redis CPU %.1f us (EVALSHA %.1f us), the service %.1f us"
          % (1e6 * (b["rcpu"] - a["rcpu"]) / n, (b["evalsha_us"] - a["evalsha_us"]) / n,
             1e6 * (b["cpu"] - a["cpu"]) / n))


def sale_figures(path):
    j = json.load(open(path))
    cp = j.get("cpu_probe") or {}
    out = (cp.get("outside") or {}).get("p99_us", j["latency_us"]["p99"])
    # other processes' CPU over the sale (% of a core), its two phases weighted by requests
    ph = [p for p in (j.get("phases") or {}).values() if p.get("requests")]
    n = sum(p["requests"] for p in ph)
    others = sum(p.get("others_cpu_pct", 0) * p["requests"] for p in ph) / n if n else 0.0
    return j["latency_us"]["p99"], out or j["latency_us"]["p99"], cp.get("slow_ms", 0.0), others


def round_(drop_ms, others_max, pollers_pct, a1, b1, b2, a2):
    f = [sale_figures(p) for p in (a1, b1, b2, a2)]
    alone, with_ = (f[0][0] + f[3][0]) / 2, (f[1][0] + f[2][0]) / 2
    alone_o, with_o = (f[0][1] + f[3][1]) / 2, (f[1][1] + f[2][1]) / 2
    slow = max(x[2] for x in f)
    others = [max(0.0, x[3] - (pollers_pct if i in (1, 2) else 0)) for i, x in enumerate(f)]
    why = []
    if slow > drop_ms:
        why.append("slow spells above %.0f ms" % drop_ms)
    if max(others) > others_max:
        why.append("other processes above %.0f %% of a core" % others_max)
    kept = not why
    print("%.2f %.2f %d p99 with / alone = %.2f (B %d, %d us / A %d, %d us); outside the "
          "host's slow spells %.2f; slow spells %s ms; other processes %s %% of a core%s" % (
              with_ / max(1, alone), with_o / max(1, alone_o), kept, with_ / max(1, alone),
              f[1][0], f[2][0], f[0][0], f[3][0], with_o / max(1, alone_o),
              ", ".join("%.0f" % x[2] for x in f), ", ".join("%.0f" % x for x in others),
              "" if kept else ": DROPPED (%s)" % ", ".join(why)))


def median(v):
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def verdict(path):
    rows = [ln.split()[:3] for ln in open(path) if ln.strip()]
    kept = sorted(float(r[0]) for r in rows if r[2] == "1")
    kept_o = sorted(float(r[1]) for r in rows if r[2] == "1")
    every = ", ".join(r[0] + ("" if r[2] == "1" else " (dropped)") for r in rows)
    if not kept:
        print("none of %d rounds kept (each met the host's slow spells or other tenants' load): %s" % (
            len(rows), every))
        return
    print("%.2f, the median of %d kept rounds of %d (%s); outside the host's slow spells %.2f" % (
        median(kept), len(kept), len(rows), every, median(kept_o)))


def polls(port, tokens, voucher, n, sock):
    toks = [ln.split()[0] for _, ln in zip(range(n), open(tokens))]
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def call(method, tok):
        c.request(method, "/seckill/queue/%s" % voucher, body="{}" if method == "POST" else None,
                  headers={"authorization": tok, "content-type": "application/json"})
        j = json.loads(c.getresponse().read())
        if not j.get("success"):
            sys.exit("room_client: %s /seckill/queue/%s: %r" % (method, voucher, j))
    for t in toks:
        call("POST", t)
    s0 = stats(sock)
    for t in toks:
        call("GET", t)
    s1 = stats(sock)
    us = s1.pop("evalsha usec", 0) - s0.pop("evalsha usec", 0)
    d = {k: v - s0.get(k, 0) for k, v in s1.items() if k not in ("info", "config")}
    sent = sum(v for k, v in d.items() if k not in INNER)
    print("room_client: commands over the polls: %s" % " ".join(
        "%s=%d" % kv for kv in sorted(d.items()) if kv[1]), file=sys.stderr)
    print(len(toks), sent, d.get("evalsha", 0), sum(d.values()), us)


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[:1] == ["passes"] and len(a) == 5:
        passes(*a[1:])
    elif a[:1] == ["polls"] and len(a) == 6:
        polls(int(a[1]), a[2], a[3], int(a[4]), a[5])
    elif a[:1] == ["snap"] and len(a) == 3:
        snap(a[1], a[2])
    elif a[:1] == ["cost"] and len(a) in (3, 5):
        cost(a[1:])
    elif a[:1] == ["round"] and len(a) == 8:
        round_(float(a[1]), float(a[2]), float(a[3]), *a[4:])
    elif a[:1] == ["verdict"] and len(a) == 2:
        verdict(a[1])
    else:
        sys.exit(__doc__)
