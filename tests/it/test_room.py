"""test_room.py -- the waiting room of a flash-sale voucher (src/room/, docs/waiting-room.md).

  - the option: `waitingRoom` is checked like every creation field; a voucher with a room
    keeps it in SQL (tb_seckill_room) and in its Redis hash (room_r, room_ttl, room_gate);
    one without a room answers the queue's endpoints NO_QUEUE and sells as ever;
  - the pass: an order on a room voucher without a pass, with a garbage, foreign,
    other-voucher or expired pass (signed with the right key, made here from the token key
    as pass.h lays it out) is refused QUEUE_REQUIRED, without a Redis command once the
    worker knows the voucher (MONITOR); a pass from the poll and one made here
    are accepted; the room survives a FLUSHALL (rebuilt from SQL);
  - fairness, on two instances sharing one Redis: 400 users joining before beginTime stand
    in an order not correlated with their join order (Spearman |rho| < 0.3: under a uniform
    shuffle rho's sd is 1/sqrt(399) = 0.05, so the bound is six sd); joins after beginTime
    are served first come, first served, behind the early ones; passes are issued at
    admitPerSecond across both instances (admitted count within the released count at the
    first and last poll of a sweep, +-1), and exactly the users of the lowest ranks; every
    other place (due within the pass lifetime) gets its pass at once, valid from its due
    moment;
  - polls faster than the limit are 429 with Retry-After, and a poll answers Retry-After;
  - exactly the stock sold to buyers with passes, one per user, audit clean;
  - on a Redis Cluster the room's keys live in the voucher's slot, and a sale through the
    room works.
"""

import hashlib
import hmac
import json
import threading
import time

import harness as H
from harness import check, eq

ME_PATH = "/voucher-order/of/me"
PASS_LABEL = b"seckill waiting-room pass v2"


def tokens_for(srv, uids):
    """Signed tokens for these user ids, once the workers accept signed tokens locally."""
    key = H.token_key(srv.data_dir)
    H.wait_until(lambda: all(srv.http().request("GET", ME_PATH, token=H.mint_token(key, 999999))[0]
                             == 200 for _ in range(8)), 10, what="signed tokens accepted")
    return {u: H.mint_token(key, u) for u in uids}


def make_pass(srv, uid, vid, expires_ms, from_ms=None):
    """A pass as pass.h lays it out, valid [from_ms, expires_ms) (from: a minute before the
    expiry unless given), signed with the key derived from the token key."""
    pk = hmac.new(H.token_key(srv.data_dir), PASS_LABEL, hashlib.sha256).digest()
    if from_ms is None:
        from_ms = expires_ms - 60000
    body = "%d.%d.%d.%d" % (uid, vid, from_ms, expires_ms)
    return body + "." + hmac.new(pk, body.encode(), hashlib.sha256).digest()[:16].hex()


def join(h, vid, tok, body=None):
    return h.api("POST", "/seckill/queue/%d" % vid, body if body is not None else {}, token=tok)


def poll(h, vid, tok):
    return h.api("GET", "/seckill/queue/%d" % vid, token=tok)


def buy(h, vid, tok, pass_=None):
    hd = {"x-seckill-pass": pass_} if pass_ is not None else None
    return h.api("POST", "/voucher-order/seckill/%d" % vid, token=tok, headers=hd)


def refused(st, j, code, what):
    check(st == 200 and j and not j["success"] and j.get("code") == code,
          "%s: expected %s, got %r %r", what, code, st, j)


def spearman(xs, ys):
    """Spearman's rho of two sequences without ties."""
    n = len(xs)
    rx = {x: i for i, x in enumerate(sorted(xs))}
    ry = {y: i for i, y in enumerate(sorted(ys))}
    d2 = sum((rx[x] - ry[y]) ** 2 for x, y in zip(xs, ys))
    return 1 - 6.0 * d2 / (n * (n * n - 1))


def redis_lines_during(r, fn, needle):
    """The MONITOR lines naming `needle` while fn runs."""
    mon = r.client(timeout=30)
    mon.send("MONITOR")
    eq(mon._read(), "OK", "MONITOR")
    lines = []
    try:
        fn()
        r.cmd("ECHO", "test-room-mark")
        while True:
            line = mon._read()
            if "test-room-mark" in line:
                break
            if needle in line:
                lines.append(line)
    finally:
        mon.close()
    return lines


def redis_ms(r):
    s, us = r.cmd("TIME")
    return int(s) * 1000 + int(us) // 1000


# ---------------------------------------------------------------------------------------

def test_room_option_and_pass():
    r, srv = H.setup(settings={"rate_user_seckill": "0"})
    h = srv.http()
    adm = srv.admin_token
    for room, why in (("x", "waitingRoom must be an object"),
                      ({}, "admitPerSecond is required"),
                      ({"admitPerSecond": 0}, "admitPerSecond must be"),
                      ({"admitPerSecond": 1000001}, "admitPerSecond must be"),
                      ({"admitPerSecond": 5, "passTtlS": 4}, "passTtlS must be"),
                      ({"admitPerSecond": 5, "botGate": "yes"}, "botGate must be")):
        st, j = h.api("POST", "/voucher/seckill", H.seckill_body(waitingRoom=room), admin=adm)
        check(st == 400 and why in j["errorMsg"], "waitingRoom %r: %r %r", room, st, j)
    st, j = h.api("POST", "/voucher/seckill",
                  H.seckill_body(waitingRoom={"admitPerSecond": 5}, stockBuckets=2), admin=adm)
    check(st == 400 and "stockBuckets" in j["errorMsg"], "room with buckets: %r %r", st, j)

    toks = tokens_for(srv, range(7100001, 7100010))
    t = list(toks.values())
    # no room: the queue says so, the sale is the course's
    plain = H.create_seckill(srv, stock=5)
    refused(*join(h, plain, t[0]), "NO_QUEUE", "join of a voucher without a room")
    refused(*poll(h, plain, t[0]), "NO_QUEUE", "poll of a voucher without a room")
    st, j = buy(h, plain, t[0])
    check(j["success"], "order without a room: %r", j)

    vid = H.create_seckill(srv, stock=5, waitingRoom={"admitPerSecond": 1000, "passTtlS": 30})
    other = H.create_seckill(srv, stock=5, waitingRoom={"admitPerSecond": 1000})
    hv = r.cmd("HGETALL", H.k_voucher(vid))
    hv = dict(zip(hv[::2], hv[1::2]))
    eq((hv.get("room_r"), hv.get("room_ttl"), hv.get("room_gate")), ("1000", "30", "0"),
       "room fields of the voucher hash")
    eq(srv.db().query("SELECT admit_per_s, pass_ttl_s, bot_gate FROM tb_seckill_room "
                      "WHERE voucher_id = ?", vid), [(1000, 30, 0)], "tb_seckill_room row")
    eq(r.cmd("HGET", H.k_voucher(plain), "room_r"), None, "room_r of a voucher without a room")

    u1, u2 = 7100001, 7100002
    # no pass, garbage, a pass of another user, of another voucher, expired: refused
    refused(*buy(h, vid, toks[u1]), "QUEUE_REQUIRED", "order without a pass")
    refused(*buy(h, vid, toks[u1], "garbage"), "QUEUE_REQUIRED", "garbage pass")
    now = int(time.time() * 1000)
    refused(*buy(h, vid, toks[u1], make_pass(srv, u2, vid, now + 60000)), "QUEUE_REQUIRED",
            "another user's pass")
    refused(*buy(h, vid, toks[u1], make_pass(srv, u1, other, now + 60000)), "QUEUE_REQUIRED",
            "another voucher's pass")
    refused(*buy(h, vid, toks[u1], make_pass(srv, u1, vid, now - 1)), "QUEUE_REQUIRED",
            "expired pass")
    good = make_pass(srv, u1, vid, now + 60000)
    refused(*buy(h, vid, toks[u1], good[:-1] + ("0" if good[-1] != "0" else "1")),
            "QUEUE_REQUIRED", "pass with a wrong MAC")
    eq(r.cmd("HLEN", H.k_buyers(vid)), 0, "buyers after the refusals")
    # once a worker knows the voucher has a room, a refusal costs no Redis command
    eq(redis_lines_during(r, lambda: [refused(*buy(h, vid, toks[u1], "garbage"),
                                              "QUEUE_REQUIRED", "refusal") for _ in range(20)],
                          "{%d}" % vid), [], "Redis commands of 20 refusals without a pass")
    # the pass of a join (admitted at once: the sale began an hour ago at 1000/s)
    st, j = join(h, vid, toks[u2])
    check(st == 200 and j["success"] and j["data"]["state"] == "admitted" and
          j["data"]["pass"], "join: %r %r", st, j)
    d = j["data"]
    check(abs(d["passExpiresAt"] - (redis_ms(r) + 30000)) < 5000, "passExpiresAt %r",
          d["passExpiresAt"])
    st, j = join(h, vid, toks[u2])
    eq(j["data"].get("pass"), d["pass"], "the pass of a second join")
    st, j = buy(h, vid, toks[u2], d["pass"])
    check(j["success"], "order with the join's pass: %r", j)
    st, j = buy(h, vid, toks[u1], good)
    check(j["success"], "order with a pass made from the token key: %r", j)
    # the room survives losing Redis: rebuilt from SQL
    r.cmd("FLUSHALL")
    H.wait_until(lambda: r.cmd("HGET", H.k_voucher(vid), "stock") is not None, 20,
                 what="voucher rebuilt after FLUSHALL")
    eq(r.cmd("HGET", H.k_voucher(vid), "room_r"), "1000", "room_r after the rebuild")
    eq(r.cmd("HGET", H.k_voucher(vid), "room_ttl"), "30", "room_ttl after the rebuild")
    u3 = 7100003
    refused(*buy(h, vid, toks[u3]), "QUEUE_REQUIRED", "order without a pass after the rebuild")
    st, j = join(h, vid, toks[u3])
    check(j["data"]["state"] == "admitted", "join after the rebuild: %r", j)
    st, j = buy(h, vid, toks[u3], j["data"]["pass"])
    check(j["success"], "order after the rebuild: %r", j)
    H.finish(srv)


@H.serial   # passes at admitPerSecond against the clock (+-1)
@H.timeout(300)
def test_room_shuffle_fifo_and_rate_two_instances():
    r, a = H.setup()
    b = H.start_server(r, name="inst-2", data_dir=a.data_dir, db_path=a.db_path,
                       admin_token=a.admin_token, db_url=a.db_url)
    rate, n_early, n_late = 40, 400, 40
    early = list(range(7200001, 7200001 + n_early))
    late = list(range(7300001, 7300001 + n_late))
    toks = tokens_for(a, early + late)
    tokens_for(b, [1])
    begin = int(time.time()) + 15   # the 400 joins take ~2 s under ASan
    vid = H.create_seckill(a, stock=100000, begin=begin,
                           waitingRoom={"admitPerSecond": rate, "passTtlS": 600})
    ha, hb = a.http(), b.http()
    for i, u in enumerate(early):
        st, j = join(ha if i % 2 == 0 else hb, vid, toks[u])
        check(st == 200 and j["success"] and j["data"]["state"] == "waiting",
              "early join %d: %r %r", i, st, j)
        check(j["data"]["waitS"] >= 1, "early join's waitS: %r", j)
    check(time.time() < begin, "the early joins took until after beginTime")
    ranks = [int(r.cmd("ZRANK", "seckill:room:{%d}" % vid, str(u))) for u in early]
    eq(sorted(ranks), list(range(n_early)), "early joiners' ranks")
    rho = spearman(list(range(n_early)), ranks)
    H.log("early joiners: Spearman rho(join order, place) = %.3f" % rho)
    check(abs(rho) < 0.3, "early joiners' places follow their join order: rho %.3f", rho)
    # joining again keeps the place
    st, j = join(hb, vid, toks[early[0]])
    eq(int(r.cmd("ZRANK", "seckill:room:{%d}" % vid, str(early[0]))), ranks[0], "place kept")
    # after beginTime: first come, first served, behind the early joiners
    H.wait_until(lambda: redis_ms(r) >= begin * 1000 + 200, 30, what="beginTime")
    for i, u in enumerate(late):
        join(ha if i % 2 else hb, vid, toks[u])
    late_ranks = [int(r.cmd("ZRANK", "seckill:room:{%d}" % vid, str(u))) for u in late]
    eq(late_ranks, list(range(n_early, n_early + n_late)), "late joiners' places (FIFO)")
    # the rate: two sweeps polling everyone, half through each instance; each sweep's
    # admitted users are exactly the lowest places, as many as released between its first
    # and its last poll
    rank_of = dict(zip(early, ranks))
    rank_of.update(zip(late, late_ranks))
    everyone = early + late
    for sweep in range(2):
        H.wait_until(lambda: redis_ms(r) >= begin * 1000 + 3000 + 3500 * sweep, 30,
                     what="sweep %d" % sweep)
        t0 = redis_ms(r)
        admitted, passes = [], {}
        for i, u in enumerate(everyone):
            st, hd, body = (ha if (i + sweep) % 2 == 0 else hb).request(
                "GET", "/seckill/queue/%d" % vid, token=toks[u])
            eq(st, 200, "poll of user %d" % u)
            d = json.loads(body)["data"]
            check(int(hd.get("retry-after", "0")) >= 1, "poll without Retry-After: %r", hd)
            if d["state"] == "admitted":
                admitted.append(u)
                passes[u] = d["pass"]
            else:
                eq(d["state"], "waiting", "state of user %d" % u)
                check(d["position"] >= 1 and d["pollAfterMs"] >= 1000, "waiting: %r", d)
                # due within the 600 s lifetime: its pass now, valid from its due moment
                due = begin * 1000 + ((rank_of[u] + 1) * 1000 + rate - 1) // rate
                check(d.get("pass") and d["passFrom"] == due, "a future pass of place %d "
                      "(due %d): %r", rank_of[u], due, d)
        t1 = redis_ms(r)
        lo = (t0 - begin * 1000) * rate // 1000
        hi = (t1 - begin * 1000) * rate // 1000
        H.log("sweep %d: %d admitted, released %d..%d over %d ms" %
              (sweep, len(admitted), lo, hi, t1 - t0))
        check(lo - 1 <= len(admitted) <= hi + 1, "admitted %d, released %d..%d",
              len(admitted), lo, hi)
        top = sorted(rank_of[u] for u in admitted)
        check(top[-1] <= hi, "an admitted user of place %d beyond %d released", top[-1], hi)
        check(all(rank_of[u] >= lo for u in everyone if u not in passes),
              "a user of a released place not admitted")
        issued = int(r.cmd("HLEN", "seckill:room:issued:{%d}" % vid))
        eq(issued, len(everyone), "passes issued (every place due within the lifetime)")
    # passes bought with, through either instance
    for i, (u, p) in enumerate(sorted(passes.items())[:10]):
        st, j = buy(ha if i % 2 else hb, vid, toks[u], p)
        check(j["success"], "order of admitted user %d: %r", u, j)
    # a poll right after another is refused from memory (a user who has not polled yet)
    u = 7399999
    toks.update(tokens_for(a, [u]))
    st, _ = poll(ha, vid, toks[u])
    st2, j = poll(ha, vid, toks[u])
    eq((st, st2, j["code"]), (200, 429, "RATE_LIMITED"), "two polls back to back")
    H.finish(b)
    H.finish(a)


def test_room_exact_stock_audit():
    r, srv = H.setup(settings={"rate_user_seckill": "0"})
    stock, n = 20, 60
    uids = list(range(7400001, 7400001 + n))
    toks = tokens_for(srv, uids)
    vid = H.create_seckill(srv, stock=stock, waitingRoom={"admitPerSecond": 1000000})
    results, lock = {}, threading.Lock()

    def buyer(chunk):
        h = srv.http()
        for u in chunk:
            refused(*buy(h, vid, toks[u]), "QUEUE_REQUIRED", "order of %d without a pass" % u)
            st, j = join(h, vid, toks[u])
            if not j["success"]:
                out = j["code"]
            elif j["data"]["state"] != "admitted":
                out = j["data"]["state"]
            else:
                st, j = buy(h, vid, toks[u], j["data"]["pass"])
                out = "ok" if j["success"] else j["code"]
            with lock:
                results[u] = out
    ts = [threading.Thread(target=buyer, args=(uids[i::6],)) for i in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    eq(len(results), n, "buyers answered")
    sold = sum(1 for v in results.values() if v == "ok")
    eq(sold, stock, "orders")
    check(all(v in ("ok", "SOLD_OUT", "soldOut") for v in results.values()), "answers: %r",
          sorted(set(results.values())))
    H.wait_until(lambda: srv.db().order_count(vid) == stock, 30, what="orders in SQL")
    eq(srv.db().per_user_max(vid), 1, "orders per user")
    # stock gone: the queue says so instead of issuing passes
    st, j = poll(srv.http(), vid, toks[uids[0]])
    check(j["success"] and j["data"]["state"] == "soldOut" and "pass" not in j["data"],
          "poll after the sale: %r", j)
    rc, out = H.audit(r, srv.db_url, vid)
    check(rc == 0, "audit: %s", out[-3000:])
    H.finish(srv)


@H.timeout(200)
def test_room_cluster_slot():
    cluster = H.start_redis_cluster(replicas=0)
    srv = H.start_server(cluster.url, name="inst-1", threads=2)
    vid = H.create_seckill(srv, stock=3, waitingRoom={"admitPerSecond": 1000})
    node = cluster.node_for(H.k_voucher(vid)).port
    for k in ("seckill:room:{%d}" % vid, "seckill:room:issued:{%d}" % vid):
        eq(cluster.node_for(k).port, node, "node of %s" % k)
    uids = list(range(7500001, 7500006))
    toks = tokens_for(srv, uids)
    h = srv.http()
    sold = 0
    for u in uids:
        refused(*buy(h, vid, toks[u]), "QUEUE_REQUIRED", "order without a pass")
        st, j = join(h, vid, toks[u])
        if j["success"] and j["data"]["state"] == "admitted":
            st, j = buy(h, vid, toks[u], j["data"]["pass"])
            sold += 1 if j["success"] else 0
    eq(sold, 3, "sold on the cluster")
    H.finish(srv)


def solve(challenge, difficulty):
    """The decimal s with SHA-256(challenge ":" s) starting with `difficulty` zero bits."""
    s = 0
    while True:
        d = hashlib.sha256(("%s:%d" % (challenge, s)).encode()).digest()
        if int.from_bytes(d, "big") >> (256 - difficulty) == 0:
            return str(s)
        s += 1


def test_room_bot_gate_join():
    r, srv = H.setup()
    h = srv.http()
    toks = tokens_for(srv, [7600001, 7600002])
    t1, t2 = toks[7600001], toks[7600002]
    plain = H.create_seckill(srv, stock=5, waitingRoom={"admitPerSecond": 100})
    refused(*h.api("GET", "/seckill/challenge/%d" % plain, token=t1), "NO_CHALLENGE",
            "challenge of a room without a bot gate")
    st, j = join(h, plain, t1)
    check(j["success"], "join without a bot gate: %r", j)
    vid = H.create_seckill(srv, stock=5, waitingRoom={"admitPerSecond": 100, "botGate": True})
    eq(r.cmd("HGET", H.k_voucher(vid), "room_gate"), "1", "room_gate")
    refused(*join(h, vid, t1), "CHALLENGE_REQUIRED", "join without a solution")
    refused(*join(h, vid, t1, {"challenge": 1, "solution": []}), "CHALLENGE_REQUIRED",
            "join with a malformed solution")
    st, j = h.api("GET", "/seckill/challenge/%d" % vid, token=t1)
    check(j["success"] and isinstance(j["data"]["challenge"], str) and
          isinstance(j["data"]["difficulty"], int), "challenge: %r", j)
    c, d = j["data"]["challenge"], j["data"]["difficulty"]
    st, j = join(h, vid, t1, {"challenge": c, "solution": solve(c, d)})
    check(j["success"] and j["data"]["state"] == "admitted", "join with a solution: %r", j)
    st, j = buy(h, vid, t1, j["data"]["pass"])
    check(j["success"], "order after the gated join: %r", j)
    refused(*buy(h, vid, t2), "QUEUE_REQUIRED", "order without a pass on the gated room")
    H.finish(srv)
