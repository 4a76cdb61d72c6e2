"""test_bench_html.py -- `seckill bench --html FILE`: the report as a page with charts.

A short sale (open loop, so it lasts a few samples), then the page is opened in Debian's
chromium (tests/browser/report.mjs, playwright-core): no JavaScript error, no request
leaving the file (dygraphs is inline), all three charts drawn (outcomes over time, latency
percentile curve, stock over time), and the audit's verdict and texts on the page match
what the bench printed.
"""

import json
import os
import shutil
import subprocess

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)
BROWSER_DIR = os.path.join(H.ROOT, "tests", "browser")


def test_bench_html_report():
    redis, srv = H.setup()
    page = os.path.join(H.tmpdir(), "report.html")
    out = subprocess.run(
        [H.binary(), "bench", "--target", "http://127.0.0.1:%d" % srv.port,
         "--redis", redis.url, "--db", srv.db_url, "--admin-token", srv.admin_token,
         "--seed-tokens", "--users", "600", "--stock", "200", "--rate", "400", "--conns", "16",
         "--quiet", "--html", page],
        capture_output=True, text=True, timeout=120, env=H.san_env())
    check(out.returncode == 0, "bench --html exit %d:\n%s%s", out.returncode, out.stdout[-3000:],
          out.stderr[-3000:])
    check("  html        " + page in out.stdout, "bench names the page:\n%s", out.stdout[-500:])
    with open(page, encoding="utf-8") as f:
        html = f.read()
    check("Verdict: audit clean" in html and "audit: 0 violations" in html,
          "verdict and audit text on the page")
    check("latency ms  p50" in html, "the text report on the page")
    check("<script src" not in html and "<link " not in html, "the page loads nothing else")

    node, chromium = shutil.which("node"), shutil.which("chromium")
    check(node and chromium, "node and chromium are needed (sh tools/deps.sh test installs them)")
    png = os.path.join(H.ROOT, "build", "browser", "bench-report.png")
    os.makedirs(os.path.dirname(png), exist_ok=True)
    p = subprocess.run([node, os.path.join(BROWSER_DIR, "report.mjs"), page, png],
                       capture_output=True, text=True, timeout=90, cwd=BROWSER_DIR,
                       env=dict(os.environ, CHROMIUM=chromium))
    check(p.returncode == 0, "report.mjs: %s%s", p.stdout[-2000:], p.stderr[-2000:])
    found = json.loads(p.stdout.strip().splitlines()[-1])
    eq(found["errors"], [], "JavaScript errors or fetches on the report page")
    eq((found["plots"], found["drawn"]), (3, 3), "charts drawn")
    check(found["verdict"].startswith("Verdict: audit clean"), "verdict %r", found["verdict"])
    eq([h.split(",")[0].split(" (")[0] for h in found["headings"]],
       ["Answers per second by outcome", "Latency by percentile",
        "Stock left over the sale"], "charts")
    H.finish(srv)
