"""test_drain.py -- the order writer's Redis work follows the live streams, not history:
a stream in the drained set ({seckill:streams}:drained: its sale ended and every order it
admitted is in SQL) is named by no XREADGROUP, XAUTOCLAIM nor the metrics pass's XINFO
GROUPS; the set lost -> those streams are read again and re-marked; an entry added to a
drained stream by hand is found by the writer's slow sweep (--writer-drain-sweep-ms,
shortened here), taken out of the set and written. MONITOR shows what the writer sends;
a window is a number of the writer's metrics passes (each starts with TIME), not a sleep.

SQLite only: the writer's stream handling is the same for both backends."""

import time

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)

ENDED = 30       # vouchers whose sale is over, drained
DRAINED = "{seckill:streams}:drained"   # keys.h: the writers' drained set


def _drained(r):
    return set(int(x) for x in r.cmd("SMEMBERS", DRAINED) if x.isdigit())


def _stream_vid(key):
    """seckill:stream:{42} -> 42 (bucket streams "{42.b.K}" -> 42)."""
    inner = key[key.index("{") + 1:key.index("}")]
    return int(inner.split(".")[0])


def _watch(r, passes, until=None, timeout=30):
    """MONITOR until the writer has begun `passes` metrics passes (TIME) -- and, if given,
    until(line) held for a line. Returns {command: [stream voucher ids named]} over that
    window."""
    mon = r.client(timeout=timeout)
    mon.send("MONITOR")
    eq(mon._read(), "OK", "MONITOR")
    named = {"XREADGROUP": [], "XINFO": [], "XAUTOCLAIM": []}
    times, hit = 0, until is None
    end = time.time() + timeout
    try:
        while times < passes or not hit:
            check(time.time() < end, "MONITOR: %d of %d passes, condition %s", times, passes,
                  hit)
            line = mon._read()
            if '"TIME"' in line and " lua]" not in line:   # not a script's own TIME
                times += 1
            if until is not None and until(line):
                hit = True
            for c in named:
                if '"%s"' % c in line:
                    named[c] += [_stream_vid(w) for w in line.split('"')
                                 if w.startswith("seckill:stream:{")]
    finally:
        mon.close()
    return named


def test_writer_reads_only_live_streams():
    """ENDED drained vouchers and two on sale: the writer's reads and metrics passes name
    the live streams only, and orders of a live voucher still flow. Then the drained set
    is deleted (data loss): the old streams are read again and re-marked."""
    r, srv = H.setup(settings={"writer-drain-sweep-ms": "3600000"})
    h = srv.http()
    tok = H.login(srv, r, "13512345701", h)
    past = time.time() - 60
    ended = [H.create_seckill(srv, stock=5, begin=past - 3600, end=past, http=h)
             for _ in range(ENDED)]
    live = [H.create_seckill(srv, stock=5, http=h) for _ in range(2)]
    H.wait_until(lambda: _drained(r) >= set(ended), 60, what="the ended vouchers drained")
    H.wait_until(lambda: H.metric(srv, "seckill_writer_streams_drained") == ENDED, 10,
                 what="the writer skipping the drained streams")
    eq(H.metric(srv, "seckill_writer_streams_live"), 2, "streams the writer reads")

    named = _watch(r, 3)
    for c, vids in named.items():
        eq(sorted(set(vids) - set(live)), [], "drained streams named by %s" % c)
    check(set(named["XINFO"]) == set(live), "XINFO GROUPS of the live streams: %r",
          named["XINFO"])
    check(set(named["XREADGROUP"]) == set(live), "XREADGROUP of the live streams: %r",
          named["XREADGROUP"])
    st, j = H.seckill(srv, tok, live[0], h)
    check(st == 200 and j["success"], "a grab of a live voucher: %r %r", st, j)
    eq(H.wait_drained(srv, r, live[0], 30), 1, "the live voucher's order in SQL")

    # the set lost: every stream is read again, then re-marked
    r.cmd("DEL", DRAINED)
    again = set()

    def read_again(line):
        if '"XREADGROUP"' in line or '"XINFO"' in line:
            again.update(_stream_vid(w) for w in line.split('"')
                         if w.startswith("seckill:stream:{"))
        return again >= set(ended)
    _watch(r, 1, until=read_again)
    H.wait_until(lambda: _drained(r) >= set(ended), 30, what="the ended vouchers re-marked")
    H.wait_until(lambda: H.metric(srv, "seckill_writer_streams_drained") == ENDED, 10,
                 what="the writer skipping them again")
    eq(H.metric(srv, "seckill_writer_undrained_total"), 0, "sweep findings")
    H.finish(srv)


def test_sweep_picks_up_entry_in_drained_stream():
    """An order XADDed by hand into a drained stream (its sale over) is not stranded: the
    sweep sees the lag, takes the stream out of the drained set (order lookups ask it
    again), counts it, and the writer writes the order; then it is marked again."""
    r, srv = H.setup(settings={"writer-drain-sweep-ms": "300"})
    h = srv.http()
    past = int(time.time()) - 60
    vids = [H.create_seckill(srv, stock=5, begin=past - 3600, end=past, http=h)
            for _ in range(3)]
    H.wait_until(lambda: _drained(r) >= set(vids), 60, what="the ended vouchers drained")
    H.wait_until(lambda: H.metric(srv, "seckill_writer_streams_drained") == 3, 10,
                 what="the writer skipping them")
    vid = vids[1]
    r.cmd("XADD", H.k_stream(vid), "*", "os", "%d 0 4343434300 77" % (past - 10))
    db = srv.db()
    H.wait_until(lambda: db.order_count(vid) == 1, 30, what="the hand-added order in SQL")
    check(H.metric(srv, "seckill_writer_undrained_total") >= 1, "the sweep's finding counted")
    check(srv.log_lines("drained stream .*" + str(vid)),
          "no log line of the sweep's finding:\n%s", srv.log_tail())
    H.wait_until(lambda: vid in _drained(r), 30, what="the stream marked drained again")
    eq(db.order_count(vids[0]) + db.order_count(vids[2]), 0, "orders of the other vouchers")
    H.finish(srv)


def test_cluster_node_writer_skips_drained():
    """The per-node writer of a (one-node) Redis Cluster: its per-stream reads and XINFO
    GROUPS name only the live streams once the ended ones are in the drained set, which
    lives in the registry's slot."""
    r = H.start_one_node_cluster()
    srv = H.start_server("redis+cluster://127.0.0.1:%d" % r.port)
    h = srv.http()
    past = time.time() - 60
    ended = [H.create_seckill(srv, stock=5, begin=past - 3600, end=past, http=h)
             for _ in range(8)]
    live = [H.create_seckill(srv, stock=5, http=h)]
    H.wait_until(lambda: _drained(r) >= set(ended), 60, what="the ended vouchers drained")
    H.wait_until(lambda: H.metric(srv, "seckill_writer_streams_drained") == 8, 10,
                 what="the node's writer skipping them")
    named = _watch(r, 3)
    for c, vids in named.items():
        eq(sorted(set(vids) - set(live)), [], "drained streams named by %s" % c)
    check(set(named["XREADGROUP"]) == set(live), "XREADGROUP of the live stream: %r",
          named["XREADGROUP"])
    H.finish(srv)
