#!/bin/sh
# deploy/cluster.sh -- a seckill cluster on this machine, for trying out:
# nginx (deploy/nginx.conf.in) in front of N `seckill serve` instances, one Redis, one MariaDB,
# all on loopback, all under ./var/cluster (kept between start and stop).
#
#   deploy/cluster.sh start [N]     start everything (N instances, default 3), print how to use it
#   deploy/cluster.sh stop          stop everything (instances first: their writers finish)
#   deploy/cluster.sh status        what runs, and /api/health through nginx
#   deploy/cluster.sh restart       rolling restart of the instances, one by one
#   deploy/cluster.sh kill I        kill -9 instance I (to watch the others carry on)
#   deploy/cluster.sh start-one I   start instance I again (after kill)
#   deploy/cluster.sh clean         stop, then delete ./var/cluster (data included)
#
# Environment (defaults): NGINX_PORT=8080 (the course's), BASE_PORT=8091 (instance i listens
# on BASE_PORT+i-1, its /metrics on 127.0.0.1:BASE_PORT+100+i-1), REDIS_PORT=6390,
# MYSQL_PORT=3390, THREADS=2 (per instance),
# BIN=build/seckill, CLUSTER_DIR=./var/cluster, HMDP_HTML=<the course's html/hmdp folder, if
# you have it: served at /, so its pages work against the cluster>, MODE=stream.
# Needs: sh tools/deps.sh test (redis-server, mariadb-server, nginx-light) and `make`.
set -eu
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DIR=${CLUSTER_DIR:-$ROOT/var/cluster}
NGINX_PORT=${NGINX_PORT:-8080}
BASE_PORT=${BASE_PORT:-8091}
REDIS_PORT=${REDIS_PORT:-6390}
MYSQL_PORT=${MYSQL_PORT:-3390}
THREADS=${THREADS:-2}
MODE=${MODE:-stream}
BIN=${BIN:-$ROOT/build/seckill}
FAIL_TIMEOUT=1          # nginx max_fails=1 fail_timeout (s): see docs/cluster.md

say() { printf '%s\n' "$*"; }
die() { printf 'cluster.sh: %s\n' "$*" >&2; exit 1; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
wait_for() {  # $1 what, $2 seconds, rest: command that succeeds when ready
    _what=$1 _secs=$2; shift 2
    _w=0
    until "$@" >/dev/null 2>&1; do
        _w=$((_w + 1))
        [ "$_w" -le $((_secs * 10)) ] || die "$_what did not come up within ${_secs}s"
        sleep 0.1
    done
}
nfile() { [ -f "$DIR/instances" ] && cat "$DIR/instances" || echo 3; }

start_redis() {
    mkdir -p "$DIR/redis"
    if alive "$DIR/redis/redis.pid"; then return; fi
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$DIR/redis" --appendonly yes \
        --appendfsync everysec --save '' --daemonize yes --pidfile "$DIR/redis/redis.pid" \
        --logfile "$DIR/redis/redis.log"
    wait_for "redis-server" 10 redis-cli -p "$REDIS_PORT" ping
    say "redis      redis://127.0.0.1:$REDIS_PORT  (AOF everysec, $DIR/redis)"
}

start_mariadb() {
    d="$DIR/mariadb"
    mkdir -p "$d"
    if alive "$d/mariadbd.pid"; then return; fi
    as_root=""
    [ "$(id -u)" -eq 0 ] && as_root="--user=root"
    fresh=0
    if [ ! -d "$d/data/mysql" ]; then
        fresh=1
        mariadb-install-db --no-defaults --datadir="$d/data" --auth-root-authentication-method=normal \
            --skip-test-db $as_root > "$d/install-db.log" 2>&1 || die "mariadb-install-db failed: $d/install-db.log"
    fi
    # shellcheck disable=SC2086
    setsid mariadbd --no-defaults --datadir="$d/data" --socket="$d/mysqld.sock" --port="$MYSQL_PORT" \
        --bind-address=127.0.0.1 --skip-name-resolve --pid-file="$d/mariadbd.pid" \
        --log-error="$d/mariadbd.err" --innodb-buffer-pool-size=256M \
        --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
        --max-connections=1000 $as_root < /dev/null > /dev/null 2>&1 &
    wait_for "mariadbd (see $d/mariadbd.err)" 60 mariadb --no-defaults -S "$d/mysqld.sock" -uroot -e 'select 1'
    if [ "$fresh" = 1 ]; then
        pw=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
        echo "$pw" > "$d/password"
        chmod 600 "$d/password"
        # seckill creates the database (utf8mb4) and the schema itself on first start.
        mariadb --no-defaults -S "$d/mysqld.sock" -uroot -e \
            "CREATE USER 'seckill'@'127.0.0.1' IDENTIFIED BY '$pw'; GRANT ALL ON \`hmdp\`.* TO 'seckill'@'127.0.0.1';"
    fi
    say "mariadb    127.0.0.1:$MYSQL_PORT, database hmdp, user seckill ($d)"
}

db_url() { echo "mysql://seckill:$(cat "$DIR/mariadb/password")@127.0.0.1:$MYSQL_PORT/hmdp"; }
admin_token() {
    [ -f "$DIR/admin_token" ] || { od -An -N16 -tx1 /dev/urandom | tr -d ' \n' > "$DIR/admin_token"; chmod 600 "$DIR/admin_token"; }
    cat "$DIR/admin_token"
}

token_key() {  # one signing key for every instance: a token from one verifies on all
    [ -f "$DIR/token-key" ] || { (umask 077; od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$DIR/token-key"); }
    echo "$DIR/token-key"
}

start_instance() {  # $1 = i
    si=$1 port=$((BASE_PORT + $1 - 1)) d="$DIR/inst-$1"
    mkdir -p "$d"
    if alive "$d/seckill.pid"; then return; fi
    # The database URL goes through the environment, not argv (ps would show the password).
    SECKILL_DB=$(db_url) SECKILL_ADMIN_TOKEN=$(admin_token) setsid "$BIN" serve \
        --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$((port + 100))" \
        --redis "redis://127.0.0.1:$REDIS_PORT" \
        --name "inst-$si" --data-dir "$d" --threads "$THREADS" --mode "$MODE" \
        --log-login-codes --trusted-proxy 127.0.0.1 \
        --token-key-file "$(token_key)" \
        < /dev/null >> "$d/seckill.log" 2>&1 &
    echo $! > "$d/seckill.pid"
    wait_for "instance $si (see $d/seckill.log)" 60 curl -fs "http://127.0.0.1:$port/health"
    say "instance   inst-$si  http://127.0.0.1:$port  (log $d/seckill.log)"
}

stop_pid() {  # $1 pid file, $2 what: SIGTERM, wait up to 60 s
    [ -f "$1" ] || return 0
    sp=$(cat "$1")
    if kill "$sp" 2>/dev/null; then
        _s=0
        while kill -0 "$sp" 2>/dev/null; do
            _s=$((_s + 1))
            [ "$_s" -le 600 ] || { kill -9 "$sp" 2>/dev/null || true; break; }
            sleep 0.1
        done
        say "stopped    $2"
    fi
    rm -f "$1"
}

start_nginx() {
    d="$DIR/nginx"
    mkdir -p "$d/logs"
    if alive "$d/nginx.pid"; then return; fi
    html=${HMDP_HTML:-$d/html}
    if [ -z "${HMDP_HTML:-}" ]; then
        mkdir -p "$html"
        cat > "$html/index.html" <<'HTML'
<!doctype html><meta charset="utf-8"><title>seckill cluster</title>
<p>seckill behind nginx. The API is under <code>/api</code> (e.g. <code>/api/voucher/list/1</code>).
<p>Set HMDP_HTML to the course's <code>nginx-1.18.0/html/hmdp</code> folder to serve its pages here.
HTML
    fi
    ups=""
    n=$(nfile)
    k=1
    while [ "$k" -le "$n" ]; do
        ups="$ups        server 127.0.0.1:$((BASE_PORT + k - 1)) max_fails=1 fail_timeout=${FAIL_TIMEOUT}s;\\
"
        k=$((k + 1))
    done
    sed -e "s|@PREFIX@|$d|g" -e "s|@LISTEN@|127.0.0.1:$NGINX_PORT|g" -e "s|@WORKERS@|2|g" \
        -e "s|@HTML@|$html|g" -e "s|^@UPSTREAMS@\$|$ups|" deploy/nginx.conf.in > "$d/nginx.conf"
    nginx -p "$d" -c "$d/nginx.conf" -t > "$d/nginx-t.log" 2>&1 || die "nginx config: $(cat "$d/nginx-t.log")"
    nginx -p "$d" -c "$d/nginx.conf"
    wait_for "nginx" 10 curl -fs "http://127.0.0.1:$NGINX_PORT/api/health"
    say "nginx      http://127.0.0.1:$NGINX_PORT  (/api -> $n instances, keep-alive; $d/nginx.conf)"
}

usage_hint() {
    B="http://127.0.0.1:$NGINX_PORT/api"
    cat <<EOF

The cluster answers at $B (the course's pages call the API there).
admin token: $(admin_token)
  curl -s -X POST $B/voucher/seckill -H 'x-admin-token: $(admin_token)' \\
       -d '{"shopId":1,"title":"100元代金券","payValue":8000,"actualValue":10000,"type":1,"stock":100,"beginTime":"2020-01-01T00:00:00","endTime":"2099-01-01T00:00:00"}'
  curl -s -X POST '$B/user/code?phone=13800000000'     # the code is in an instance's log:
  grep -h 'code for 13800000000' $DIR/inst-*/seckill.log | tail -1
  curl -s -X POST $B/user/login -d '{"phone":"13800000000","code":"<code>"}'
  curl -s -X POST $B/voucher-order/seckill/<voucherId> -H 'authorization: <token>'
Then: deploy/cluster.sh kill 2 (nginx carries on), deploy/cluster.sh restart, deploy/cluster.sh stop.
EOF
}

cmd=${1:-}
case "$cmd" in
start)
    n=${2:-3}
    [ "$n" -ge 1 ] 2>/dev/null || die "N must be a number >= 1"
    [ -x "$BIN" ] || make -s
    mkdir -p "$DIR"
    echo "$n" > "$DIR/instances"
    start_redis
    start_mariadb
    k=1
    while [ "$k" -le "$n" ]; do start_instance "$k"; k=$((k + 1)); done
    start_nginx
    usage_hint
    ;;
stop)
    stop_pid "$DIR/nginx/nginx.pid" nginx
    for p in "$DIR"/inst-*/seckill.pid; do [ -f "$p" ] && stop_pid "$p" "$(basename "$(dirname "$p")")"; done
    stop_pid "$DIR/mariadb/mariadbd.pid" mariadbd
    if alive "$DIR/redis/redis.pid"; then redis-cli -p "$REDIS_PORT" shutdown >/dev/null 2>&1 || true; say "stopped    redis"; fi
    ;;
status)
    for p in "$DIR/redis/redis.pid" "$DIR/mariadb/mariadbd.pid" "$DIR"/inst-*/seckill.pid "$DIR/nginx/nginx.pid"; do
        [ -f "$p" ] || continue
        if alive "$p"; then s=running; else s=DOWN; fi
        say "$(basename "$(dirname "$p")"): $s (pid $(cat "$p"))"
    done
    curl -s "http://127.0.0.1:$NGINX_PORT/api/health" && echo || say "nginx: no answer on $NGINX_PORT"
    ;;
restart)
    # One by one: stop (the writer commits what it holds), start under the same name, wait
    # until healthy, then past nginx's fail_timeout so nginx trusts it again before the next.
    n=$(nfile)
    k=1
    while [ "$k" -le "$n" ]; do
        stop_pid "$DIR/inst-$k/seckill.pid" "inst-$k"
        start_instance "$k"
        sleep $((FAIL_TIMEOUT + 1))
        k=$((k + 1))
    done
    ;;
kill)
    [ -n "${2:-}" ] || die "kill needs an instance number"
    p="$DIR/inst-$2/seckill.pid"
    alive "$p" || die "instance $2 is not running"
    kill -9 "$(cat "$p")"
    rm -f "$p"
    say "killed     inst-$2 (kill -9): its pending orders are adopted by another instance after --claim-idle-ms (30 s)"
    ;;
start-one)
    [ -n "${2:-}" ] || die "start-one needs an instance number"
    start_instance "$2"
    ;;
clean)
    "$0" stop
    rm -rf "$DIR"
    say "removed    $DIR"
    ;;
*)
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$cmd" ] || exit 2
    ;;
esac
