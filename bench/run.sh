#!/bin/sh
# bench/run.sh -- the issue-2 benchmark: the service beside its ceilings, in one run.
#
# Starts its own redis-server (AOF everysec), nginx (static 200) and seckill on free
# loopback ports, then measures with the same wrk settings:
#   1. redis-benchmark EVALSHA of scripts/admit.lua, -P 1 and -P 16 (64 clients)
#   2. nginx returning a static 200, 2 workers
#   3. seckill grab: stock never runs out, a new user on every request
#   4. seckill sold out: stock 0
#   5. the order writer's drain rate into SQLite after the grab
# and the server's and redis-server's CPU time per request (from /proc). Results go to
# stdout and to build/bench/results.txt. Env: DURATION (s, default 10), CONNS (64).
set -eu
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10}
CONNS=${CONNS:-64}
USERS=${USERS:-600000}
BIN=${BIN:-build/seckill}
OUT=build/bench
mkdir -p "$OUT"
TMP=$(mktemp -d /tmp/seckill-bench.XXXXXX)
RES="$OUT/results.txt"
: > "$RES"
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    sleep 0.3
    for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

say() { echo "$*" | tee -a "$RES"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
tick_us() { echo $((1000000 / $(getconf CLK_TCK))); }

[ -x "$BIN" ] || make -s
RP=$(free_port); HP=$(free_port); NP=$(free_port)

redis-server --port "$RP" --bind 127.0.0.1 --dir "$TMP" --appendonly yes --appendfsync everysec \
    --save '' --daemonize no --logfile "$TMP/redis.log" &
RPID=$!; pids="$pids $RPID"
R="redis-cli -p $RP"
until $R ping >/dev/null 2>&1; do sleep 0.05; done

say "# seckill benchmark $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(nproc) cores; wrk -t2 -c$CONNS -d${DURATION}s"

# 1. redis-benchmark of the admission script itself, on a voucher that never sells out.
SHA=$($R script load "$(cat scripts/admit.lua)")
$R hset 'seckill:voucher:{1}' stock 1000000000 begin 0 end 4102444800 >/dev/null
for P in 1 16; do
    line=$(redis-benchmark -p "$RP" -c 64 -n $((P == 1 ? 200000 : 1000000)) -P $P -r 1000000000 -q \
        EVALSHA "$SHA" 3 'seckill:voucher:{1}' 'seckill:order:{1}' 'seckill:stream:{1}' \
        __rand_int__ __rand_int__ 1 | tr '\r' '\n' | grep -a 'requests per second' | tail -1)
    rps=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p')
    say "redis-benchmark EVALSHA admit.lua -c64 -P$P: $rps req/s"
    eval "RB_P$P=$rps"
done
$R del 'seckill:voucher:{1}' 'seckill:order:{1}' 'seckill:stream:{1}' >/dev/null

# 2. nginx static 200.
mkdir -p "$TMP/nginx/logs"
cat > "$TMP/nginx/nginx.conf" <<NGX
worker_processes 2;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log;
daemon off;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $TMP/nginx; proxy_temp_path $TMP/nginx;
    fastcgi_temp_path $TMP/nginx; uwsgi_temp_path $TMP/nginx; scgi_temp_path $TMP/nginx;
    server { listen 127.0.0.1:$NP; keepalive_requests 1000000;
             location / { default_type application/json; return 200 '{"success":true}'; } }
}
NGX
nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" &
pids="$pids $!"
until curl -s "http://127.0.0.1:$NP/" >/dev/null; do sleep 0.05; done
NGINX=$(wrk -t2 -c"$CONNS" -d"${DURATION}s" "http://127.0.0.1:$NP/" | awk '/Requests\/sec/ {print $2}')
say "nginx static 200 (2 workers): $NGINX req/s"

# 3. seckill.
ADMIN=benchadmintoken0123456789
"$BIN" serve --redis "redis://127.0.0.1:$RP" --db "sqlite:$TMP/seckill.db" --data-dir "$TMP" \
    --listen "127.0.0.1:$HP" --admin-token "$ADMIN" --threads 2 --log-level warn \
    > "$TMP/seckill.out" 2> "$TMP/seckill.err" &
SPID=$!; pids="$pids $SPID"
until curl -s "http://127.0.0.1:$HP/health" | grep -q '"success":true'; do sleep 0.05; done
mk() {
    curl -s -X POST "http://127.0.0.1:$HP/voucher/seckill" -H "x-admin-token: $ADMIN" -d \
      "{\"shopId\":1,\"title\":\"bench\",\"payValue\":100,\"actualValue\":200,\"type\":1,\"stock\":$1,\"beginTime\":\"2020-01-01T00:00:00\",\"endTime\":\"2099-01-01T00:00:00\"}" |
      sed -n 's/.*"data":\([0-9]*\).*/\1/p'
}
GRAB=$(mk 100000000); SOLD=$(mk 0)
python3 bench/seed_tokens.py "$USERS" | $R --pipe >/dev/null

run_wrk() {  # $1 voucher, $2 label
    s0=$(cpu_ticks "$SPID"); r0=$(cpu_ticks "$RPID")
    VOUCHER=$1 USERS=$USERS wrk -t2 -c"$CONNS" -d"${DURATION}s" --latency -s bench/grab.lua \
        "http://127.0.0.1:$HP" > "$TMP/wrk.txt"
    s1=$(cpu_ticks "$SPID"); r1=$(cpu_ticks "$RPID")
    rps=$(awk '/Requests\/sec/ {print $2}' "$TMP/wrk.txt")
    n=$(awk '/requests in/ {print $1}' "$TMP/wrk.txt")
    p50=$(awk '$1=="50%" {print $2}' "$TMP/wrk.txt"); p99=$(awk '$1=="99%" {print $2}' "$TMP/wrk.txt")
    errs=$(grep -E 'Non-2xx|Socket errors' "$TMP/wrk.txt" | tr '\n' ' ' || true)
    us=$(tick_us)
    say "seckill $2: $rps req/s, p50 $p50, p99 $p99; server CPU $(( (s1 - s0) * us / (n > 0 ? n : 1) )) us/req, redis CPU $(( (r1 - r0) * us / (n > 0 ? n : 1) )) us/req ($n requests) $errs"
    eval "RPS_$2=$rps"
}
run_wrk "$GRAB" grab
ADMITTED=$($R hlen "seckill:order:{$GRAB}")
run_wrk "$SOLD" soldout

# 5. drain rate from a full backlog: stop the server, empty the orders table, rewind the
#    consumer group so every grab order is delivered again, start it, time until all are in.
kill "$SPID"; wait "$SPID" 2>/dev/null || true
sqlite3 "$TMP/seckill.db" "delete from tb_voucher_order; update tb_seckill_voucher set stock = 100000000 where voucher_id = $GRAB"
$R xgroup setid "seckill:stream:{$GRAB}" g1 0 >/dev/null
count() { sqlite3 "$TMP/seckill.db" "select count(*) from tb_voucher_order where voucher_id=$GRAB" 2>/dev/null || echo 0; }
t0=$(date +%s.%N)
"$BIN" serve --redis "redis://127.0.0.1:$RP" --db "sqlite:$TMP/seckill.db" --data-dir "$TMP" \
    --listen "127.0.0.1:$HP" --admin-token "$ADMIN" --threads 2 --log-level warn --name bench \
    > "$TMP/seckill.out" 2>> "$TMP/seckill.err" &
SPID=$!; pids="$pids $SPID"
while [ "$(count)" -lt "$ADMITTED" ]; do sleep 0.05; done
t1=$(date +%s.%N)
DRAIN=$(python3 -c "print(round($ADMITTED / max($t1 - $t0, 1e-3)))")
say "writer: drained a backlog of $ADMITTED orders into SQLite at $DRAIN orders/s (server start included)"

python3 - "$RPS_grab" "$RB_P16" "$RB_P1" "$RPS_soldout" "$NGINX" <<'PY' | tee -a "$RES"
import sys
g, p16, p1, s, n = map(float, sys.argv[1:])
print("ratios: grab / redis-benchmark -P16 = %.2f; grab / redis-benchmark -P1 = %.2f; sold out / nginx = %.2f" % (g / p16, g / p1, s / n))
PY
