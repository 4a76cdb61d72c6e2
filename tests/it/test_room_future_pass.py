"""test_room_future_pass.py -- a waiting-room pass valid from its place's due moment
(room.lua, src/room/pass.c, docs/waiting-room.md "Admission" and "When to poll").

  - after beginTime a join or poll whose place is due within the pass lifetime gets its
    pass at once, valid from the due moment (passFrom, in the future); a re-poll returns
    the same pass and says to poll at its start; an order with it before passFrom is
    refused QUEUE_REQUIRED, without a Redis command and without selling anything; from
    passFrom on it buys (the order in SQL: both backends);
  - a place due beyond the lifetime gets no pass yet, and is told to poll when it is due
    within one lifetime: that poll gets the pass, valid exactly from the due moment;
  - the rate: the passes' starts are the places' due moments, 1/R apart in rank order, so
    the passes valid by any moment t are at most floor((t - begin) * R);
  - the sale board counts a pass by the generation of its start: a pass handed out in
    one generation and starting in the next is not counted expired while it lives;
  - on a Redis Cluster the same, in the voucher's slot.
"""

import time

import harness as H
from harness import check, eq

from test_room import buy, join, poll, redis_lines_during, redis_ms, refused, tokens_for
from test_room_board import board_sales


def due_of(begin_s, rank, rate):
    return begin_s * 1000 + ((rank + 1) * 1000 + rate - 1) // rate


def rank_of(r, vid, u):
    return int(r.cmd("ZRANK", "seckill:room:{%d}" % vid, str(u)))


def wait_redis(r, ms, what):
    H.wait_until(lambda: redis_ms(r) >= ms, 30, what=what)


def test_future_pass_buys_from_its_start():
    r, srv = H.setup(settings={"rate_user_seckill": "0"})
    h = srv.http()
    uids = list(range(8100001, 8100009))
    toks = tokens_for(srv, uids)
    # R = 1/s, passes live 5 s; begun (the second now in Redis's clock): rank k is due
    # begin + (k + 1) s, 0..1 s ahead of now for rank 0
    begin = redis_ms(r) // 1000
    vid = H.create_seckill(srv, stock=5, begin=begin, end=begin + 3600,
                           waitingRoom={"admitPerSecond": 1, "passTtlS": 5})
    ans = {}
    for u in uids:
        st, j = join(h, vid, toks[u])
        check(st == 200 and j["success"], "join of %d: %r %r", u, st, j)
        ans[u] = j["data"]
    check(redis_ms(r) < begin * 1000 + 2500, "the joins took too long to check the schedule")
    for u in uids:
        k, d = rank_of(r, vid, u), ans[u]
        due = due_of(begin, k, 1)
        if due - redis_ms(r) > 5000:
            check("pass" not in d and d["state"] == "waiting", "place %d (due in > 5 s): %r",
                  k, d)
        elif "pass" in d and d["state"] == "waiting":
            eq(d["passFrom"], due, "place %d: its pass's start" % k)
            eq(d["passExpiresAt"], due + 5000, "place %d: its pass's expiry" % k)
    # the last place: due beyond the lifetime, no pass; told to poll once it is due within
    # one (+ 50 ms), when it gets the pass from the due moment
    u7 = next(u for u in uids if rank_of(r, vid, u) == 7)
    due7 = due_of(begin, 7, 1)
    st, j = poll(h, vid, toks[u7])
    d7 = j["data"]
    now = redis_ms(r)
    check(d7["state"] == "waiting" and "pass" not in d7, "a place due beyond the lifetime: %r",
          d7)
    want = due7 - 5000 + 50 - now
    check(want - 100 <= d7["pollAfterMs"] <= want + 300, "pollAfterMs %d, expected ~%d",
          d7["pollAfterMs"], want)

    # rank 3: due 3..4 s from now, its pass now
    u3 = next(u for u in uids if rank_of(r, vid, u) == 3)
    d = ans[u3]
    due3 = due_of(begin, 3, 1)
    check(d["state"] == "waiting" and d.get("pass") and d["passFrom"] == due3,
          "a pass valid from the due moment: %r (due %d)", d, due3)
    # a re-poll: the same pass, poll again at its start (+ 50 ms)
    st, j = poll(h, vid, toks[u3])
    d2 = j["data"]
    eq((d2["state"], d2["pass"], d2["passFrom"]), ("waiting", d["pass"], due3), "re-poll")
    left = due3 - redis_ms(r)
    check(left <= d2["pollAfterMs"] - 50 <= left + 300 or d2["pollAfterMs"] == 1000,
          "pollAfterMs %d for a pass starting in %d ms", d2["pollAfterMs"], left)
    # before its start: refused like no pass, nothing sold, no Redis command
    for _ in range(4):   # both workers learn the voucher has a room
        refused(*buy(h, vid, toks[u3], d["pass"]), "QUEUE_REQUIRED", "order before passFrom")
    lines = redis_lines_during(
        r, lambda: [refused(*buy(h, vid, toks[u3], d["pass"]), "QUEUE_REQUIRED",
                            "order before passFrom") for _ in range(10)], "{%d}" % vid)
    check(redis_ms(r) < due3, "the early orders came after passFrom: test too slow")
    eq(lines, [], "Redis commands of 10 orders before passFrom")
    eq(r.cmd("HLEN", H.k_buyers(vid)), 0, "buyers before passFrom")

    # from passFrom on, the pass buys
    wait_redis(r, due3, "the pass's start")
    st, j = buy(h, vid, toks[u3], d["pass"])
    check(j["success"], "order at passFrom: %r", j)
    H.wait_until(lambda: srv.db().order_count(vid) == 1, 30, what="the order in SQL")

    wait_redis(r, due7 - 5000 + 50, "the last place's poll")
    st, j = poll(h, vid, toks[u7])
    d7 = j["data"]
    check(d7["state"] == "waiting" and d7.get("pass") and d7["passFrom"] == due7,
          "the poll when due within the lifetime: %r (due %d)", d7, due7)
    H.finish(srv)


def test_future_pass_starts_follow_the_rate():
    """R = 4/s: every pass starts at its place's due moment (or, admitted at once, at the
    poll, later), so the starts are 250 ms apart in rank order and the passes valid by
    any moment t are at most floor((t - begin) * R)."""
    r, srv = H.setup(settings={"rate_user_seckill": "0"})
    h = srv.http()
    rate, n = 4, 24
    uids = list(range(8200001, 8200001 + n))
    toks = tokens_for(srv, uids)
    begin = redis_ms(r) // 1000
    vid = H.create_seckill(srv, stock=100, begin=begin, end=begin + 3600,
                           waitingRoom={"admitPerSecond": rate, "passTtlS": 60})
    start = {}
    for u in uids:
        st, j = join(h, vid, toks[u])
        d = j["data"]
        check(d.get("pass"), "every place is due within the lifetime: %r", d)
        start[rank_of(r, vid, u)] = (d["state"], d["passFrom"])
    eq(sorted(start), list(range(n)), "ranks")
    future = 0
    for k in range(n):
        state, s = start[k]
        due = due_of(begin, k, rate)
        check(s >= due, "place %d: a pass from %d before its due moment %d", k, s, due)
        if state == "waiting":
            eq(s, due, "place %d: a future pass's start" % k)
            future += 1
            if k > 0 and start[k - 1][0] == "waiting":
                eq(s - start[k - 1][1], 250, "starts of places %d and %d" % (k - 1, k))
    check(future >= n // 2, "too few future passes: %d of %d", future, n)
    starts = sorted(s for _, s in start.values())
    for i, t in enumerate(starts):
        check(i + 1 <= (t - begin * 1000) * rate // 1000,
              "%d passes valid by %d, %d released", i + 1, t, (t - begin * 1000) * rate // 1000)
    eq(int(r.cmd("HLEN", "seckill:room:issued:{%d}" % vid)), n, "passes issued")
    H.finish(srv)


@H.timeout(120)
def test_board_counts_a_pass_by_its_start():
    """Passes of 5 s (generations of 5,000 ms, begin on one's edge), R = 1/s, joined 2 s
    into generation G: ranks 0-1 admitted (G), 2-3 start in G, 4-6 start in G + 1 (handed
    out in G), 7 no pass. Once now is in G + 2 the board's expired counts G's passes only:
    one of G + 1's still lives; in G + 3 every one."""
    r, srv = H.setup(settings={"rate_user_seckill": "0"})
    h = srv.http()
    uids = list(range(8300001, 8300009))
    toks = tokens_for(srv, uids)
    H.wait_until(lambda: 1900 <= redis_ms(r) % 5000 <= 2600, 10, interval=0.01,
                 what="2 s into a generation")
    g = redis_ms(r) // 5000
    begin = g * 5
    vid = H.create_seckill(srv, stock=10, begin=begin, end=begin + 3600,
                           waitingRoom={"admitPerSecond": 1, "passTtlS": 5})
    passes = {}
    for u in uids:
        st, j = join(h, vid, toks[u])
        if "pass" in j["data"]:
            passes[u] = j["data"]
    check(redis_ms(r) // 5000 == g, "the joins left generation G")
    gens = sorted(d["passFrom"] // 5000 - g for d in passes.values())
    H.log("passes by their start's generation (relative to G): %r" % gens)
    check(gens.count(1) >= 2 and gens.count(0) >= 3, "passes by generation: %r", gens)
    first = min(passes, key=lambda u: passes[u]["passFrom"])
    st, j = buy(h, vid, toks[first], passes[first]["pass"])
    check(j["success"], "order with the first pass: %r", j)
    H.wait_until(lambda: board_sales(srv)[vid]["buyers"] == 1, 10, what="buyer on the board")
    b = board_sales(srv)[vid]["room"]
    eq((b["issued"], b["used"], b["expired"]), (len(passes), 1, 0), "board in G")

    def expired_by(now):
        """The passes past their expiry at now (Redis's clock), less the one used."""
        return sum(1 for d in passes.values() if d["passExpiresAt"] <= now) - 1

    wait_redis(r, (g + 2) * 5000 + 50, "generation G + 2")
    b = board_sales(srv)[vid]["room"]
    now = redis_ms(r)
    check(redis_ms(r) < (g + 3) * 5000, "the board read left generation G + 2")
    eq(b["expired"], gens.count(0) - 1, "expired in G + 2 (G's passes less the one used)")
    check(b["expired"] <= expired_by(now), "expired %d counts a living pass (%d are past "
          "their expiry)", b["expired"], expired_by(now))
    wait_redis(r, (g + 3) * 5000 + 50, "generation G + 3")
    b = board_sales(srv)[vid]["room"]
    eq((b["issued"], b["used"], b["expired"]), (len(passes), 1, len(passes) - 1),
       "board in G + 3")
    H.finish(srv)


@H.timeout(200)
def test_future_pass_on_a_cluster():
    cluster = H.start_redis_cluster(replicas=0)
    srv = H.start_server(cluster.url, name="inst-1", threads=2,
                         settings={"rate_user_seckill": "0"})
    node = None
    uids = list(range(8400001, 8400005))
    toks = tokens_for(srv, uids)
    h = srv.http()

    def now_ms():
        s, us = node.cmd("TIME")
        return int(s) * 1000 + int(us) // 1000
    begin = int(time.time())
    vid = H.create_seckill(srv, stock=3, begin=begin, end=begin + 3600,
                           waitingRoom={"admitPerSecond": 1, "passTtlS": 5})
    node = cluster.node_for(H.k_voucher(vid))
    got = {}
    for u in uids:
        st, j = join(h, vid, toks[u])
        check(j["success"], "join on the cluster: %r", j)
        got[u] = j["data"]
    last = uids[-1]   # rank 3: due begin + 4 s
    d = got[last]
    eq(int(node.cmd("ZRANK", "seckill:room:{%d}" % vid, str(last))), 3, "rank of the last")
    check(d["state"] == "waiting" and d.get("pass") and d["passFrom"] == begin * 1000 + 4000,
          "a future pass on the cluster: %r", d)
    refused(*buy(h, vid, toks[last], d["pass"]), "QUEUE_REQUIRED", "order before passFrom")
    check(now_ms() < d["passFrom"], "the early order came after passFrom: test too slow")
    eq(node.cmd("HLEN", H.k_buyers(vid)), 0, "buyers before passFrom")
    H.wait_until(lambda: now_ms() >= d["passFrom"], 30, what="passFrom")
    st, j = buy(h, vid, toks[last], d["pass"])
    check(j["success"], "order at passFrom on the cluster: %r", j)
    H.finish(srv)
