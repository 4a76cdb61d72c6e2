#!/bin/sh
# deploy/redis-cluster.sh -- a Redis Cluster on this machine (loopback), for trying seckill's
# cluster mode and for its tests: 3 masters + 3 replicas by default, from Debian's
# redis-server and redis-cli (no create-cluster script is packaged).
#
#   deploy/redis-cluster.sh start [PORT...]    start the nodes under $CLUSTER_DIR, form the
#                                              cluster, wait until it is ok; prints the URL
#   deploy/redis-cluster.sh create PORT...     form a cluster of nodes already running with
#                                              --cluster-enabled yes (the tests start them)
#   deploy/redis-cluster.sh stop               SHUTDOWN every node started by `start`
#   deploy/redis-cluster.sh status             CLUSTER INFO and the slot owners
#   deploy/redis-cluster.sh url                the seckill --redis URL
#
# PORTs default to 7000..7005. With REPLICAS=1 half of them become masters (3 at least);
# REPLICAS=0 makes every node a master (1 or 2 nodes too).
# Each node's cluster bus listens on PORT+10000, so ports must be <= 55535.
# Environment (defaults): CLUSTER_DIR=./var/redis-cluster, REPLICAS=1, NODE_TIMEOUT_MS=1000
# (how long a master may be silent before its replica takes over), APPENDFSYNC=everysec.
# Use it:  build/seckill serve --redis "$(deploy/redis-cluster.sh url)"
set -eu
cd "$(dirname "$0")/.."
DIR=${CLUSTER_DIR:-$(pwd)/var/redis-cluster}
REPLICAS=${REPLICAS:-1}
NODE_TIMEOUT_MS=${NODE_TIMEOUT_MS:-1000}
APPENDFSYNC=${APPENDFSYNC:-everysec}

die() { printf 'redis-cluster.sh: %s\n' "$*" >&2; exit 1; }
cli() { _p=$1; shift; redis-cli -h 127.0.0.1 -p "$_p" "$@"; }

# Waits up to $2 s for command "$3..." to succeed; $1 says what for the error.
wait_for() {
    _what=$1 _secs=$2; shift 2
    _i=0
    until "$@" >/dev/null 2>&1; do
        _i=$((_i + 1))
        [ "$_i" -le $((_secs * 20)) ] || die "$_what: not within ${_secs}s"
        sleep 0.05
    done
}

state_ok() { cli "$1" CLUSTER INFO | grep -q '^cluster_state:ok'; }
# Every node agrees on the whole map: all 16384 slots assigned and ok.
all_ok() {
    for _p in "$@"; do
        state_ok "$_p" || return 1
        cli "$_p" CLUSTER INFO | grep -q '^cluster_slots_ok:16384' || return 1
    done
}
# Every replica has finished its initial sync (WAIT and a failover need that), and every
# master counts its replicas online (min-replicas-to-write, --redis-wait-replicas, counts
# those: a master whose replica is still syncing refuses writes).
replicas_synced() {
    for _p in "$@"; do
        _info=$(cli "$_p" INFO replication | tr -d '\r')
        case "$_info" in
            *role:slave*) printf '%s' "$_info" | grep -q 'master_link_status:up' || return 1 ;;
            *role:master*)
                [ "${REPLICAS:-0}" -gt 0 ] || continue
                printf '%s' "$_info" | grep -q '^connected_slaves:[1-9]' || return 1
                if printf '%s\n' "$_info" | grep '^slave[0-9]*:' | grep -qv 'state=online'; then
                    return 1
                fi ;;
        esac
    done
}

# redis-cli --cluster create wants 3 masters at least; 1 or 2 masters without replicas
# (benchmarks: docs/redis-cluster.md) are made by hand: equal slot ranges, then MEET.
create_small() {
    _n=$# _i=0 _first=$1
    for p in "$@"; do
        cli "$p" CLUSTER ADDSLOTSRANGE $((_i * 16384 / _n)) $(((_i + 1) * 16384 / _n - 1)) \
            >/dev/null || die "ADDSLOTSRANGE on $p failed"
        [ "$p" = "$_first" ] || cli "$_first" CLUSTER MEET 127.0.0.1 "$p" >/dev/null
        _i=$((_i + 1))
    done
    wait_for "cluster state ok on every node" 30 all_ok "$@"
}

create() {
    [ $# -ge 1 ] || die "create needs ports"
    for p in "$@"; do
        [ "$p" -le 55535 ] || die "port $p: the cluster bus (port+10000) would not fit"
    done
    if [ "$REPLICAS" = 0 ] && [ $# -lt 3 ]; then
        create_small "$@"
        return
    fi
    [ $# -ge 3 ] || die "create needs at least 3 masters (or REPLICAS=0 and 1-2 nodes)"
    _hosts=""
    for p in "$@"; do
        _hosts="$_hosts 127.0.0.1:$p"
    done
    # shellcheck disable=SC2086
    redis-cli --cluster create $_hosts --cluster-replicas "$REPLICAS" --cluster-yes \
        >"${CREATE_LOG:-/dev/null}" 2>&1 || die "redis-cli --cluster create failed${CREATE_LOG:+ (see $CREATE_LOG)}"
    wait_for "cluster state ok on every node" 30 all_ok "$@"
    wait_for "replicas in sync" 30 replicas_synced "$@"
}

start() {
    [ $# -gt 0 ] || set -- 7000 7001 7002 7003 7004 7005
    mkdir -p "$DIR"
    : >"$DIR/ports"
    for p in "$@"; do
        mkdir -p "$DIR/$p"
        redis-server --port "$p" --bind 127.0.0.1 --dir "$DIR/$p" --daemonize yes \
            --pidfile "$DIR/$p/redis.pid" --logfile "$DIR/$p/redis.log" \
            --cluster-enabled yes --cluster-config-file "$DIR/$p/nodes.conf" \
            --cluster-node-timeout "$NODE_TIMEOUT_MS" --appendonly yes \
            --appendfsync "$APPENDFSYNC" --save '' --protected-mode no
        echo "$p" >>"$DIR/ports"
    done
    for p in "$@"; do
        wait_for "node $p answers PING" 10 cli "$p" PING
    done
    if cli "$1" CLUSTER INFO | grep -q '^cluster_state:ok'; then
        echo "cluster already formed (nodes.conf kept under $DIR)"
    else
        CREATE_LOG="$DIR/create.log" create "$@"
    fi
    echo "Redis Cluster up: $(url)"
}

url() {
    [ -f "$DIR/ports" ] || die "no cluster under $DIR (run start first)"
    _u=""
    for p in $(cat "$DIR/ports"); do
        _u="${_u:+$_u,}127.0.0.1:$p"
    done
    echo "redis+cluster://$_u"
}

stop() {
    [ -f "$DIR/ports" ] || return 0
    for p in $(cat "$DIR/ports"); do
        cli "$p" SHUTDOWN >/dev/null 2>&1 || true
    done
    for p in $(cat "$DIR/ports"); do
        _pf="$DIR/$p/redis.pid"
        [ -f "$_pf" ] || continue
        _pid=$(cat "$_pf")
        _i=0
        while kill -0 "$_pid" 2>/dev/null && [ "$_i" -lt 200 ]; do sleep 0.05; _i=$((_i + 1)); done
    done
    echo "stopped"
}

status() {
    [ -f "$DIR/ports" ] || die "no cluster under $DIR"
    for p in $(cat "$DIR/ports"); do
        printf '%s: ' "$p"
        cli "$p" ROLE 2>/dev/null | head -1 || echo down
    done
    cli "$(head -1 "$DIR/ports")" CLUSTER INFO | grep -E '^cluster_(state|slots_ok|known_nodes)'
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    start) start "$@" ;;
    create) create "$@" ;;
    stop) stop ;;
    status) status ;;
    url) url ;;
    *) die "usage: $0 start [PORT...] | create PORT... | stop | status | url" ;;
esac
