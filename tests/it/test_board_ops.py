"""test_board_ops.py -- running and reviewing a sale from the board: create-time validation,
titles, per-sale totals kept in Redis, the event log, and the sale controls.

- POST /voucher/seckill refuses a sale that cannot sell (stock 0, an end in the past), an
  end not after its begin and a price above the voucher's worth, with a clear 400;
- the board's data names each sale's title and carries its totals by outcome, the same
  from both instances and after the instance that counted them is gone (they live in
  Redis, added by each instance once a second);
- a Redis killed and restarted within a second leaves redis_down / redis_up in the event
  log (written from memory once Redis is back);
- pause, resume, end and extend through the admin API while `seckill bench` sells: paused
  -> 秒杀已暂停 (code PAUSED) on both instances at once and no admission during the pause,
  resumed -> sells, ended -> 秒杀已经结束！, extended -> sells again and SQL has the new
  end; bench's audit and `seckill audit` stay clean and the events show each control.
The page's side of the same (countdowns, form validation, controls, totals after a
reload) is tests/browser/board.mjs, run by test_board.py.
"""

import subprocess
import time

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite", "mysql")
MSG_PAUSED = "秒杀已暂停"


def _cluster(n=2, threads=2):
    redis = H.start_redis()
    first = H.start_server(redis, name="ops-1", threads=threads)
    servers = [first]
    for i in range(2, n + 1):
        servers.append(H.start_server(redis, name="ops-%d" % i, threads=1,
                                      data_dir=H.subdir("ops-inst-%d" % i),
                                      db_path=first.db_path, admin_token=first.admin_token))
    return redis, servers


def _board(srv):
    h = H.Http(srv.port)
    try:
        st, j = h.api("GET", "/admin/api/board", admin=srv.admin_token)
    finally:
        h.close()
    eq(st, 200, "board data (%r)" % (j,))
    return j["data"]


def _sale(srv, vid):
    s = [x for x in _board(srv)["sales"] if x["id"] == vid]
    return s[0] if s else None


def _control(srv, vid, action, body=None, admin=True):
    h = H.Http(srv.port)
    try:
        return h.api("POST", "/admin/api/sale/%d/%s" % (vid, action), body,
                     admin=srv.admin_token if admin else None)
    finally:
        h.close()


def test_create_refuses_a_sale_that_cannot_sell():
    r, srv = H.setup()
    h = srv.http()
    now = time.time()
    cases = (
        ("stock 0", H.seckill_body(stock=0, allowClosed=None),
         "stock must be an integer from 1 to 100000000"),
        ("an end in the past", H.seckill_body(begin=now - 7200, end=now - 60, allowClosed=None),
         "endTime must be in the future"),
        ("end before begin", H.seckill_body(begin=now + 7200, end=now + 3600),
         "endTime must be after beginTime"),
        ("end equal to begin", H.seckill_body(begin=now + 3600, end=now + 3600),
         "endTime must be after beginTime"),
        ("pay above worth", H.seckill_body(payValue=10001, actualValue=10000),
         "payValue must not be above actualValue"),
        ("allowClosed not a boolean", H.seckill_body(allowClosed="yes"),
         "allowClosed must be true or false"),
    )
    for what, body, msg in cases:
        st, j = h.api("POST", "/voucher/seckill", body, admin=srv.admin_token)
        eq((st, j and j.get("success"), j and j.get("errorMsg"), j and j.get("code")),
           (400, False, msg, "BAD_REQUEST"), "create with " + what)
    eq(srv.db().scalar("SELECT COUNT(*) FROM tb_seckill_voucher"), 0, "sales created")
    # A sale that can sell is created as before; one asked for as closed (a record of a
    # past sale, a sold-out rehearsal) too.
    H.create_seckill(srv, stock=1, http=h)
    H.create_seckill(srv, stock=0, http=h)
    H.create_seckill(srv, stock=5, begin=now - 7200, end=now - 3600, http=h)
    eq(srv.db().scalar("SELECT COUNT(*) FROM tb_seckill_voucher"), 3, "sales created")
    H.finish(srv)


def test_totals_titles_and_sale_events_across_instances():
    redis, (s1, s2) = _cluster(2)
    vid = H.create_seckill(s1, stock=4, title="周末秒杀券")
    tokens = [H.login(s1, redis, H.phone_for(i)) for i in range(6)]
    got = []
    # 4 sold, 2 duplicates (while stock is left: the course checks stock first), 2 sold out;
    # answered by both instances
    for i, k in enumerate((0, 1, 0, 1, 2, 3, 4, 5)):
        got.append(H.seckill(s1 if i % 2 else s2, tokens[k], vid)[1].get("errorMsg"))
    eq(got, [None, None, H.MSG_DUPLICATE, H.MSG_DUPLICATE, None, None, H.MSG_SOLD_OUT,
             H.MSG_SOLD_OUT], "answers")
    want = {"ok": 4, "sold_out": 2, "duplicate": 2}

    def totals(srv):
        s = _sale(srv, vid)
        return s["totals"] if s and s["totals"] == want else None
    t1 = H.wait_until(lambda: totals(s1), 10, 0.2, "totals on instance 1")
    t2 = H.wait_until(lambda: totals(s2), 10, 0.2, "totals on instance 2")
    eq(t1, t2, "totals seen from both instances")
    sale = _sale(s1, vid)
    eq((sale["title"], sale["paused"], sale["stock"], sale["buyers"]),
       ("周末秒杀券", False, 0, 4), "title, paused, stock, buyers")
    # Kept in Redis: the instance that counted them gone, the next request (a page
    # reload) shows the same totals.
    s2.stop()
    eq(_sale(s1, vid)["totals"], want, "totals after instance 2 stopped")
    # The sale's events, once each across both instances, newest first.
    def sale_events():
        ev = [e for e in _board(s1)["events"] if e.get("voucher") == vid]
        kinds = [e["kind"] for e in ev]
        return ev if {"sale_opened", "sale_sold_out"} <= set(kinds) else None
    ev = H.wait_until(sale_events, 10, 0.2, "the sale's events")
    kinds = [e["kind"] for e in ev]
    eq((kinds.count("sale_opened"), kinds.count("sale_sold_out")), (1, 1), "events once each")
    ts = [e["ts"] for e in _board(s1)["events"]]
    eq(ts, sorted(ts, reverse=True), "events newest first")
    H.finish(s1)


def test_redis_restart_within_a_second_is_an_event():
    redis, srv = H.setup(name="ops-ev")
    H.wait_until(lambda: _board(srv)["instances"], 10, 0.2, "the instance announced")
    eq([e["kind"] for e in _board(srv)["events"] if e["kind"].startswith("redis")], [],
       "redis events before the restart")
    redis.kill()
    redis.start()
    t0 = time.time()

    def restarted():
        kinds = [e["kind"] for e in _board(srv)["events"]]
        return kinds if "redis_down" in kinds and "redis_up" in kinds else None
    kinds = H.wait_until(restarted, 15, 0.2, "redis_down and redis_up in the event log")
    check(kinds.index("redis_up") < kinds.index("redis_down"),
          "newest first: redis_up before redis_down: %r", kinds)
    ev = {e["kind"]: e for e in _board(srv)["events"]}
    eq(ev["redis_down"]["instance"], "ops-ev", "the instance that saw it")
    check(ev["redis_down"]["ts"] <= ev["redis_up"]["ts"] <= (time.time() + 1) * 1000,
          "event times: %r", ev)
    H.log("events visible %.1f s after the restart" % (time.time() - t0))
    H.finish(srv)


def test_controls_refuse_bad_requests():
    r, srv = H.setup()
    vid = H.create_seckill(srv, stock=5)
    st, _ = _control(srv, vid, "pause", admin=False)
    eq(st, 403, "pause without the admin token")
    st, j = _control(srv, 987654, "pause")
    eq((st, j["errorMsg"]), (404, H.MSG_NO_VOUCHER), "pause of an unknown sale")
    for body, msg in (({}, "endTime must be a local date-time like \"2024-01-31T10:00:00\""),
                      ({"endTime": H.fmt_time(time.time() - 10)}, "endTime must be in the future"),
                      ({"endTime": H.fmt_time(time.time() + 60)},
                       "endTime must be later than the sale's current end")):
        st, j = _control(srv, vid, "extend", body)
        eq((st, j["errorMsg"]), (400, msg), "extend with %r" % body)
    eq(_control(srv, vid, "end")[0], 200, "end")
    st, j = _control(srv, vid, "end")
    eq((st, j["errorMsg"]), (400, "the sale has already ended"), "end twice")
    # a sale not started yet ends at its begin: it never opens
    begin = int(time.time()) + 3600
    later = H.create_seckill(srv, stock=5, begin=begin, end=begin + 3600)
    st, j = _control(srv, later, "end")
    eq((st, j["data"]["endTime"]), (200, H.fmt_time(begin)), "end of a sale not started")
    H.finish(srv)


@H.serial   # a resume takes effect within 1.5 s while a bench sells
@H.timeout(300)
def test_pause_resume_end_extend_under_bench():
    redis, (s1, s2) = _cluster(2)
    stock = 500
    vid = H.create_seckill(s1, stock=stock)
    bench = [H.binary(), "bench", "--target", "http://127.0.0.1:%d" % s2.port,
             "--also-target", "http://127.0.0.1:%d" % s1.port,
             "--redis", redis.url, "--db", s1.db_url, "--admin-token", s1.admin_token,
             "--voucher", str(vid), "--stock", str(stock), "--seed-tokens",
             "--users", "3000", "--rate", "150", "--conns", "8", "--dup", "0", "--quiet"]
    p = subprocess.Popen(bench, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=H.san_env(), text=True)
    probes = [H.login(s1, redis, H.phone_for(i, prefix="139")) for i in range(4)]
    buyers = lambda: int(redis.cmd("HLEN", H.k_buyers(vid)))
    try:
        H.wait_until(lambda: buyers() >= 20, 30, 0.1, "the bench selling")
        st, j = _control(s1, vid, "pause")
        eq((st, j["success"], j["data"]["paused"]), (200, True, True), "pause")
        # both instances refuse at once (admit.lua reads the flag)
        for srv in (s1, s2):
            st, j = H.seckill(srv, probes[0], vid)
            eq((j.get("errorMsg"), j.get("code")), (MSG_PAUSED, "PAUSED"),
               "a buyer on %s while paused" % srv.name)
        n0 = buyers()
        time.sleep(1.0)          # an observation window: nothing may be admitted in it
        eq(buyers(), n0, "admissions during the pause")
        check(_sale(s1, vid)["paused"], "the board shows the sale paused")
        eq(_control(s1, vid, "resume")[0], 200, "resume")
        t0 = time.time()
        H.wait_until(lambda: H.seckill(s2, probes[0], vid)[1].get("success"), 1.5, 0.05,
                     "the paused buyer sells after the resume")
        check(time.time() - t0 < 1.5, "resume took effect within a second or so")
        H.wait_until(lambda: buyers() > n0 + 10, 20, 0.1, "the bench selling again")
        eq(_control(s2, vid, "end")[0], 200, "end")
        for srv in (s1, s2):
            st, j = H.seckill(srv, probes[1], vid)
            eq((j.get("errorMsg"), j.get("code")), (H.MSG_ENDED, "ENDED"),
               "a buyer on %s after the end" % srv.name)
        n1 = buyers()
        new_end = int(time.time()) + 1800
        st, j = _control(s1, vid, "extend", {"endTime": H.fmt_time(new_end)})
        eq((st, j["data"]["endTime"]), (200, H.fmt_time(new_end)), "extend")
        H.wait_until(lambda: H.seckill(s1, probes[1], vid)[1].get("success"), 1.5, 0.05,
                     "the ended buyer sells after the extend")
        H.wait_until(lambda: buyers() > n1 + 10, 20, 0.1, "the bench selling after the extend")
        out, err = p.communicate(timeout=200)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    eq(p.returncode, 0, "bench exit status (its audit): %s" % err[-2000:])
    H.log("bench:", out[-3000:])
    rc, aout = H.audit(redis, s1.db_url, vid)
    eq(rc, 0, "seckill audit: %s" % aout[-2000:])
    # SQL has the new end (the voucher list reads SQL), so a rebuild keeps it.
    st, j = s1.http().api("GET", "/voucher/list/1")
    eq([v["endTime"] for v in j["data"] if v["id"] == vid], [H.fmt_time(new_end)],
       "the end in SQL")
    H.wait_drained(s1, redis, vid)
    eq(H.Db(s1.db_url).order_count(vid), buyers(), "orders in SQL = buyers in Redis")
    kinds = [e["kind"] for e in _board(s1)["events"] if e.get("voucher") == vid]
    for k in ("sale_paused", "sale_resumed", "sale_ended", "sale_extended"):
        check(k in kinds, "event %s on the board: %r", k, kinds)
    eq(kinds.index("sale_extended") < kinds.index("sale_paused"), True, "newest first")
    def totals():
        t = _sale(s1, vid)["totals"]
        return t if t.get("ok") == buyers() and t.get("paused", 0) >= 2 else None
    t = H.wait_until(totals, 10, 0.2, "totals: every sale, and the paused answers")
    check(t.get("ended", 0) >= 2, "ended answers in the totals: %r", t)
    H.finish(s1)
    H.finish(s2)


def test_pause_in_queue_mode_and_refused_in_sync_mode():
    """Queue mode admits through the same script: a pause holds there too. Sync mode takes
    stock in SQL: pause is refused with the reason, end and extend still work."""
    r, srv = H.setup(settings={"mode": "queue"})
    vid = H.create_seckill(srv, stock=5)
    tok = H.login(srv, r, "13612345678")
    eq(_control(srv, vid, "pause")[0], 200, "pause in queue mode")
    st, j = H.seckill(srv, tok, vid)
    eq((j.get("errorMsg"), j.get("code")), (MSG_PAUSED, "PAUSED"), "a buyer while paused")
    eq(_control(srv, vid, "resume")[0], 200, "resume in queue mode")
    H.wait_until(lambda: H.seckill(srv, tok, vid)[1].get("success"), 1.5, 0.05,
                 "the buyer sells after the resume")
    H.wait_until(lambda: H.Db(srv.db_url).order_count(vid) == 1, 10, 0.1, "the order in SQL")
    H.finish(srv)
    r, srv = H.setup(settings={"mode": "sync"})
    vid = H.create_seckill(srv, stock=5)
    st, j = _control(srv, vid, "pause")
    eq((st, j["errorMsg"]), (400, "pause needs --mode stream or queue; this server runs "
                                 "--mode sync"), "pause in sync mode")
    tok = H.login(srv, r, "13612345679")
    eq(_control(srv, vid, "end")[0], 200, "end in sync mode")
    eq(H.seckill(srv, tok, vid)[1].get("errorMsg"), H.MSG_ENDED, "a buyer after the end (sync)")
    new_end = int(time.time()) + 1800
    eq(_control(srv, vid, "extend", {"endTime": H.fmt_time(new_end)})[0], 200, "extend (sync)")
    check(H.seckill(srv, tok, vid)[1].get("success"), "a buyer after the extend (sync)")
    H.finish(srv)


def test_rebuild_is_an_event():
    """Redis loses its data (FLUSHALL): the rebuild watch rebuilds the live sale from SQL,
    and the event log (itself rebuilt from the instance's memory) says so."""
    r, srv = H.setup(name="ops-rb")
    vid = H.create_seckill(srv, stock=5)
    r.cmd("FLUSHALL")
    H.wait_until(lambda: H.voucher_present(r, vid), 20, 0.1, "the sale rebuilt")

    def rebuilt():
        ev = [e for e in _board(srv)["events"] if e["kind"] == "rebuild"]
        return ev or None
    ev = H.wait_until(rebuilt, 10, 0.2, "the rebuild in the event log")
    eq((ev[0].get("voucher"), ev[0]["instance"]), (vid, "ops-rb"), "the rebuild event")
    H.finish(srv)
