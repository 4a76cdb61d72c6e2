#!/usr/bin/env python3
"""perf/room_memory.py -- what a waiting room of N queued buyers costs in Redis memory.

    python3 perf/room_memory.py [--members 1000000] [--passes 1000000]

A fresh redis-server (no persistence). The room's zset (seckill:room:{1}) gets N members as
room.lua writes them -- user ids from 1,000,000 up, scored a uniform random number in
[0, 1) as joins before beginTime are -- and the issued-pass hash (seckill:room:issued:{1})
P entries userId -> ms, both through redis-cli --pipe. Prints MEMORY USAGE of each key
(SAMPLES 0: every element counted), bytes per member, and used_memory. The figures in
docs/waiting-room.md come from this script.
"""
import argparse
import os
import random
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "it"))
import harness as H  # noqa: E402


def resp(*args):
    out = ["*%d\r\n" % len(args)]
    for a in args:
        a = str(a)
        out.append("$%d\r\n%s\r\n" % (len(a.encode()), a))
    return "".join(out)


def pipe(port, cmds):
    p = subprocess.run(["redis-cli", "-p", str(port), "--pipe"], input="".join(cmds).encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=True)
    if b"errors: 0" not in p.stdout:
        sys.exit("redis-cli --pipe: %s" % p.stdout.decode()[-300:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=1000000)
    ap.add_argument("--passes", type=int, default=1000000)
    a = ap.parse_args()
    r = H.start_redis(extra=("--save", "", "--appendonly", "no"))
    try:
        zkey, hkey = "seckill:room:{1}", "seckill:room:issued:{1}"
        pipe(r.port, (resp("ZADD", zkey, repr(random.random()), 1000000 + i)
                      for i in range(a.members)))
        pipe(r.port, (resp("HSET", hkey, 1000000 + i, 1765000000000 + i)
                      for i in range(a.passes)))
        z = int(r.cmd("MEMORY", "USAGE", zkey, "SAMPLES", "0"))
        h = int(r.cmd("MEMORY", "USAGE", hkey, "SAMPLES", "0")) if a.passes else 0
        used = [ln for ln in r.cmd("INFO", "memory").splitlines()
                if ln.startswith("used_memory:")][0]
        print("room zset: %d members, %d bytes (%.1f MiB, %.0f bytes/member)" %
              (a.members, z, z / 2**20, z / max(a.members, 1)))
        print("issued-pass hash: %d entries, %d bytes (%.1f MiB, %.0f bytes/entry)" %
              (a.passes, h, h / 2**20, h / max(a.passes, 1)))
        print(used)
    finally:
        r.stop()


if __name__ == "__main__":
    main()
