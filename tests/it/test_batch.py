"""test_batch.py -- coalesced admissions (src/admission.c, scripts/admit_batch.lua).

Under load a worker sends the admissions of a voucher that queue up behind its call in
flight as one admit_batch.lua call. The sale must stay exact -- no oversell, one order per
user, every admitted order persisted -- with buyers sending concurrent copies (the same
user twice in one batch), and Redis must see fewer script calls than admissions.
"""
import json
import os

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
    hsetnx = stats.get("hsetnx", 0)   # one per admission that reached the stock check
    H.log("script calls %d, HSETNX %d, outcomes %r" % (calls, hsetnx, res["outcomes"]))
    check(hsetnx >= 1500, "HSETNX %d < stock", hsetnx)
    check(calls < hsetnx, "no coalescing: %d script calls for %d admissions", calls, hsetnx)

    # A batch's stream entries carry exactly what admit.lua's do (the writer and a rebuild
    # from SQL read them): admit.lua run by hand on a scratch voucher is the reference.
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "scripts", "admit.lua")) as f:
        admit = f.read()
    r.cmd("HSET", H.k_voucher(999999), "stock", "5", "begin", "0", "end", "4102444800",
          "ep", "3")
    eq(r.cmd("EVAL", admit, "3", H.k_voucher(999999), H.k_buyers(999999), H.k_stream(999999),
             "77", "123456789", "999999"), 0, "admit.lua by hand")
    ref = r.cmd("XRANGE", H.k_stream(999999), "-", "+")[0][1]
    got = r.cmd("XRANGE", H.k_stream(vid), "-", "+", "COUNT", "1")[0][1]
    eq(got[::2], ref[::2], "stream entry fields: admit_batch.lua vs admit.lua")
    H.finish(srv)
