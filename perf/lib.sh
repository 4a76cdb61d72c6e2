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
