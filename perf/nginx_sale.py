#!/usr/bin/env python3
"""perf/nginx_sale.py -- the control sale: nginx in the service's place, the same `seckill bench`.

    python3 perf/nginx_sale.py --rate R [--stock S] [--users U] [--bench BIN] [--rt]
                               [--json FILE] [--report FILE] [--timeline FILE]

nginx with 2 workers answers every request with the course's sold-out body; `seckill bench`
drives it with the sale of `make perf` (S in stock, U buyers -- 10x S by default -- +10 %
repeats, 5 % sent three times at once, open loop at R req/s over 256 connections; tokens
from a file, a voucher id that nginx ignores, no audit). nginx does next to nothing per
request, so the tail this sale shows is the machine's (its CPU's slow spells, the
neighbours) and the bench's own, not the service's: the control `make perf` (perf/run.sh)
sets beside each of its sales, and the `nginx` variant of perf/sale_ab.py.

Prints the bench's JSON on stdout unless --json names a file; --report keeps the bench's
text report (its "host CPU" and "outside" lines), --timeline its per-100 ms timeline.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grab_ab import free_port  # noqa: E402

SOLD_OUT_BODY = '{"success":false,"errorMsg":"库存不足"}'


def nginx_conf(d, port, body, workers=2):
    """An nginx.conf in d: `workers` workers answering 200 with the JSON body to every request."""
    path = os.path.join(d, "nginx.conf")
    with open(path, "w") as f:
        f.write("""worker_processes %(w)d;
pid %(d)s/nginx.pid;
error_log %(d)s/error.log;
daemon off;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path %(d)s; proxy_temp_path %(d)s;
    fastcgi_temp_path %(d)s; uwsgi_temp_path %(d)s; scgi_temp_path %(d)s;
    keepalive_requests 100000000;
    server { listen 127.0.0.1:%(port)d;
             location / { default_type application/json; return 200 '%(body)s'; } }
}
""" % {"w": workers, "d": d, "port": port, "body": body})
    return path


def write_tokens(path, users):
    """`<token> <user id>` lines, what `seckill bench --tokens` reads (nginx checks none)."""
    with open(path, "w") as f:
        for i in range(users):
            f.write("%s %d\n" % (os.urandom(16).hex(), i + 1))


def stop(proc, d):
    """Stops a server started for one run (TERM, KILL after 10 s) and removes its directory d."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    shutil.rmtree(d, ignore_errors=True)


def run(rate, stock, users=0, bench="build/seckill", rt=False, tmp=None, json_out=None,
        report=None, timeline=None):
    """One control sale; returns the bench's JSON (a dict). Output files are kept if named."""
    users = users or stock * 10
    d = tempfile.mkdtemp(prefix="sabng", dir=tmp)
    port = free_port()
    conf = nginx_conf(d, port, SOLD_OUT_BODY)
    write_tokens(os.path.join(d, "tokens"), users)
    pre = ["chrt", "-f", "5"] if rt else []
    ng = subprocess.Popen(pre + ["nginx", "-p", d, "-c", conf],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if ng.poll() is not None:
                sys.exit("nginx exited: " + open(os.path.join(d, "error.log")).read()[-2000:])
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=1).read()
                break
            except OSError:
                time.sleep(0.05)
        j = json_out or os.path.join(d, "sale.json")
        cmd = pre + [bench, "bench", "--target", "http://127.0.0.1:%d" % port, "--voucher", "1",
                     "--tokens", os.path.join(d, "tokens"), "--no-audit", "--quiet",
                     "--users", str(users), "--stock", str(stock), "--rate", str(rate),
                     "--dup", "0.1", "--burst-share", "0.05", "--conns", "256", "--json", j,
                     "--cpu-probe"]   # the slow spells: run.sh's tail_lines and sale_detail
        if timeline:
            cmd += ["--timeline", timeline]
        out = open(report, "w") if report else subprocess.DEVNULL
        try:
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode
        finally:
            if report:
                out.close()
        if rc >= 2 or not os.path.exists(j):
            sys.exit("nginx_sale: seckill bench failed (exit %d)%s" % (
                rc, ": see " + report if report else ""))
        with open(j) as f:
            return json.load(f)
    finally:
        stop(ng, d)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=int, required=True)
    ap.add_argument("--stock", type=int, default=20000)
    ap.add_argument("--users", type=int, default=0, help="buyers [10x the stock]")
    ap.add_argument("--bench", default="build/seckill", help="the seckill binary whose bench drives it")
    ap.add_argument("--rt", action="store_true", help="nginx and the bench in the real-time class (chrt -f 5)")
    ap.add_argument("--json", help="write the bench's JSON here [stdout]")
    ap.add_argument("--report", help="keep the bench's text report here")
    ap.add_argument("--timeline", help="keep the bench's timeline here")
    a = ap.parse_args()
    d = run(a.rate, a.stock, a.users, a.bench, a.rt, json_out=a.json, report=a.report,
            timeline=a.timeline)
    if not a.json:
        json.dump(d, sys.stdout)
        print()


if __name__ == "__main__":
    main()
