"""test_tryfault.py -- the order lifecycle on a Redis Cluster with replicas, tried with faults
(docs/lifecycle.md, docs/redis-cluster.md "Failover without losing an answered order"):
what the first try of it found.

- Under --redis-wait-replicas N a cancel and a payment are told their answer only once N
  replicas have the decision, as an admission is: a master whose replica has not
  acknowledged it (stopped with SIGSTOP: the master still counts it in sync for
  min-replicas-max-lag) answers 503 系统繁忙，请重试, never a success a failover could undo
  (a payment answered PAID, then the order timed out on the promoted replica and its unit
  sold again). The retry, once the replica is back, answers from the decision, and SQL has
  each decision once; the audit is clean.

SQLite only: the Redis side is what this is about."""

import hashlib
import hmac
import json
import os
import signal

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)
SERIAL = True   # a replica stopped with SIGSTOP for about a second

PAY_KEY = "k3y-0f-the-tryfault-payment-provider"


def _settings():
    path = os.path.join(H.tmpdir(), "tryfault-pay-key-%d" % os.getpid())
    with open(path, "w") as f:
        f.write(PAY_KEY + "\n")
    os.chmod(path, 0o600)
    return {"pay-key-file": path, "rate-user-seckill": "0", "rate-user-lookup": "1000/s:1000",
            "redis-timeout-ms": 1000, "redis-wait-replicas": 1}


def _notify(h, body):
    raw = json.dumps(body).encode()
    sig = hmac.new(PAY_KEY.encode(), raw, hashlib.sha256).hexdigest()
    return h.api("POST", "/pay/notify", body=raw, headers={"x-pay-signature": sig})


@H.timeout(120)
def test_cancel_and_pay_wait_for_the_replica():
    cluster = H.start_redis_cluster(node_timeout_ms=1500)
    srv = H.start_server(cluster.url, name="inst-1", threads=2, settings=_settings())
    h = srv.http()
    a = H.login(srv, cluster, "13612348801", h)
    b = H.login(srv, cluster, "13612348802", h)
    vid = H.create_seckill(srv, stock=2, http=h)
    db = srv.db()
    pay_value = db.scalar("SELECT pay_value FROM tb_voucher WHERE id=?", vid)
    oa = H.seckill(srv, a, vid, h)[1]["data"]
    ob = H.seckill(srv, b, vid, h)[1]["data"]
    H.wait_drained(srv, cluster, vid, 30)   # a payment is checked against SQL's order
    master = cluster.node_for(H.k_voucher(vid))
    replica = cluster.replica_of(master)

    def cancel():
        return h.api("POST", "/voucher-order/%d/cancel" % ob, token=b)

    def pay():
        return _notify(h, {"orderId": oa, "paymentId": "PAY-FAULT-1", "amount": pay_value})

    # The replica stops acknowledging; the master still counts it in sync for
    # min-replicas-max-lag (2 s), so it takes the decisions, and WAIT (500 ms) gets 0.
    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        stp, jp = pay()
        stc, jc = cancel()
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
    H.log("while the replica was stopped: pay %r %r, cancel %r %r" % (stp, jp, stc, jc))
    eq((stp, jp.get("errorMsg")), (503, "系统繁忙，请重试"),
       "the payment the replica did not have (it answered %r)" % (jp.get("data"),))
    eq((stc, jc.get("errorMsg")), (503, "系统繁忙，请重试"),
       "the cancel the replica did not have")

    # the replica back: the retries answer from the decisions, once it has them
    def settled(call, want):
        st, j = call()
        return st == 200 and j.get("success") and j.get("data") == want
    H.wait_until(lambda: settled(pay, "PAID"), 20, interval=0.2, what="the payment's retry")
    H.wait_until(lambda: settled(cancel, None), 20, interval=0.2, what="the cancel's retry")
    H.wait_until(lambda: db.scalar("SELECT status FROM tb_voucher_order WHERE id=?", oa) == 2
                 and db.scalar("SELECT status FROM tb_voucher_order WHERE id=?", ob) == 4,
                 30, what="both decisions in SQL")
    eq(db.query("SELECT payment_id, order_id, status FROM tb_voucher_payment"),
       [("PAY-FAULT-1", oa, 2)], "payment rows")
    eq(cluster.cmd("HMGET", H.k_voucher(vid), "paid", "returned", "stock"), ["1", "1", "1"],
       "paid, returned, stock in Redis")
    st, out = H.audit(cluster, srv.db_url, vid)
    eq(st, 0, "seckill audit:\n%s" % out)
    H.finish(srv)
