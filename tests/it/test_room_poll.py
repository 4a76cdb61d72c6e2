"""test_room_poll.py -- how often a waiting room's buyers poll (src/room/room.c, room.lua;
docs/waiting-room.md, "When to poll").

  - pollAfterMs follows the place: after begin a place due within the pass lifetime holds
    its pass already (valid from its due moment) and is told to poll at that moment (50 ms
    after, at least 1 s from now: an old client's one more poll); a place due later polls
    when it is due within one lifetime (50 ms after); so a room costs about one poll per
    buyer after begin however many wait;
  - a buyer that polls as told holds its pass after at most two polls (one for a place due
    within the lifetime), valid exactly from its place's due moment (passFrom);
  - a poll runs no ZSCORE in Redis (ZRANK says whether the user has a place): INFO
    commandstats counts the commands room.lua runs.
"""

import threading
import time

import harness as H
from harness import check, eq
from test_room import tokens_for

# When to poll is the room's Redis script and the worker's answer: no SQL in it (test_room.py
# runs the room on both backends).
DB_BACKENDS = ("sqlite",)
# run alone under tests/run.py -j: a buyer's poll must come before its place is due
SERIAL = True

TTL_S = 5   # places due more than 5 s ahead get no pass yet


def queue(h, method, vid, tok):
    st, j = h.api(method, "/seckill/queue/%d" % vid, {} if method == "POST" else None, token=tok)
    check(st == 200 and j and j["success"], "%s queue: %r %r", method, st, j)
    return j["data"]


def cmdstat(r, name):
    for ln in r.cmd("INFO", "commandstats").splitlines():
        if ln.startswith("cmdstat_%s:" % name):
            return int(ln.split("calls=")[1].split(",")[0])
    return 0


def check_after(d):
    """pollAfterMs of a waiting answer after begin against its waitS (the wait W rounded
    up to s): with a pass (W until its start) W + 50 ms, without one W - the lifetime +
    50 ms; at least 1 s."""
    w_lo, w_hi = 1000 * (d["waitS"] - 1), 1000 * d["waitS"]   # W in (w_lo, w_hi]
    if "pass" not in d:
        w_lo, w_hi = w_lo - TTL_S * 1000, w_hi - TTL_S * 1000
    after = d["pollAfterMs"]
    lo, hi = max(1000, w_lo + 50), max(1000, w_hi + 50)
    check(lo <= after <= hi, "pollAfterMs %d for waitS %d: expected %d..%d (%r)",
          after, d["waitS"], lo, hi, d)


def test_poll_after_follows_the_place():
    r, srv = H.setup()
    h = srv.http()
    rate, n = 20, 400   # the last place is due 20 s after begin
    users = list(range(7500001, 7500001 + n))
    toks = tokens_for(srv, users)
    begin = int(time.time()) + 1
    vid = H.create_seckill(srv, stock=100000, begin=begin,
                           waitingRoom={"admitPerSecond": rate, "passTtlS": TTL_S})
    H.wait_until(lambda: int(r.cmd("TIME")[0]) >= begin, 10, what="beginTime")
    for u in users:   # after begin: first come, first served
        queue(h, "POST", vid, toks[u])
    followers = (users[n // 2], users[-1])   # poll as told below
    checked = {"near": 0, "far": 0}
    for u in users[::7]:
        if u in followers:
            continue
        d = queue(h, "GET", vid, toks[u])
        if d["state"] != "waiting":
            continue
        check_after(d)
        checked["near" if "pass" in d else "far"] += 1
    H.log("pollAfterMs checked: %r" % checked)
    check(checked["near"] >= 5 and checked["far"] >= 5, "too few places checked: %r", checked)

    # two buyers poll as told from here, until they hold a pass: the last place and one in
    # the middle
    res = {}

    def follow(u):
        hh = srv.http()
        polls = 0
        while True:
            d = queue(hh, "GET", vid, toks[u])
            polls += 1
            if "pass" in d:
                res[u] = (polls, d["passFrom"])
                return
            eq(d["state"], "waiting", "state of %d" % u)
            check(polls < 20, "user %d still waiting after 20 polls" % u)
            time.sleep(d["pollAfterMs"] / 1000.0)   # what the answer asks of a client
    th = [threading.Thread(target=follow, args=(u,)) for u in followers]
    for t in th:
        t.start()
    for t in th:
        t.join(60)
    for u in followers:
        check(u in res, "user %d was not admitted" % u)
        rank = users.index(u)
        due = begin * 1000 + ((rank + 1) * 1000 + rate - 1) // rate
        polls, start = res[u]
        H.log("user of place %d: a pass after %d polls, valid %d ms after due" %
              (rank, polls, start - due))
        check(polls <= 2, "place %d polled %d times", rank, polls)
        eq(start, due, "place %d: its pass's start" % rank)
    H.finish(srv)


def test_poll_runs_no_zscore():
    r, srv = H.setup()
    h = srv.http()
    users = list(range(7600001, 7600021))
    toks = tokens_for(srv, users)
    begin = int(time.time()) + 3600
    vid = H.create_seckill(srv, stock=100000, begin=begin, end=begin + 3600,
                           waitingRoom={"admitPerSecond": 10})
    for u in users:
        eq(queue(h, "POST", vid, toks[u])["state"], "waiting", "join")
    z0, k0 = cmdstat(r, "zscore"), cmdstat(r, "zrank")
    for u in users:
        d = queue(h, "GET", vid, toks[u])
        eq(d["state"], "waiting", "poll")
    z1, k1 = cmdstat(r, "zscore"), cmdstat(r, "zrank")
    eq(k1 - k0, len(users), "ZRANK calls over the polls")
    eq(z1 - z0, 0, "ZSCORE calls over the polls")
    # a user who never joined is told so
    u = 7609999
    toks.update(tokens_for(srv, [u]))
    eq(queue(h, "GET", vid, toks[u])["state"], "notQueued", "poll without a join")
    H.finish(srv)
