#!/usr/bin/env python3
"""Print Redis protocol that creates N login tokens (for redis-cli --pipe).

Token n is the 32-hex form of n; its hash is the course's login:token:<token>
{id, nickName, icon}. Used by perf/run.sh so that a benchmark can use hundreds of
thousands of distinct users without logging each one in through the API.
"""
import sys

def cmd(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)

def main():
    n = int(sys.argv[1])
    ttl = int(sys.argv[2]) if len(sys.argv) > 2 else 36000
    w = sys.stdout.buffer
    for i in range(1, n + 1):
        key = "login:token:%032x" % i
        w.write(cmd("HSET", key, "id", 1000000 + i, "nickName", "bench_%d" % i, "icon", ""))
        w.write(cmd("EXPIRE", key, ttl))

main()
