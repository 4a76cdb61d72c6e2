"""test_timeout_evcall.py -- a payment-deadline call's events in one stream entry
(src/order/life.lua expire, src/sale/sentry.h `evs`; docs/lifecycle.md, "What it costs"):
a wave of timeouts writes one entry per expire call, not one per order, and the writer
applies each such entry as one unit -- every order at status 4 in SQL exactly once, its
unit returned once, the audit clean. A stream that also holds the one-event entries (`ev`)
an earlier version wrote for its timeouts is applied the same way after an upgrade, and a
malformed `evs` entry goes to the dead letters whole."""

import harness as H
from harness import check, eq
from test_lifecycle_faults import FAST, _counted, _sale, unpaid_wave


def _cmd_calls(r, name):
    """Redis's calls of command name so far (INFO commandstats; a script's commands too)."""
    for line in r.cmd("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_%s:" % name):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def _event_entries(r, vid):
    """The voucher stream's event entries: ([evs value, ...], [ev value, ...])."""
    evs, ev = [], []
    for _, f in r.cmd("XRANGE", H.k_stream(vid), "-", "+"):
        d = dict(zip(f[::2], f[1::2]))
        if "evs" in d:
            evs.append(d["evs"])
        if "ev" in d:
            ev.append(d["ev"])
    return evs, ev


@H.timeout(240)
def test_wave_writes_one_entry_per_expire_call():
    """2,000 unpaid orders past their deadline together (a restart with --pay-timeout-s 1):
    the expire calls (32 orders at most) write one `evs` entry each -- one XADD per call
    that timed out orders, none of one `ev` per order. A call holds admission entries whole
    (about 9 orders each here), so two calls in a row hold more than 32 orders: at most
    2,000 / 16 + a few entries (about 76 in practice, ceil(2,000 / 32) = 63; 2,000 before
    evs). The entries name every order exactly once; every order is at status 4 in SQL, its
    unit returned once, the audit clean."""
    n = 2000
    r, srv, vid = unpaid_wave(n)
    xadd0 = _cmd_calls(r, "xadd")
    eval0 = _cmd_calls(r, "eval") + _cmd_calls(r, "evalsha")
    srv = H.restart_server(srv, settings=dict(FAST, **{"pay-timeout-s": "1"}))
    orders = dict(srv.db().orders(vid))
    eq(len(orders), n, "orders in SQL before the wave")
    _counted(r, srv, vid, n, list(orders), list(orders))
    xadds = _cmd_calls(r, "xadd") - xadd0
    evals = _cmd_calls(r, "eval") + _cmd_calls(r, "evalsha") - eval0   # the expire calls
    evs, ev = _event_entries(r, vid)
    H.log("%d orders timed out: %d evs entries, %d ev entries, %d XADDs, %d expire calls"
          % (n, len(evs), len(ev), xadds, evals))
    eq(len(ev), 0, "one-event entries (one per timed-out order before evs), e.g. %r"
       % ev[:2])
    check(len(evs) <= evals, "%d evs entries from %d expire calls" % (len(evs), evals))
    eq(xadds, len(evs), "XADDs during the wave (one per expire call that timed out orders)")
    check(len(evs) <= n // 16 + 8,
          "%d evs entries for %d orders (calls of up to 32)" % (len(evs), n))
    named = []
    for v in evs:
        w = v.split(" ")
        eq(w[0], "t", "an expire entry's kind")
        check(len(w) >= 5 and len(w) % 2 == 1, "evs shape: %r" % v[:80])
        check(len(w[3:]) // 2 <= 32, "a call's events: %d" % (len(w[3:]) // 2))
        for i in range(3, len(w), 2):
            named.append(int(w[i]))
            eq(orders.get(int(w[i])), int(w[i + 1]), "the buyer of order %s" % w[i])
    eq(len(named), n, "events in the evs entries")
    eq(sorted(named), sorted(orders), "every order timed out once in the stream")
    eq(int(r.cmd("XLEN", "seckill:dead:{%d}" % vid) or 0), 0, "dead letters")
    H.finish(srv)


def _time_out_by_hand(r, vid, pairs):
    """Redis's side of a timeout of each (orderId, userId), as life.lua decides it (the
    state `t`, the unit back, the counters): the stream's event is the caller's to write."""
    ts = int(r.cmd("TIME")[0])
    for oid, uid in pairs:
        r.cmd("HSET", "seckill:ostate:{%d}" % vid, str(oid), "t %d %d" % (ts, uid))
    for f in ("stock", "returned", "timedout"):
        r.cmd("HINCRBY", H.k_voucher(vid), f, str(len(pairs)))
    return ts


@H.timeout(240)
def test_mixed_stream_of_old_and_new_event_entries():
    """A stream with the one-event `ev` entries of an earlier version's timeouts and `evs`
    entries (written by hand with XADD, with Redis's state as the script leaves it): the
    writer applies both -- the orders named at status 4 in SQL once, the others at 1, the
    units counted in SQL and Redis, nothing in the dead letters, the audit clean. On another
    voucher of the same server a malformed `evs` entry (a pair cut short) goes to the dead
    letters whole -- none of its orders moves -- and the good entry behind it is applied."""
    r, srv = H.setup(settings=FAST)
    n = 8
    vid = H.create_seckill(srv, stock=n)
    _sale(srv, r, vid, n, 20000)
    db = srv.db()
    orders = sorted(db.orders(vid))
    ep = r.cmd("HGET", H.k_voucher(vid), "ep") or "0"
    old, new = orders[:2], orders[2:6]
    ts = _time_out_by_hand(r, vid, old + new)
    ks = H.k_stream(vid)
    r.cmd("XADD", ks, "*", "ev", "t %d %d %d %s" % (old[0][0], old[0][1], ts, ep))
    r.cmd("XADD", ks, "*", "evs", "t %d %s %d %d %d %d" % (ts, ep, new[0][0], new[0][1],
                                                          new[1][0], new[1][1]))
    r.cmd("XADD", ks, "*", "ev", "t %d %d %d %s" % (old[1][0], old[1][1], ts, ep))
    r.cmd("XADD", ks, "*", "evs", "t %d %s %d %d %d %d" % (ts, ep, new[2][0], new[2][1],
                                                          new[3][0], new[3][1]))
    # another voucher: a malformed entry, then a good one
    vb = H.create_seckill(srv, stock=4)
    _sale(srv, r, vb, 4, 21000)
    ob = sorted(db.orders(vb))
    _time_out_by_hand(r, vb, ob[2:3])
    kb = H.k_stream(vb)
    r.cmd("XADD", kb, "*", "evs", "t %d 0 %d %d %d" % (ts, ob[0][0], ob[0][1], ob[1][0]))
    r.cmd("XADD", kb, "*", "evs", "t %d 0 %d %d" % (ts, ob[2][0], ob[2][1]))
    timed = [o for o, _ in old + new]
    _counted(r, srv, vid, n, [o for o, _ in orders], timed)
    eq(int(r.cmd("XLEN", "seckill:dead:{%d}" % vid) or 0), 0, "dead letters of the mixed stream")
    H.wait_until(lambda: int(r.cmd("XLEN", "seckill:dead:{%d}" % vb) or 0) == 1, 30,
                 what="the malformed entry in the dead letters")
    H.wait_until(lambda: db.scalar("SELECT status FROM tb_voucher_order WHERE id=?",
                                   ob[2][0]) == 4, 30, what="the entry behind it applied")
    H.wait_drained(srv, r, vb, 30)
    st = dict(db.query("SELECT id, status FROM tb_voucher_order WHERE voucher_id=?", vb))
    eq((st[ob[0][0]], st[ob[1][0]], st[ob[2][0]], st[ob[3][0]]), (1, 1, 4, 1),
       "the malformed entry's orders untouched, the good one's timed out")
    d = r.cmd("XRANGE", "seckill:dead:{%d}" % vb, "-", "+")[0][1]
    H.log("dead letter: %r" % d)
    check(any("bad events" in x for x in d), "the dead letter's reason: %r" % d)
    H.finish(srv)


@H.timeout(120)
def test_expire_call_entries_hold_at_most_1024_events():
    """life.lua expire alone, on a bucket no writer reads: a call of 1,100 unpaid orders
    answers 1,100 and writes two `evs` entries, of 1,024 and 76 events (the readers refuse
    more than 4,096 in one), with `free 1` under expire-free; the same call again times out
    none and writes nothing; a cancel still writes its one `ev` entry."""
    r = H.start_redis()
    script = open(H.ROOT + "/src/order/life.lua").read()
    for op, tag in (("expire", "990001"), ("expire-free", "990002")):
        keys = ["seckill:voucher:{%s}" % tag, "seckill:order:{%s}" % tag,
                "seckill:ostate:{%s}" % tag, "seckill:stream:{%s}" % tag,
                "seckill:paysweep:{%s}" % tag]
        r.cmd("HSET", keys[0], "stock", "0", "ep", "4")
        pairs = [(9000000 + i, 5000 + i) for i in range(1101)]
        buyers = []
        for o, u in pairs:
            buyers += [str(u), str(o)]
        r.cmd("HSET", keys[1], *buyers)
        args = [x for o, u in pairs[:1100] for x in (str(o), str(u))]
        got = r.cmd("EVAL", script, "5", *keys, op, "1-1", *args)
        eq(got, [1100, "1-1"], "%s: its answer" % op)
        ents = r.cmd("XRANGE", keys[3], "-", "+")
        eq(len(ents), 2, "%s: entries" % op)
        sizes, named = [], []
        for _, f in ents:
            d = dict(zip(f[::2], f[1::2]))
            eq(d.get("free"), "1" if op == "expire-free" else None, "%s: free field" % op)
            w = d["evs"].split(" ")
            eq(w[0:3], ["t", w[1], "4"], "%s: kind and ep" % op)
            sizes.append((len(w) - 3) // 2)
            named += [(int(w[i]), int(w[i + 1])) for i in range(3, len(w), 2)]
        eq(sizes, [1024, 76], "%s: events per entry" % op)
        eq(named, pairs[:1100], "%s: every order once, in the call's order" % op)
        eq(r.cmd("HMGET", keys[0], "stock", "returned", "timedout"), ["1100", "1100", "1100"],
           "%s: units back" % op)
        eq(r.cmd("EVAL", script, "5", *keys, op, "", *args), [0, "1-1"], "%s: again" % op)
        eq(int(r.cmd("XLEN", keys[3])), 2, "%s: nothing written by a call that timed out none"
           % op)
        o, u = pairs[1100]
        eq(r.cmd("EVAL", script, "4", *keys[:4], "cancel", str(o), str(u)), 0, "a cancel")
        last = r.cmd("XRANGE", keys[3], "-", "+")[-1][1]
        eq(last[0], "ev", "%s: the cancel's entry" % op)
        check(last[1].startswith("c %d %d " % (o, u)) and last[1].endswith(" 4"),
              "%s: the cancel's event: %r" % (op, last[1]))
    r.stop()
