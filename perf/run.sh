#!/bin/sh
# perf/run.sh -- `make perf`: the service beside the machine's ceilings, in one run.
#
#   1. ceilings   redis-benchmark EVALSHA of src/sale/admit.lua (-P 1 and -P 16, 64 clients)
#                 on the service's own redis-server (its unix socket); nginx returning a
#                 static 200 with 1 and with 2 workers (wrk -t2 -c64); measured before
#                 the service's runs and again after them: the ratios use the mean of the
#                 two, and their spread shows how far the host drifted during the run
#   2. service    `seckill serve` on its embedded default (private redis-server over a
#                 unix socket, AOF everysec; SQLite), driven by `seckill bench` and,
#                 independently, by wrk with perf/grab.lua (a distinct token per request):
#                   grab      stock never runs out, every request a new user
#                   sold out  stock 0, every request a new user
#                 plus sales with 10x more buyers than stock, open loop at fixed rates
#                 (seckill bench --rate: latency from each request's due time), audited;
#                 right after each, its control: the same bench and sale against nginx
#                 (2 workers) answering every request with the sold-out body
#                 (perf/nginx_sale.py): the tail the machine and the bench allow
#   3. writer     drain rate into SQLite: the grab voucher's orders deleted from SQL and its
#                 consumer group rewound, timed from the first to the last row written
#   4. ratios     grab / redis-benchmark -P16, sold out / nginx static, and a final
#                 `seckill audit` of everything the run sold
#   5. room       the waiting room's targets (perf/room.sh, on a service of its own; `sh
#                 perf/room.sh` runs this part alone): Redis commands per poll, an order
#                 with a pass vs. one without a room, a refusal without a pass, the sale's
#                 p99 with 200,000 pollers vs. without, 1,000,000 queued buyers' memory
#   6. wave       the payment timeout (perf/timeout_wave.py, on a service of its own, at most
#                 WAVE_BOUND s): WAVE_ORDERS orders whose deadlines pass together 4 s after a
#                 restart, WAVE_ROUNDS (3) times: the sweep's rate (>= 10,000 orders/s) and
#                 a sale's p99 during the wave / without it (<= 1.5), the median of the
#                 rounds the host's noise left
# CPU time per request of the server and of redis-server comes from /proc/PID/stat over
# each run. Results: stdout and build/perf/results.txt (docs/performance.md reads them); each
# sale's timeline per 100 ms (latency, backlog, every thread's CPU and run-queue wait) in
# build/perf/timeline-sale-RATE.tsv (the control's: timeline-nginx-sale-RATE.tsv).
#
# Env: DURATION (s per run, 10), CONNS (64), USERS (tokens per tool, 600000),
#      SALE_STOCK (20000; buyers = 10x), SALE_RATES (req/s, "10000 20000"), BIN (build/seckill),
#      WAVE_ORDERS (100000), WAVE_BOUND (s, 600).
set -eu
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10}
CONNS=${CONNS:-64}
USERS=${USERS:-600000}
SALE_STOCK=${SALE_STOCK:-20000}
SALE_RATES=${SALE_RATES:-10000 20000}
BIN=${BIN:-build/seckill}
WAVE_ORDERS=${WAVE_ORDERS:-100000}
WAVE_BOUND=${WAVE_BOUND:-600}
WAVE_ROUNDS=${WAVE_ROUNDS:-3}
OUT=build/perf
mkdir -p "$OUT"
RES="$OUT/results.txt"
TMP=$(mktemp -d /tmp/skbench.XXXXXX)   # short: the Redis socket path must fit in 107 bytes
: > "$RES"
. perf/lib.sh   # cleanup trap, free_port, tick_us, cpu_ticks, serve_embedded

say() { echo "$*" | tee -a "$RES"; }
per_req() { python3 -c "import sys; t,n,us=map(float,sys.argv[1:]); print('%.1f' % (t*us/n if n else 0))" "$1" "$2" "$(tick_us)"; }
jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); v=d
for k in sys.argv[2].split('.'): v=v[k]
print(v)" "$1" "$2"; }

[ -x "$BIN" ] || make -s
for t in redis-benchmark redis-cli nginx wrk curl sqlite3; do
    command -v $t >/dev/null || { echo "perf: $t not found (sh tools/deps.sh perf)"; exit 2; }
done

# ---- the service on its embedded default -------------------------------------------------
NP=$(free_port)
D="$TMP/d"
mkdir -p "$D"
serve_embedded "$BIN" "$D"   # sets HP, SPID
SOCK="$D/redis/redis.sock"
R="redis-cli -s $SOCK"
# Redis commands executed so far (INFO commandstats; this script's INFO/CONFIG not counted;
# the commands admit.lua issues count one each, as in MONITOR)
cmds() { $R info commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_/ && $1 !~ /^cmdstat_(info|config)/ {n += $3} END {print n + 0}'; }
# The same, top-level only: what clients sent (the script call, the writer's reads and
# acks...), without the commands issued inside admit.lua (its HSET: the buyer hash of a
# call of several buyers -- and the order index of binaries before the buyer-hash lookups).
INNER='hmget|time|hsetnx|hset|hincrby|xadd'
cmds_top() { $R info commandstats | tr -d '\r' | awk -F'[=,:]' -v inner="^cmdstat_($INNER)\$" '/^cmdstat_/ && $1 !~ /^cmdstat_(info|config)/ && $1 !~ inner {n += $3} END {print n + 0}'; }
# "evalsha-calls admitted-buyers usec-of-all-commands" for voucher $1 (the profile line of
# the wrk grab; admitted = HLEN of its buyer hash: the script records a call's buyers with
# one HSET, so commands no longer count them)
# (the script's inner commands are left out of the sum: EVALSHA's own time includes them)
cprof() { echo "$($R info commandstats | tr -d '\r' | awk -F'[=,:]' -v inner="^cmdstat_($INNER)\$" '/^cmdstat_/ && $1 !~ /^cmdstat_(info|config)/ && $1 !~ inner {u += $5}
    $1 == "cmdstat_evalsha" {e = $3} END {print e + 0, u + 0}')" "$($R hlen "seckill:order:{$1}")" |
    awk '{print $1, $3, $2}'; }
RPID=$($R info server | tr -d '\r' | awk -F: '/^process_id:/ {print $2}')
ADMIN=$(cat "$D/admin-token")
URL="http://127.0.0.1:$HP"

say "# seckill benchmark, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "# machine: $(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), kernel $(uname -r)"
say "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (the cores are shared: compare, don't trust absolutes)"
say "# $(redis-server --version | cut -d' ' -f1-3), AOF everysec over a unix socket; SQLite $(sqlite3 --version | cut -d' ' -f1) (WAL, synchronous=FULL); $(nginx -v 2>&1 | cut -d' ' -f3); wrk -t2 -c$CONNS -d${DURATION}s"
say "# service: seckill serve --data-dir (embedded default: private redis-server + SQLite), $(nproc) worker threads"
say ""

# ---- 1. ceilings, before the service's runs (and again after them, in 4.) ------------------
# The run takes minutes on a shared host whose speed drifts meanwhile: each reference is
# measured before and after the service's runs, the ratios use the mean of the two, and the
# spread between them is printed beside it (a large one says the host changed under the run).
# The redis-benchmark keys belong to a voucher id no voucher of the run has: after the runs
# the order writer reads the streams of real vouchers.
SHA=$($R script load "$(cat src/sale/admit.lua)")
CV=999999999
ceilings() {  # $1 before|after: sets RB_P1_$1, RB_P16_$1, NGINX_1_$1, NGINX_2_$1, NGINX_CPU_2_$1
    $R hset "seckill:voucher:{$CV}" stock 1000000000 begin 0 end 4102444800 >/dev/null
    for P in 1 16; do
        N=$((P == 1 ? 300000 : 2000000))
        r0=$(cpu_ticks "$RPID")
        line=$(redis-benchmark -s "$SOCK" -c 64 -n $N -P $P -r 1000000000 -q \
            EVALSHA "$SHA" 3 "seckill:voucher:{$CV}" "seckill:order:{$CV}" "seckill:stream:{$CV}" \
            $CV stream __rand_int__ __rand_int__ | tr '\r' '\n' | grep -a 'requests per second' | tail -1)
        r1=$(cpu_ticks "$RPID")
        rps=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p')
        say "ceiling  ($1) redis-benchmark EVALSHA admit.lua -c64 -P$P: $rps req/s; redis CPU $(per_req $((r1 - r0)) $N) us/req"
        eval "RB_P${P}_$1=$rps"
        $R del "seckill:order:{$CV}" "seckill:stream:{$CV}" >/dev/null
    done
    $R del "seckill:voucher:{$CV}" >/dev/null
    NP=$(free_port)
    for W in 1 2; do
        nginx_static "$W" '{"success":false,"errorMsg":"sold out","code":"SOLD_OUT"}'
        n0=$(cpu_ticks $NGPID $NGW)
        wrk -t2 -c"$CONNS" -d"${DURATION}s" "http://127.0.0.1:$NP/" > "$TMP/wrk.txt"
        n1=$(cpu_ticks $NGPID $NGW)
        rps=$(awk '/Requests\/sec/ {print $2}' "$TMP/wrk.txt")
        n=$(awk '/requests in/ {print $1}' "$TMP/wrk.txt")
        say "ceiling  ($1) nginx static 200 ($W worker$([ $W = 2 ] && echo s || true)): $rps req/s; nginx CPU $(per_req $((n1 - n0)) "$n") us/req"
        eval "NGINX_${W}_$1=$rps; NGINX_CPU_${W}_$1=$(per_req $((n1 - n0)) "$n")"
        kill "$NGPID"; wait "$NGPID" 2>/dev/null || true
    done
}
ceilings before
say ""

# ---- 2. the service, driven by seckill bench ----------------------------------------------
bench() {  # $1 label, rest: extra flags. Leaves $TMP/$1.json
    label=$1; shift
    brc=0
    "$BIN" bench --target "$URL" --data-dir "$D" --seed-tokens --conns "$CONNS" --quiet \
        --json "$TMP/$label.json" "$@" > "$TMP/$label.txt" 2>&1 || brc=$?
    cp "$TMP/$label.txt" "$OUT/bench-$label.txt"
    if [ "$brc" -ge 2 ]; then cat "$TMP/$label.txt"; echo "bench: seckill bench $label failed"; exit 1; fi
    j="$TMP/$label.json"
    say "seckill-bench $label: $(jget "$j" rps | cut -d. -f1) req/s, p50 $(jget "$j" latency_us.p50) us, p99 $(jget "$j" latency_us.p99) us, p99.9 $(jget "$j" latency_us.p99_9) us; server CPU $(jget "$j" server_cpu_us_per_request) us/req, redis CPU $(jget "$j" redis_cpu_us_per_request) us/req, bench CPU $(jget "$j" bench_cpu_us_per_request) us/req ($(jget "$j" requests) requests: $(jget "$j" outcomes.success) success, $(jget "$j" outcomes.sold_out) sold out, $(jget "$j" outcomes.duplicate) duplicate, $(jget "$j" outcomes.no_answer) unanswered)"
}
# Server CPU of a grab with the order writer's share in full: the writer runs niced
# (--writer-nice) and catches up after the load, so the figure taken over the load alone
# leaves part of it out. grab_full counts from the load's start until the voucher's stream
# is drained (nothing pending, nothing undelivered), split by thread.
# The writer's commits so far (/metrics): its CPU per order falls with the orders per commit
# (docs/performance.md, "Where the time goes").
writer_commits() { curl -s -H "authorization: Bearer $PERF_METRICS_TOKEN" "$URL/metrics" | awk '$1 == "seckill_writer_batches_total" {print int($2)}'; }
grab_full_start() { G0=$(cpu_ticks "$SPID"); GW0=$(thread_ticks "$SPID" '^w[0-9]+$'); GR0=$(thread_ticks "$SPID" '^writer$'); GC0=$(writer_commits); }
grab_full() {  # $1 voucher, $2 grabs, $3 label; sets GRAB_FULL_$3
    t0=$(date +%s.%N); i=0
    until $R xinfo groups "seckill:stream:{$1}" | tr -d '\r' |
          awk '$0 == "pending" || $0 == "lag" {k = $0; next} k != "" {v[k] = $0; k = ""}
               END {exit !(v["pending"] == "0" && v["lag"] == "0")}'; do
        i=$((i + 1)); [ $i -ge 2400 ] && break
        sleep 0.05
    done
    t1=$(date +%s.%N)
    g=$(($(cpu_ticks "$SPID") - G0)); gw=$(($(thread_ticks "$SPID" '^w[0-9]+$') - GW0))
    gr=$(($(thread_ticks "$SPID" '^writer$') - GR0))
    full=$(per_req "$g" "$2")
    gc=$(($(writer_commits) - GC0)); [ "$gc" -gt 0 ] || gc=1
    say "              $3 grab, writer included: server CPU $full us/grab (workers $(per_req "$gw" "$2"), writer $(per_req "$gr" "$2") in $gc commits of $(($2 / gc)) orders, rest $(per_req $((g - gw - gr)) "$2")) from the load's start until its orders were in SQL, $(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$t1") s after the load"
    eval "GRAB_FULL_$3=$full"
}
grab_full_start
bench grab --users "$USERS" --stock 100000000 --dup 0 --burst-share 0 --duration "$DURATION" --no-audit
GRAB_V=$(jget "$TMP/grab.json" voucher)
grab_full "$GRAB_V" "$(jget "$TMP/grab.json" outcomes.success)" bench
BG=$(jget "$TMP/grab.json" rps)
c0=$(cmds)
bench soldout --users "$USERS" --stock 0 --dup 0 --burst-share 0 --duration "$DURATION" --no-audit
c1=$(cmds)
BS=$(jget "$TMP/soldout.json" rps)
# the tokens' seeding (HSET + EXPIRE per user, before the load) is not the sale's
SOLDOUT_CMDS=$(python3 -c "import sys; c, u, n = map(float, sys.argv[1:]); print('%.4f' % ((c - 2 * u) / max(1.0, n)))" $((c1 - c0)) "$USERS" "$(jget "$TMP/soldout.json" requests)")
say "              soldout: Redis commands per request $SOLDOUT_CMDS (INFO commandstats over the run, less the seeding's 2 per user)"

# ---- 2b. the same two scenarios, driven by wrk ---------------------------------------------
mk() {
    curl -s -X POST "$URL/voucher/seckill" -H "x-admin-token: $ADMIN" -d \
      "{\"shopId\":1,\"title\":\"wrk\",\"payValue\":100,\"actualValue\":200,\"type\":1,\"stock\":$1,\"beginTime\":\"2020-01-01T00:00:00\",\"endTime\":\"2099-01-01T00:00:00\"}" |
      sed -n 's/.*"data":\([0-9]*\).*/\1/p'
}
run_wrk() {  # $1 voucher, $2 label
    # Fresh signed tokens (seckill tokens, the service's key), as users who logged in
    # within the last --token-refresh-s: a token's first refresh is due that long after
    # its login (docs/api-notes.md), and is measured separately below.
    "$BIN" tokens --users "$USERS" --key-file "$D/token-key" --redis "unix:$SOCK" > "$TMP/tokens.txt"
    sleep 1   # let the hashes' writes settle out of the CPU figures
    s0=$(cpu_ticks "$SPID"); k0=$(sys_ticks "$SPID"); r0=$(cpu_ticks "$RPID"); c0=$(cmds); t0=$(cmds_top); p0=$(cprof "$1")
    grab_full_start
    VOUCHER=$1 TOKENS="$TMP/tokens.txt" wrk -t2 -c"$CONNS" -d"${DURATION}s" --latency -s perf/grab.lua "$URL" \
        > "$TMP/wrk.txt"
    s1=$(cpu_ticks "$SPID"); k1=$(sys_ticks "$SPID"); r1=$(cpu_ticks "$RPID"); c1=$(cmds); t1=$(cmds_top); p1=$(cprof "$1")
    rps=$(awk '/Requests\/sec/ {print $2}' "$TMP/wrk.txt")
    n=$(awk '/requests in/ {print $1}' "$TMP/wrk.txt")
    p50=$(awk '$1=="50%" {print $2}' "$TMP/wrk.txt"); p99=$(awk '$1=="99%" {print $2}' "$TMP/wrk.txt")
    errs=$(grep -E 'Non-2xx|Socket errors' "$TMP/wrk.txt" | tr '\n' ' ' || true)
    cpr=$(python3 -c "import sys; print('%.4f' % (float(sys.argv[1]) / max(1.0, float(sys.argv[2]))))" $((c1 - c0)) "$n")
    tpr=$(python3 -c "import sys; print('%.4f' % (float(sys.argv[1]) / max(1.0, float(sys.argv[2]))))" $((t1 - t0)) "$n")
    kpct=$(python3 -c "import sys; k, s = map(float, sys.argv[1:]); print('%.0f' % (100 * k / s if s else 0))" $((k1 - k0)) $((s1 - s0)))
    say "wrk           $2: $rps req/s, p50 $p50, p99 $p99; server CPU $(per_req $((s1 - s0)) "$n") us/req (kernel $kpct %), redis CPU $(per_req $((r1 - r0)) "$n") us/req, redis commands $cpr/req, of them sent by clients $tpr/req ($n requests) $errs"
    if [ "$2" = grab ]; then
        # Where Redis's time goes in a grab (INFO commandstats: command execution only,
        # a script's inner commands counted once, inside its EVALSHA's time).
        say "              grab profile: $(python3 -c "import sys
e0, h0, u0, e1, h1, u1, n = map(float, sys.argv[1:])
print('%.0f admissions in %.0f script calls (%.1f per call); Redis command time %.1f us per request' % (h1 - h0, e1 - e0, (h1 - h0) / max(1, e1 - e0), (u1 - u0) / max(1, n)))" $p0 $p1 "$n")"
    fi
    eval "WRK_$2=$rps; WRK_KPCT_$2=$kpct; WRK_CPU_$2=$(per_req $((s1 - s0)) "$n"); WRK_RCPU_$2=$(per_req $((r1 - r0)) "$n"); WRK_CMDS_$2=$cpr; WRK_TOP_$2=$tpr"
    if [ "$2" = grab ]; then
        grab_full "$1" "$n" wrk
    fi
}
run_wrk "$(mk 100000000)" grab
run_wrk "$(mk 0)" soldout
say ""

# ---- 2c. sales with 10x more buyers than stock, open loop, then drain + audit --------------
# Each sale starts from an idle service: the writer has drained every earlier order (the
# grab runs leave up to a few hundred thousand in the stream; a writer still busy would
# compete with the sale's answers) and the AOF has just been rewritten (below); and the
# host's own load is measured right before it.
host_busy() {  # % of all cores busy over $1 s (/proc/stat), and the same for the steal
    python3 - "$1" <<'PY'
import sys, time
def snap():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    return f[0] + f[1] + f[2] + f[5] + f[6], sum(f), f[7]
b0, t0, s0 = snap(); time.sleep(float(sys.argv[1])); b1, t1, s1 = snap()
print("%.0f %.0f" % (100.0 * (b1 - b0) / max(1, t1 - t0), 100.0 * (s1 - s0) / max(1, t1 - t0)))
PY
}
# Where a sale's tail sits: while the stock sells (every request a grab) or after (every
# answer a verdict from memory); how late the bench itself sent; what else ran.
phase_lines() {  # $1 label, $2 the bench's JSON
    python3 - "$2" "$1" <<'PY' | tee -a "$RES"
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("selling", "sold_out"):
    p = d.get("phases", {}).get(k)
    if not p or not p["requests"]:
        continue
    t = p.get("threads", {})
    busy = " ".join("%s %.0f/%.0f" % (n, v["cpu_pct"], v["wait_pct"]) for n, v in t.items()
                    if not n.startswith("host/") and (v["cpu_pct"] >= 5 or v["wait_pct"] >= 5))
    print("              %s %-8s due %.2f-%.2f s, %d requests: p50 %.2f p99 %.2f ms (from send %.2f, sent late %.2f); "
          "CPU/run-queue wait %% of a core: %s; other processes %.0f" % (
          sys.argv[2], k.replace("_", " "), p["from_s"], p["to_s"], p["requests"], p["p50_us"] / 1e3,
          p["p99_us"] / 1e3, p["send_p99_us"] / 1e3, p["late_p99_us"] / 1e3, busy, p.get("others_cpu_pct", -1)))
PY
}
# The bench report's worst 100 ms slots; the machine's own CPU: spells when a probe thread's
# fixed arithmetic ran several times slower in its own CPU time (the hypervisor, not a
# process of this host; docs/performance.md "What limits the figures"), and the p99 of the
# requests that met none of them.
tail_lines() {  # $1 label, $2 the bench's text report
    say "              $1 $(grep -m1 'worst 100ms' "$2" | sed 's/^ *//')"
    say "              $1 $(grep -m1 '^  host CPU' "$2" | sed 's/^ *//')"
    if grep -q '^  outside ' "$2"; then say "              $1 $(grep -m1 '^  outside ' "$2" | sed 's/^ *//')"; fi
}
# "rate:p99:selling p99:sold-out p99:host busy:spells:slow ms:p99 outside:requests outside:requests"
# of a sale's JSON $2 at rate $1, host busy $3 (the final table reads it)
sale_detail() {
    python3 - "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[2]))
ph, cp = d.get("phases", {}), d.get("cpu_probe", {})
print(":".join(str(x) for x in (sys.argv[1], d["latency_us"]["p99"], ph.get("selling", {}).get("p99_us", 0),
      ph.get("sold_out", {}).get("p99_us", 0), sys.argv[3], cp.get("slow_spells", 0), cp.get("slow_ms", 0),
      cp.get("outside", {}).get("p99_us", 0), cp.get("outside", {}).get("requests", 0), d["requests"])))
PY
}
SALE_DETAIL=""
NGINX_DETAIL=""
for rate in $SALE_RATES; do
    "$BIN" audit --data-dir "$D" --wait-drain 120 > "$TMP/pre-sale-audit.txt" 2>&1 || true
    # ... and its AOF compacted: the runs above grew it by hundreds of MB, and Redis's own
    # rewrite (once the AOF doubles) could fall into the sale: a fork that stops
    # redis-server (~40-140 ms here at 0.2-0.6 GB) and a child that takes a core for
    # seconds. A sale that meets one anyway shows it in its "redis stalls" line.
    f0=$(date +%s.%N)
    aof_rewrite
    say "redis         before sale-$rate: AOF rewritten in $(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$f0" "$(date +%s.%N)") s (fork $($R info stats | tr -d '\r' | awk -F: '$1 == "latest_fork_usec" {print $2}') us, base now $($R info persistence | tr -d '\r' | awk -F: '$1 == "aof_base_size" {printf "%.0f", $2 / 1048576}') MB)"
    set -- $(host_busy 2)
    say "host          before sale-$rate: $1% of the $(nproc) cores busy (steal $2%) with the service idle: the neighbours' share (above ~5%, the sale's p99 measures them too)"
    HOST_BUSY=$1
    # Redis's own stalls during the sale: LATENCY events above 2 ms (a command, an AOF
    # write that waited for the disk, a fork), and its AOF rewrites (fork + child)
    $R config set latency-monitor-threshold 2 >/dev/null; $R latency reset >/dev/null
    rw0=$($R info persistence | tr -d '\r' | awk -F: '$1 == "aof_rewrites" {print $2}')
    # --cpu-probe: the machine's CPU slow spells, which tail_lines and sale_detail read
    bench "sale-$rate" --users $((SALE_STOCK * 10)) --stock "$SALE_STOCK" --rate "$rate" --dup 0.1 \
        --burst-share 0.05 --conns 256 --timeline "$OUT/timeline-sale-$rate.tsv" --cpu-probe
    j="$TMP/sale-$rate.json"
    say "              sale-$rate: $SALE_STOCK stock, $((SALE_STOCK * 10)) buyers (+10% repeats, 5% sent 3x at once) at $rate req/s open loop; latency from send p99 $(jget "$j" latency_from_send_us.p99) us; drained $(jget "$j" drain.seconds) s after the last answer; audit status $(jget "$j" audit) (0 = no violation)"
    phase_lines "sale-$rate" "$j"
    tail_lines "sale-$rate" "$TMP/sale-$rate.txt"
    rw1=$($R info persistence | tr -d '\r' | awk -F: '$1 == "aof_rewrites" {print $2}')
    say "              sale-$rate redis stalls: $($R latency latest | tr -d '\r' | paste -sd' ' |
        awk '{s = ""; for (i = 1; i + 3 <= NF; i += 4) s = s sprintf("%s max %s ms; ", $i, $(i + 3)); print (s == "" ? "none above 2 ms; " : s)}')AOF rewrites $((rw1 - rw0)) (last fork $($R info stats | tr -d '\r' | awk -F: '$1 == "latest_fork_usec" {print $2}') us)"
    $R config set latency-monitor-threshold 0 >/dev/null
    SALE_DETAIL="$SALE_DETAIL $(sale_detail "$rate" "$j" "$HOST_BUSY")"

    # The control, right after: the same bench, sale and rate against nginx (2 workers)
    # answering every request with the sold-out body (perf/nginx_sale.py; tokens from a
    # file, nothing checked). nginx does next to nothing per answer: the tail it shows is
    # what this machine, its neighbours and the bench allow at this rate, now.
    set -- $(host_busy 2)
    say "host          before nginx-sale-$rate: $1% of the $(nproc) cores busy (steal $2%), the service idle"
    NG_BUSY=$1
    j="$TMP/nginx-sale-$rate.json"
    python3 perf/nginx_sale.py --bench "$BIN" --rate "$rate" --stock "$SALE_STOCK" \
        --users $((SALE_STOCK * 10)) --json "$j" --report "$OUT/bench-nginx-sale-$rate.txt" \
        --timeline "$OUT/timeline-nginx-sale-$rate.tsv"
    say "seckill-bench nginx-sale-$rate: $(jget "$j" rps | cut -d. -f1) req/s, p50 $(jget "$j" latency_us.p50) us, p99 $(jget "$j" latency_us.p99) us, p99.9 $(jget "$j" latency_us.p99_9) us; bench CPU $(jget "$j" bench_cpu_us_per_request) us/req ($(jget "$j" requests) requests: $(jget "$j" outcomes.sold_out) sold out, $(jget "$j" outcomes.no_answer) unanswered)"
    say "              nginx-sale-$rate: the control of sale-$rate: nginx (2 workers) answering every request with the sold-out body, the same bench, buyers and rate; latency from send p99 $(jget "$j" latency_from_send_us.p99) us"
    phase_lines "nginx-sale-$rate" "$j"
    tail_lines "nginx-sale-$rate" "$OUT/bench-nginx-sale-$rate.txt"
    NGINX_DETAIL="$NGINX_DETAIL $(sale_detail "$rate" "$j" "$NG_BUSY")"
done

# ---- 3. writer drain rate from a full backlog ---------------------------------------------
N=$(sqlite3 "$D/seckill.db" "select count(*) from tb_voucher_order where voucher_id=$GRAB_V")
sqlite3 "$D/seckill.db" ".timeout 10000" "begin immediate; delete from tb_voucher_order where voucher_id=$GRAB_V; update tb_seckill_voucher set stock = stock + $N where voucher_id=$GRAB_V; commit;"
$R xgroup setid "seckill:stream:{$GRAB_V}" g1 0 >/dev/null
DRAIN=$(python3 - "$D/seckill.db" "$GRAB_V" "$N" <<'PY'
import sqlite3, sys, time
db, vid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
c = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=30)
q = "select count(*) from tb_voucher_order where voucher_id=%d" % vid
t_first = c_first = None
deadline = time.monotonic() + 120
while True:
    k = c.execute(q).fetchone()[0]
    now = time.monotonic()
    if k > 0 and t_first is None:
        t_first, c_first = now, k
    if k >= n or now > deadline:
        break
    time.sleep(0.005)
rate = (k - c_first) / (now - t_first) if t_first and now > t_first else 0
print("%d %.0f %.2f" % (k, rate, now - (t_first or now)))
PY
)
set -- $DRAIN
say "writer        drained a backlog of $N orders into SQLite at $2 orders/s ($1 written, $3 s from the first to the last batch)"
DRAIN_RATE=$2

# ---- 4. ratios, and the audit of everything sold ------------------------------------------
"$BIN" audit --data-dir "$D" --wait-drain 60 > "$TMP/audit.txt" 2>&1 && AUD=0 || AUD=$?
say "audit         of every voucher of this run: $(tail -1 "$TMP/audit.txt") (exit $AUD)"
say ""
ceilings after
# mean of before and after, and their spread: |after - before| / mean
ms() { python3 -c "import sys; b, a = map(float, sys.argv[1:]); m = (a + b) / 2; print('%.2f %.0f' % (m, 100 * abs(a - b) / m if m else 0))" "$1" "$2"; }
ref() {  # $1 variable, $2 label, $3 unit: sets $1 to the mean, prints both and the spread
    eval "b=\$${1}_before a=\$${1}_after"
    set -- "$1" "$2" "$3" $(ms "$b" "$a")
    eval "$1=$4"
    say "reference     $2: before $b, after $a $3; mean $4, spread $5 %"
}
ref RB_P1 "redis-benchmark -P1" req/s
ref RB_P16 "redis-benchmark -P16" req/s
ref NGINX_1 "nginx static (1 worker)" req/s
ref NGINX_2 "nginx static (2 workers)" req/s
ref NGINX_CPU_2 "nginx CPU per static answer (2 workers)" us
say "              (the ratios below use the means; a spread above ~10 % says the host's speed drifted during the run, and every ratio is that uncertain)"
say ""
python3 - "$BG" "$RB_P16" "$RB_P1" "$BS" "$NGINX_1" "$NGINX_2" "$WRK_grab" "$WRK_soldout" \
    "$DRAIN_RATE" "$NGINX_DETAIL" "$WRK_CMDS_soldout" "$WRK_RCPU_grab" "$WRK_CPU_grab" "$WRK_CPU_soldout" \
    "$(jget "$TMP/soldout.json" server_cpu_us_per_request)" "$(jget "$TMP/grab.json" redis_cpu_us_per_request)" \
    "$(jget "$TMP/grab.json" server_cpu_us_per_request)" "$SOLDOUT_CMDS" "$WRK_CMDS_grab" "$WRK_TOP_grab" \
    "$SALE_DETAIL" "$GRAB_FULL_wrk" "$GRAB_FULL_bench" "$NGINX_CPU_2" "$WRK_KPCT_grab" "$WRK_KPCT_soldout" \
    "$CONNS" "$DURATION" <<'PY' | tee -a "$RES"
import sys
bg, p16, p1, bs, n1, n2, wg, ws, dr = map(float, sys.argv[1:10])
wcmds, wrcpu_g, wcpu_g, wcpu_s, bcpu_s, brcpu_g, bcpu_g, bcmds = map(float, sys.argv[11:19])
ng = float(sys.argv[24])   # nginx `return 200`, 2 workers: CPU per answer, mean of before/after


def sales(arg):
    """{rate: figures} from sale_detail's lines (perf/run.sh)."""
    keys = ("p99", "selling", "sold_out", "busy", "spells", "slow_ms", "outside", "kept", "requests")
    return {int(x.split(":")[0]): dict(zip(keys, map(float, x.split(":")[1:]))) for x in arg.split()}


svc, ctl = sales(sys.argv[21]), sales(sys.argv[10])
ms = lambda us: "%.2f ms" % (us / 1000)
per_rate = lambda f: ", ".join("%d req/s: %s" % (r, f(r)) for r in sorted(svc))
ratio = lambda a, b: "%.2f" % (a / b) if b > 0 else "-"
p99 = per_rate(lambda r: ms(svc[r]["p99"]))
p99_ctl = per_rate(lambda r: ms(ctl[r]["p99"]) if r in ctl else "-")
p99_ratio = per_rate(lambda r: ratio(svc[r]["p99"], ctl[r]["p99"]) if r in ctl else "-")
print("ratios   grab / redis-benchmark -P16 = %.2f (seckill bench), %.2f (wrk)   [target >= 0.6]" % (bg / p16, wg / p16))
print("         grab / redis-benchmark -P1  = %.2f (seckill bench), %.2f (wrk)" % (bg / p1, wg / p1))
print("         sold out / nginx static (1 worker)  = %.2f (seckill bench), %.2f (wrk)" % (bs / n1, ws / n1))
print("         sold out / nginx static (2 workers) = %.2f (seckill bench), %.2f (wrk)   [target >= 0.8]" % (bs / n2, ws / n2))
print("         writer drain %.0f orders/s   [target >= 10000]" % dr)
print("         sale p99 (10x buyers, open loop) %s   [target < 5 ms]" % p99)
print("         sale p99 / nginx control p99 (the same sale against nginx) %s   [1 = the machine's tail]" % p99_ratio)
print()

# The table: (case, measured, target); target None = a detail line under the row above
# (its text runs on, not counted in the columns' widths).
rows = [
    ("sold out, new user per request, req/s / nginx static (2 workers)",
     "%.2f wrk, %.2f bench" % (ws / n2, bs / n2), ">= 0.8"),
    ("Redis commands per sold-out request", "%.4f wrk, %.4f bench" % (wcmds, bcmds), "<= 0.01"),
    ("grab, new user per request, req/s / redis-benchmark -P16",
     "%.2f wrk, %.2f bench" % (wg / p16, bg / p16), ">= 0.6"),
    ("Redis CPU per grab", "%.1f us wrk, %.1f us bench" % (wrcpu_g, brcpu_g), "<= 12 us"),
    ("Redis commands per grab (wrk): sent by clients / in all",
     "%.2f / %.2f" % (float(sys.argv[20]), float(sys.argv[19])), "as few as possible"),
    ("server CPU per grab / per sold out",
     "%.1f / %.1f us wrk; %.1f / %.1f us bench" % (wcpu_g, wcpu_s, bcpu_g, bcpu_s), "<= 12 / <= 6 us"),
]
if ng > 0:
    # The row above in units of nginx's CPU per static answer in this run: on a slower or
    # busier host both grow, the ratio much less (most of either is the kernel's loopback
    # TCP and wake-ups).
    rows.append(("  the same in nginx static answers (1 = %.1f us of nginx CPU)" % ng,
                 "%.2f / %.2f wrk; %.2f / %.2f bench" % (wcpu_g / ng, wcpu_s / ng, bcpu_g / ng, bcpu_s / ng),
                 "no target (reads the us on this host)"))
rows.append(("  the server's CPU in the kernel (wrk runs), grab / sold out",
             "%s %% / %s %%" % (sys.argv[25], sys.argv[26]), "no target"))
rows.append(("server CPU per grab, the writer's catch-up after the load included",
             "%.1f us wrk, %.1f us bench" % (float(sys.argv[22]), float(sys.argv[23])), "<= 12 us"))
rows.append(("p99 at 20,000 req/s open loop, 10x buyers per stock", p99, "< 5 ms"))
rows.append(("  nginx control: the same sale, nginx answering sold out", p99_ctl, "no target (the machine's tail)"))
rows.append(("  service p99 / nginx control p99", p99_ratio, "1 = the machine's tail"))
for r in sorted(svc):
    x, c = svc[r], ctl.get(r)
    rows.append(("  sale at %d req/s, p99 by phase" % r, "selling %s, sold out %s; host %.0f%% busy before it" % (
        ms(x["selling"]), ms(x["sold_out"]), x["busy"]), None))
    if c is not None:
        rows.append(("  nginx control at %d req/s, p99" % r, "%s, every answer sold out; host %.0f%% busy before it" % (
            ms(c["p99"]), c["busy"]), None))
    # the machine's CPU slow spells during the sale (the probe of seckill bench): the p99 of
    # the requests that met none of them says what the service does on a steady CPU
    for who, y in (("sale", x), ("nginx control", c)):
        if y is not None:
            rows.append(("  %s at %d req/s, p99 outside the CPU's slow spells" % (who, r),
                         "%s without the %.1f %% of requests that met %d slow spell(s) of the machine's CPU (%.0f ms)" % (
                             ms(y["outside"]), 100 * (1 - y["kept"] / max(1, y["requests"])), y["spells"],
                             y["slow_ms"]), None))
    if c is not None:
        rows.append(("  service / nginx control at %d req/s, outside the slow spells" % r,
                     ratio(x["outside"], c["outside"]), None))
w0 = max(len(r[0]) for r in rows)
w1 = max(len(r[1]) for r in rows if r[2] is not None)
print("hot-path targets, this run:")
print("  %-*s  %-*s  %s" % (w0, "case", w1, "measured", "target"))
for case, measured, target in rows:
    print(("  %-*s  %-*s  %s" % (w0, case, w1, measured, target)) if target is not None else
          ("  %-*s  %s" % (w0, case, measured)))
print("  where from: wrk = wrk -t2 -c%s -d%ss -s perf/grab.lua, a new signed token per request; bench = seckill bench\n"
      "  --seed-tokens (sales: --rate, latency from each request's due time); nginx static and redis-benchmark: the\n"
      "  ceilings above, mean of before and after; CPU: /proc/PID/stat over the load; Redis commands: INFO commandstats;\n"
      "  nginx control: perf/nginx_sale.py right after each sale, the same bench (its lines above)" % (sys.argv[27], sys.argv[28]))
PY
kill "$SPID"; wait "$SPID" 2>/dev/null || true

# ---- 5. the waiting room (perf/room.sh, which runs alone too): its own service ------------
say ""
RES="$RES" RES_APPEND=1 DURATION="$DURATION" CONNS="$CONNS" BIN="$BIN" sh perf/room.sh

# ---- 6. the payment-timeout wave (perf/timeout_wave.py, its own service): bounded ----------
say ""
say "# payment-timeout wave (perf/timeout_wave.py), $(date -u +%Y-%m-%dT%H:%M:%SZ); load average $(cut -d' ' -f1-3 /proc/loadavg)"
WAVE_RC=0
timeout "$WAVE_BOUND" python3 perf/timeout_wave.py --orders "$WAVE_ORDERS" --rounds "$WAVE_ROUNDS" "$BIN" > "$TMP/wave.txt" 2>&1 || WAVE_RC=$?
tee -a "$RES" < "$TMP/wave.txt"
case $WAVE_RC in
    0) WAVE_IS="met" ;;
    1) WAVE_IS="NOT met" ;;
    124) WAVE_IS="not measured: over $WAVE_BOUND s" ;;
    *) WAVE_IS="not measured (exit $WAVE_RC)" ;;
esac
say "timeout wave  $WAVE_ORDERS orders expiring together, $WAVE_ROUNDS rounds: sweep >= 10,000 orders/s and the sale's p99 during the wave <= 1.5x alone, the median of the kept rounds: $WAVE_IS (lines above)"
echo "results: $RES"
