"""test_timeout_sql.py -- what a wave of payment timeouts costs the database
(docs/lifecycle.md, "What it costs"): the order writer applies the `t` events with the
lifecycle's statements kept prepared on its connection, not prepared, run and closed for
each order (on MariaDB three round trips a statement)."""

import harness as H
from harness import check
from test_lifecycle_faults import FAST, _counted, unpaid_wave

DB_BACKENDS = ("mysql",)   # SQLite prepares in-process: nothing to count from outside


def _prepares(srv):
    """The server's prepared statements so far (MariaDB's Com_stmt_prepare)."""
    row = H.mysql_connect(srv.db_url)
    try:
        cur = row.cursor()
        cur.execute("SHOW GLOBAL STATUS LIKE 'Com_stmt_prepare'")
        return int(cur.fetchone()[1])
    finally:
        row.close()


@H.timeout(240)
def test_wave_prepares_a_few_statements_not_two_an_order():
    """1,000 unpaid orders past their deadline together: every one timed out once, its unit
    returned once, and MariaDB prepared a few dozen statements for the wave, not two (the
    status CAS and the unit back) for each order."""
    n = 1000
    r, srv, vid = unpaid_wave(n)
    before = _prepares(srv)
    srv = H.restart_server(srv, settings=dict(FAST, **{"pay-timeout-s": "1"}))
    orders = [o for o, _ in srv.db().orders(vid)]
    _counted(r, srv, vid, n, orders, orders)
    prepared = _prepares(srv) - before
    H.log("the wave of %d orders: %d statements prepared (the restart's own among them)"
          % (n, prepared))
    check(prepared < n // 4, "%d statements prepared for %d orders timed out" % (prepared, n))
    H.finish(srv)
