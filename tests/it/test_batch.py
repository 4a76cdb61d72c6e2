"""test_batch.py -- coalesced admissions (src/sale/admission.c, src/sale/admit.lua).

Under load a worker sends the admissions of a voucher that queue up behind its call in
flight together as one admit.lua call. The sale must stay exact -- no oversell, one order per
user, every admitted order persisted -- with buyers sending concurrent copies (the same
user twice in one batch), and Redis must see fewer script calls than admissions.
"""
import json
import os
import time

import harness as H
from harness import check, eq


@H.timeout(180)
def test_coalesced_sale_exact():
    r, srv = H.setup()
    d = H.tmpdir()
    js = os.path.join(d, "b.json")
    r.cmd("CONFIG", "RESETSTAT")
    rc, out, err = H.run_tool(["bench", "--target", "http://127.0.0.1:%d" % srv.port,
                               "--redis", r.url, "--db", srv.db_url, "--admin-token",
                               srv.admin_token, "--quiet", "--seed-tokens", "--token-key-file",
                               os.path.join(srv.data_dir, "token-key"), "--users", 4000,
                               "--stock", 1500, "--conns", 64, "--dup", 0.2,
                               "--burst-share", 0.2, "--burst", 3, "--json", js], timeout=150)
    check(rc == 0, "bench (with its audit) exit %d:\n%s\n%s", rc, out, err)
    res = json.load(open(js))
    eq(res["outcomes"]["success"], 1500, "admitted = stock")
    eq(res["audit"], 0, "audit status")
    vid = res["voucher"]
    eq(srv.db().order_count(vid), 1500, "orders in SQL")
    eq(r.cmd("HLEN", H.k_buyers(vid)), 1500, "buyers in Redis")
    stats = H.commandstats(r)
    calls = stats.get("evalsha", 0) + stats.get("eval", 0)
    xadd = stats.get("xadd", 0)   # one stream entry per script call that admitted
    H.log("script calls %d, stream entries %d, outcomes %r" % (calls, xadd, res["outcomes"]))
    # every one of the 1,500 admitted orders went through a script call and into an entry
    check(calls < 1500, "no coalescing: %d script calls for 1500 admitted orders", calls)
    check(0 < xadd < 1500, "stream entries %d for 1500 orders: one per order", xadd)
    eq(sum(len(o) for o in H.stream_orders(r, vid).values()), 1500, "orders in the stream")

    # One script decides alike for a batch and for the same buyers one call each: the
    # same codes in the course's order (sold out before duplicate), the same stream
    # entries (the writer and a rebuild from SQL read them) and the same Redis state.
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "src", "sale", "admit.lua")) as f:
        admit = f.read()
    buyers = [("77", "1001"), ("78", "1002"), ("77", "1003"), ("79", "1004"), ("78", "1005")]
    state, entries = {}, {}
    for name, v, calls in (("batch", 999998, [buyers]),
                           ("single", 999999, [[b] for b in buyers])):
        r.cmd("HSET", H.k_voucher(v), "stock", "3", "begin", "0", "end", "4102444800",
              "ep", "3")
        codes = []
        for call in calls:
            args = [a for b in call for a in b]
            codes += r.cmd("EVAL", admit, "3", H.k_voucher(v), H.k_buyers(v), H.k_stream(v),
                           str(v), "stream", *args)
        # one entry per call, one field os = "ts ep orderId userId ..." (src/sale/sentry.h):
        # a batch's entry holds the orders of its single calls' entries, in their order;
        # ts left out of the comparison (the two runs may straddle a second)
        ents = []
        for _, f in r.cmd("XRANGE", H.k_stream(v), "-", "+"):
            eq(f[0], "os", "the entry's one field")
            ts, ep, *pairs = f[1].split(" ")
            check(abs(int(ts) - time.time()) < 60, "entry's ts %s", ts)
            ents += [(oid, uid, ep) for oid, uid in zip(pairs[::2], pairs[1::2])]
        entries[name] = r.cmd("XLEN", H.k_stream(v))
        state[name] = (codes, r.cmd("HGET", H.k_voucher(v), "stock"),
                       sorted(r.cmd("HGETALL", H.k_buyers(v))), ents)
    # 77, 78 admitted; 77 again: a duplicate; 79 takes the last; 78 again: sold out
    # comes before duplicate (the course's order)
    eq(state["single"][0], [0, 0, 2, 0, 1], "codes, one call per buyer")
    eq(state["batch"], state["single"], "a batch of 5 vs 5 single calls")
    eq(state["single"][3][0], ("1001", "77", "3"), "the first order: order, user, generation")
    eq(entries, {"batch": 1, "single": 3}, "stream entries: one per call that admitted")
    # A caller of another argument layout is refused before anything is taken.
    try:
        r.cmd("EVAL", admit, "3", H.k_voucher(999998), H.k_buyers(999998),
              H.k_stream(999998), "80", "1006", "999998")
        check(False, "old argument layout accepted")
    except Exception as e:
        check("bad arguments" in str(e), "refusal: %s", e)
    eq(r.cmd("HGET", H.k_voucher(999998), "stock"), "0", "stock untouched")
    # The sale's own entries (coalesced by the server) have the same fields.
    got = r.cmd("XRANGE", H.k_stream(vid), "-", "+", "COUNT", "1")[0][1]
    eq(got[0], "os", "the server's entries")
    check(len(got[1].split(" ")) >= 4 and len(got[1].split(" ")) % 2 == 0,
          "the server's entries: %r", got)
    H.finish(srv)
