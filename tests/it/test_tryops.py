"""test_tryops.py -- the order lifecycle and the waiting room run as an operator runs them:
from /metrics, deploy/prometheus's alerts and the packaged config (docs/operations.md,
docs/configuration.md, deploy/). What the first try found:

- /metrics had the refunds alone: no cancels, payments, timeouts, nothing of how far the
  payment-deadline sweep is behind its 2 s promise, nothing of the waiting room's answers
  and passes; deploy/prometheus paged nobody when refunds keep failing or the sweep falls
  behind.
- the Debian package's seckill.conf named none of the lifecycle's settings (the pay key,
  the refund command and its bounds, the payment timeout, --cancel-frees-buyer), nor how
  a service on its own Redis and SQL gets a pay key."""

import hashlib
import hmac
import json
import os
import re
import shutil
import signal
import subprocess
import time

import harness as H
from harness import check, eq

PAY_KEY = "k3y-0f-the-tryops-payment-provider"
PROM_DIR = os.path.join(H.ROOT, "deploy", "prometheus")
CONF = os.path.join(H.ROOT, "deploy", "deb", "seckill.conf")


def _metrics(srv):
    """Every sample of /metrics: {'name{labels}': value}."""
    st, _, body = srv.http().request("GET", "/metrics")
    check(st == 200, "/metrics: HTTP %d", st)
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def _notify(h, oid, pid, amount=8000):
    raw = json.dumps({"orderId": oid, "paymentId": pid, "amount": amount}).encode()
    sig = hmac.new(PAY_KEY.encode(), raw, hashlib.sha256).hexdigest()
    return h.api("POST", "/pay/notify", body=raw, headers={"x-pay-signature": sig})[1]


def _status(db, oid):
    return db.scalar("SELECT status FROM tb_voucher_order WHERE id=?", oid)


def test_lifecycle_on_metrics_and_alerts():
    """A cancel, a payment, a timeout and a late payment whose refund command fails, each
    counted once on /metrics (a notice repeated is not counted again); the sweep's lag
    shown and within its promise; the refund's failure logged with its exit status. Every
    seckill_* series the alert rules and docs/operations.md name is on /metrics, and the
    rules page on refunds failing and the sweep falling behind (promtool test rules)."""
    key = H.pay_key_file(PAY_KEY)
    r, srv = H.setup(settings={
        "pay-key-file": key, "pay-timeout-s": "2",
        "refund-command": "echo refund provider down >&2; exit 3",
        "rate-user-seckill": "1000/s:1000", "rate-user-lookup": "1000/s:1000"})
    h = srv.http()
    a, b, c = (H.login(srv, r, "1361234990%d" % i, h) for i in (1, 2, 3))
    vid = H.create_seckill(srv, stock=3, http=h)   # payValue 8000 (harness)
    db = srv.db()
    m0 = _metrics(srv)
    for name in ("seckill_orders_cancelled_total", 'seckill_payments_total{result="taken"}',
                 'seckill_payments_total{result="refunded"}', "seckill_orders_timed_out_total",
                 "seckill_pay_sweep_lag_seconds"):
        check(name in m0, "/metrics has no %s", name)

    ob = H.seckill(srv, b, vid, h)[1]["data"]
    H.wait_until(lambda: _status(db, ob) == 1, 10, what="b's order in SQL")
    eq(_notify(h, ob, "PB").get("data"), "PAID", "b pays in time")
    eq(_notify(h, ob, "PB").get("data"), "PAID", "the same notice again")
    oa = H.seckill(srv, a, vid, h)[1]["data"]
    oc = H.seckill(srv, c, vid, h)[1]["data"]
    st, j = h.api("POST", "/voucher-order/%d/cancel" % oa, token=a)
    check(j.get("success"), "a cancels: %r %r", st, j)
    H.wait_until(lambda: _status(db, oc) == 4, 10, what="c's unpaid order timed out")
    eq(_notify(h, oc, "PC-LATE").get("data"), "REFUNDED", "c pays after its deadline")
    H.wait_until(lambda: _metrics(srv)["seckill_refunds_failed_total"] >= 1, 10,
                 what="the refund command's failure counted")

    m = _metrics(srv)
    eq(m["seckill_orders_cancelled_total"], 1, "cancels")
    eq(m['seckill_payments_total{result="taken"}'], 1, "payments taken (a repeat not counted)")
    eq(m['seckill_payments_total{result="refunded"}'], 1, "payments refunded")
    eq(m["seckill_orders_timed_out_total"], 1, "orders timed out")
    check(m["seckill_refunds_pending"] >= 1, "the failing refund is pending: %r",
          m["seckill_refunds_pending"])
    check(0 <= m["seckill_pay_sweep_lag_seconds"] < 2, "sweep lag %r s while it keeps up",
          m["seckill_pay_sweep_lag_seconds"])
    check(srv.log_lines(r"refund of order %d payment PC-LATE amount 8000 NOT sent "
                        r"\(exit status 3\)" % oc),
          "the refund's failure is not logged with its exit status:\n%s", srv.log_tail())

    # every series the rules and the operator's doc name is served
    names = set(re.sub(r"[{ ].*", "", k) for k in m)
    names |= set(n[:-len("_bucket")] for n in names if n.endswith("_bucket"))
    with open(os.path.join(PROM_DIR, "seckill.rules.yml")) as f:
        rules = f.read()
    with open(os.path.join(H.ROOT, "docs", "operations.md")) as f:
        ops = f.read()
    for alert in ("SeckillRefundsFailing", "SeckillPaySweepBehind"):
        check("alert: " + alert in rules, "seckill.rules.yml has no %s", alert)
        check(alert in ops, "docs/operations.md does not name %s", alert)
    named = set(re.findall(r"(?<![:\w])seckill_[a-z0-9_]+", rules + ops))   # not the recording rules
    missing = sorted(n for n in named if n not in names and not n.endswith("_"))
    eq(missing, [], "series named in seckill.rules.yml or docs/operations.md, not on /metrics")
    promtool = shutil.which("promtool")
    check(promtool is not None, "promtool not installed (sh tools/deps.sh test installs it)")
    p = subprocess.run([promtool, "test", "rules", "rules_test.yml"], cwd=PROM_DIR,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    eq(p.returncode, 0, "promtool test rules:\n%s" % p.stdout.decode())
    H.finish(srv)


def test_sweep_lag_shows_a_stalled_sweep():
    """Redis stopped (SIGSTOP): the sweep cannot decide deadlines and its lag on /metrics
    grows past the 2 s promise; Redis back, it comes down below it again."""
    key = H.pay_key_file(PAY_KEY)
    r, srv = H.setup(settings={"pay-key-file": key, "pay-timeout-s": "2"})
    lag = lambda: _metrics(srv)["seckill_pay_sweep_lag_seconds"]
    H.wait_until(lambda: lag() < 2, 10, what="the sweep keeping up")
    os.kill(r.proc.pid, signal.SIGSTOP)
    try:
        H.wait_until(lambda: lag() > 2.5, 15, interval=0.2, what="the stalled sweep's lag")
    finally:
        os.kill(r.proc.pid, signal.SIGCONT)
    H.wait_until(lambda: lag() < 2, 15, interval=0.2, what="the sweep caught up")
    H.finish(srv)


def test_room_answers_and_passes_on_metrics():
    """A waiting room's joins and polls counted by the buyer's state, and the passes they
    carried; an order without a pass is the queue_required outcome."""
    r, srv = H.setup()
    h = srv.http()
    t = H.login(srv, r, "13612349911", h)
    vid = H.create_seckill(srv, stock=5, http=h, waitingRoom={"admitPerSecond": 1000})
    st, j = h.api("POST", "/voucher-order/seckill/%d" % vid, None, token=t)
    check(not j.get("success"), "an order without a pass: %r %r", st, j)
    st, j = h.api("POST", "/seckill/queue/%d" % vid, {}, token=t)
    check(j.get("success"), "join: %r %r", st, j)
    joined = j["data"]
    time.sleep(0.6)   # the room's own limit: polls closer than ROOM_POLL_MIN_MS / 2 are 429
    st, j = h.api("GET", "/seckill/queue/%d" % vid, token=t)
    check(j.get("success"), "poll: %r %r", st, j)
    polled = j["data"]
    m = _metrics(srv)
    answers = {k: v for k, v in m.items() if k.startswith("seckill_room_answers_total{")}
    eq(sum(answers.values()), 2, "room answers: %r" % answers)
    for d in (joined, polled):
        check(m['seckill_room_answers_total{state="%s"}' % d["state"]] >= 1,
              "state %s not counted: %r", d["state"], answers)
    eq(m["seckill_room_passes_total"], sum("pass" in d for d in (joined, polled)),
       "passes signed into the answers")
    eq(m['seckill_seckill_requests_total{outcome="queue_required"}'], 1,
       "the order without a pass")
    H.finish(srv)


def test_package_config_names_the_lifecycle():
    """deploy/deb/seckill.conf names each lifecycle setting as a commented key (each a real
    setting of `seckill serve --help`) and tells how to make the pay key."""
    with open(CONF) as f:
        conf = f.read()
    keys = set(re.findall(r"^#\s*([a-z][a-z0-9-]+)\s*=", conf, re.M))
    want = {"pay-key-file", "refund-command", "refund-command-timeout-ms",
            "refund-command-max", "pay-timeout-s", "timeout-rate", "cancel-frees-buyer"}
    eq(sorted(want - keys), [], "lifecycle settings missing from seckill.conf")
    p = subprocess.run([H.binary(), "serve", "--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, env=H.san_env(), timeout=30)
    helptext = p.stdout.decode()
    unknown = sorted(k for k in keys if "--%s " % k not in helptext)
    eq(unknown, [], "seckill.conf keys that are no setting")
    check("/dev/urandom" in conf and "pay-key" in conf,
          "seckill.conf does not say how to make the pay key")
