"""test_perf_tools.py -- what `make perf`'s measurements rely on in seckill bench
(docs/bench.md, docs/performance.md).

  - --pay-share with --voucher pays the voucher's own payValue, read from
    GET /voucher/list/{--shop} (a list longer than the 4 KiB bench keeps of an answer):
    every payment is taken, none refused for its amount; a voucher not in that shop's list
    is a clear error before the sale.
  - --waiting-room sends an admitted buyer's order before the joins and polls that are
    due: 5,000 buyers' joins fall due together at beginTime on one connection, each
    admitted by its join (R = 100,000/s), and each order still goes out as soon as its pass
    is in (orderLateMs), not behind the joins still due -- where a pass could expire in the
    bench's own queue.
"""

import json
import os

import harness as H
from harness import check, eq

from test_lifecycle_bench import _bench
from test_lifecycle import _pay_settings
from test_gate import room_present

# The load tools themselves (bench): no SQL behaviour of their own.
DB_BACKENDS = ("sqlite",)
# run alone under tests/run.py -j: bench's timing (orders within orderLateMs of a pass)
SERIAL = True


def test_bench_pays_the_vouchers_pay_value():
    settings = _pay_settings({"pay-timeout-s": "3"})
    r, srv = H.setup(settings=settings)
    h = srv.http()
    # shop 2's list: 30 vouchers (about 9 KiB of JSON) before the sale's, payValue 4750
    for i in range(30):
        H.create_seckill(srv, stock=1, shop_id=2, http=h, title="filler %d" % i)
    vid = H.create_seckill(srv, stock=120, shop_id=2, http=h, payValue=4750)
    rc, out, j = _bench(r, srv, settings["pay-key-file"], 3, "--voucher", str(vid),
                        "--stock", "120", "--shop", "2", "--pay-share", "0.5")
    eq(rc, 0, "bench exit status:\n%s" % out[:3000])
    life = j["lifecycle"]
    eq(j["outcomes"]["success"], 120, "orders sold")
    check(life["to_pay"] > 20, "payments to send: %r", life)
    eq((life["paid"], life["refused"]), (life["to_pay"], 0),
       "every payment of 4750 taken: %r" % life)
    check(life["ok"], "Redis agrees: %r", life)
    db = srv.db()
    eq(db.scalar("SELECT count(*) FROM tb_voucher_order WHERE voucher_id=? AND status=2", vid),
       life["to_pay"], "SQL: the paid orders at status 2")
    # the wrong shop: told before the sale, nothing sold
    other = H.create_seckill(srv, stock=10, shop_id=2, http=h, payValue=4750)
    rc, out, j = _bench(r, srv, settings["pay-key-file"], 3, "--voucher", str(other),
                        "--stock", "10", "--shop", "3", "--pay-share", "0.5", "--no-audit")
    eq(rc, 2, "bench exit status:\n%s" % out[:3000])
    check("not in GET /voucher/list/3" in out and "--shop" in out, "the reason:\n%s", out)
    eq(db.scalar("SELECT count(*) FROM tb_voucher_order WHERE voucher_id=?", other), 0,
       "no sale ran")
    H.finish(srv)


def test_bench_room_orders_before_due_polls():
    r, srv = H.setup()
    h = srv.http()
    room_present(srv, h)
    out = os.path.join(H.tmpdir(), "room-late.json")
    rc, stdout, stderr = H.run_tool(
        ["bench", "--target", "http://127.0.0.1:%d" % srv.port, "--redis", r.url, "--db",
         srv.db_url, "--admin-token", srv.admin_token, "--seed-tokens", "--token-key-file",
         os.path.join(srv.data_dir, "token-key"), "--users", "5000", "--stock", "5000",
         "--begin-in", "2", "--waiting-room", "--room-rate", "100000", "--room-early", "0",
         "--room-late", "0", "--room-slow", "0", "--conns", "1", "--threads", "1", "--quiet",
         "--json", out, "--seed", "7"], timeout=240)
    check(rc == 0, "bench --waiting-room: %s %s", stdout[-1500:], stderr[-500:])
    j = json.load(open(out))["waitingRoom"]
    H.log(json.dumps(j))
    eq((j["bought"], j["passesRefused"], j["audit"]), (5000, 0, 0),
       "bought, passes refused, audit")
    # behind the due joins (one connection) an order would wait about half their backlog
    check(j["orderLateMs"]["mean"] < 50, "orders sent %.1f ms late on average (max %d ms)",
          j["orderLateMs"]["mean"], j["orderLateMs"]["max"])
    H.finish(srv)
