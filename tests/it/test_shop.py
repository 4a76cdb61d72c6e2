"""test_shop.py -- the course's shop and shop-type reads, their Redis cache, the empty blog
and follow answers, and the course-style pages in chromium (docs/api.md "Shops", docs/cache.md).

Cache behaviour is counted on the server's own counters: seckill_cache_loads_total (reads
that went to SQL) and seckill_cache_hits_total (answered from Redis).
"""

import json
import os
import shutil
import subprocess
import threading
import urllib.parse

import harness as H
from harness import check, eq

SHOP_TTL = 1800
EMPTY_TTL = 120
JITTER = 0.10
BROWSER_DIR = os.path.join(H.ROOT, "tests", "browser")


def _loads(srv):
    return H.metric(srv, "seckill_cache_loads_total")


def _hits(srv):
    return H.metric(srv, "seckill_cache_hits_total")


def _ok(st, j, what):
    check(st == 200 and j is not None and j["success"] is True, "%s: %r %r", what, st, j)
    return j.get("data")


def _shop_body(name, type_id=1, **kw):
    b = {"name": name, "typeId": type_id, "images": "", "area": "大关",
         "address": "金华路1号", "x": 120.149192, "y": 30.316078, "avgPrice": 80,
         "sold": 10, "comments": 5, "score": 37, "openHours": "10:00-22:00"}
    b.update(kw)
    return b


def _add_shop(srv, name, **kw):
    st, j = srv.http().api("POST", "/shop", _shop_body(name, **kw), admin=srv.admin_token)
    sid = _ok(st, j, "POST /shop " + name)
    check(isinstance(sid, int) and sid > 0, "POST /shop: id %r", sid)
    return sid


def _ttl_ok(ttl, base, what):
    check(base <= ttl <= int(base * (1 + JITTER)) + 1, "%s: TTL %s outside [%d, %d]", what, ttl,
          base, int(base * (1 + JITTER)))


# ---------------------------------------------------------------------------------------
# the pages' calls answer 200 + success

def test_shop_pages_calls_answer():
    r, srv = H.setup()
    h = srv.http()
    shop = _ok(*h.api("GET", "/shop/1"), "GET /shop/1")
    eq(shop["id"], 1, "shop id")
    eq(shop["name"], "103茶餐厅", "shop 1's name")
    eq(shop["typeId"], 1, "shop 1's type")
    for k in ("images", "address", "x", "y", "sold", "comments", "score", "openHours",
              "createTime", "updateTime"):
        check(k in shop, "GET /shop/1 has no %s: %r", k, shop)
    types = _ok(*h.api("GET", "/shop-type/list"), "GET /shop-type/list")
    eq(len(types), 10, "the course's shop types")
    eq([t["sort"] for t in types], sorted(t["sort"] for t in types), "types ordered by sort")
    eq(types[0]["name"], "美食", "first shop type")
    eq(_ok(*h.api("GET", "/blog/hot?current=1"), "GET /blog/hot"), [], "/blog/hot")
    # the shop page's voucher list names the shop the walk-through's vouchers belong to
    vid = H.create_seckill(srv, stock=5, shop_id=shop["id"])
    vs = _ok(*h.api("GET", "/voucher/list/%d" % shop["id"]), "GET /voucher/list/1")
    check(any(v["id"] == vid for v in vs), "voucher %d not listed for shop 1: %r", vid, vs)
    H.finish(srv)


def test_shop_unknown_and_bad_ids():
    r, srv = H.setup()
    h = srv.http()
    st, j = h.api("GET", "/shop/424242")
    check(st == 200 and j["success"] is False and j["errorMsg"] == "店铺不存在！",
          "unknown shop: %r %r", st, j)
    st, j = h.api("GET", "/shop/abc")
    check(st == 400 and j["success"] is False, "GET /shop/abc: %r %r", st, j)
    st, j = h.api("GET", "/shop/of/type")
    check(st == 400 and "typeId" in j["errorMsg"], "of/type without typeId: %r %r", st, j)
    st, j = h.api("GET", "/shop/of/type?typeId=1&current=0")
    check(st == 400, "current=0: %r %r", st, j)
    H.finish(srv)


def test_blog_and_follow_calls():
    r, srv = H.setup()
    h = srv.http()
    tok = H.login(srv, r, H.phone_for(1))
    # public in the course: only /blog/hot
    eq(_ok(*h.api("GET", "/blog/hot?current=2"), "/blog/hot"), [], "/blog/hot page 2")
    for path in ("/blog/of/me?current=1", "/blog/of/user?id=1&current=1", "/blog/likes/1",
                 "/follow/common/1"):
        st, _ = h.api("GET", path)
        eq(st, 401, path + " without a token")
        eq(_ok(*h.api("GET", path, token=tok), path), [], path)
    eq(_ok(*h.api("GET", "/follow/or/not/2", token=tok), "/follow/or/not"), False,
       "/follow/or/not/2")
    feed = _ok(*h.api("GET", "/blog/of/follow?lastId=1&offset=0", token=tok), "of/follow")
    eq(feed, {"list": [], "minTime": 0, "offset": 0}, "/blog/of/follow")
    st, j = h.api("GET", "/blog/7", token=tok)
    check(st == 200 and j["success"] is False and j["errorMsg"] == "笔记不存在！",
          "/blog/7: %r %r", st, j)
    for path in ("/follow/2/true", "/follow/2/false", "/blog/like/7"):
        st, j = h.api("PUT", path, token=tok)
        check(st == 200 and j["success"] is False and j["errorMsg"] == "功能未完成",
              "PUT %s: %r %r", path, st, j)
    H.finish(srv)


# ---------------------------------------------------------------------------------------
# lists and the admin call

def test_shop_lists_and_create():
    r, srv = H.setup()
    h = srv.http()
    st, j = h.api("POST", "/shop", _shop_body("无令牌"))
    eq(st, 403, "POST /shop without the admin token")
    for bad, word in ((_shop_body(""), "name"), (_shop_body("x", typeId="1"), "typeId"),
                      (_shop_body("x", x=500), "longitude"), (_shop_body("x", score=99), "score"),
                      (_shop_body("x" * 129), "name"), ({"name": "x"}, "typeId")):
        st, j = h.api("POST", "/shop", bad, admin=srv.admin_token)
        check(st == 400 and word in j["errorMsg"], "bad shop %r: %r %r", bad, st, j)
    ids = [_add_shop(srv, "茶馆%d" % i, type_id=2) for i in range(7)]
    page1 = _ok(*h.api("GET", "/shop/of/type?typeId=2&current=1"), "of/type page 1")
    page2 = _ok(*h.api("GET", "/shop/of/type?typeId=2&current=2&x=120.1&y=30.3"), "page 2")
    eq([s["id"] for s in page1 + page2], ids, "type 2's shops over two pages of 5")
    eq(len(page1), 5, "page size of /shop/of/type")
    by_name = _ok(*h.api("GET", "/shop/of/name?name=" + urllib.parse.quote("茶") +
                         "&current=1"), "of/name")
    eq([s["id"] for s in by_name], [1] + ids, "shops named *茶*")
    everything = _ok(*h.api("GET", "/shop/of/name"), "of/name without a name")
    eq(len(everything), 8, "all shops, one page of 10")
    got = _ok(*h.api("GET", "/shop/%d" % ids[0]), "GET the new shop")
    eq((got["name"], got["typeId"], got["avgPrice"], got["score"], got["area"]),
       ("茶馆0", 2, 80, 37, "大关"), "the new shop as stored")
    H.finish(srv)


# ---------------------------------------------------------------------------------------
# the cache

def test_shop_cache_hit_and_miss():
    r, srv = H.setup()
    h = srv.http()
    loads, hits = _loads(srv), _hits(srv)
    shop = _ok(*h.api("GET", "/shop/1"), "first GET")
    eq(_loads(srv), loads + 1, "a miss reads SQL once")
    cached = r.cmd("GET", "cache:shop:1")
    eq(json.loads(cached), shop, "cache:shop:1 holds the answer")
    _ttl_ok(int(r.cmd("TTL", "cache:shop:1")), SHOP_TTL, "cache:shop:1")
    eq(r.cmd("EXISTS", "lock:shop:1"), 0, "the mutex is released")
    # a hit is served from Redis: a value written there is what the API answers
    shop2 = dict(shop, name="缓存里的名字")
    r.cmd("SET", "cache:shop:1", json.dumps(shop2, ensure_ascii=False), "EX", "60")
    eq(_ok(*h.api("GET", "/shop/1"), "hit")["name"], "缓存里的名字", "answer from the cache")
    eq(_loads(srv), loads + 1, "a hit does not read SQL")
    eq(_hits(srv), hits + 1, "the hit is counted")
    r.cmd("DEL", "cache:shop:1")
    eq(_ok(*h.api("GET", "/shop/1"), "after DEL")["name"], "103茶餐厅", "reloaded from SQL")
    eq(_loads(srv), loads + 2, "the next miss reads SQL again")
    # the shop-type list is cached the same way
    _ok(*h.api("GET", "/shop-type/list"), "types")
    _ok(*h.api("GET", "/shop-type/list"), "types again")
    eq(_loads(srv), loads + 3, "shop types: one SQL read for two GETs")
    _ttl_ok(int(r.cmd("TTL", "cache:shop-type")), SHOP_TTL, "cache:shop-type")
    H.finish(srv)


def test_shop_unknown_cached_empty_briefly():
    r, srv = H.setup()
    h = srv.http()
    loads = _loads(srv)
    for _ in range(3):
        st, j = h.api("GET", "/shop/2")
        check(st == 200 and j["success"] is False and j["errorMsg"] == "店铺不存在！",
              "GET /shop/2 before it exists: %r %r", st, j)
    eq(_loads(srv), loads + 1, "an unknown id reaches SQL once (penetration)")
    eq(r.cmd("GET", "cache:shop:2"), "", "the unknown id is cached as an empty string")
    _ttl_ok(int(r.cmd("TTL", "cache:shop:2")), EMPTY_TTL, "the empty entry")
    # adding the shop forgets the empty entry: it is found at once, not after 2 minutes
    sid = _add_shop(srv, "新店")
    eq(sid, 2, "the first added shop's id")
    eq(_ok(*h.api("GET", "/shop/2"), "GET /shop/2 after POST /shop")["name"], "新店",
       "the new shop")
    H.finish(srv)


def test_shop_update_deletes_the_cache():
    """PUT /shop: SQL first, then the cache entry is deleted before the answer, so the next
    read (on any worker) loads the new row."""
    r, srv = H.setup(threads=2)
    h = srv.http()
    eq(_ok(*h.api("GET", "/shop/1"), "warm")["name"], "103茶餐厅", "shop 1 cached")
    check(r.cmd("EXISTS", "cache:shop:1") == 1, "cache:shop:1 after a read")
    body = _shop_body("103茶餐厅（新装修）", id=1, avgPrice=90)
    st, j = h.api("PUT", "/shop", body)
    eq(st, 403, "PUT /shop without the admin token")
    st, j = h.api("PUT", "/shop", _shop_body("x"), admin=srv.admin_token)
    check(st == 200 and j["success"] is False and j["errorMsg"] == "店铺id不能为空",
          "PUT /shop without an id: %r %r", st, j)
    st, j = h.api("PUT", "/shop", _shop_body("x", id=9999), admin=srv.admin_token)
    check(st == 200 and j["success"] is False and j["errorMsg"] == "店铺不存在！",
          "PUT /shop of an unknown id: %r %r", st, j)
    loads = _loads(srv)
    st, j = h.api("PUT", "/shop", body, admin=srv.admin_token)
    check(st == 200 and j == {"success": True}, "PUT /shop: %r %r", st, j)
    eq(r.cmd("EXISTS", "cache:shop:1"), 0, "cache:shop:1 deleted by the update")
    for _ in range(4):   # fresh connections: both workers answer the new row
        c = H.Http(srv.port)
        try:
            got = _ok(*c.api("GET", "/shop/1"), "GET after PUT")
        finally:
            c.close()
        eq((got["name"], got["avgPrice"]), ("103茶餐厅（新装修）", 90), "shop 1 after PUT")
    eq(_loads(srv), loads + 1, "one SQL read refills the cache")
    # the same values again (possibly within one second): still found, still ok
    st, j = h.api("PUT", "/shop", body, admin=srv.admin_token)
    check(st == 200 and j == {"success": True}, "PUT /shop again: %r %r", st, j)
    H.finish(srv)


def test_shop_ttl_jitter():
    r, srv = H.setup()
    h = srv.http()
    ids = [_add_shop(srv, "店%d" % i) for i in range(10)]
    ttls = []
    for sid in ids:
        _ok(*h.api("GET", "/shop/%d" % sid), "GET /shop/%d" % sid)
        ttls.append(int(r.cmd("TTL", "cache:shop:%d" % sid)))
    for t in ttls:
        _ttl_ok(t, SHOP_TTL, "a shop filled with the others")
    check(len(set(ttls)) > 1, "ten shops filled at once share one TTL (no jitter): %r", ttls)
    H.finish(srv)


def test_shop_read_while_redis_is_late():
    """Redis not answering within the deadline: the shop is read from SQL and answered,
    and nothing is cached from that read."""
    r, srv = H.setup()
    h = srv.http()
    loads = _loads(srv)
    pauser = H.Resp(port=r.port)
    pauser.cmd("CLIENT", "PAUSE", "2500", "ALL")
    try:
        shop = _ok(*h.api("GET", "/shop/1"), "GET /shop/1 while Redis is paused")
    finally:
        pauser.close()
    eq(shop["name"], "103茶餐厅", "shop 1 from SQL")
    eq(_loads(srv), loads + 1, "SQL reads while Redis was late")
    eq(r.cmd("EXISTS", "cache:shop:1"), 0, "nothing cached from a read Redis missed")

    def healthy():
        c = H.Http(srv.port)
        try:
            return c.request("GET", "/health")[0] == 200
        finally:
            c.close()
    H.wait_until(healthy, 20, what="/health after the pause (Redis reconnected)")
    H.finish(srv)


def test_shop_cache_on_redis_cluster():
    """The cache keys and the mutex's compare-and-delete (an EVAL routed by its key) on a
    Redis Cluster: cache:shop:<id> and lock:shop:<id> hash to different slots."""
    cluster = H.start_redis_cluster(masters=3, replicas=0)
    srv = H.start_server(cluster.url, threads=2)
    h = srv.http()
    loads = _loads(srv)
    ids = [1] + [_add_shop(srv, "集群店%d" % i) for i in range(4)]
    for sid in ids:
        _ok(*h.api("GET", "/shop/%d" % sid), "miss on the cluster")
        _ok(*h.api("GET", "/shop/%d" % sid), "hit on the cluster")
        check(json.loads(cluster.cmd("GET", "cache:shop:%d" % sid))["id"] == sid,
              "cache:shop:%d on the cluster", sid)
        eq(cluster.cmd("EXISTS", "lock:shop:%d" % sid), 0, "lock:shop:%d released" % sid)
    eq(_loads(srv), loads + len(ids), "one SQL read per shop on the cluster")
    H.finish(srv)


def _fire(srv, path, n):
    """n concurrent GETs, one connection each; returns the threads and their results."""
    results = [None] * n
    barrier = threading.Barrier(n)

    def one(i):
        c = H.Http(srv.port, timeout=10)
        try:
            barrier.wait()
            results[i] = c.api("GET", path)
        finally:
            c.close()
    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    return ts, results


def test_shop_concurrent_misses_one_sql_read():
    r, srv = H.setup(threads=2)
    sid = _add_shop(srv, "热门店")
    loads = _loads(srv)
    ts, results = _fire(srv, "/shop/%d" % sid, 40)
    for t in ts:
        t.join(30)
    for st, j in results:
        check(st == 200 and j["success"] and j["data"]["name"] == "热门店", "%r %r", st, j)
    eq(_loads(srv), loads + 1, "40 concurrent misses of one shop: SQL reads")
    H.finish(srv)


def test_shop_waits_for_the_mutex_holder():
    """Another instance holds lock:shop:1 (it is loading): readers wait for its value
    instead of reading SQL themselves."""
    r, srv = H.setup(threads=2)
    r.cmd("SET", "lock:shop:1", "another-instance", "PX", "10000")
    loads = _loads(srv)
    polls = lambda: int(dict(
        l.split(":", 1) for l in r.cmd("INFO", "commandstats").splitlines()
        if l.startswith("cmdstat_set:"))["cmdstat_set"].split(",")[0].split("=")[1])
    before = polls()
    ts, results = _fire(srv, "/shop/1", 8)
    # every reader has tried the mutex at least twice: they are polling, not reading SQL
    H.wait_until(lambda: polls() >= before + 16, 10, what="readers polling the mutex")
    check(all(x is None for x in results), "a reader answered while the mutex was held: %r",
          results)
    eq(_loads(srv), loads, "SQL reads while another instance holds the mutex")
    theirs = {"id": 1, "name": "另一实例写的", "typeId": 1}
    r.cmd("SET", "cache:shop:1", json.dumps(theirs, ensure_ascii=False), "EX", "60")
    r.cmd("DEL", "lock:shop:1")
    for t in ts:
        t.join(10)
    for st, j in results:
        check(st == 200 and j["success"] and j["data"] == theirs, "waiter: %r %r", st, j)
    eq(_loads(srv), loads, "SQL reads after the holder filled the cache")
    H.finish(srv)


# ---------------------------------------------------------------------------------------
# the course-style pages in chromium (tests/browser/course.mjs)

class _CourseNginx(H.Nginx):
    """The deploy's nginx config with the course-style pages as its web root."""

    def write_conf(self):
        os.makedirs(os.path.join(self.dir, "logs"), exist_ok=True)
        with open(self.conf, "w", encoding="utf-8") as f:
            f.write(H.render_nginx_conf(self.dir, "127.0.0.1:%d" % self.port, self.backends,
                                        self.workers, html=os.path.join(BROWSER_DIR, "course")))


def test_course_pages_in_browser():
    node = shutil.which("node")
    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    check(node is not None, "node not installed (sh tools/deps.sh test installs nodejs)")
    check(os.path.exists(chromium), "no chromium at %s (sh tools/deps.sh test)", chromium)
    check(os.path.isdir(os.path.join(BROWSER_DIR, "node_modules", "playwright-core")),
          "tests/browser/node_modules missing (sh tools/deps.sh test runs npm ci)")
    r, srv = H.setup()
    vid = H.create_seckill(srv, stock=10, shop_id=1)
    ng = _CourseNginx(H.subdir("nginx"), H.free_port(), ["127.0.0.1:%d" % srv.port]).start()
    try:
        phone = H.phone_for(7)
        code = H.send_code(srv, r, phone)
        out = os.path.join(H.ROOT, "build", "course-pages")
        env = dict(os.environ, COURSE_URL="http://127.0.0.1:%d" % ng.port, PHONE=phone,
                   CODE=code, VOUCHER=str(vid), OUT_DIR=out, CHROMIUM=chromium)
        p = subprocess.run([node, os.path.join(BROWSER_DIR, "course.mjs")], env=env,
                           capture_output=True, text=True, timeout=120)
        H.log("course.mjs:", p.stdout[-2000:], p.stderr[-3000:])
        check(p.returncode == 0, "course.mjs failed (exit %d):\n%s\n%s", p.returncode,
              p.stdout[-2000:], p.stderr[-3000:])
        found = json.loads(p.stdout.strip().splitlines()[-1])
        check(found["orderId"] > 0, "no order id in the success toast: %r", found)
    finally:
        ng.stop()
    H.wait_drained(srv, r, vid)
    eq(srv.db().order_count(vid), 1, "orders in SQL after the page's 限时抢购")
    H.finish(srv)
