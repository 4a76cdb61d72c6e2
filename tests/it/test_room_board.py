"""test_room_board.py -- the sale board's waiting-room figures (api_board.c, web/board.js).

  - a sale with a room carries "room": {admitPerSecond, passTtlS, released, queued, waiting,
    waitS, issued, used, expired}; a sale without one "room": null;
  - a room that has not begun: everyone waiting, the wait of the last in line is its
    position / R plus the time to begin;
  - a running room: passes issued = users admitted, used = orders made with a pass,
    expired 0 while the passes live and exactly issued - used once they are past their
    expiry (Redis's clock);
  - the board reads two commands per room sale (ZCARD, HLEN) and none for a sale without a
    room (INFO commandstats across one board request);
  - the page (tests/browser/board_room.mjs, chromium under the board's CSP) shows a room
    line right under the room's sale, none under a sale without a room, and a measured
    passes-issued rate above zero while buyers join; screenshot build/browser/board-room.png;
  - on a Redis Cluster, a bot-gated room's replay key and its room keys live on the node of
    the voucher's slot.
"""

import json
import os
import subprocess
import threading
import time

import harness as H
from harness import check, eq

from test_board import BROWSER_DIR, _browser_tools
from test_room import buy, join, redis_ms, solve, tokens_for

DB_BACKENDS = ("sqlite",)   # the room figures come from Redis: one SQL backend is enough


def board_sales(srv):
    st, j = srv.http().api("GET", "/admin/api/board", admin=srv.admin_token)
    check(st == 200 and j["success"], "board: %r %r", st, j)
    return {s["id"]: s for s in j["data"]["sales"]}


def calls(r, name):
    for line in r.cmd("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_%s:" % name):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def test_room_board_figures():
    r, srv = H.setup(settings={"rate_user_seckill": "0"})
    uids = list(range(7600001, 7600011))
    toks = tokens_for(srv, uids)
    h = srv.http()
    plain = H.create_seckill(srv, stock=5)
    # not begun: R = 2/s, begins in 60 s
    later = H.create_seckill(srv, stock=5, begin=time.time() + 60,
                             waitingRoom={"admitPerSecond": 2})
    for u in uids[:4]:
        st, j = join(h, later, toks[u])
        check(j["success"] and j["data"]["state"] == "waiting", "early join: %r", j)
    # running: R = 1000/s from now, passes live 5 s
    begin = int(redis_ms(r) // 1000)
    vid = H.create_seckill(srv, stock=3, begin=begin,
                           waitingRoom={"admitPerSecond": 1000, "passTtlS": 5})
    passes = {}
    for u in uids[4:]:
        st, j = join(h, vid, toks[u])
        check(j["success"] and j["data"]["state"] == "admitted", "join: %r", j)
        passes[u] = (j["data"]["pass"], j["data"]["passExpiresAt"])
    for u in uids[4:6]:
        st, j = buy(h, vid, toks[u], passes[u][0])
        check(j["success"], "order with a pass: %r", j)
    H.wait_until(lambda: board_sales(srv)[vid]["buyers"] == 2, 10, what="buyers on the board")

    before_z, before_h = calls(r, "zcard"), calls(r, "hlen")
    sales = board_sales(srv)
    # ZCARD: one per room sale; HLEN: the buyers of each of the 3 sales, as before
    eq(calls(r, "zcard") - before_z, 2, "ZCARD per board request")
    eq(calls(r, "hlen") - before_h, 3, "HLEN per board request")
    check("room" not in sales[plain], "a sale without a room: %r", sales[plain])

    w = sales[later]["room"]
    eq((w["admitPerSecond"], w["passTtlS"], w["released"], w["queued"], w["waiting"]),
       (2, 60, 0, 4, 4), "room not begun")
    eq((w["issued"], w["used"], w["expired"]), (0, 0, 0), "room not begun: passes")
    check(60 <= w["waitS"] <= 63, "wait of the last in line (4 / 2 s + ~60 s): %r", w)

    g = sales[vid]["room"]
    eq((g["queued"], g["waiting"], g["issued"], g["used"]), (6, 0, 6, 2), "running room")
    last = max(e for _, e in passes.values())
    if redis_ms(r) < last:
        eq(g["expired"], 0, "expired while the passes live")
    check(g["released"] >= 6, "released: %r", g)

    # every pass issued in a generation (5 s) older than the one before now's
    counted = ((last - 5000) // 5000 + 2) * 5000
    H.wait_until(lambda: redis_ms(r) > counted + 50, 20, what="passes two generations old")
    g = board_sales(srv)[vid]["room"]
    eq((g["issued"], g["used"], g["expired"]), (6, 2, 4), "passes after their expiry")
    H.finish(srv)


def test_room_board_in_chromium():
    """The page's room line, under its CSP, while buyers join: tests/browser/board_room.mjs."""
    node, chromium = _browser_tools()
    r, srv = H.setup(settings={"rate_user_seckill": "0"})
    uids = list(range(7700001, 7700401))
    toks = tokens_for(srv, uids)
    plain = H.create_seckill(srv, stock=5)
    vid = H.create_seckill(srv, stock=50, waitingRoom={"admitPerSecond": 1000})
    stop = threading.Event()

    def joiner():
        h = srv.http()
        for u in uids:
            if stop.wait(0.05):
                return
            join(h, vid, toks[u])
    t = threading.Thread(target=joiner)
    t.start()
    try:
        env = dict(os.environ, BOARD_URL="http://127.0.0.1:%d" % srv.port,
                   ADMIN_TOKEN=srv.admin_token, ROOM=str(vid), PLAIN=str(plain),
                   OUT_DIR=os.path.join(H.ROOT, "build", "browser"), CHROMIUM=chromium)
        p = subprocess.run([node, os.path.join(BROWSER_DIR, "board_room.mjs")], env=env,
                           capture_output=True, text=True, timeout=120, cwd=BROWSER_DIR)
    finally:
        stop.set()
        t.join()
    H.log("board_room.mjs:", p.stdout[-2000:], p.stderr[-3000:])
    check(p.returncode == 0, "board_room.mjs failed (exit %d):\n%s\n%s", p.returncode,
          p.stdout[-3000:], p.stderr[-3000:])
    found = json.loads(p.stdout.strip().splitlines()[-1])
    eq(found["errors"], [], "JavaScript errors")
    eq(found["plain_has_line"], False, "a room line under the sale without a room")
    eq(found["row_after_sale"], str(vid), "the room line right under its sale")
    parts = found["parts"]
    check(parts["head"] == "waiting room:" and parts["rate"].startswith("1,000/s admitted"),
          "room line: %r", parts)
    for k in ("queued", "issued", "used", "expired", "waiting"):
        check(parts[k].split(" ")[0].replace(",", "").isdigit(), "%s: %r", k, parts)
    H.finish(srv)


@H.timeout(200)
def test_room_bot_gate_cluster_slot():
    """On a Redis Cluster a bot-gated room's keys and its solved challenge's replay key
    (seckill:pow:{id}:<mac>) live on the node of the voucher's slot: the join's SET NX
    reaches it (the join succeeds, a replay is refused) and the key is found there."""
    cluster = H.start_redis_cluster(replicas=0)
    srv = H.start_server(cluster.url, name="inst-1", threads=2)
    vid = H.create_seckill(srv, stock=3, waitingRoom={"admitPerSecond": 1000, "botGate": True})
    node = cluster.node_for(H.k_voucher(vid))
    uid = 7800001
    tok = tokens_for(srv, [uid])[uid]
    h = srv.http()
    st, j = h.api("GET", "/seckill/challenge/%d" % vid, token=tok)
    check(j["success"], "challenge: %r", j)
    c, d = j["data"]["challenge"], j["data"]["difficulty"]
    body = {"challenge": c, "solution": solve(c, d)}
    st, j = join(h, vid, tok, body)
    check(j["success"] and j["data"]["state"] == "admitted", "gated join on the cluster: %r", j)
    pass_ = j["data"]["pass"]
    st, j = join(h, vid, tok, body)
    check(not j["success"] and j.get("code") == "CHALLENGE_REQUIRED", "replay: %r", j)
    replay = "seckill:pow:{%d}:%s" % (vid, c.rsplit(".", 1)[1])
    eq(cluster.node_for(replay).port, node.port, "node of the replay key")
    eq(node.cmd("EXISTS", replay), 1, "the replay key on the voucher's node")
    for k in ("seckill:room:{%d}" % vid, "seckill:room:issued:{%d}" % vid):
        eq(node.cmd("EXISTS", k), 1, "%s on the voucher's node" % k)
    st, j = buy(h, vid, tok, pass_)
    check(j["success"], "order with the pass on the cluster: %r", j)
    H.finish(srv)
