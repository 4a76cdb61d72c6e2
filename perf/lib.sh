# perf/lib.sh -- shell helpers the perf scripts share (sourced, not run).
#
# The sourcing script sets TMP (a scratch dir) and appends the pids it starts to $pids;
# on exit every such process is stopped (TERM, then KILL) and TMP removed.
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    sleep 0.5
    for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
# A loopback port nobody listens on now.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Microseconds per clock tick of /proc/PID/stat.
tick_us() { echo $((1000000 / $(getconf CLK_TCK))); }
# CPU ticks (utime + stime) of the given processes, summed.
cpu_ticks() { t=0; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $t; }
# Kernel CPU ticks (stime) of the given processes, summed: syscalls, and on loopback TCP
# also the receiver's side of every send (the kernel charges it to the sender).
sys_ticks() { t=0; for p in "$@"; do t=$((t + $(awk '{print $15}' "/proc/$p/stat"))); done; echo $t; }
PERF_METRICS_TOKEN=seckill-perf-metrics   # serve_embedded's --metrics-token
# Starts `$1 serve` on its embedded default (private redis-server + SQLite) in data dir $2
# on a free port and waits for /health; sets HP (the port) and SPID (added to $pids).
# Its output goes to $2.out and $2.err.
serve_embedded() {
    HP=$(free_port)
    # /metrics is private by default: a token serves it on --listen (perf reads it there)
    "$1" serve --data-dir "$2" --listen "127.0.0.1:$HP" --log-level warn \
        --metrics-token "$PERF_METRICS_TOKEN" > "$2.out" 2> "$2.err" &
    SPID=$!; pids="$pids $SPID"
    until curl -s "http://127.0.0.1:$HP/health" | grep -q '"success":true'; do
        kill -0 "$SPID" 2>/dev/null || { cat "$2.err"; exit 1; }
        sleep 0.1
    done
}
# The reference: nginx with $1 worker processes answering every request 200 with the JSON
# body $2, on port $NP (the caller picks it with free_port), its files under $TMP/nginx.
# Sets NGPID (the master, added to $pids), NGW (its workers) and NGALL (both).
nginx_static() {
    mkdir -p "$TMP/nginx"
    cat > "$TMP/nginx/nginx.conf" <<NGX
worker_processes $1;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log;
daemon off;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $TMP/nginx; proxy_temp_path $TMP/nginx;
    fastcgi_temp_path $TMP/nginx; uwsgi_temp_path $TMP/nginx; scgi_temp_path $TMP/nginx;
    keepalive_requests 100000000;
    server { listen 127.0.0.1:$NP;
             location / { default_type application/json; return 200 '$2'; } }
}
NGX
    nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" &
    NGPID=$!; pids="$pids $NGPID"
    until curl -s "http://127.0.0.1:$NP/" >/dev/null; do sleep 0.05; done
    NGW=$(ps -o pid= --ppid "$NGPID" | tr '\n' ' ')
    NGALL="$NGPID $NGW"
}
# CPU ticks (utime + stime) of the threads of PID whose name matches the awk regex $2
# (the service names its threads: w0, w1, ... the workers; writer the order writer).
thread_ticks() {
    cat /proc/"$1"/task/*/stat 2>/dev/null |
        awk -v re="$2" '{ n = $2; gsub(/[()]/, "", n); if (n ~ re) t += $14 + $15 } END { print t + 0 }'
}
# Rewrites the AOF of the redis-server that $R (the caller's redis-cli command) talks to,
# and waits until the rewrite is over (at most 2 minutes).
aof_rewrite() {
    $R bgrewriteaof > /dev/null
    i=0
    until $R info persistence | tr -d '\r' | grep -qx 'aof_rewrite_in_progress:0' &&
          $R info persistence | tr -d '\r' | grep -qx 'aof_rewrite_scheduled:0'; do
        i=$((i + 1)); [ $i -ge 1200 ] && break
        sleep 0.1
    done
}
