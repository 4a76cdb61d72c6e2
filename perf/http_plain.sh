#!/bin/sh
# perf/http_plain.sh -- the HTTP layer alone: wrk against seckill's plain answer (a 404
# for an unknown path, answered at once without Redis or SQL) beside nginx `return 200`,
# alternated in one run so both see the same machine load. docs/http.md quotes it.
#
#   sh perf/http_plain.sh [BIN ...]      default BIN: build/seckill
#
# Each BIN (e.g. an old build and a new one) serves on the embedded default with 2 worker
# threads; every round runs wrk on nginx, then on each BIN, and prints requests/s and the
# server's CPU time per request (less sensitive to a busy machine than requests/s).
# Env: ROUNDS (5), DURATION (5), CONNS (64).
set -eu
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5}
CONNS=${CONNS:-64}
[ $# -gt 0 ] || set -- build/seckill
for t in nginx wrk curl; do
    command -v $t >/dev/null || { echo "http_plain: $t not found (sh tools/deps.sh perf)"; exit 2; }
done
TMP=$(mktemp -d /tmp/skhttp.XXXXXX)
. perf/lib.sh   # cleanup trap, free_port, tick_us, cpu_ticks
# wrk on URL $1 while measuring the CPU of processes $2...: "req/s:us-per-request"
rps() {
    u=$1; shift
    c0=$(cpu_ticks "$@")
    wrk -t2 -c"$CONNS" -d"${DURATION}s" "$u" > "$TMP/wrk.txt"
    c1=$(cpu_ticks "$@")
    python3 - "$TMP/wrk.txt" $((c1 - c0)) "$(tick_us)" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
n = int(re.search(r"(\d+) requests in", t).group(1))
print("%.0f:%.2f" % (rps, int(sys.argv[2]) * float(sys.argv[3]) / n if n else 0))
PY
}

NP=$(free_port)
nginx_static 2 '{"success":true}'

i=0
ports=""
for b in "$@"; do
    i=$((i + 1))
    p=$(free_port)
    "$b" serve --listen "127.0.0.1:$p" --threads 2 --data-dir "$TMP/d$i" --log-level warn \
        > "$TMP/s$i.log" 2>&1 &
    pids="$pids $!"
    until curl -s "http://127.0.0.1:$p/nope" >/dev/null; do sleep 0.05; done
    ports="$ports $p:$!"
done

# Each cell: requests/s : CPU microseconds per request of that server (utime + stime).
printf 'round nginx'; for b in "$@"; do printf ' %s' "$b"; done; echo
r=1
while [ $r -le "$ROUNDS" ]; do
    # shellcheck disable=SC2086
    line="$r $(rps "http://127.0.0.1:$NP/" $NGALL)"
    for pp in $ports; do line="$line $(rps "http://127.0.0.1:${pp%%:*}/nope" "${pp#*:}")"; done
    echo "$line"
    r=$((r + 1))
done
