#!/usr/bin/env python3
"""perf/room_lua.py -- what one poll's EVALSHA of src/room/room.lua costs inside Redis, on an
idle redis-server of its own (docs/waiting-room.md, "Where the pollers' time goes").

    python3 perf/room_lua.py [--members N] [--calls N] [--clients C]

Starts redis-server on a unix socket in a temp dir (no persistence), fills a voucher hash
with a room (R = 1,000/s, begun as each case starts: most polls find their member waiting) and its zset with N members (200,000; ids
zero-padded as redis-benchmark's __rand_int__ writes them), then runs redis-benchmark
--calls times, C clients, for each of:

    poll        EVALSHA room.lua 'poll' of a random queued member (what a waiting poller costs)
    empty       EVALSHA of `return 1` (Redis's fixed cost of a script call)
    reads       EVALSHA of room.lua's three reads alone (HMGET, TIME, ZRANK), returning 1
    zrank       ZRANK of a random member, sent by the client (no script)

and prints each one's usec_per_call from INFO commandstats (Redis's time inside the call,
not the client's round trip), the inner commands' too. Exit status 2 when it could not run.
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READS = ("local v = redis.call('HMGET', KEYS[1], 'stock', 'begin', 'end', 'room_r', "
         "'room_ttl') local t = redis.call('TIME') "
         "local r = redis.call('ZRANK', KEYS[2], ARGV[2]) return 1")


def private_redis(tmp, aof=False):
    """redis-server on a unix socket in tmp, no snapshots, AOF (fsync every second) only
    with aof: (its process, the socket's path). Exits 2 when it does not start."""
    sock = os.path.join(tmp, "redis.sock")
    srv = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock, "--save", "",
                            "--appendonly", "yes" if aof else "no", "--appendfsync",
                            "everysec", "--dir", tmp],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if os.path.exists(sock):
            return srv, sock
        time.sleep(0.05)
    srv.kill()
    print("%s: redis-server did not start" % os.path.basename(sys.argv[0]), file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=200000)
    ap.add_argument("--calls", type=int, default=200000)
    ap.add_argument("--clients", type=int, default=4)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="skrlua.")
    srv, sock = private_redis(tmp)
    try:
        def cli(*args, stdin=None):
            r = subprocess.run(["redis-cli", "-s", sock] + [str(x) for x in args], input=stdin,
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                sys.exit("room_lua: redis-cli %s: %s" % (args[:2], r.stderr))
            return r.stdout.strip()
        kv, kz, ki = "seckill:voucher:{1}", "seckill:room:{1}", "seckill:room:issued:{1}"
        now = int(time.time())
        cli("HSET", kv, "stock", 100000000, "begin", now, "end", now + 86400, "room_r",
            1000, "room_ttl", 60)
        rnd = random.Random(1)
        lines = ["ZADD %s %.17f %012d" % (kz, rnd.random(), i) for i in range(a.members)]
        cli("--pipe", stdin="\n".join(lines) + "\n")
        with open(os.path.join(ROOT, "src", "room", "room.lua")) as f:
            room = cli("SCRIPT", "LOAD", f.read())
        empty = cli("SCRIPT", "LOAD", "return 1")
        reads = cli("SCRIPT", "LOAD", READS)
        print("room_lua: a room of %d members, %d calls each, %d clients, redis-server %s" % (
            int(cli("ZCARD", kz)), a.calls, a.clients,
            cli("INFO", "server").split("redis_version:")[1].split()[0]))
        cases = [("poll", ["EVALSHA", room, "3", kv, kz, ki, "poll", "__rand_int__"]),
                 ("empty", ["EVALSHA", empty, "0"]),
                 ("reads", ["EVALSHA", reads, "2", kv, kz, "poll", "__rand_int__"]),
                 ("zrank", ["ZRANK", kz, "__rand_int__"])]
        for name, cmd in cases:
            # the room begins now: members due within the 60 s pass lifetime (rank < 60,000)
            # get their pass valid from their due moment at their first poll (HSETNX), the
            # rest wait -- what the polls of a large room meet
            cli("HSET", kv, "begin", int(time.time()))
            cli("DEL", ki)
            cli("CONFIG", "RESETSTAT")
            r = subprocess.run(["redis-benchmark", "-s", sock, "-n", str(a.calls), "-c",
                                str(a.clients), "-r", str(a.members), "-q"] + cmd,
                               capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                sys.exit("room_lua: redis-benchmark %s: %s" % (name, r.stderr))
            st = {}
            for ln in cli("INFO", "commandstats").splitlines():
                if ln.startswith("cmdstat_"):
                    n, rest = ln[len("cmdstat_"):].split(":", 1)
                    f = dict(kv.split("=") for kv in rest.split(","))
                    st[n] = (int(f["calls"]), float(f["usec_per_call"]))
            top = st.get(cmd[0].lower(), (0, 0))
            inner = ", ".join("%s %.2f" % (n, c[1]) for n, c in sorted(st.items())
                              if n != cmd[0].lower() and not n.startswith("config"))
            print("room_lua: %-6s %.2f us per call in Redis (%d calls)%s" % (
                name, top[1], top[0], "; inside it, us per call: " + inner if inner else ""))
        return 0
    finally:
        srv.terminate()
        srv.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
