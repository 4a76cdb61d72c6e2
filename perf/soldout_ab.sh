#!/bin/sh
# perf/soldout_ab.sh -- the sold-out answer's server cost, A/B: each BIN (e.g. a kept old
# build and a new one) serves a stock-0 flash sale on the embedded default with 2 worker
# threads; every round drives nginx `return 200` (the same body, 2 workers) and then each
# BIN with wrk -t2 -c64 (perf/grab.lua: a new signed-token user per request), alternating,
# so all see the same machine load. docs/performance.md, "The A/B tools".
#
#   sh perf/soldout_ab.sh [VARIANT ...]      default: build/seckill
#
# A VARIANT is a binary, optionally followed by serve flags after commas (they come after
# `--threads 2`, so `BIN,--threads=1` overrides it): `/tmp/old`, `build/seckill,--threads=1`.
#
# Per cell: requests/s, the server's CPU µs per request (perf stat task-clock over all its
# threads; the kernel's share of its syscalls included), the user-space part of it (utime
# from /proc: what the server's own code costs; the kernel's TCP work is the same for
# every server), syscalls and context switches per request
# (raw_syscalls:sys_enter); then the scheduling cost per request: CPU migrations of the
# server's threads, the wake-ups they made (sched:sched_waking in their context: mostly the
# client thread each send wakes), the IPIs they sent (ipi:ipi_send_cpu: a wake-up of a
# thread on another CPU that was not polling; on a VM each one is a VM exit) and how many
# requests each epoll_wait found (requests / epoll_wait calls). Every perf figure is per
# recvfrom counted in the same perf session (one per request here): under load perf stat
# can attach well after wrk starts, and dividing by wrk's count made those cells too low.
# At the end, per BIN, the syscalls per request by name, counted over one more run (perf
# stat on the syscalls:sys_enter_* tracepoints).
# Env: ROUNDS (3), DURATION (3), CONNS (64), USERS (100000). Needs perf, wrk, nginx.
set -eu
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-3}
CONNS=${CONNS:-64}
USERS=${USERS:-100000}
[ $# -gt 0 ] || set -- build/seckill
for t in nginx wrk curl perf; do
    command -v $t >/dev/null || { echo "soldout_ab: $t not found (sh tools/deps.sh perf)"; exit 2; }
done
TMP=$(mktemp -d /tmp/sksold.XXXXXX)
. perf/lib.sh   # cleanup trap, free_port, tick_us
# user-space CPU ticks (utime) of the given processes, summed
user_ticks() { t=0; for p in "$@"; do t=$((t + $(awk '{print $14}' "/proc/$p/stat"))); done; echo $t; }

# wrk on URL $1 (extra wrk args in $WRKARGS) under perf stat of pids $2...:
# "req/s:cpu-us:user-us:syscalls:switches:migrations:wakeups:ipis:req-per-epoll_wait" per request
measure() {
    u=$1; shift
    pl=$(echo "$@" | tr ' ' ',')
    perf stat -x, -e task-clock,raw_syscalls:sys_enter,context-switches,cpu-migrations \
        -e sched:sched_waking,ipi:ipi_send_cpu,syscalls:sys_enter_epoll_wait \
        -e syscalls:sys_enter_recvfrom \
        -p "$pl" -o "$TMP/stat.txt" &
    sp=$!
    sleep 0.1
    u0=$(user_ticks "$@")
    # shellcheck disable=SC2086
    wrk -t2 -c"$CONNS" -d"${DURATION}s" $WRKARGS "$u" > "$TMP/wrk.txt"
    u1=$(user_ticks "$@")
    kill -INT $sp; wait $sp 2>/dev/null || true
    python3 - "$TMP/wrk.txt" "$TMP/stat.txt" $((u1 - u0)) "$(tick_us)" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
n = int(re.search(r"(\d+) requests in", t).group(1))
st = {}
for line in open(sys.argv[2]):
    f = line.strip().split(",")
    if len(f) > 2 and f[0] and f[0][0].isdigit():
        st[f[2]] = float(f[0])
# The perf figures are per recvfrom counted in the same session (one per request for
# nginx and seckill alike: "syscalls per request, by name"), not per request wrk counted:
# under load perf stat may attach to the threads well after wrk has started, and its
# window is then shorter than wrk's.
nr = st.get("syscalls:sys_enter_recvfrom", 0.0)
wrk_n = n
n = nr if nr > 0.5 * n else n
ms = st.get("task-clock", 0.0)
sc = st.get("raw_syscalls:sys_enter", 0.0)
cs = st.get("context-switches", 0.0)
mig = st.get("cpu-migrations", 0.0)
wk = st.get("sched:sched_waking", 0.0)
ipi = st.get("ipi:ipi_send_cpu", 0.0)
ew = st.get("syscalls:sys_enter_epoll_wait", 0.0)
n = max(n, 1)
user = int(sys.argv[3]) * float(sys.argv[4]) / max(wrk_n, 1)
print("%.0f:%.2f:%.2f:%.2f:%.3f:%.4f:%.3f:%.3f:%.1f" % (rps, ms * 1000 / n, user, sc / n, cs / n,
      mig / n, wk / n, ipi / n, n / ew if ew else 0.0))
PY
}

# Fresh signed tokens (and their Redis hashes) for BIN $1's data dir $2 into file $3:
# minted just before each run, so no token is old enough for its sliding refresh
# (--token-refresh-s) and every run measures the same thing.
mint() {
    "$1" tokens --users "$USERS" --key-file "$2/token-key" --redis "unix:$2/redis/redis.sock" > "$3"
}

NP=$(free_port)
nginx_static 2 '{"success":false,"errorMsg":"库存不足","code":"SOLD_OUT"}'

i=0
targets=""
for var in "$@"; do
    i=$((i + 1))
    b=${var%%,*}
    flags=""
    case $var in *,*) flags=$(echo "${var#*,}" | tr ',' ' ') ;; esac
    p=$(free_port)
    d="$TMP/d$i"
    # shellcheck disable=SC2086
    "$b" serve --listen "127.0.0.1:$p" --threads 2 --data-dir "$d" --log-level warn $flags \
        > "$TMP/s$i.log" 2>&1 &
    spid=$!
    pids="$pids $spid"
    until curl -s "http://127.0.0.1:$p/health" | grep -q '"success":true'; do
        kill -0 "$spid" 2>/dev/null || { cat "$TMP/s$i.log"; exit 1; }
        sleep 0.1
    done
    v=$(curl -s -X POST "http://127.0.0.1:$p/voucher/seckill" -H "x-admin-token: $(cat "$d/admin-token")" -d \
      '{"shopId":1,"title":"ab","payValue":100,"actualValue":200,"type":1,"stock":0,"allowClosed":true,"beginTime":"2020-01-01T00:00:00","endTime":"2099-01-01T00:00:00"}' |
      sed -n 's/.*"data":\([0-9]*\).*/\1/p')
    mint "$b" "$d" "$TMP/tok$i.txt"
    # one warm-up pass: the sold-out verdict cached, the connections' buffers grown
    VOUCHER=$v TOKENS="$TMP/tok$i.txt" wrk -t2 -c"$CONNS" -d1s -s perf/grab.lua "http://127.0.0.1:$p" > "$TMP/warm.txt"
    grep -q 'Non-2xx' "$TMP/warm.txt" && { echo "soldout_ab: $b answered non-2xx"; cat "$TMP/warm.txt"; exit 1; }
    targets="$targets $i:$p:$spid:$v:$b"
done

echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ), load $(cut -d' ' -f1-3 /proc/loadavg); wrk -t2 -c$CONNS -d${DURATION}s; cell = req/s : server CPU us/req : of it in user space : syscalls/req : context switches/req : migrations/req : wake-ups/req : IPIs/req : requests per epoll_wait"
printf 'round nginx'; for b in "$@"; do printf ' | %s' "$b"; done; echo
r=1
while [ $r -le "$ROUNDS" ]; do
    # shellcheck disable=SC2086
    line="$r $(WRKARGS="" measure "http://127.0.0.1:$NP/" $NGALL)"
    for t in $targets; do
        IFS=: read -r i p spid v b <<EOF
$t
EOF
        mint "$b" "$TMP/d$i" "$TMP/tok$i.txt"
        export VOUCHER=$v TOKENS="$TMP/tok$i.txt"
        line="$line | $(WRKARGS="-s perf/grab.lua" measure "http://127.0.0.1:$p" "$spid")"
    done
    echo "$line"
    echo "$line" >> "$TMP/rounds.txt"
    r=$((r + 1))
done
python3 - "$TMP/rounds.txt" nginx "$@" <<'PY'
import statistics, sys
rows = [l.split(None, 1)[1].split(" | ") for l in open(sys.argv[1])]
names = sys.argv[2:]
med = []
for i, name in enumerate(names):
    cells = [[float(x) for x in r[i].split(":")] for r in rows]
    med.append([statistics.median(c[k] for c in cells) for k in range(9)])
    print("median %-20s %.0f req/s, CPU %.2f us/req (user %.2f), syscalls %.2f, switches %.3f, "
          "migrations %.4f, wake-ups %.3f, IPIs %.3f, requests per epoll_wait %.1f" % (name, *med[-1]))
for i, name in enumerate(names[1:], 1):
    print("ratio  %-20s req/s / nginx %.2f, CPU / nginx %.2f" % (name[-20:], med[i][0] / med[0][0], med[i][1] / med[0][1]))
PY

# syscalls by name, per request (one more run per server)
byname() {  # $1 label, $2 url, $3 wrk args, rest: pids
    lab=$1; u=$2; wa=$3; shift 3
    pl=$(echo "$@" | tr ' ' ',')
    perf stat -x, -e 'syscalls:sys_enter_*' -p "$pl" -o "$TMP/sys.txt" &
    sp=$!
    sleep 0.1
    # shellcheck disable=SC2086
    wrk -t2 -c"$CONNS" -d"${DURATION}s" $wa "$u" > "$TMP/wrk.txt"
    kill -INT $sp; wait $sp 2>/dev/null || true
    python3 - "$lab" "$TMP/wrk.txt" "$TMP/sys.txt" <<'PY'
import re, sys
n = int(re.search(r"(\d+) requests in", open(sys.argv[2]).read()).group(1))
rows = []
for line in open(sys.argv[3]):
    f = line.strip().split(",")
    if len(f) > 2 and f[0] and f[0][0].isdigit() and float(f[0]) > 0:
        rows.append((float(f[0]) / n, f[2].replace("syscalls:sys_enter_", "")))
rows.sort(reverse=True)
print("%-20s %s" % (sys.argv[1], "  ".join("%s %.3f" % (name, v) for v, name in rows if v >= 0.001)))
PY
}
echo "syscalls per request, by name:"
# shellcheck disable=SC2086
byname nginx "http://127.0.0.1:$NP/" "" $NGALL
for t in $targets; do
    IFS=: read -r i p spid v b <<EOF
$t
EOF
    mint "$b" "$TMP/d$i" "$TMP/tok$i.txt"
    export VOUCHER=$v TOKENS="$TMP/tok$i.txt"
    byname "$b" "http://127.0.0.1:$p" "-s perf/grab.lua" "$spid"
done
