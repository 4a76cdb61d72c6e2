"""test_trylife.py -- the order lifecycle tried from outside, as a payment provider and an
attacker would (docs/api.md "Order lifecycle", docs/lifecycle.md): what the first try of
it found, each checked against the database and `seckill audit`.

- One payment id belongs to one order: a notice of an id another order's notice was taken
  with is refused (订单不存在) also before the order writer has the first one's row in
  SQL, and the refused order stays unpaid (stream mode).
- A /pay/notify body that is a JSON object but not valid JSON to the parser (a duplicate
  key, a number beyond 64 bits) is told so, not "must be a JSON object".
- The bench line `seckill serve` prints for a service on its own Redis and SQL sells (its
  buyers' tokens signed with the service's key), where it got 401 for every request.
- `seckill audit` after a sync-mode cancel is clean (it failed cancel-returned: sync mode
  counts no returned unit in Redis).
- `seckill bench --pay-share --cancel-share --pay-timeout` against a sync-mode service counts
  the fates in SQL (it asked Redis, which has none there, and said NOT as rehearsed)."""

import hashlib
import hmac
import json
import os
import re
import shlex
import subprocess

import harness as H
from harness import check, eq

PAY_KEY = "k3y-0f-the-trylife-payment-provider"


def _settings():
    return {"pay-key-file": H.pay_key_file(PAY_KEY), "rate-user-seckill": "1000/s:1000",
            "rate-user-lookup": "1000/s:1000"}


def _notify(h, raw):
    if not isinstance(raw, bytes):
        raw = json.dumps(raw).encode()
    sig = hmac.new(PAY_KEY.encode(), raw, hashlib.sha256).hexdigest()
    return h.api("POST", "/pay/notify", body=raw, headers={"x-pay-signature": sig})


def _hold_writer(srv, oid):
    """Keeps the order writer from writing order oid's payment until .rollback(): SQLite,
    BEGIN EXCLUSIVE (WAL readers go on); MariaDB, the order's row FOR UPDATE, which the
    writer's status CAS waits for while the notices' plain reads go on (hold_db_lock's
    LOCK TABLES would stop them too). A connection has .rollback() and .close()."""
    if not srv.db_url.startswith(("mysql:", "mariadb:")):
        return H.hold_db_lock(srv)
    c = H.mysql_connect(srv.db_url)
    cur = c.cursor()
    cur.execute("START TRANSACTION")
    cur.execute("SELECT status FROM tb_voucher_order WHERE id=%s FOR UPDATE", (oid,))
    return c


def test_payment_id_of_another_order():
    r, srv = H.setup(settings=_settings())
    h = srv.http()
    a = H.login(srv, r, "13612347701", h)
    b = H.login(srv, r, "13612347702", h)
    vid = H.create_seckill(srv, stock=2, http=h)   # payValue 8000 (harness)
    pay_value = srv.db().scalar("SELECT pay_value FROM tb_voucher WHERE id=?", vid)
    oa = H.seckill(srv, a, vid, h)[1]["data"]
    ob = H.seckill(srv, b, vid, h)[1]["data"]
    H.wait_drained(srv, r, vid, 30)   # a payment is checked against SQL's order
    db = srv.db()

    lock = _hold_writer(srv, oa)   # the writer cannot write a's payment row yet
    try:
        st, j = _notify(h, {"orderId": oa, "paymentId": "PAY-ONE", "amount": pay_value})
        eq(j.get("data"), "PAID", "the payment of a's order")
        st, j = _notify(h, {"orderId": ob, "paymentId": "PAY-ONE", "amount": pay_value})
        check(not j["success"] and j.get("errorMsg") == "订单不存在",
              "the same payment id for b's order, before SQL has its row: %r %r", st, j)
        st, j = _notify(h, {"orderId": oa, "paymentId": "PAY-ONE", "amount": pay_value})
        eq(j.get("data"), "PAID", "a's notice again")
    finally:
        lock.rollback()
        lock.close()
    H.wait_until(lambda: db.scalar("SELECT status FROM tb_voucher_order WHERE id=?", oa) == 2,
                 30, what="a's payment in SQL")
    st, j = _notify(h, {"orderId": ob, "paymentId": "PAY-ONE", "amount": pay_value})
    check(not j["success"] and j.get("errorMsg") == "订单不存在",
          "b's notice again, SQL having the row: %r", j)
    H.wait_drained(srv, r, vid, 30)
    eq(db.scalar("SELECT status FROM tb_voucher_order WHERE id=?", ob), 1, "b's order")
    eq(db.query("SELECT payment_id, order_id, status FROM tb_voucher_payment"),
       [("PAY-ONE", oa, 2)], "payment rows")
    eq(r.cmd("HGET", H.k_voucher(vid), "paid"), "1", "payments taken in Redis")
    # b pays with its own id: taken
    st, j = _notify(h, {"orderId": ob, "paymentId": "PAY-TWO", "amount": pay_value})
    eq(j.get("data"), "PAID", "b's own payment")
    H.finish(srv)


def test_notify_body_not_json_is_told_so():
    r, srv = H.setup(settings=_settings())
    h = srv.http()
    for raw in (b'{"orderId":1,"paymentId":"x","amount":1,"amount":2}',
                b'{"orderId":99999999999999999999999,"paymentId":"x","amount":1}',
                b'{"orderId":1,"paymentId":"x","amount":1} trailing',
                b'{"orderId":1,"paymentId":"\xff","amount":1}'):
        st, j = _notify(h, raw)
        eq((st, j.get("code")), (400, "BAD_REQUEST"), "answer to %r" % raw)
        check("not valid JSON" in j.get("errorMsg", ""), "message for %r: %r", raw, j)
    st, j = _notify(h, b'[1]')
    eq(j.get("errorMsg"), "request body must be a JSON object", "an array")
    H.finish(srv)


def test_printed_bench_command_sells():
    """The bench command `seckill serve` prints for a service on its own Redis and SQL,
    its placeholders filled in, sells: its seeded buyers' tokens are signed with the
    service's key (--token-key-file), not refused 401."""
    # the default: only signed tokens (the harness's servers take opaque ones too)
    r, srv = H.setup(settings=dict(_settings(), **{"token-accept-opaque": "0"}))
    H.wait_until(lambda: " bench --target " in srv.stdout_text(), 10, what="the printed bench line")
    line = [l for l in srv.stdout_text().splitlines() if " bench --target " in l][0]
    line = line.replace("<admin token>", srv.admin_token)
    argv = shlex.split(line.strip())[1:]
    fill = [r.url, srv.db_url]
    argv = [fill.pop(0) if a == "<url>" else a for a in argv]
    argv[argv.index("--users") + 1] = "200"
    argv[argv.index("--stock") + 1] = "50"
    p = subprocess.run([H.binary()] + argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, env=H.san_env(), timeout=120)
    out = p.stdout.decode("utf-8", "replace")
    eq(p.returncode, 0, "bench exit status:\n%s" % out)
    m = re.search(r"^\s+success\s+([\d,]+)", out, re.M)
    check(m and int(m.group(1).replace(",", "")) == 50, "the printed bench sold the stock:\n%s",
          out)
    H.finish(srv)


def test_bench_with_every_answer_401_fails():
    """A bench whose seeded tokens the service refuses (signed with another key) sold
    nothing and measured nothing: it exits 1 and says why, though the audit of the
    untouched sale is clean."""
    r, srv = H.setup(settings=dict(_settings(), **{"token-accept-opaque": "0"}))
    other = os.path.join(H.tmpdir(), "other-token-key")
    with open(other, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    os.chmod(other, 0o600)
    rc, out, err = H.run_tool(["bench", "--target", "http://127.0.0.1:%d" % srv.port,
                               "--redis", r.url, "--db", srv.db_url,
                               "--admin-token", srv.admin_token, "--seed-tokens",
                               "--token-key-file", other, "--users", "20", "--stock", "5",
                               "--conns", "2", "--quiet"], timeout=120)
    eq(rc, 1, "bench exit status (stdout %s, stderr %s)" % (out[-800:], err[-400:]))
    check("every answer was 401" in err and "--token-key-file" in err,
          "bench says why: %s", err[-600:])
    H.finish(srv)


def test_audit_after_sync_mode_cancel():
    """Sync mode cancels in SQL alone: Redis counts no returned unit, and the audit does
    not ask it to (cancel-returned skip); the stock still agrees."""
    r, srv = H.setup(settings=dict(_settings(), mode="sync"))
    h = srv.http()
    a = H.login(srv, r, "13612347711", h)
    vid = H.create_seckill(srv, stock=2, http=h)
    oa = H.seckill(srv, a, vid, h)[1]["data"]
    st, j = h.api("POST", "/voucher-order/%d/cancel" % oa, token=a)
    check(j["success"], "the cancel: %r", j)
    p = subprocess.run([H.binary(), "audit", "--redis", r.url, "--db", srv.db_url,
                        "--mode", "sync", "--voucher", str(vid), "--stock", "2"],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, env=H.san_env(), timeout=60)
    out = p.stdout.decode("utf-8", "replace")
    eq(p.returncode, 0, "seckill audit exit status:\n%s" % out)
    check(re.search(r"skip\s+I1 cancel-returned", out), "cancel-returned skipped:\n%s", out)
    check(re.search(r"ok\s+I1 stock-agree", out), "stock-agree:\n%s", out)
    H.finish(srv)


def test_bench_rehearsal_in_sync_mode():
    """seckill bench --pay-share --cancel-share --pay-timeout against a sync-mode service
    (--pay-timeout-s: docs/lifecycle.md "Sync mode"): the fates are counted in SQL, where
    sync mode keeps them (Redis has no counters there: bench said NOT as rehearsed)."""
    settings = dict(_settings(), mode="sync", **{"pay-timeout-s": "2"})
    r, srv = H.setup(settings=settings)
    js = os.path.join(H.tmpdir(), "trylife-bench-%d.json" % os.getpid())
    p = subprocess.run([H.binary(), "bench", "--target", "http://127.0.0.1:%d" % srv.port,
                        "--redis", r.url, "--db", srv.db_url, "--admin-token", srv.admin_token,
                        "--seed-tokens", "--users", "60", "--stock", "30", "--quiet",
                        "--pay-key-file", settings["pay-key-file"], "--pay-share", "0.3",
                        "--cancel-share", "0.2", "--pay-timeout", "2", "--json", js],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, env=H.san_env(), timeout=120)
    out = p.stdout.decode("utf-8", "replace")
    eq(p.returncode, 0, "bench exit status:\n%s" % out)
    life = json.load(open(js))["lifecycle"]
    eq(life.get("counted_in"), "sql", "where the fates were counted")
    eq((life["redis"]["paid"], life["redis"]["timedout"], life["redis"]["returned"]),
       (life["to_pay"], life["to_expire"], life["to_cancel"] + life["to_expire"]),
       "SQL's figures: %r" % life)
    check(life["to_expire"] > 0 and life["timeout_ok"], "timeouts: %r", life)
    H.finish(srv)
