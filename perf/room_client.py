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
        core, Redis's EVALSHA us per second; with a second pair (a run with pollers, the
        first without): what the second run cost more per poll (Redis CPU us, EVALSHA us,
        PID's CPU us; the pollers' joins and the admitted ones' orders count too)
"""
import hashlib
import hmac
import http.client
import json
import os
import subprocess
import sys
import time

PASS_LABEL = b"seckill waiting-room pass v1"
# what room.lua runs inside its one EVALSHA (not sent by a client)
INNER = {"hmget", "time", "zscore", "zrank", "hsetnx", "hget", "hset", "hincrby", "zadd",
         "hdel", "zrem"}


def passes(tokens, key_file, voucher, out):
    with open(key_file, "rb") as f:
        pk = hmac.new(f.read().rstrip(b" \t\r\n"), PASS_LABEL, hashlib.sha256).digest()
    exp = int(time.time() * 1000) + 3600 * 1000
    with open(tokens) as src, open(out, "w") as dst:
        for line in src:
            tok, uid = line.split()[:2]
            body = "%s.%s.%d" % (uid, voucher, exp)
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
                      "host": (sum(c) - c[3] - c[4]) / hz,
                      "rcpu": float(f["used_cpu_user"]) + float(f["used_cpu_sys"]),
                      "zrank": cmd("zrank", "calls"), "evalsha": cmd("evalsha", "calls"),
                      "evalsha_us": cmd("evalsha", "usec")}))


def rates(f0, f1):
    a, b = (json.load(open(f)) for f in (f0, f1))
    dt = max(1e-3, b["t"] - a["t"])
    return {k: (b[k] - a[k]) / dt for k in a if k != "t"}


def cost(files):
    a = rates(*files[:2])
    if len(files) == 2:
        print("%.0f polls/s, Redis %.0f %% of a core (EVALSHA %.0f us/s), the service %.0f %%, "
              "the host %.0f %% (all cores)"
              % (a["zrank"], 100 * a["rcpu"], a["evalsha_us"], 100 * a["cpu"], 100 * a["host"]))
        return
    b = rates(*files[2:])
    n = max(1.0, b["zrank"] - a["zrank"])
    # (the pollers' polls, and also their joins and the admitted ones' orders)
    print("Redis CPU %.1f us (EVALSHA %.1f us), the service %.1f us"
          % (1e6 * (b["rcpu"] - a["rcpu"]) / n, (b["evalsha_us"] - a["evalsha_us"]) / n,
             1e6 * (b["cpu"] - a["cpu"]) / n))


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
    else:
        sys.exit(__doc__)
