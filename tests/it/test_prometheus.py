"""test_prometheus.py -- Debian's prometheus scraping two live seckill instances.

deploy/prometheus/ holds the operators' scrape config and alert rules (promtool checks them
in test_promtool_* below). Here a real prometheus, on a free loopback port with a 1 s scrape
interval and the repo's rule file, scrapes two running instances on their own loopback /metrics
listeners (/metrics is private by default, as deploy/cluster.sh runs them); the test reads back
through prometheus's HTTP API:
  - the per-instance rate of HTTP answers and the flash-sale admissions, which must match
    what the test sent;
  - the repo's rules loaded and healthy;
  - SeckillRedisDown going pending for exactly the instance whose Redis was killed.
"""

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)      # what is tested is the metrics path, not the store
PROM_DIR = os.path.join(H.ROOT, "deploy", "prometheus")
RULES = os.path.join(PROM_DIR, "seckill.rules.yml")


def _promtool():
    p = shutil.which("promtool")
    check(p is not None, "promtool not installed (sh tools/deps.sh test installs prometheus)")
    return p


def test_promtool_check_config():
    out = subprocess.run([_promtool(), "check", "config",
                          os.path.join(PROM_DIR, "prometheus.yml")],
                         capture_output=True, text=True, timeout=60)
    check(out.returncode == 0, "promtool check config:\n%s%s", out.stdout, out.stderr)


def test_promtool_test_rules():
    out = subprocess.run([_promtool(), "test", "rules", "rules_test.yml"], cwd=PROM_DIR,
                         capture_output=True, text=True, timeout=60)
    check(out.returncode == 0 and "SUCCESS" in out.stdout,
          "promtool test rules:\n%s%s", out.stdout, out.stderr)


class Prometheus:
    def __init__(self, targets):
        self.dir = H.subdir("prometheus")
        self.port = H.free_port()
        conf = os.path.join(self.dir, "prometheus.yml")
        with open(conf, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "rule_files:\n  - %s\n"
                    "scrape_configs:\n  - job_name: seckill\n    static_configs:\n"
                    "      - targets: [%s]\n" % (
                        json.dumps(RULES), ", ".join('"%s"' % t for t in targets)))
        prom = shutil.which("prometheus")
        check(prom is not None, "prometheus not installed (sh tools/deps.sh test installs it)")
        self.log = open(os.path.join(self.dir, "prometheus.log"), "wb")
        self.proc = H.register_proc(subprocess.Popen(
            [prom, "--config.file", conf, "--storage.tsdb.path", os.path.join(self.dir, "data"),
             "--web.listen-address", "127.0.0.1:%d" % self.port],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True))
        H.wait_until(lambda: self.get("/-/ready") is not None, 60, 0.2, "prometheus ready")

    def get(self, path):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, path),
                                        timeout=5) as r:
                return r.read()
        except OSError:
            check(self.proc.poll() is None, "prometheus exited: %s",
                  H.tail(os.path.join(self.dir, "prometheus.log")))
            return None

    def api(self, path, **params):
        body = self.get("/api/v1/%s?%s" % (path, urllib.parse.urlencode(params)))
        check(body is not None, "prometheus API %s did not answer", path)
        j = json.loads(body)
        eq(j.get("status"), "success", "prometheus %s status" % path)
        return j["data"]

    def query(self, q):
        """{instance: float} of an instant query's vector."""
        return {s["metric"].get("instance", ""): float(s["value"][1])
                for s in self.api("query", query=q)["result"]}


def test_prometheus_scrapes_two_instances():
    # Two independent instances: each its own Redis and its own data dir (and so database).
    r1, r2 = H.start_redis("redis-1"), H.start_redis("redis-2")
    # /metrics is private by default: each serves it on its own loopback listener, as
    # deploy/cluster.sh starts them, and prometheus scrapes those.
    m1, m2 = H.free_port(), H.free_port()
    s1 = H.start_server(r1, name="prom-1", data_dir=H.subdir("prom-1"),
                        settings={"metrics_public": None, "metrics_listen": "127.0.0.1:%d" % m1})
    s2 = H.start_server(r2, name="prom-2", data_dir=H.subdir("prom-2"),
                        settings={"metrics_public": None, "metrics_listen": "127.0.0.1:%d" % m2})
    inst = {s1.port: "127.0.0.1:%d" % m1, s2.port: "127.0.0.1:%d" % m2}
    prom = Prometheus(list(inst.values()))

    # Both targets up.
    H.wait_until(lambda: len(prom.query('up{job="seckill"} == 1')) == 2, 30, 0.2,
                 "both instances up in prometheus")

    # Steady traffic on both, until prometheus sees a rate above 1/s on each (the test sends
    # about 50/s to each). The first samples after the traffic starts give a smaller rate:
    # the 5 s window then holds a scrape from before the traffic.
    stop = threading.Event()
    sent = {s1.port: 0, s2.port: 0}

    def load(srv):
        h = H.Http(srv.port)
        while not stop.is_set():
            st, _, _ = h.request("GET", "/voucher/list/1")
            if st == 200:
                sent[srv.port] += 1
            time.sleep(0.01)
        h.close()

    threads = [threading.Thread(target=load, args=(s,)) for s in (s1, s2)]
    for t in threads:
        t.start()
    try:
        rates = H.wait_until(
            lambda: (lambda v: v if len(v) == 2 and all(x > 1.0 for x in v.values()) else None)(
                prom.query('sum by (instance) (rate(seckill_http_responses_total{code="2xx"}[5s]))')),
            30, 0.3, "a 2xx rate above 1/s for both instances")
    finally:
        stop.set()
        for t in threads:
            t.join()
    H.log("2xx rates read back from prometheus:", rates)
    for port, name in inst.items():
        check(name in rates and rates[name] > 1.0,
              "rate of %s: %r (the test sent %d answers)", name, rates, sent[port])

    # Flash-sale admissions: exactly the orders this test made, per instance.
    made = {}
    for srv, redis, n in ((s1, r1, 3), (s2, r2, 5)):
        vid = H.create_seckill(srv, stock=10)
        for i in range(n):
            tok = H.login(srv, redis, H.phone_for(i + 10 * srv.port % 1000))
            st, j = H.seckill(srv, tok, vid)
            check(st == 200 and j["success"], "order %d on %d: %r", i, srv.port, j)
        made[inst[srv.port]] = float(n)
    q = 'sum by (instance) (seckill_seckill_requests_total{outcome="ok"})'
    seen = {}

    def shows_made():
        seen["last"] = prom.query(q)
        return seen["last"] == made
    try:
        H.wait_until(shows_made, 30, 0.3, "prometheus to show %r admitted orders" % made)
    except H.TestFailure:
        raise H.TestFailure("prometheus shows %r admitted orders, the test made %r; targets: %r"
                            % (seen.get("last"), made, prom.api("targets")["activeTargets"]))

    # The repo's rules are loaded and evaluate without errors.
    groups = {g["name"]: g for g in prom.api("rules")["groups"]}
    check("seckill" in groups and len(groups["seckill"]["rules"]) == 13, "rule groups: %r",
          groups)
    for g in groups.values():
        for rule in g["rules"]:
            check(rule.get("health") in ("ok", "unknown"), "rule %s: %r", rule["name"],
                  rule.get("lastError"))

    # Kill the second instance's Redis: SeckillRedisDown goes pending for it alone.
    r2.kill()

    def redis_alert():
        al = [a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] ==
              "SeckillRedisDown"]
        return al if al else None
    al = H.wait_until(redis_alert, 30, 0.3, "SeckillRedisDown pending")
    eq([a["labels"]["instance"] for a in al], [inst[s2.port]], "instances in SeckillRedisDown")
    H.finish(s1)
    s2.stop()
