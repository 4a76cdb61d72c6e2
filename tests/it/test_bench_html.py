"""test_bench_html.py -- `seckill bench --html FILE`: the report as a page with charts.

A short sale (open loop, so it lasts a few samples), then the page is opened in Debian's
chromium (tests/browser/report.mjs, playwright-core): no JavaScript error, no request
leaving the file (dygraphs is inline), all three charts drawn (outcomes over time, latency
percentile curve, stock over time), and the audit's verdict and texts on the page match
what the bench printed. Then the README's own example, a sale over in a few tens of
milliseconds: its charts still have many points (the time slot follows the sale's length),
the stock reaches 0 where the last success was answered, legends sit outside the plots and
the y labels clear the tick numbers (screenshot build/browser/bench-report-short.png).
"""

import json
import os
import re
import shutil
import subprocess

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)
BROWSER_DIR = os.path.join(H.ROOT, "tests", "browser")


def _open_in_chromium(page, png_name):
    """tests/browser/report.mjs on the page: its findings; a screenshot in build/browser/."""
    node, chromium = shutil.which("node"), shutil.which("chromium")
    check(node and chromium, "node and chromium are needed (sh tools/deps.sh test installs them)")
    png = os.path.join(H.ROOT, "build", "browser", png_name)
    os.makedirs(os.path.dirname(png), exist_ok=True)
    p = subprocess.run([node, os.path.join(BROWSER_DIR, "report.mjs"), page, png],
                       capture_output=True, text=True, timeout=90, cwd=BROWSER_DIR,
                       env=dict(os.environ, CHROMIUM=chromium))
    check(p.returncode == 0, "report.mjs: %s%s", p.stdout[-2000:], p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


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

    found = _open_in_chromium(page, "bench-report.png")
    eq(found["errors"], [], "JavaScript errors or fetches on the report page")
    eq((found["plots"], found["drawn"]), (3, 3), "charts drawn")
    check(found["verdict"].startswith("Verdict: audit clean"), "verdict %r", found["verdict"])
    eq([h.split(",")[0].split(" (")[0] for h in found["headings"]],
       ["Answers per second by outcome", "Latency by percentile",
        "Stock left over the sale"], "charts")
    H.finish(srv)


def test_bench_html_short_sale():
    """The README's example (`--users 2000 --stock 500`, closed loop): the sale is over in a
    few tens of milliseconds, and its page still draws it."""
    redis, srv = H.setup()
    page = os.path.join(H.tmpdir(), "short.html")
    js = os.path.join(H.tmpdir(), "short.json")
    out = subprocess.run(
        [H.binary(), "bench", "--target", "http://127.0.0.1:%d" % srv.port,
         "--redis", redis.url, "--db", srv.db_url, "--admin-token", srv.admin_token,
         "--seed-tokens", "--users", "2000", "--stock", "500", "--quiet", "--html", page,
         "--json", js],
        capture_output=True, text=True, timeout=120, env=H.san_env())
    check(out.returncode == 0, "bench --html exit %d:\n%s%s", out.returncode, out.stdout[-3000:],
          out.stderr[-3000:])
    H.log("sale of %.3f s" % json.load(open(js))["seconds"])
    # The answers chart's data, as written into the page (its CSV, one row per slot).
    html = open(page, encoding="utf-8").read()
    m = re.search(r'getElementById\("chart1"\), "((?:[^"\\]|\\.)*)"', html)
    check(m, "no data for the first chart in the page")
    rows = m.group(1).split("\\n")[1:-1]
    check(len(rows) >= 50, "answers per second: %d points in the page (want 50-200)", len(rows))
    found = _open_in_chromium(page, "bench-report-short.png")
    eq(found["errors"], [], "JavaScript errors or fetches on the report page")
    eq(len(found["charts"]), 3, "charts")
    answers, latency, stock = found["charts"]
    check(50 <= len(answers["rows"]) <= 202, "answers per second: %d points (want 50-200)",
          len(answers["rows"]))
    check(sum(1 for r in answers["rows"] if sum(r[1:]) > 0) >= 10,
          "answers per second: fewer than 10 slots with answers: %r", answers["rows"])
    eq(len(stock["rows"]), len(answers["rows"]) + 1, "stock points (one at the start)")
    eq(stock["rows"][0][1], 500, "stock at the start")
    eq(stock["rows"][-1][1], 0, "stock at the end")
    # The stock reaches 0 in the slot of the last success answer, not later.
    sold_out_at = next(r[0] for r in stock["rows"] if r[1] == 0)
    last_success = max(r[0] for r in answers["rows"] if r[1] > 0)
    eq(sold_out_at, last_success, "stock 0 at the last success's slot")
    for name, c in (("answers", answers), ("latency", latency), ("stock", stock)):
        check(not c["legendOverPlot"], "%s chart: its legend covers the plot", name)
        check(not c["ylabelOverTicks"], "%s chart: the y label covers tick numbers", name)
    H.finish(srv)
