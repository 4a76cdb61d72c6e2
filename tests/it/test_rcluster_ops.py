"""test_rcluster_ops.py -- the operations side of seckill on a Redis Cluster.

Each test forms its own cluster of 3 masters (harness.start_redis_cluster, as
test_rcluster.py does) and checks one feature that used to need a single Redis:
  - the sale board (/admin/api/board): both instances listed, every sale's stock and buyer
    count read on the master owning its voucher (vouchers on every master);
"""

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)   # the Redis side is under test; a cluster costs ~6 s to form


def _spread_vouchers(srv, cluster, n, stock):
    """n vouchers whose slots cover every master; returns (ids, {id: master port})."""
    vids = [H.create_seckill(srv, stock=stock) for _ in range(n)]
    owners = {v: cluster.node_for(H.k_voucher(v)).port for v in vids}
    eq(set(owners.values()), {r.port for r in cluster.masters()}, "masters of the vouchers")
    return vids, owners


def _board(srv):
    h = H.Http(srv.port)
    try:
        return h.api("GET", "/admin/api/board", admin=srv.admin_token)
    finally:
        h.close()


@H.timeout(120)
def test_board_on_redis_cluster():
    cluster = H.start_redis_cluster(masters=3, replicas=0)
    s1 = H.start_server(cluster.url, name="board-c1", settings={"rate_user_seckill": "0"})
    s2 = H.start_server(cluster.url, name="board-c2", threads=1,
                        data_dir=H.subdir("inst-2"), db_path=s1.db_path,
                        admin_token=s1.admin_token)
    tokens = H.login_many(s1, cluster, 12)
    vids, owners = _spread_vouchers(s1, cluster, 9, stock=5)
    bought = {}
    for i, v in enumerate(vids):
        n = i % 4                                   # 0..3 buyers: a different count each
        for u in range(n):
            st, j = H.seckill(s1 if u % 2 else s2, tokens[u], v)
            check(j.get("success"), "buy %d by user %d: %r", v, u, j)
        bought[v] = n

    # Both instances announce (once a second) on the {board} slot's master.
    def both():
        st, j = _board(s1)
        return st == 200 and {i["name"] for i in j["data"]["instances"]} == {"board-c1",
                                                                              "board-c2"}
    H.wait_until(both, 15, what="both instances on the board")
    for srv in (s1, s2):
        st, j = _board(srv)
        eq(st, 200, "board data on a Redis Cluster via %s" % srv.name)
        sales = {s["id"]: s for s in j["data"]["sales"]}
        eq(set(sales), set(vids), "sales on the board")
        for v in vids:
            eq(sales[v]["stock"], 5 - bought[v], "voucher %d stock (master %d)" % (v, owners[v]))
            eq(sales[v]["buyers"], bought[v], "voucher %d buyers" % v)
            check(sales[v]["begin"] is not None and sales[v]["end"] is not None,
                  "voucher %d window: %r", v, sales[v])
    board_keys = cluster.cmd("SMEMBERS", "seckill:{board}:instances")
    eq(sorted(board_keys), ["board-c1", "board-c2"], "announcement set")
    h = H.Http(s1.port)
    st, j = h.api("GET", "/admin/api/board")
    h.close()
    eq(st, 403, "no data without the token")
    H.finish(s1)
    H.finish(s2)
