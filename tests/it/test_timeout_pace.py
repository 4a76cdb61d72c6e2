"""test_timeout_pace.py -- the payment-deadline sweep's pace (docs/lifecycle.md, "What a wave
of deadlines costs the sale"): a wave of orders past their deadline together is timed out
at most --timeout-rate orders a second, in calls of at most 32 orders, and every order is
still timed out once, its unit returned once."""

import time

import harness as H
from harness import check
from test_lifecycle_faults import FAST, _counted, unpaid_wave

DB_BACKENDS = ("sqlite",)   # the pace is the writer's Redis side; SQL only follows


def _cmd_calls(r, name):
    """Redis's calls of command name so far (INFO commandstats)."""
    for line in r.cmd("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_%s:" % name):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


@H.timeout(240)
def test_wave_swept_at_the_rate_in_small_calls():
    """2,000 unpaid orders past their deadline together (a restart with --pay-timeout-s 1),
    --timeout-rate 1000: Redis's count of timed-out orders never runs ahead of 1,000 a
    second from the first (plus the pace's 100 ms of credit and one call), the expire calls
    hold 32 orders at most (at least 2,000 / 32 of them), and every order is timed out and
    its unit returned exactly once (SQL and Redis counted, the audit clean)."""
    rate, n = 1000, 2000
    r, srv, vid = unpaid_wave(n)
    evals0 = _cmd_calls(r, "eval") + _cmd_calls(r, "evalsha")
    settings = dict(FAST, **{"pay-timeout-s": "1", "timeout-rate": str(rate)})
    srv = H.restart_server(srv, settings=settings)
    samples = []   # (monotonic s, orders timed out in Redis)

    def timed_out():
        samples.append((time.monotonic(), int(r.cmd("HGET", H.k_voucher(vid), "timedout") or 0)))
        return samples[-1][1] >= n
    H.wait_until(timed_out, 60, interval=0.02, what="every order timed out in Redis")
    first = next(i for i, (_, c) in enumerate(samples) if c > 0)
    # the sample before the first nonzero one bounds when the sweep began
    t0 = samples[first - 1][0] if first > 0 else samples[0][0]
    worst = max(c - (rate * (t - t0) + rate // 10 + 32) for t, c in samples[first:])
    H.log("%d samples over %.2f s; the count ran ahead of the pace by %d at most"
          % (len(samples), samples[-1][0] - t0, worst))
    check(worst <= 0, "timed out faster than --timeout-rate %d: %d ahead of the pace; %r"
          % (rate, worst, samples[first:first + 20]))
    calls = _cmd_calls(r, "eval") + _cmd_calls(r, "evalsha") - evals0
    check(calls >= n // 32, "expire calls: %d for %d orders (32 orders a call at most)"
          % (calls, n))
    orders = [o for o, _ in srv.db().orders(vid)]
    _counted(r, srv, vid, n, orders, orders)
    H.finish(srv)


@H.timeout(240)
def test_wave_calls_go_by_sha():
    """The sweep's calls go as EVALSHA (not the script's text each call): with Redis's
    script cache flushed, the first call's NOSCRIPT is answered by one EVAL that loads
    life.lua, and the rest of the wave goes by SHA -- every order still timed out once."""
    n = 320
    r, srv, vid = unpaid_wave(n)
    r.cmd("SCRIPT", "FLUSH")
    evals0, shas0 = _cmd_calls(r, "eval"), _cmd_calls(r, "evalsha")
    srv = H.restart_server(srv, settings=dict(FAST, **{"pay-timeout-s": "1"}))
    H.wait_until(lambda: int(r.cmd("HGET", H.k_voucher(vid), "timedout") or 0) >= n, 60,
                 interval=0.02, what="every order timed out in Redis")
    evals, shas = _cmd_calls(r, "eval") - evals0, _cmd_calls(r, "evalsha") - shas0
    H.log("the wave's calls: %d EVAL, %d EVALSHA" % (evals, shas))
    check(evals <= 2, "%d EVALs for %d orders: the calls sent the script's text" % (evals, n))
    check(shas >= n // 32, "%d EVALSHAs for %d orders" % (shas, n))
    orders = [o for o, _ in srv.db().orders(vid)]
    _counted(r, srv, vid, n, orders, orders)
    H.finish(srv)
