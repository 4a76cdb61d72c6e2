"""test_rebuild.py -- Redis loses its data mid-sale: the sale state is rebuilt from SQL.

  after the writer drained: FLUSHALL, and separately an empty Redis on the same port --
    the sale goes on within seconds, never more orders than stock, no buyer twice;
  an undrained backlog (the writer holds a batch it cannot commit): the orders of the lost
    Redis are refused by the generation fence and the audit lists exactly them;
  a voucher created while Redis is down sells once Redis is back;
  two instances racing to rebuild: one rebuild (the SQL generation is raised once);
  `seckill redis rebuild --dry-run` writes nothing, the real run is idempotent.
On SQLite and MariaDB (about 25 s each).
"""

import json
import os
import signal
import shutil
import subprocess
import time

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite", "mysql")


def _sale_round(srv, vid, tokens, users, attempts=2):
    recs = H.run_sale(srv, vid, tokens, attempts=attempts, users=users)
    bad = [x for x in recs if not x.ok and x.msg not in (H.MSG_SOLD_OUT, H.MSG_DUPLICATE)]
    check(not bad, "unexpected answers: %r", bad[:5])
    return recs


def _check_final(srv, r, vid, stock, bought_before, recs2):
    """No oversell, nobody with an order bought again, the sale sold out."""
    db = srv.db()
    n = H.wait_drained(srv, r, vid, 60)
    check(n <= stock, "OVERSELL: %d orders for stock %d", n, stock)
    eq(db.per_user_max(vid), 1, "orders per user at most")
    again = [x for x in recs2 if x.ok and x.user in bought_before]
    check(not again, "buyers with an order bought again: %r", again[:5])
    eq(n, stock, "orders after the sale went on (sold out)")
    rc, out = H.audit(r, srv.db_url, vid, wait_drain=30)
    check(rc == 0, "audit after the rebuild:\n%s", out[-3000:])


def _lose_and_resume(replace):
    users, stock = 120, 60
    r, srv = H.setup()
    tokens = H.login_many(srv, r, users)
    vid = H.create_seckill(srv, stock=stock)
    recs1 = _sale_round(srv, vid, tokens, range(40), attempts=1)
    bought = {x.user for x in recs1 if x.ok}
    eq(len(bought), 40, "first round buyers")
    eq(H.wait_drained(srv, r, vid, 60), 40, "persisted before the loss")
    t0 = time.monotonic()
    if replace:
        port, d = r.port, r.dir
        r.kill()
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d, exist_ok=True)
        r = H.Redis(port, d).start()
    else:
        r.cmd("FLUSHALL")
    H.wait_until(lambda: H.voucher_present(r, vid), 15, what="voucher republished")
    H.log("voucher republished %.2f s after the loss" % (time.monotonic() - t0))
    # the order-id slot counter is put back, so a new instance cannot lease ours
    H.wait_until(lambda: int(r.cmd("GET", "seckill:instance") or 0) >= 1, 10,
                 what="seckill:instance restored")
    eq(H.rebuild_epoch(srv, vid), 1, "SQL generation after one rebuild")
    eq(int(r.cmd("HGET", H.k_voucher(vid), "stock")), stock - 40, "rebuilt stock")
    eq(r.cmd("HLEN", H.k_buyers(vid)), 40, "rebuilt buyers")
    tokens = H.login_many(srv, r, users)   # logins may have gone with Redis
    recs2 = _sale_round(srv, vid, tokens, range(users))
    _check_final(srv, r, vid, stock, bought, recs2)
    H.finish(srv)


@H.timeout(240)
def test_flushall_after_drain():
    _lose_and_resume(replace=False)


@H.timeout(240)
def test_empty_redis_on_same_port():
    _lose_and_resume(replace=True)


@H.timeout(300)
def test_undrained_backlog_fenced_and_audited():
    """A writes nothing (SQL locked) and holds its batch; A is stopped, Redis is flushed,
    B starts and rebuilds from SQL. Either A's batch is refused by the generation (its
    orders are lost with Redis) or, where A still held the voucher's row lock when it was
    stopped (MariaDB), B's rebuild waits for A's commit and counts it. Either way the audit
    lists exactly the answered orders SQL lacks, and nothing is oversold.
    On SQLite A holds no lock while stopped, so the fence is what happens: all 30 lost."""
    users, stock = 100, 50
    r, a = H.setup(name="inst-a")
    tokens = H.login_many(a, r, users)
    vid = H.create_seckill(a, stock=stock)
    lock = H.hold_db_lock(a)
    recs1 = _sale_round(a, vid, tokens, range(30), attempts=1)
    answered = {x.j["data"]: x for x in recs1 if x.ok}
    eq(len(answered), 30, "answered while SQL is locked")
    H.wait_until(lambda: H.unacked_orders(r, vid, pending_only=True) == 30, 20,
                 what="A's writer holds the batch")
    os.kill(a.proc.pid, signal.SIGSTOP)
    try:
        lock.rollback()
        lock.close()
        r.cmd("FLUSHALL")
        # The order-id slot counter went too: running instances put it back above their
        # own slot within a second (rebuild watch); A is stopped, so do it for A, or B
        # would lease A's slot and mint A's order ids.
        r.cmd("SET", "seckill:instance", "64")
        os.makedirs(a.data_dir + "-b", exist_ok=True)
        b = H.start_server(r, name="inst-b", data_dir=a.data_dir + "-b", db_path=a.db_path,
                           admin_token=a.admin_token)
        if H.DB_KIND == "sqlite":
            H.wait_until(lambda: H.voucher_present(r, vid), 15,
                         what="B rebuilt the voucher at start")
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
    H.wait_until(lambda: H.voucher_present(r, vid), 30, what="B rebuilt the voucher")
    kept = {row[0] for row in a.db().orders(vid)}
    check(kept <= set(answered), "SQL orders before round 2 that were never answered: %r",
          sorted(kept - set(answered))[:5])
    check(len(kept) in (0, 30), "A's batch is all or nothing: %d of 30 in SQL", len(kept))
    if H.DB_KIND == "sqlite":
        eq(len(kept), 0, "orders of the lost Redis in SQL (fenced)")
    if not kept:
        H.wait_until(lambda: any("which a rebuild from SQL replaced" in l
                                 for l in a.log_lines()), 30, what="A's old batch refused")
    eq(int(r.cmd("HGET", H.k_voucher(vid), "stock")) + int(r.cmd("HLEN", H.k_buyers(vid))),
       stock, "rebuilt stock + buyers")
    H.log("A's batch: %s" % ("refused (fenced)" if not kept else "committed before the rebuild"))
    tokens = H.login_many(b, r, users)
    _sale_round(b, vid, tokens, range(users))
    n = H.wait_drained(b, r, vid, 60)
    eq(n, stock, "orders after the sale went on")
    eq(b.db().per_user_max(vid), 1, "orders per user at most")
    # the audit, given the answers of round 1: exactly those SQL lacks are lost
    uids = H.user_ids(r, [tokens[x.user] for x in recs1 if x.ok])
    rec = os.path.join(H.tmpdir(), "answers.txt")
    with open(rec, "w") as f:
        f.write("# seckill-bench-record v1 voucher=%d stock=%d complete=0 unanswered=0\n"
                % (vid, stock))
        for (oid, _), uid in zip(answered.items(), uids):
            f.write("%d %d\n" % (oid, uid))
    p = subprocess.run([H.binary(), "audit", "--redis", r.url, "--db", b.db_url, "--orders",
                        rec, "--json", "-", "--wait-drain", "30"], capture_output=True,
                       env=H.san_env(), timeout=120)
    rep = json.loads(p.stdout.decode())
    H.log("audit: %s" % [c["detail"] for c in rep["vouchers"][0]["checks"]
                         if c["check"] == "answered-persisted"])
    lost = sorted(set(answered) - kept)
    eq(sorted(rep["vouchers"][0]["vanished"]), lost, "vanished orders")
    fails = [c["check"] for c in rep["vouchers"][0]["checks"] if c["status"] == "fail"]
    eq(fails, ["answered-persisted"] if lost else [], "failed checks (none oversold)")
    eq(p.returncode, 1 if lost else 0, "audit exit")
    H.finish(b)
    H.finish(a)


@H.timeout(240)
def test_voucher_created_while_redis_down_sells_after():
    r, srv = H.setup()
    tokens = H.login_many(srv, r, 5)
    r.shutdown()
    h = H.Http(srv.port)
    st, _, body = h.request("POST", "/voucher/seckill", body=H.seckill_body(stock=3),
                            admin=srv.admin_token)
    h.close()
    eq(st, 503, "create while Redis is down")
    vid = srv.db().scalar("SELECT max(voucher_id) FROM tb_seckill_voucher")
    t0 = time.monotonic()
    r.start()
    H.wait_until(lambda: H.voucher_present(r, vid), 15,
                 what="voucher published after Redis returned")
    H.log("sellable %.2f s after Redis returned" % (time.monotonic() - t0))
    recs = _sale_round(srv, vid, tokens, range(5), attempts=1)
    eq(sum(1 for x in recs if x.ok), 3, "sold")
    eq(H.wait_drained(srv, r, vid, 60), 3, "persisted")
    H.finish(srv)


@H.timeout(240)
def test_two_instances_rebuild_once():
    r, a = H.setup(name="inst-1")
    b = H.start_server(r, name="inst-2", data_dir=a.data_dir, db_path=a.db_path,
                       admin_token=a.admin_token)
    tokens = H.login_many(a, r, 20)
    vids = [H.create_seckill(a, stock=10) for _ in range(4)]
    for v in vids:
        _sale_round(a, v, tokens, range(5), attempts=1)
        H.wait_drained(a, r, v, 60)
    r.cmd("FLUSHALL")
    H.wait_until(lambda: all(H.voucher_present(r, v) for v in vids), 15, what="all republished")
    for v in vids:
        eq(H.rebuild_epoch(a, v), 1, "SQL generation of voucher %d (raised once)" % v)
    n = sum(len([l for l in s.log_lines() if "rebuilt from SQL" in l]) for s in (a, b))
    eq(n, len(vids), "rebuilds over both instances")
    H.finish(b)
    H.finish(a)


@H.timeout(180)
def test_operator_rebuild_dry_run_and_idempotent():
    r, srv = H.setup()
    tokens = H.login_many(srv, r, 10)
    vid = H.create_seckill(srv, stock=8)
    _sale_round(srv, vid, tokens, range(3), attempts=1)
    H.wait_drained(srv, r, vid, 60)
    srv.stop()
    r.cmd("FLUSHALL")

    def tool(*extra):
        p = subprocess.run([H.binary(), "redis", "rebuild", "--redis", r.url, "--db",
                            srv.db_url] + list(extra), capture_output=True, env=H.san_env(),
                           timeout=60)
        return p.returncode, p.stdout.decode() + p.stderr.decode()

    rc, out = tool("--dry-run", "--voucher", str(vid))
    eq(rc, 0, "dry run exit: " + out)
    check("would be rebuilt: stock 5, 3 buyers" in out, "dry run output:\n%s", out)
    check("HSET seckill:voucher:{%d}" % vid in out, "dry run lists the writes:\n%s", out)
    eq(r.cmd("DBSIZE"), 0, "keys after a dry run")
    eq(H.rebuild_epoch(srv, vid), 0, "generation after a dry run")
    rc, out = tool()
    eq(rc, 0, "rebuild exit: " + out)
    check("rebuilt: stock 5, 3 buyers, generation 1" in out, "rebuild output:\n%s", out)
    rc, out = tool()
    check(rc == 0 and "nothing to do" in out, "second run:\n%s", out)
    eq(H.rebuild_epoch(srv, vid), 1, "generation after two runs")
    rc, out = H.audit(r, srv.db_url, vid, wait_drain=10)
    check(rc == 0, "audit after the operator's rebuild:\n%s", out[-3000:])


@H.timeout(120)
def test_no_such_voucher_answer_triggers_rebuild():
    """An ended sale is not in the periodic check (live vouchers only); a buyer's
    优惠券不存在 for a voucher SQL knows pokes the watch, which rebuilds it: the answer
    becomes 秒杀已经结束！ (and an id SQL does not know stays 优惠券不存在)."""
    r, srv = H.setup()
    now = time.time()
    vid = H.create_seckill(srv, stock=5, begin=now - 7200, end=now - 3600)
    r.cmd("FLUSHALL")
    # Logins went with the data too (a worker that refreshes a lost token's TTL forgets
    # it: 401), so the buyer logs in again, as a real one would.
    tokens = H.login_many(srv, r, 2)
    h = H.Http(srv.port)

    def answer(v):
        _, j = h.api("POST", "/voucher-order/seckill/%d" % v, token=tokens[0])
        return j.get("errorMsg")

    eq(answer(vid), H.MSG_NO_VOUCHER, "first answer after the loss")
    H.wait_until(lambda: H.voucher_present(r, vid), 10, what="rebuilt after the answer")
    H.wait_until(lambda: answer(vid) == H.MSG_ENDED, 10, what="the sale's own answer")
    eq(answer(vid + 1000), H.MSG_NO_VOUCHER, "an id SQL does not know")
    check(not H.voucher_present(r, vid + 1000), "a voucher SQL does not know was published")
    h.close()
    H.finish(srv)
