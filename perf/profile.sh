#!/bin/sh
# perf/profile.sh -- where the CPU goes: perf profiles of seckill serve and of its
# redis-server while `seckill bench` drives one scenario (docs/performance.md).
#
#   sh perf/profile.sh [grab|soldout|sale|pollers]     (default grab)
#
# Starts the service on its embedded default in a temp dir, seeds tokens, runs the
# scenario for DURATION seconds (default 8) and records both processes with
# `perf record -g` during the middle of the run. pollers: 200,000 buyers join a waiting
# room of R = 1,000/s in the 15 s before its begin and poll it as told (perf/room.sh's
# pollers, without the sale), recorded for DURATION/2 s from 1 s after the begin. Prints, per process, the split by thread
# and by library and the top symbols; the raw data stays in build/perf/perf.*.data for
# `perf report -i ...`. Needs perf (linux-perf) and a build with symbols (make: -g).
set -eu
cd "$(dirname "$0")/.."
SCEN=${1:-grab}
DURATION=${DURATION:-8}
BIN=${BIN:-build/seckill}
OUT=build/perf
mkdir -p "$OUT"
[ -x "$BIN" ] || make -s
command -v perf >/dev/null || { echo "profile: perf not found"; exit 2; }
TMP=$(mktemp -d /tmp/skprof.XXXXXX)
SPID=""
cleanup() { [ -n "$SPID" ] && kill "$SPID" 2>/dev/null; sleep 0.5; rm -rf "$TMP"; }
trap cleanup EXIT INT TERM
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$BIN" serve --data-dir "$TMP/d" --listen "127.0.0.1:$PORT" --log-level warn > /dev/null 2>&1 &
SPID=$!
until curl -s "http://127.0.0.1:$PORT/health" | grep -q '"success":true'; do sleep 0.1; done
RPID=$(redis-cli -s "$TMP/d/redis/redis.sock" info server | tr -d '\r' | awk -F: '/^process_id:/ {print $2}')
# Tokens minted in the second the service found Redis without a revocation epoch are
# checked in Redis (src/auth/revoke.c), and bench mints them all as of one second: seed
# them once that second has passed, or every request costs an HGETALL the run would not
R="redis-cli -s $TMP/d/redis/redis.sock"
until EP=$($R zrangebyscore seckill:revoked +inf +inf | sed -n 's/^epoch://p' | sort -n | tail -1) &&
      [ -n "$EP" ] && [ "$($R time | head -1)" -ge "$EP" ]; do
    sleep 0.05
done
case "$SCEN" in
    grab)    args="--users 1000000 --stock 100000000 --dup 0 --burst-share 0 --duration $DURATION --no-audit" ;;
    soldout) args="--users 1000000 --stock 0 --dup 0 --burst-share 0 --duration $DURATION --no-audit" ;;
    sale)    args="--users 200000 --stock 20000 --rate 20000 --dup 0.1 --conns 256" ;;
    pollers) args="--waiting-room --room-rate 1000 --users 200000 --stock 100000000 --begin-in 15
                   --room-early 1 --room-slow 0 --duration $((DURATION + 20)) --conns 256 --no-audit" ;;
    *) echo "profile: unknown scenario $SCEN"; exit 2 ;;
esac
redis-cli -s "$TMP/d/redis/redis.sock" config resetstat > /dev/null
# shellcheck disable=SC2086
"$BIN" bench --target "http://127.0.0.1:$PORT" --data-dir "$TMP/d" --seed-tokens \
    $args > "$OUT/profile-$SCEN.txt" 2>&1 &
BPID=$!
# wait until the load is on (seeding takes a few seconds), then record the middle of it
while ! grep -q "users ready" "$OUT/profile-$SCEN.txt" 2>/dev/null && kill -0 $BPID 2>/dev/null; do
    sleep 0.2
done
sleep 1
[ "$SCEN" = pollers ] && sleep 15   # the room's begin: the polls after it
W=$((DURATION / 2))
perf record -F 1999 -g -p "$SPID" -o "$OUT/perf.server.data" -- sleep "$W" > /dev/null 2>&1 &
perf record -F 1999 -g -p "$RPID" -o "$OUT/perf.redis.data" -- sleep "$W" > /dev/null 2>&1
wait $BPID || true
sleep 0.5
grep -E "requests|latency|CPU" "$OUT/profile-$SCEN.txt"
echo
echo "== redis: INFO commandstats (Redis's own time per command, no I/O; includes the seeding)"
redis-cli -s "$TMP/d/redis/redis.sock" info commandstats | tr -d '\r' | grep '^cmdstat' |
    sed 's/^cmdstat_//; s/:calls=/ calls=/; s/,usec=[0-9]*//; s/,rejected_calls.*//' | sort -t= -k2 -n -r | head -12
for p in server redis; do
    f="$OUT/perf.$p.data"
    echo
    echo "== $p: by thread"
    perf report -i "$f" --no-children --sort comm --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' | head -8
    echo "== $p: by library"
    perf report -i "$f" --no-children --sort dso --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' | head -8
    echo "== $p: top symbols"
    perf report -i "$f" --no-children --sort sym --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' | head -25
done
