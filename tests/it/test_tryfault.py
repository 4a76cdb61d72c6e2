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
- A master short of its in-sync replicas refuses the decision before it writes anything
  (NOREPLICAS, min-replicas-to-write): a cancel and a payment there answer 503
  系统繁忙，请重试 (code RETRY), as an admission does, with a log line a second at most --
  not `redis unavailable` and an ERROR line per call. Once a replica is back the retries
  are decided.
- The waiting room on a master short of its replicas: a join (a write: the place) answers
  503 系统繁忙，请重试 (code RETRY, Retry-After) as the admission does, not `redis
  unavailable`; a pass handed out before stays valid, and once a replica is back the join
  and the order with the pass go through.

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
    return {"pay-key-file": H.pay_key_file(PAY_KEY), "rate-user-seckill": "0", "rate-user-lookup": "1000/s:1000",
            "redis-timeout-ms": 1000, "redis-wait-replicas": 1}


def _notify(h, body):
    raw = json.dumps(body).encode()
    sig = hmac.new(PAY_KEY.encode(), raw, hashlib.sha256).hexdigest()
    return h.api("POST", "/pay/notify", body=raw, headers={"x-pay-signature": sig})


def _start(phones, **voucher):
    """3 masters + 3 replicas, one seckill with --redis-wait-replicas 1, the phones' tokens
    and a voucher of len(phones) units: (cluster, srv, http, tokens, voucher id)."""
    cluster = H.start_redis_cluster(node_timeout_ms=1500)
    srv = H.start_server(cluster.url, name="inst-1", threads=2, settings=_settings())
    h = srv.http()
    toks = [H.login(srv, cluster, p, h) for p in phones]
    vid = H.create_seckill(srv, stock=len(phones), http=h, **voucher)
    return cluster, srv, h, toks, vid


@H.timeout(120)
def test_cancel_and_pay_wait_for_the_replica():
    cluster, srv, h, (a, b, c, d), vid = _start(
        ["13612348801", "13612348802", "13612348803", "13612348804"])
    db = srv.db()
    pay_value = db.scalar("SELECT pay_value FROM tb_voucher WHERE id=?", vid)
    oa = H.seckill(srv, a, vid, h)[1]["data"]
    ob = H.seckill(srv, b, vid, h)[1]["data"]
    oc = H.seckill(srv, c, vid, h)[1]["data"]
    od = H.seckill(srv, d, vid, h)[1]["data"]
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

    # The replication link broken (the replica cannot log in again: a wrong masterauth):
    # the master has 0 of its 1 in-sync replicas and refuses every write.
    undo = _orphan(master, replica)
    try:
        stc, jc = h.api("POST", "/voucher-order/%d/cancel" % oc, token=c)
        stp, jp = _notify(h, {"orderId": od, "paymentId": "PAY-FAULT-2", "amount": pay_value})
    finally:
        undo()
    H.log("on the master without its replica: cancel %r %r, pay %r %r" % (stc, jc, stp, jp))
    eq((stc, jc.get("errorMsg"), jc.get("code")), (503, "系统繁忙，请重试", "RETRY"),
       "the cancel the master refused")
    eq((stp, jp.get("errorMsg"), jp.get("code")), (503, "系统繁忙，请重试", "RETRY"),
       "the payment the master refused")
    H.wait_until(lambda: settled(lambda: h.api("POST", "/voucher-order/%d/cancel" % oc,
                                               token=c), None), 30, interval=0.2,
                 what="the cancel once the replica is back")
    H.wait_until(lambda: settled(lambda: _notify(h, {"orderId": od, "paymentId": "PAY-FAULT-2",
                                                     "amount": pay_value}), "PAID"),
                 30, interval=0.2, what="the payment once the replica is back")
    def statuses():
        return [db.scalar("SELECT status FROM tb_voucher_order WHERE id=?", o)
                for o in (oa, ob, oc, od)]
    H.wait_until(lambda: statuses() == [2, 4, 4, 2], 30, what="the decisions in SQL")
    eq(db.query("SELECT payment_id, order_id, status FROM tb_voucher_payment ORDER BY 1"),
       [("PAY-FAULT-1", oa, 2), ("PAY-FAULT-2", od, 2)], "payment rows")
    eq(cluster.cmd("HMGET", H.k_voucher(vid), "paid", "returned", "stock"), ["2", "2", "2"],
       "paid, returned, stock in Redis")
    log = open(srv.stderr_path, encoding="utf-8", errors="replace").read()
    check("NOREPLICAS" not in "".join(x for x in log.splitlines() if " ERROR " in x),
          "an ERROR line per refused call")
    st, out = H.audit(cluster, srv.db_url, vid)
    eq(st, 0, "seckill audit:\n%s" % out)
    H.finish(srv)


def _orphan(master, replica):
    """The replication link broken: the replica cannot log in again (a wrong masterauth),
    so the master has 0 of its 1 in-sync replicas. Returns the undo."""
    H.wait_until(lambda: master.cmd("CONFIG", "GET", "min-replicas-to-write")[1] == "1", 20,
                 what="the writer's min-replicas-to-write on the master")
    replica.cmd("CONFIG", "SET", "masterauth", "not-the-password")
    master.cmd("CLIENT", "KILL", "TYPE", "replica")
    H.wait_until(lambda: "connected_slaves:0" in master.cmd("INFO", "replication"), 10,
                 what="the master without its replica")
    return lambda: replica.cmd("CONFIG", "SET", "masterauth", "")


@H.timeout(120)
def test_room_on_a_master_short_of_replicas():
    cluster, srv, h, (a, b), vid = _start(
        ["13612348811", "13612348812"], waitingRoom={"admitPerSecond": 1000, "passTtlS": 60})
    st, j = h.api("POST", "/seckill/queue/%d" % vid, {}, token=a)
    check(st == 200 and j["data"].get("pass"), "a's join before the fault: %r %r", st, j)
    pass_a = j["data"]["pass"]
    master = cluster.node_for(H.k_voucher(vid))
    undo = _orphan(master, cluster.replica_of(master))
    try:
        stj, jj = h.api("POST", "/seckill/queue/%d" % vid, {}, token=b)
    finally:
        undo()
    H.log("b's join on the master without its replica: %r %r" % (stj, jj))
    eq((stj, jj.get("errorMsg"), jj.get("code")), (503, "系统繁忙，请重试", "RETRY"),
       "a join the master refused")

    def joined():
        st, j = h.api("POST", "/seckill/queue/%d" % vid, {}, token=b)
        return st == 200 and j["success"] and j["data"].get("pass")
    H.wait_until(joined, 30, interval=0.2, what="b's join once the replica is back")

    def bought():
        st, j = h.api("POST", "/voucher-order/seckill/%d" % vid, token=a,
                      headers={"x-seckill-pass": pass_a})
        return st == 200 and j["success"]
    H.wait_until(bought, 30, interval=0.2, what="a's order with the pass from before")
    H.wait_drained(srv, cluster, vid, 30)
    st, out = H.audit(cluster, srv.db_url, vid)
    eq(st, 0, "seckill audit:\n%s" % out)
    H.finish(srv)
