#!/bin/sh
# perf/grab_redis.sh -- what a grab costs Redis, command by command, for one or more binaries.
#
#   sh perf/grab_redis.sh [BIN...]        (default: build/seckill)
#
# For each binary in turn (ROUNDS times, alternating, so a noisy host hits all alike): the
# service on its embedded default (private redis-server, AOF everysec, SQLite), a voucher
# whose stock never runs out, fresh signed tokens (`seckill tokens`), CONFIG RESETSTAT, then
# wrk with perf/grab.lua (a new user per request) for DURATION seconds and a wait until the
# writer has drained. Prints, per request: Redis's /proc CPU, every command's calls and
# execution time (INFO commandstats; a script's inner commands are listed indented and are
# included in its EVALSHA's time), and the sum of top-level commands.
#
# Env: DURATION (s, 5), CONNS (64), USERS (tokens, 300000), ROUNDS (1).
set -eu
cd "$(dirname "$0")/.."
DURATION=${DURATION:-5}
CONNS=${CONNS:-64}
USERS=${USERS:-300000}
ROUNDS=${ROUNDS:-1}
[ $# -gt 0 ] || set -- build/seckill
TMP=$(mktemp -d /tmp/skgr.XXXXXX)   # short: the Redis socket path must fit in 107 bytes
. perf/lib.sh   # cleanup trap, free_port, tick_us, cpu_ticks, serve_embedded
for t in redis-cli wrk curl; do
    command -v $t >/dev/null || { echo "perf: $t not found (sh tools/deps.sh perf)"; exit 2; }
done

one() {  # $1 binary, $2 label
    D="$TMP/d$2"; rm -rf "$D"; mkdir -p "$D"
    serve_embedded "$1" "$D"   # sets HP, SPID
    R="redis-cli -s $D/redis/redis.sock"
    RPID=$($R info server | tr -d '\r' | awk -F: '/^process_id:/ {print $2}')
    V=$(curl -s -X POST "http://127.0.0.1:$HP/voucher/seckill" -H "x-admin-token: $(cat "$D/admin-token")" -d \
      '{"shopId":1,"title":"wrk","payValue":100,"actualValue":200,"type":1,"stock":100000000,"beginTime":"2020-01-01T00:00:00","endTime":"2099-01-01T00:00:00"}' |
      sed -n 's/.*"data":\([0-9]*\).*/\1/p')
    "$1" tokens --users "$USERS" --key-file "$D/token-key" --redis "unix:$D/redis/redis.sock" > "$TMP/tokens.txt"
    sleep 1
    $R config resetstat > /dev/null
    r0=$(cpu_ticks "$RPID")
    VOUCHER=$V TOKENS="$TMP/tokens.txt" wrk -t2 -c"$CONNS" -d"${DURATION}s" -s perf/grab.lua \
        "http://127.0.0.1:$HP" > "$TMP/wrk.txt"
    # the writer's share of the grab: wait until it has acked every order
    i=0
    while [ "$($R xpending "seckill:stream:{$V}" g1 | head -1)" != 0 ] && [ $i -lt 300 ]; do
        sleep 0.1; i=$((i + 1))
    done
    r1=$(cpu_ticks "$RPID")
    n=$(awk '/requests in/ {print $1}' "$TMP/wrk.txt")
    $R info commandstats | tr -d '\r' > "$TMP/cs.txt"
    kill "$SPID"; wait "$SPID" 2>/dev/null || true
    python3 - "$2" "$n" "$((r1 - r0))" "$(tick_us)" "$TMP/cs.txt" "$(awk '/Requests\/sec/ {print $2}' "$TMP/wrk.txt")" <<'PY'
import sys
label, n, ticks, tus, path, rps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
# what admit.lua calls (HSET: the buyer hash of a call of several buyers; binaries before
# the buyer-hash lookups also wrote the order index there, on one Redis)
inner = {"hmget", "time", "hsetnx", "hset", "hincrby", "xadd", "lpush", "publish"}
rows = []
for line in open(path):
    if not line.startswith("cmdstat_"):
        continue
    name, rest = line[8:].split(":", 1)
    kv = dict(x.split("=") for x in rest.split(","))
    if name in ("info", "config|resetstat", "config|get", "xpending"):
        continue
    rows.append((name, int(kv["calls"]), int(kv["usec"])))
n = max(n, 1)
top = [r for r in rows if r[0] not in inner]
print("%s: %d grabs (%s req/s); redis CPU %.1f us/grab (/proc); top-level commands %.2f/grab, %.1f us/grab"
      % (label, n, rps, ticks * tus / n, sum(r[1] for r in top) / n, sum(r[2] for r in top) / n))
for name, calls, usec in sorted(top, key=lambda r: -r[2]) + sorted([r for r in rows if r[0] in inner], key=lambda r: -r[2]):
    ind = "      (inside a script) " if name in inner else "    "
    print("%s%-14s %8.4f calls/grab %6.2f us/grab %6.2f us/call" % (ind, name, calls / n, usec / n, usec / max(calls, 1)))
PY
}

r=1
while [ $r -le "$ROUNDS" ]; do
    for b in "$@"; do one "$b" "$b"; done
    r=$((r + 1))
done
