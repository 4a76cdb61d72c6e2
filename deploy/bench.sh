#!/bin/sh
# deploy/bench.sh -- grab and sold-out requests/s through nginx with 1, 2 and 3 instances,
# beside one instance without nginx (docs/cluster.md has the figures and what they mean).
#
# Starts its own redis-server (AOF everysec), a private MariaDB and nginx (from
# deploy/nginx.conf.in) on free loopback ports under a temp dir, and the -O2 build. For each
# N in $COUNTS it starts N instances (names inst-1..N, --threads $THREADS) behind nginx and
# runs wrk the way perf/run.sh does (perf/grab.lua, signed tokens from `seckill tokens`):
#   grab:     a voucher that never sells out, a new user on every request
#   sold out: a voucher with stock 0 (answered from each worker's memory)
# and reads each process's CPU time from /proc, so the table says who used the 2 cores (the
# rest of the busy time is wrk itself and the kernel's loopback networking).
# Each figure is the best of TRIES runs (the least disturbed: this box is shared); "other"
# is busy CPU not charged to any of our processes nor wrk -- the kernel's loopback work,
# and anything else that ran meanwhile.
# Env: DURATION (s, 10), CONNS (64), COUNTS ("1 2 3"), THREADS (2), NGINX_WORKERS (2),
# TRIES (3), USERS (1000000), BIN (build/seckill). Results: stdout and build/perf/cluster.txt.
set -eu
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10}
CONNS=${CONNS:-64}
COUNTS=${COUNTS:-1 2 3}
THREADS=${THREADS:-2}
NGINX_WORKERS=${NGINX_WORKERS:-2}
USERS=${USERS:-1000000}
TRIES=${TRIES:-3}
BIN=${BIN:-build/seckill}
OUT=build/perf
mkdir -p "$OUT"
RES="$OUT/cluster.txt"
: > "$RES"
TMP=$(mktemp -d /tmp/seckill-cbench.XXXXXX)
. perf/lib.sh   # cleanup trap, free_port

say() { echo "$*" | tee -a "$RES"; }
idle() { awk '/^cpu / {print $5 + $6}' /proc/stat; }   # idle + iowait, in ticks
busy() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }   # user nice system irq softirq
ticks() { t=0; for p in "$@"; do [ -r "/proc/$p/stat" ] && t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $t; }
hz=$(getconf CLK_TCK)
[ -x "$BIN" ] || make -s
command -v wrk >/dev/null || { echo "wrk missing: sh tools/deps.sh perf" >&2; exit 1; }

# Redis
RP=$(free_port)
redis-server --port "$RP" --bind 127.0.0.1 --dir "$TMP" --appendonly yes --appendfsync everysec \
    --save '' --daemonize no --logfile "$TMP/redis.log" &
RPID=$!; pids="$pids $RPID"
R="redis-cli -p $RP"
until $R ping >/dev/null 2>&1; do sleep 0.05; done

# MariaDB (private datadir, loopback port, a user with a password)
MP=$(free_port); MD="$TMP/mariadb"; mkdir -p "$MD"
as_root=""; [ "$(id -u)" -eq 0 ] && as_root="--user=root"
# shellcheck disable=SC2086
mariadb-install-db --no-defaults --datadir="$MD/data" --auth-root-authentication-method=normal \
    --skip-test-db $as_root > "$MD/install.log" 2>&1
# shellcheck disable=SC2086
mariadbd --no-defaults --datadir="$MD/data" --socket="$MD/sock" --port="$MP" --bind-address=127.0.0.1 \
    --skip-name-resolve --log-error="$MD/err.log" --pid-file="$MD/pid" --innodb-buffer-pool-size=512M \
    --max-connections=1000 $as_root > /dev/null 2>&1 &
MPID=$!; pids="$pids $MPID"
until mariadb --no-defaults -S "$MD/sock" -uroot -e 'select 1' >/dev/null 2>&1; do sleep 0.1; done
mariadb --no-defaults -S "$MD/sock" -uroot -e \
    "CREATE USER 'seckill'@'127.0.0.1' IDENTIFIED BY 'benchpw'; GRANT ALL ON *.* TO 'seckill'@'127.0.0.1'"
DB="mysql://seckill:benchpw@127.0.0.1:$MP/hmdp"

# One signing key for every instance (they share --data-dir $TMP, so they read this file).
(umask 077; od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$TMP/token-key")
"$BIN" tokens --users "$USERS" --key-file "$TMP/token-key" --redis "redis://127.0.0.1:$RP" \
    > "$TMP/tokens.txt"
ADMIN=benchadmintoken0123456789
say "# seckill cluster benchmark $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, wrk -t2 -c$CONNS -d${DURATION}s (best of $TRIES), instances --threads $THREADS, nginx $NGINX_WORKERS workers, MariaDB"

start_instances() {  # $1 = N; sets IPIDS, PORTS
    IPIDS=""; PORTS=""
    i=1
    while [ "$i" -le "$1" ]; do
        port=$(free_port)
        SECKILL_DB=$DB "$BIN" serve --redis "redis://127.0.0.1:$RP" --data-dir "$TMP" \
            --listen "127.0.0.1:$port" --admin-token "$ADMIN" --threads "$THREADS" \
            --name "inst-$i" --log-level warn > "$TMP/inst-$i.out" 2>> "$TMP/inst-$i.err" &
        IPIDS="$IPIDS $!"; PORTS="$PORTS $port"
        until curl -fs "http://127.0.0.1:$port/health" >/dev/null; do sleep 0.05; done
        i=$((i + 1))
    done
    pids="$pids $IPIDS"
}
stop_instances() {
    for p in $IPIDS; do kill "$p" 2>/dev/null || true; done
    for p in $IPIDS; do while kill -0 "$p" 2>/dev/null; do sleep 0.05; done; done
}
start_nginx() {  # upstreams: $PORTS; sets NPORT, NPIDS
    NPORT=$(free_port); ND="$TMP/nginx"; rm -rf "$ND"; mkdir -p "$ND/logs" "$ND/html"
    ups=""
    for port in $PORTS; do
        ups="$ups        server 127.0.0.1:$port max_fails=1 fail_timeout=1s;\\
"
    done
    sed -e "s|@PREFIX@|$ND|g" -e "s|@LISTEN@|127.0.0.1:$NPORT|g" -e "s|@WORKERS@|$NGINX_WORKERS|g" \
        -e "s|@HTML@|$ND/html|g" -e "s|^@UPSTREAMS@\$|$ups|" deploy/nginx.conf.in > "$ND/nginx.conf"
    nginx -p "$ND" -c "$ND/nginx.conf" -g 'daemon off;' &
    NMASTER=$!; pids="$pids $NMASTER"
    until curl -fs "http://127.0.0.1:$NPORT/health" >/dev/null; do sleep 0.05; done
    NPIDS="$NMASTER $(pgrep -P "$NMASTER" | tr '\n' ' ')"
}
stop_nginx() { kill "$NMASTER" 2>/dev/null || true; wait "$NMASTER" 2>/dev/null || true; }
mk() {  # $1 port, $2 stock -> voucher id
    curl -s -X POST "http://127.0.0.1:$1/voucher/seckill" -H "x-admin-token: $ADMIN" -d \
      "{\"shopId\":1,\"title\":\"bench\",\"payValue\":100,\"actualValue\":200,\"type\":1,\"stock\":$2,\"beginTime\":\"2020-01-01T00:00:00\",\"endTime\":\"2099-01-01T00:00:00\"}" |
      sed -n 's/.*"data":\([0-9]*\).*/\1/p'
}
run_wrk() {  # $1 url, $2 stock (a new voucher per try), $3 label, $4 nginx pids: best of $TRIES
    best=0; bestline=""
    t=1
    while [ "$t" -le "$TRIES" ]; do
        wrk_once "$@"
        if [ "$rps" -gt "$best" ]; then best=$rps; bestline=$line; fi
        t=$((t + 1))
    done
    say "$bestline"
}
wrk_once() {
    V=$(mk "$first" "$2"); [ -n "$V" ] || { echo "voucher create failed" >&2; exit 1; }
    [ "$2" -gt 0 ] && GRABS="$GRABS $V"
    s0=$(ticks $IPIDS); r0=$(ticks "$RPID"); n0=$(ticks $4); m0=$(ticks "$MPID"); i0=$(idle); b0=$(busy)
    # wrk's own CPU time comes from its rusage (python runs it and reports it in seconds)
    wsec=$(VOUCHER=$V TOKENS="$TMP/tokens.txt" python3 -c 'import resource, subprocess, sys
with open(sys.argv[1], "wb") as f:
    subprocess.run(sys.argv[2:], stdout=f)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime)' "$TMP/wrk.txt" wrk -t2 -c"$CONNS" -d"${DURATION}s" --latency -s perf/grab.lua "$1")
    s1=$(ticks $IPIDS); r1=$(ticks "$RPID"); n1=$(ticks $4); m1=$(ticks "$MPID"); i1=$(idle); b1=$(busy)
    rps=$(awk '/Requests\/sec/ {printf "%d", $2}' "$TMP/wrk.txt")
    p50=$(awk '$1=="50%" {print $2}' "$TMP/wrk.txt"); p99=$(awk '$1=="99%" {print $2}' "$TMP/wrk.txt")
    errs=$(grep -E 'Non-2xx|Socket errors' "$TMP/wrk.txt" | tr '\n' ' ' || true)
    cores() { python3 -c "print('%.2f' % (($2 - $1) / $hz / $DURATION))" ; }
    # other = busy time of the box not accounted to ours or wrk: the kernel's share of
    # loopback networking, and anything else running (a busy box shows up here)
    other=$(python3 -c "print('%.2f' % ((($b1 - $b0) - ($s1 - $s0) - ($r1 - $r0) - ($n1 - $n0) - ($m1 - $m0)) / $hz / $DURATION - $wsec / $DURATION))")
    line="$(printf '%-34s %7s req/s  p50 %-8s p99 %-8s cores: seckill %s nginx %s redis %s mariadb %s wrk %s other %s idle %s %s' \
        "$3" "$rps" "$p50" "$p99" "$(cores "$s0" "$s1")" "$(cores "$n0" "$n1")" "$(cores "$r0" "$r1")" \
        "$(cores "$m0" "$m1")" "$(python3 -c "print('%.2f' % ($wsec / $DURATION))")" "$other" \
        "$(cores "$i0" "$i1")" "$errs")"
    echo "   (try: $line)" >&2
}

for n in $COUNTS; do
    start_instances "$n"
    first=$(echo "$PORTS" | awk '{print $1}')
    GRABS=""
    if [ "$n" = 1 ]; then
        run_wrk "http://127.0.0.1:$first" 100000000 "1 instance, no nginx: grab" ""
        run_wrk "http://127.0.0.1:$first" 0 "1 instance, no nginx: sold out" ""
    fi
    start_nginx
    run_wrk "http://127.0.0.1:$NPORT" 100000000 "$n instance(s) via nginx: grab" "$NPIDS"
    run_wrk "http://127.0.0.1:$NPORT" 0 "$n instance(s) via nginx: sold out" "$NPIDS"
    stop_nginx
    stop_instances
    # the orders the grab runs admitted: all in MariaDB once the instances have stopped?
    adm=0
    for g in $GRABS; do adm=$((adm + $($R hlen "seckill:order:{$g}"))); done
    ids=$(echo $GRABS | tr ' ' ',')
    sql=$(mariadb --no-defaults -S "$MD/sock" -uroot -N -e "select count(*) from hmdp.tb_voucher_order where voucher_id in ($ids)")
    say "   grab orders admitted $adm, in MariaDB after the instances stopped: $sql"
done
