"""test_perf_control.py -- `make perf`'s control sale (perf/nginx_sale.py) runs and leaves
what perf/run.sh reads from it.

perf/run.sh sets beside each open-loop sale the same `seckill bench` sale against nginx
answering every request with the course's sold-out body, and reads the bench's JSON
(latency, phases, cpu_probe) and its text report's "worst 100ms", "host CPU" and "outside"
lines. A small sale at a low rate checks that all of it is there and that every answer
was nginx's sold-out body; no figure is judged (benchmarks are not timed tests).
"""

import json
import os
import subprocess
import sys

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)   # no database: nginx answers
# run alone under tests/run.py -j: `make perf`'s control sale, a bench's timing output
SERIAL = True


@H.timeout(120)
def test_nginx_control_sale():
    d = H.tmpdir()
    j, rep, tl = (os.path.join(d, n) for n in ("sale.json", "report.txt", "timeline.tsv"))
    stock = 150
    p = subprocess.run([sys.executable, os.path.join(H.ROOT, "perf", "nginx_sale.py"),
                        "--bench", H.binary(), "--rate", "2000", "--stock", str(stock),
                        "--json", j, "--report", rep, "--timeline", tl],
                       capture_output=True, text=True, timeout=100, env=H.san_env(), cwd=d)
    report = open(rep).read() if os.path.exists(rep) else ""
    H.log(report)
    check(p.returncode == 0, "nginx_sale.py exit %d:\n%s\n%s", p.returncode, p.stdout, p.stderr)
    for m in H.SANITIZER_MARKERS:
        check(m not in report, "sanitizer report from seckill bench:\n%s", report[-6000:])

    r = json.load(open(j))
    n = r["requests"]
    # 10x buyers, +10 % repeats, 5 % sent three times at once
    check(n >= stock * 10, "requests %d, want at least %d", n, stock * 10)
    eq(r["outcomes"]["sold_out"], n, "every answer nginx's sold-out body")
    eq(r["unanswered"], 0, "unanswered")
    eq(r["rate"], 2000, "open loop at the rate asked")
    # the fields run.sh's sale_detail reads
    check(r["latency_us"]["p99"] > 0, "no p99: %r", r["latency_us"])
    eq(r["phases"]["selling"]["requests"], 0, "nothing sold, so no selling phase")
    eq(r["phases"]["sold_out"]["requests"], n, "the whole sale is the sold-out phase")
    cp = r["cpu_probe"]
    check(cp["runs"] > 0, "the CPU probe never ran: %r", cp)
    check(0 < cp["outside"]["requests"] <= n, "requests outside the slow spells: %r", cp)
    check(cp["outside"]["p99_us"] > 0, "no p99 outside the slow spells: %r", cp)

    # the report lines run.sh's tail_lines copies
    check("  worst 100ms at " in report, "no worst-100ms line")
    check("\n  host CPU    " in report, "no host CPU line")
    if cp["slow_spells"]:
        check("\n  outside     them (" in report, "slow spells but no outside line")
    with open(tl) as f:
        check(f.readline().startswith("t_s\t"), "the timeline has no header")
        check(len(f.readlines()) > 5, "the timeline has no rows")
