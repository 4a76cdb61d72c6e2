"""test_tryroom.py -- the waiting room and its bot gate tried from outside, as a buyer, an
operator and an attacker would (docs/waiting-room.md, docs/bot-gate.md, docs/api.md):

  - joins are limited per user like polls: a client that re-joins instead of polling (a
    join answers what a poll does) is 429 from memory after a few, so it cannot send
    room.lua calls at will; replaying one solved challenge is limited the same way (each
    replay would cost a SET NX), and so are challenges; a buyer's challenge, join, poll
    and order in quick succession still go through;
  - joining or asking a challenge of a voucher that does not exist answers 优惠券不存在
    (NO_VOUCHER), as for a poll;
  - a misspelt `waitingRoom` member (`botgate`) is refused 400 naming it, not a room
    created without the bot gate the operator asked for;
  - `seckill bench --waiting-room --html FILE` writes its page;
  - an order without a valid pass counts as its own outcome (`queue_required`), in
    /metrics and in the sale's totals on the board, not as a malformed request (which the
    board shows among errors).
"""

import json
import os

import harness as H
from harness import check, eq
from test_room import redis_lines_during, solve

DB_BACKENDS = ("sqlite",)   # the room decides in memory and Redis: one SQL backend is enough
FAST = {"pow_min_bits": 8, "pow_max_bits": 8}   # solvable in Python in ~1 ms


def calls_of(r, fn, needle, command):
    """The MONITOR lines of `command` naming `needle` while fn runs."""
    return [ln for ln in redis_lines_during(r, fn, needle) if '"%s"' % command in ln.lower()]


def code_of(st, j):
    return (st, j.get("code") if j else None)


def test_tryroom_joins_limited_unknown_voucher_and_members():
    r, srv = H.setup(settings=FAST, threads=1)
    h = srv.http()
    room = H.create_seckill(srv, stock=100, waitingRoom={"admitPerSecond": 1000})
    gated = H.create_seckill(srv, stock=100, waitingRoom={"admitPerSecond": 1000,
                                                          "botGate": True})
    a, b, c, d = (H.login(srv, r, H.phone_for(i), h) for i in (1, 2, 3, 4))

    # a buyer's own sequence, quickly: challenge, join, poll, order
    st, j = h.api("GET", "/seckill/challenge/%d" % gated, token=d)
    check(j and j["success"], "challenge: %r %r", st, j)
    ch = j["data"]
    st, j = h.api("POST", "/seckill/queue/%d" % gated,
                  {"challenge": ch["challenge"], "solution": solve(ch["challenge"],
                                                                   ch["difficulty"])}, token=d)
    check(j and j["success"] and j["data"]["state"] == "admitted", "gated join: %r %r", st, j)
    st, j = h.api("GET", "/seckill/queue/%d" % gated, token=d)
    check(j and j["success"] and j["data"].get("pass"), "poll: %r %r", st, j)
    st, j = h.api("POST", "/voucher-order/seckill/%d" % gated, token=d,
                  headers={"x-seckill-pass": j["data"]["pass"]})
    check(j and j["success"], "order with the pass: %r %r", st, j)

    # re-joining in a loop is polling without the poll limit: limited the same way
    answers = []

    def joins():
        for _ in range(20):
            st, hd, bd = h.request("POST", "/seckill/queue/%d" % room, {}, token=a)
            j = json.loads(bd) if bd else None
            answers.append(code_of(st, j))
            if st == 429:
                check(hd.get("retry-after", hd.get("Retry-After")) == "1",
                      "429 without Retry-After: %r", hd)
    calls = calls_of(r, joins, "{%d}" % room, "evalsha")
    H.log("20 joins in a row: %r; room.lua calls %d" % (answers, len(calls)))
    check(answers.count((429, "RATE_LIMITED")) >= 10, "joins in a row not limited: %r", answers)
    check(len(calls) <= 8, "20 joins in a row cost %d room.lua calls" % len(calls))

    # one solved challenge replayed: each replay would be a SET NX
    st, j = h.api("GET", "/seckill/challenge/%d" % gated, token=b)
    ch = j["data"]
    body = {"challenge": ch["challenge"], "solution": solve(ch["challenge"], ch["difficulty"])}
    replays = []

    def replay():
        for _ in range(20):
            replays.append(code_of(*h.api("POST", "/seckill/queue/%d" % gated, body, token=b)))
    sets = calls_of(r, replay, "seckill:pow:{%d}" % gated, "set")
    H.log("20 joins with one challenge: %r; SET NX %d" % (replays, len(sets)))
    eq(replays[0], (200, None), "the first join with the challenge")
    check(all(x in ((200, "CHALLENGE_REQUIRED"), (429, "RATE_LIMITED")) for x in replays[1:]),
          "replays: %r", replays)
    check(len(sets) <= 8, "20 joins with one challenge cost %d SET NX" % len(sets))

    # challenges in a loop: limited too
    chal = [code_of(*h.api("GET", "/seckill/challenge/%d" % gated, token=c)) for _ in range(20)]
    check(chal.count((429, "RATE_LIMITED")) >= 10, "challenges in a row: %r", chal)

    # a voucher that does not exist: 优惠券不存在, as the poll says
    e = H.login(srv, r, H.phone_for(5), h)
    for method, path in (("POST", "/seckill/queue/"), ("GET", "/seckill/challenge/"),
                         ("GET", "/seckill/queue/")):
        st, j = h.api(method, path + "987654321", {} if method == "POST" else None, token=e)
        check(st == 200 and j and j.get("code") == "NO_VOUCHER" and
              j.get("errorMsg") == "优惠券不存在", "%s %s of no voucher: %r %r", method, path,
              st, j)

    # a misspelt member: refused, naming it, and no voucher made
    for room_opts, name in (({"admitPerSecond": 5, "botgate": True}, "botgate"),
                            ({"admitPerSecond": 5, "passTTLs": 10}, "passTTLs"),
                            ({"admitPerSecond": 5, "x": {"y": [1]}}, "x")):
        body = {"shopId": 1, "title": "t", "payValue": 1, "actualValue": 2, "type": 1,
                "stock": 5, "beginTime": "2020-01-01T00:00:00",
                "endTime": "2099-01-01T00:00:00", "waitingRoom": room_opts}
        st, j = h.api("POST", "/voucher/seckill", body, admin=srv.admin_token)
        check(st == 400 and j and name in j.get("errorMsg", ""), "waitingRoom %r: %r %r",
              room_opts, st, j)
    H.finish(srv)


def test_tryroom_bench_html():
    """`seckill bench --waiting-room --html FILE`: the page is written, with the fairness
    figures and the audit's verdict."""
    r, srv = H.setup(threads=1)
    out = os.path.join(H.tmpdir(), "room.html")
    rc, stdout, stderr = H.run_tool(["bench", "--target", "http://127.0.0.1:%d" % srv.port,
                      "--redis", r.url, "--db", srv.db_url, "--admin-token", srv.admin_token,
                      "--seed-tokens", "--token-key-file",
                      os.path.join(srv.data_dir, "token-key"), "--users", "40", "--stock", "20",
                      "--waiting-room", "--room-rate", "1000", "--room-late", "1",
                      "--room-slow-ms", "0", "--conns", "4", "--quiet", "--html", out],
                     timeout=120)
    check(rc == 0, "bench --waiting-room: %s %s", stdout[-1500:], stderr[-500:])
    check(os.path.exists(out), "no page written: %s", stdout[-800:])
    page = open(out, encoding="utf-8").read()
    for want in ("audit clean", "Spearman", "passes", "20 bought"):
        check(want in page, "the page lacks %r", want)
    H.finish(srv)


def test_tryroom_order_without_pass_is_its_own_outcome():
    r, srv = H.setup(threads=1)
    h = srv.http()
    vid = H.create_seckill(srv, stock=10, waitingRoom={"admitPerSecond": 1000})
    tok = H.login(srv, r, H.phone_for(1), h)
    for _ in range(3):
        st, j = H.seckill(srv, tok, vid)
        eq(code_of(st, j), (200, "QUEUE_REQUIRED"), "an order without a pass")

    def outcomes():
        st, _, body = h.request("GET", "/metrics")
        check(st == 200, "/metrics: HTTP %d", st)
        got = {}
        for line in body.decode().splitlines():
            if line.startswith("seckill_seckill_requests_total{"):
                got[line.split('"')[1]] = float(line.split()[-1])
        return got
    got = outcomes()
    eq((got.get("queue_required"), got.get("bad_request", 0.0)), (3.0, 0.0),
       "outcomes queue_required and bad_request in /metrics")

    def totals():
        st, j = h.api("GET", "/admin/api/board", admin=srv.admin_token)
        sale = [s for s in (j or {}).get("data", {}).get("sales", []) if s.get("id") == vid]
        t = sale[0].get("totals") if sale else None
        return t if t and t.get("queue_required") == 3 else None
    t = H.wait_until(totals, 10, 0.2, "the sale's totals to count 3 orders without a pass")
    check("bad_request" not in t, "the sale's totals: %r", t)
    H.finish(srv)
