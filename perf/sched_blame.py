#!/usr/bin/env python3
"""perf/sched_blame.py -- whose CPU time the service's threads waited behind.

    perf sched record -o sched.data -- sleep 3        # while the sale sells
    perf script -i sched.data -F cpu,time,event,trace | python3 perf/sched_blame.py

Reads the scheduler's switch and wake-up events and, for every thread named w0, w1,
writer, redis-server and bench0, adds up the time it sat runnable but not running (from
its wake-up, or from being preempted, until it ran again) and blames each part of that
wait on what ran on the CPU meanwhile: the workers, the order writer, redis (any of its
threads), the bench, the idle task (a wake-up's own latency) or "other" (every other
process: the neighbours on a shared host, kernel threads). Unlike a p99, the share blamed
on one of our own threads does not move with the neighbours' load; perf/sale_ab.py
--sched prints it per run.
"""
import bisect
import collections
import re
import sys

SWITCH = re.compile(r"prev_comm=(.*?) prev_pid=(\d+) .*prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+)")
WAKE = re.compile(r"comm=(.*?) pid=(\d+) ")
LINE = re.compile(r"\[(\d+)\]\s+([\d.]+):\s+(\S+):\s+(.*)")
WATCHED = ("w0", "w1", "redis-server", "bench0", "writer")


def who(comm):
    if comm in ("w0", "w1"):
        return "workers"
    if comm == "writer":
        return "writer"
    if comm.startswith(("redis", "bio_", "jemalloc")):
        return "redis"
    if comm.startswith("bench"):
        return "bench"
    if comm.startswith("swapper"):
        return "idle"
    return "other"


def blame(lines):
    """{comm: (total wait s, Counter(culprit -> s))} for the WATCHED threads."""
    segs = collections.defaultdict(list)   # cpu -> [(start, comm, tid)] of what ran
    waiting = {}                            # tid -> when it became runnable
    waits = []                              # (tid, comm, from, to, cpu)
    for line in lines:
        m = LINE.search(line)
        if not m:
            continue
        cpu, t, ev, tr = int(m.group(1)), float(m.group(2)), m.group(3), m.group(4)
        if ev.endswith("sched_switch"):
            s = SWITCH.search(tr)
            if not s:
                continue
            pcomm, ptid, state, ncomm, ntid = s.groups()
            segs[cpu].append((t, ncomm, ntid))
            if state.startswith("R"):
                waiting[ptid] = t           # preempted: still runnable
            if ntid in waiting:
                waits.append((ntid, ncomm, waiting.pop(ntid), t, cpu))
        elif ev.endswith(("sched_waking", "sched_wakeup")):
            s = WAKE.search(tr)
            if s and s.group(2) not in waiting:
                waiting[s.group(2)] = t
    starts = {c: [x[0] for x in v] for c, v in segs.items()}
    out = {}
    for tid, comm, t0, t1, cpu in waits:
        if comm not in WATCHED:
            continue
        total, by = out.setdefault(comm, [0.0, collections.Counter()])
        out[comm][0] = total + (t1 - t0)
        sl, st = segs[cpu], starts[cpu]
        i = max(0, bisect.bisect_right(st, t0) - 1)
        while i < len(sl) and sl[i][0] < t1:
            a = max(t0, sl[i][0])
            b = min(t1, sl[i + 1][0] if i + 1 < len(sl) else t1)
            if b > a and sl[i][2] != tid:
                by[who(sl[i][1])] += b - a
            i += 1
    return out


def main():
    out = blame(sys.stdin)
    for comm in WATCHED:
        if comm in out:
            total, by = out[comm]
            print("%-13s waited %7.1f ms; behind: %s" % (
                comm, total * 1e3, " ".join("%s %.1f" % (k, v * 1e3) for k, v in by.most_common())))


if __name__ == "__main__":
    main()
