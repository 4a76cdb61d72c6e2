"""test_security.py -- abuse and security: hostile input in every string field,
oversized and malformed requests, wrong credentials, rate limits, secrets kept out of the
log, Redis AUTH.

Every reply checked here must still be the API's envelope (harness.check_envelope), and
every server must stop cleanly afterwards with no sanitizer report (the runner checks).
"""

import json
import os
import re
import socket
import subprocess
import time
import urllib.parse

import harness as H
from harness import check, eq

SQL_META = [
    "'; DROP TABLE tb_voucher; --",
    "\" OR \"1\"=\"1",
    "1' OR '1'='1' /*",
    "\\'; SELECT sleep(5); -- \\\\",
    "%_%' ESCAPE '\\'",
    "`tb_user`; DELETE FROM tb_user WHERE 1=1; #",
    "Robert'); DROP TABLE tb_voucher_order;--",
    "0x27 CHAR(39) || '--",
    "中文'; --秒杀",
]

RATE_MSG = "请求过于频繁，请稍后再试"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _raw(port, data, timeout=5):
    """Sends raw bytes on a fresh connection; returns (status, headers, body)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    c = H.Http(port, connect=False)
    c.sock = s
    try:
        return c.read_response()
    finally:
        c.close()


def _json(body, what):
    try:
        j = json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise H.TestFailure("%s: reply is not valid UTF-8 JSON (%s): %r" % (what, e, body[:300]))
    H.check_envelope(j, what)
    return j


def _tables_intact(srv):
    db = srv.db()
    for t in ("tb_voucher", "tb_seckill_voucher", "tb_user", "tb_voucher_order"):
        db.scalar("SELECT COUNT(*) FROM %s" % t)   # raises if a table is gone


# ---------------------------------------------------------------------------------------
# hostile strings

def test_sql_metacharacters_in_every_string_field():
    # /user/me reads Redis every time; many login attempts on one phone are the point here
    r, srv = H.setup(settings={"token_cache_ms": 0, "rate_phone_login": 0})
    h = srv.http()
    # title, subTitle, rules: stored and read back byte for byte (prepared statements)
    made = []
    for i, s in enumerate(SQL_META):
        vid = H.create_seckill(srv, stock=5, shop_id=77, title=s, subTitle=s[::-1],
                               rules=s + "\n" + s, http=h)
        nid = H.create_voucher(srv, shop_id=77, title=s, subTitle=s, rules=s, http=h)
        made += [(vid, s, s[::-1], s + "\n" + s), (nid, s, s, s)]
    st, j = h.api("GET", "/voucher/list/77")
    eq(st, 200, "list status")
    got = {v["id"]: (v["title"], v.get("subTitle"), v.get("rules")) for v in j["data"]}
    for vid, t, sub, rules in made:
        eq(got.get(vid), (t, sub, rules), "voucher %d read back" % vid)
    eq(srv.db().scalar("SELECT COUNT(*) FROM tb_voucher WHERE shop_id=77"), len(made),
       "vouchers in SQL")
    # phone (query and body) and code: refused as input, never reach SQL
    for s in SQL_META + ["13800000000' OR '1'='1", "1380000000%27", "13800000000;--"]:
        st, j = h.api("POST", "/user/code?phone=" + urllib.parse.quote(s, safe=""))
        check(st == 200 and j["success"] is False and j["errorMsg"] == H.MSG_BAD_PHONE,
              "phone %r: %r %r", s, st, j)
        st, j = h.api("POST", "/user/login", {"phone": s, "code": "123456"})
        check(st == 200 and j["success"] is False and j["errorMsg"] == H.MSG_BAD_PHONE,
              "login phone %r: %r %r", s, st, j)
    phone = "13900000042"
    code = H.send_code(srv, r, phone, h)
    for s in SQL_META + ["' OR ''='", code + "' OR '1'='1", code + "\u0000"]:
        st, j = h.api("POST", "/user/login", {"phone": phone, "code": s})
        check(st in (200, 400) and j["success"] is False, "login code %r: %r %r", s, st, j)
    eq(srv.db().user_count(), 0, "users created by hostile logins")
    # nickName / icon come from Redis (the course's Java side writes them too): whatever
    # bytes they hold, /user/me answers valid JSON with them intact or replaced
    tok = H.login(srv, r, phone, h)
    for nick in SQL_META + ["<script>alert(1)</script>", "\"}],\"success\":true,{\""]:
        r.cmd("HSET", "login:token:" + tok, "nickName", nick, "icon", nick)
        st, hd, body = srv.http().request("GET", "/user/me", token=tok)
        j = _json(body, "/user/me with nickName %r" % nick)
        eq((j["data"]["nickName"], j["data"]["icon"]), (nick, nick), "nickName/icon echoed")
    r.cmd("HSET", "login:token:" + tok, "nickName", b"bad \xff\xfe utf-8 \xe4\xb8", "icon",
          b"\xc0\x80")
    st, hd, body = srv.http().request("GET", "/user/me", token=tok)
    j = _json(body, "/user/me with invalid UTF-8 in Redis")
    check("\ufffd" in j["data"]["nickName"], "invalid bytes not replaced: %r", j)
    # and a flash sale still works afterwards
    vid = made[0][0]
    st, j = H.seckill(srv, tok, vid, h)
    check(st == 200 and j["success"], "seckill after the hostile input: %r %r", st, j)
    _tables_intact(srv)
    H.finish(srv)


# ---------------------------------------------------------------------------------------
# oversized and malformed

def test_oversized_and_malformed_inputs():
    r, srv = H.setup()
    h = srv.http()
    adm = srv.admin_token
    # string fields over their limits (characters, not bytes)
    for field, n in (("title", 256), ("subTitle", 256), ("rules", 1025)):
        st, j = h.api("POST", "/voucher/seckill", H.seckill_body(**{field: "券" * n}), admin=adm)
        check(st == 400 and field in j["errorMsg"], "%s of %d chars: %r %r", field, n, st, j)
        st, j = h.api("POST", "/voucher/seckill", H.seckill_body(**{field: "券" * (n - 1)}),
                      admin=adm)
        check(st == 200 and j["success"], "%s of %d chars: %r %r", field, n - 1, st, j)
    # numbers out of range or of the wrong type
    big = object()   # a number JSON can write but no integer holds
    for k, v in (("stock", -1), ("stock", 10 ** 12), ("stock", big), ("shopId", 0),
                 ("shopId", 2 ** 63), ("payValue", "100"), ("type", 7), ("stock", True),
                 ("payValue", 1.5), ("beginTime", "2024-13-01T00:00:00"), ("endTime", 12345)):
        b = H.seckill_body()
        b[k] = 424242 if v is big else v
        raw = json.dumps(b)
        if v is big:
            raw = raw.replace('"%s": 424242' % k, '"%s": 1e999' % k)
        st, hd, body = h.request("POST", "/voucher/seckill", raw, admin=adm)
        j = _json(body, "%s=%r" % (k, v))
        check(st == 400 and j["success"] is False, "%s=%r: %r %r", k, v, st, j)
    # malformed JSON: every error reply is valid UTF-8 JSON, even when the parser's
    # message quotes the broken input (a multi-byte character cut in half)
    for raw in (b'{"title":"\xe5\x85\xa8\\\xe6\xa8\x97"}',   # found by fuzz_json
                b'{"title":"\xe5\x85\x83', b'{"rules":"\xe5\\x"}', b'{"a":"\xff\xfe"}',
                b'{"title":"\\ud800"}', b'{"title":"a\\u0000b"}', b"[" * 60000,
                b'{"phone":"13800000000","code":"1"' + b" " * 1000, b"\x00\x01\x02",
                b'{"shopId":1,' * 5000, b"\xef\xbb\xbf{}"):
        for path in ("/voucher/seckill", "/voucher", "/user/login"):
            st, hd, body = h.request("POST", path, raw, admin=adm)
            j = _json(body, "%s with %r" % (path, raw[:30]))
            # a login body is at most 4 KiB (test_sec_http.py): larger is 413
            want = 413 if path == "/user/login" and len(raw) > 4096 else 400
            check(st == want and j["success"] is False, "%s %r: %r %r", path, raw[:30], st, j)
    # request line, headers and body over their limits: refused, connection closed, the
    # server stays up (test_api.py checks the exact statuses)
    for raw in (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
                b"GET /health HTTP/1.1\r\n" + b"X: " + b"b" * 9000 + b"\r\n\r\n",
                b"GET /health HTTP/1.1\r\n" + b"".join(b"H%d: v\r\n" % i for i in range(150))
                + b"\r\n",
                b"POST /user/login HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
                b"POST /user/login HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"FFFFFFFFFFFFFFFF\r\n",
                b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 1\r\n"
                b"Content-Length: 2\r\n\r\nab"):
        st, hd, body = _raw(srv.port, raw)
        check(400 <= st < 500, "%r...: HTTP %d", raw[:40], st)
        if body:
            _json(body, "error reply to %r" % raw[:40])
    # phone and code of absurd length
    st, j = h.api("POST", "/user/code?phone=" + "1" * 5000)
    check(j["success"] is False, "5000-digit phone: %r", j)
    # (a login body is at most 4 KiB: larger is 413, test_sec_http.py)
    st, j = h.api("POST", "/user/login", {"phone": "13800000000", "code": "1" * 3000})
    check(j["success"] is False and j["errorMsg"] == H.MSG_BAD_CODE, "3k code: %r", j)
    _tables_intact(srv)
    H.finish(srv)


# ---------------------------------------------------------------------------------------
# credentials

def test_wrong_admin_tokens():
    # many wrong tokens from one client: without the guessing throttle (429 after a few;
    # test_sec_tokens.py tests it)
    r, srv = H.setup(settings={"rate_ip_admin": 0})
    adm = srv.admin_token
    body = json.dumps(H.seckill_body(shop_id=9), ensure_ascii=False).encode()
    flip = adm[:5] + ("0" if adm[5] != "0" else "1") + adm[6:]
    wrong = ["", " ", adm[:-1], adm + "x", flip, adm.upper(), adm * 2, "x" * 4000,
             adm[:16], "Bearer " + adm, adm + "%0d%0a", adm + "\\r\\n"]
    h = srv.http()
    for w in wrong:
        st, hd, b = h.request("POST", "/voucher/seckill", body, admin=w)
        eq(st, 403, "x-admin-token %r" % w[:40])
        _json(b, "403 reply")
    # CR/LF tricks: a folded value that adds to the token or splits it, a bare CR inside
    # it, two token headers (whichever comes first): refused
    for head in (b"x-admin-token: " + adm.encode() + b"\r\n x-extra",
                 b"x-admin-token: " + adm[:10].encode() + b"\r\n\t" + adm[10:].encode(),
                 b"x-admin-token: " + adm.encode() + b"\rX: y",
                 b"x-admin-token: wrong\r\nx-admin-token: " + adm.encode(),
                 b"x-admin-token: " + adm.encode() + b"\r\nX-Admin-Token: " + adm.encode(),
                 b"x-admin-token: " + adm.encode() + b"\r\nx-admin-token: wrong"):
        raw = (b"POST /voucher/seckill HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body) + body)
        st, hd, b = _raw(srv.port, raw)
        check(st in (400, 403), "admin header %r: HTTP %d %r", head[:60], st, b[:200])
    eq(srv.db().scalar("SELECT COUNT(*) FROM tb_voucher"), 0, "vouchers made with bad tokens")
    # forms HTTP allows for the *right* token (a bare LF line end; an obs-fold, which is
    # read as a space and trimmed): accepted or refused, never anything else
    for head in (b"x-admin-token: " + adm.encode() + b"\nX: y",
                 b"x-admin-token:\r\n " + adm.encode()):
        raw = (b"POST /voucher/seckill HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body) + body)
        st, hd, b = _raw(srv.port, raw)
        check(st in (200, 400), "admin header %r: HTTP %d %r", head[:60], st, b[:200])
    # the right one, with the whitespace HTTP allows around a value, works
    st, hd, b = h.request("POST", "/voucher/seckill", body, admin=" " + adm + " ")
    check(st == 200 and _json(b, "create")["success"], "padded admin token: %d %r", st, b)
    H.finish(srv)


def test_admin_token_compared_in_constant_time():
    """api.c compares the admin and metrics tokens without an early exit (secret_eq,
    used by api_admin_ok and api_metrics_ok): every byte of the configured token is
    looked at whatever the given one holds (read from the source, as a timing test would
    be flaky)."""
    with open(os.path.join(ROOT, "src", "api", "api.c"), encoding="utf-8") as f:
        src = f.read()
    for caller in ("api_admin_ok", "api_metrics_ok"):
        m = re.search(r"\nint %s\([^)]*\)\s*\{(.*?)\n\}" % caller, src, re.S)
        check(m is not None and "secret_eq(" in m.group(1), "%s does not use secret_eq", caller)
    m = re.search(r"static int secret_eq\([^)]*\)\s*\{(.*?)\n\}", src, re.S)
    check(m is not None, "secret_eq not found in src/api/api.c")
    fn = m.group(1)
    for bad in ("strcmp", "strncmp", "memcmp", "strcasecmp", "bcmp"):
        check(bad not in fn, "admin_token_ok uses %s (stops at the first difference)", bad)
    loop = re.search(r"for \(size_t i = 0; i < wl; i\+\+\) \{(.*?)\}", fn, re.S)
    check(loop is not None, "admin_token_ok: no loop over the whole configured token")
    check("return" not in loop.group(1) and "break" not in loop.group(1),
          "admin_token_ok leaves the loop early")
    check("|=" in loop.group(1), "admin_token_ok does not accumulate the difference")


def test_wrong_user_tokens():
    r, srv = H.setup()
    h = srv.http()
    tok = H.login(srv, r, "13700000001", h)
    vid = H.create_seckill(srv, stock=5)
    unknown = "0123456789abcdef0123456789abcdef"
    for bad in ("", " ", "null", unknown, tok.upper(), tok[:-1], tok + "0", "Bearer " + tok,
                tok[:16] + "-" + tok[17:], "../" + tok, "x" * 4000, tok + ";" + tok,
                "' OR '1'='1", tok + "%0d%0a"):
        for method, path in (("GET", "/user/me"), ("POST", "/voucher-order/seckill/%d" % vid),
                             ("GET", "/voucher-order/of/me")):
            st, hd, b = srv.http().request(method, path, token=bad)
            eq((st, b), (401, b""), "%s %s with token %r" % (method, path, bad[:40]))
    for head in (b"authorization: " + tok.encode() + b"\r\n junk",
                 b"authorization: " + tok[:10].encode() + b"\r\n\t" + tok[10:].encode(),
                 b"authorization: " + tok.encode() + b"\rX: y",
                 b"authorization: " + unknown.encode() + b"\r\nAuthorization: " +
                 tok.encode()):
        raw = (b"GET /user/me HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n\r\n")
        st, hd, b = _raw(srv.port, raw)
        check(st in (400, 401), "authorization header %r: HTTP %d %r", head[:60], st, b[:200])
    eq(srv.db().order_count(vid), 0, "orders made with bad tokens")
    st, j = H.seckill(srv, tok, vid, h)
    check(st == 200 and j["success"], "the real token still works: %r %r", st, j)
    H.finish(srv)


# ---------------------------------------------------------------------------------------
# rate limits

def _metric(srv, name, labels=None):
    st, hd, body = srv.http().request("GET", "/metrics")
    total = 0
    for line in body.decode().splitlines():
        if not line.startswith(name):
            continue
        m = re.match(r"^(\w+)(\{[^}]*\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        if labels and not all('%s="%s"' % kv in (m.group(2) or "") for kv in labels.items()):
            continue
        total += float(m.group(3))
    return total


def _is_limited(st, j):
    return st == 429 and j == {"success": False, "errorMsg": RATE_MSG, "code": "RATE_LIMITED"}


def test_rate_limit_seckill_per_user():
    r, srv = H.setup(threads=1, settings={"rate_user_seckill": "1/s:5"})
    a, b = (H.login(srv, r, p, srv.http()) for p in ("13600000001", "13600000002"))
    vid = H.create_seckill(srv, stock=10)
    h = srv.http()
    got = [H.seckill(srv, a, vid, h) for _ in range(8)]
    ok = [x for x in got if x[0] == 200]
    limited = [x for x in got if _is_limited(*x)]
    check(len(ok) == 5 and len(limited) == 3, "burst 5 then 429: %r", got)
    check(ok[0][1]["success"] and all(x[1]["errorMsg"] == H.MSG_DUPLICATE for x in ok[1:]),
          "the allowed ones: %r", ok)
    # another user has a bucket of his own
    st, j = H.seckill(srv, b, vid, h)
    check(st == 200 and j["success"], "user b: %r %r", st, j)
    # refill: 1/s, so within a second a request is allowed again
    t0 = time.monotonic()
    H.wait_until(lambda: H.seckill(srv, a, vid, h)[0] == 200, 5, interval=0.05,
                 what="user a allowed again after the refill")
    H.log("user a allowed again after %.2fs" % (time.monotonic() - t0))
    check(_metric(srv, "seckill_rate_limited_total") >= 3, "rate_limited metric")
    check(_metric(srv, "seckill_rate_limited_by_limit_total", {"limit": "user_seckill"}) >= 3,
          "per-limit metric")
    check(_metric(srv, "seckill_seckill_requests_total", {"outcome": "rate_limited"}) >= 3,
          "seckill outcome rate_limited")
    eq(H.wait_drained(srv, r, vid, 60), 2, "orders after drain")
    eq(srv.db().per_user_max(vid), 1, "orders per user")
    H.finish(srv)


def test_rate_limit_seckill_per_worker_bound():
    """With 2 workers each gets half the burst; however the client spreads its connections,
    the instance lets through at most the configured burst."""
    r, srv = H.setup(threads=2, settings={"rate_user_seckill": "1/m:10"})
    tok = H.login(srv, r, "13600000003", srv.http())
    vid = H.create_seckill(srv, stock=10)
    conns = [srv.http() for _ in range(12)]
    got = []
    for _ in range(3):
        for c in conns:
            got.append(H.seckill(srv, tok, vid, c))
    allowed = sum(1 for st, j in got if st == 200)
    limited = sum(1 for st, j in got if _is_limited(st, j))
    eq(allowed + limited, len(got), "every reply is an answer or a 429")
    check(5 <= allowed <= 10, "allowed %d of %d (burst 10 over 2 workers)", allowed, len(got))
    H.finish(srv)


def test_rate_limit_seckill_per_ip():
    r, srv = H.setup(threads=1, settings={"rate_ip_seckill": "1/s:3"})
    toks = [H.login(srv, r, H.phone_for(i, "135"), srv.http()) for i in range(5)]
    vid = H.create_seckill(srv, stock=10)
    h = srv.http()
    got = [H.seckill(srv, t, vid, h) for t in toks]
    eq([st for st, j in got], [200, 200, 200, 429, 429], "statuses from one IP")
    check(all(_is_limited(*x) for x in got[3:]), "429 bodies: %r", got[3:])
    H.wait_until(lambda: H.seckill(srv, toks[4], vid, h)[0] == 200, 5,
                 what="the IP allowed again")
    check(_metric(srv, "seckill_rate_limited_by_limit_total", {"limit": "ip_seckill"}) >= 2,
          "per-IP metric")
    H.finish(srv)


def test_rate_limit_login_codes():
    r, srv = H.setup(settings={"rate_ip_code": "1/s:6", "rate_phone_code": "1/m:2"})
    h = srv.http()
    phone = "13400000001"
    got = [h.api("POST", "/user/code?phone=" + phone) for _ in range(3)]
    check([st for st, j in got] == [200, 200, 429] and _is_limited(*got[2]),
          "codes for one phone (1/m:2): %r", got)
    st, j = h.api("POST", "/user/code?phone=13400000002")
    check(st == 200 and j["success"], "another phone: %r %r", st, j)
    # the limit is per instance, whichever worker gets the connection
    st, j = srv.http().api("POST", "/user/code?phone=" + phone)
    check(_is_limited(st, j), "same phone on a new connection: %r %r", st, j)
    # per IP: 6 in a burst (3 above + 3 here), then 429 whatever the phone
    got = [h.api("POST", "/user/code?phone=1340000001%d" % i) for i in range(3)]
    check(any(_is_limited(*x) for x in got), "IP limit never reached: %r", got)
    H.wait_until(lambda: h.api("POST", "/user/code?phone=13400000099")[0] == 200, 5,
                 what="the IP allowed again")
    check(_metric(srv, "seckill_rate_limited_by_limit_total", {"limit": "phone_code"}) >= 2,
          "per-phone metric")
    check(_metric(srv, "seckill_rate_limited_by_limit_total", {"limit": "ip_code"}) >= 1,
          "per-IP code metric")
    H.finish(srv)


def test_rate_limit_login_attempts():
    """Guessing a code: attempts per phone are limited, the right code included once the
    limit is reached; other phones are not affected; refused attempts never reach Redis."""
    r, srv = H.setup(settings={"rate_phone_login": "1/m:4"})
    h = srv.http()
    phone = "13500000001"
    code = H.send_code(srv, r, phone, h)
    wrong = ["%06d" % ((int(code) + k) % 1000000) for k in range(1, 5)]
    got = [h.api("POST", "/user/login", {"phone": phone, "code": w}) for w in wrong]
    check(all(st == 200 and j["errorMsg"] == H.MSG_BAD_CODE for st, j in got),
          "4 wrong codes: %r", got)
    st, j = h.api("POST", "/user/login", {"phone": phone, "code": code})
    check(_is_limited(st, j), "5th attempt (the right code) not limited: %r %r", st, j)
    # attempts that cannot be a code are refused before they count
    for c in ("", "1" * 65):
        st, j = h.api("POST", "/user/login", {"phone": "13500000002", "code": c})
        eq(j["errorMsg"], H.MSG_BAD_CODE, "shapeless code")
    tok = H.login(srv, r, "13500000002", h)
    check(H.TOKEN_RE.match(tok), "another phone logs in: %r", tok)
    check(_metric(srv, "seckill_rate_limited_by_limit_total", {"limit": "phone_login"}) >= 1,
          "per-phone login metric")
    eq(srv.db().user_count(), 1, "users")
    H.finish(srv)


def test_rate_limit_defaults():
    """Defaults: per user 20/s:40 on the flash sale, 1/m:3 codes per phone, per-IP off --
    a sale from one address (all tests run from 127.0.0.1) is never limited by IP."""
    r, srv = H.setup(threads=1)
    h = srv.http()
    got = [h.api("POST", "/user/code?phone=13300000001") for _ in range(4)]
    eq([st for st, j in got], [200, 200, 200, 429], "default per-phone limit")
    toks = H.login_many(srv, r, 60, prefix="133", start=100)
    vid = H.create_seckill(srv, stock=100)
    got = [H.seckill(srv, t, vid, h) for t in toks]
    check(all(st == 200 and j["success"] for st, j in got), "60 users from one IP: %r",
          [x for x in got if x[0] != 200][:3])
    t0 = time.monotonic()
    got = [H.seckill(srv, toks[0], vid, h) for _ in range(100)]
    elapsed = time.monotonic() - t0
    allowed = sum(1 for st, j in got if st == 200)
    check(allowed + sum(1 for x in got if _is_limited(*x)) == len(got), "odd replies: %r",
          [x for x in got if x[0] not in (200, 429)][:3])
    check(39 <= allowed <= 40 + 20 * elapsed + 1,
          "one user, 100 requests in %.2fs: %d allowed (burst 40, 20/s)", elapsed, allowed)
    H.finish(srv)


# ---------------------------------------------------------------------------------------
# secrets and the log

def test_tokens_never_logged():
    r, srv = H.setup(settings={"log_level": "debug", "log_login_codes": 1})
    h = srv.http()
    toks = [H.login(srv, r, p, h) for p in ("13200000001", "13200000002")]
    vid = H.create_seckill(srv, stock=3)
    for t in toks:
        H.seckill(srv, t, vid, h)
        h.api("GET", "/user/me", token=t)
        h.api("GET", "/voucher-order/of/me", token=t)
    guess = "guessed-admin-token-1234567890"
    h.api("POST", "/voucher/seckill", H.seckill_body(), admin=guess)
    h.api("GET", "/user/me", token="ffffffffffffffffffffffffffffffff")
    h.api("POST", "/user/logout", token=toks[1])
    H.wait_drained(srv, r, vid, 60)
    srv.stop()
    text = srv.stderr_text() + srv.stdout_text()
    check("verification code" in text, "the log is not the one expected (no code lines)")
    for secret in toks + [srv.admin_token, guess, "ffffffffffffffffffffffffffffffff"]:
        check(secret not in text, "a token is in the server's log: %s...", secret[:8])


class AuthRedis(H.Redis):
    """A redis-server with --requirepass; its client authenticates."""

    def __init__(self, port, dir_, password):
        super().__init__(port, dir_, ["--requirepass", password])
        self.password = password
        self.url = "redis://:%s@127.0.0.1:%d" % (password, port)

    def client(self, timeout=5.0):
        c = H.Resp(port=self.port, timeout=timeout)
        c.cmd("AUTH", self.password)
        return c

    def start(self, timeout=20):
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with H._registry_lock:
            H._redises.append(self)

        def ready():
            if self.proc.poll() is not None:
                raise H.TestFailure("redis-server exited: %s" % H.tail(
                    os.path.join(self.dir, "redis.log")))
            try:
                c = self.client(timeout=1)
            except (OSError, H.RedisError):
                return False
            try:
                return c.cmd("PING") == "PONG"
            finally:
                c.close()
        H.wait_until(ready, timeout, what="redis-server with a password")
        return self


def test_redis_auth():
    pw = "s3cret-" + H.rand_hex(12)
    red = AuthRedis(H.free_port(), H.subdir("redis-auth"), pw).start()
    # without the password Redis refuses everything
    c = H.Resp(port=red.port)
    try:
        c.cmd("GET", "x")
        raise H.TestFailure("redis-server accepted a command without AUTH")
    except H.RedisError as e:
        check("NOAUTH" in str(e), "unexpected error %s", e)
    finally:
        c.close()
    # a wrong password: seckill refuses to start, says why, and does not print it
    d = H.subdir("bad")
    argv = [H.binary(), "serve", "--listen", "127.0.0.1:%d" % H.free_port(),
            "--redis", "redis://:wrong-%s@127.0.0.1:%d" % (pw, red.port),
            "--db", "sqlite:" + os.path.join(d, "x.db"), "--admin-token", "adm" + H.rand_hex(29),
            "--threads", "1", "--data-dir", d]
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, env=H.san_env(), cwd=d, timeout=60)
    text = p.stdout.decode("utf-8", "replace")
    check(p.returncode != 0, "seckill started with a wrong Redis password:\n%s", text)
    for m in H.SANITIZER_MARKERS:
        check(m not in text, "sanitizer report from the refused start:\n%s", text)
    check("password" in text.lower() or "auth" in text.lower(), "no reason given: %s", text)
    check(pw not in text, "the Redis password is in the log")
    # the right one: a whole login and sale through an authenticated Redis
    srv = H.start_server(red)
    h = srv.http()
    tok = H.login(srv, red, "13100000001", h)
    vid = H.create_seckill(srv, stock=2)
    st, j = H.seckill(srv, tok, vid, h)
    check(st == 200 and j["success"], "seckill through AUTH: %r %r", st, j)
    eq(H.wait_drained(srv, red, vid, 60), 1, "orders written through AUTH")
    # Redis restarts: the workers reconnect and authenticate again
    red.shutdown()
    red.start()
    H.wait_until(lambda: srv.http().request("GET", "/health")[0] == 200, 30,
                 what="/health after Redis came back")
    tok2 = H.login(srv, red, "13100000002", srv.http())
    st, j = H.seckill(srv, tok2, vid, srv.http())
    check(st == 200 and j["success"], "seckill after the restart: %r %r", st, j)
    srv.stop()
    text = srv.stderr_text() + srv.stdout_text()
    check(pw not in text, "the Redis password is in the server's log")


# ---------------------------------------------------------------------------------------
# login codes: limits that guard a secret cannot be reset by volume

def _pipelined_logins(port, phones, code, chunk=200):
    """POST /user/login for each phone with the same code, pipelined in chunks on one
    connection; returns the (status, errorMsg) of each, in order."""
    out = []
    c = H.Http(port, timeout=30)
    try:
        for i in range(0, len(phones), chunk):
            part = phones[i:i + chunk]
            c.send_raw(b"".join(H.Http.build("POST", "/user/login",
                                             body={"phone": p, "code": code})
                                for p in part))
            for _ in part:
                st, hd, body = c.read_response("POST")
                j = json.loads(body.decode("utf-8")) if body else {}
                out.append((st, j.get("errorMsg")))
    finally:
        c.close()
    return out


def test_flood_then_guess_login_code():
    """The attack of the security review: spend a phone's login attempts, flood the
    limiter with 12,000 other phones (more than its table holds) so that it forgets the
    spent bucket, then guess on. The limit must hold: the phone's bucket is not evicted
    (a full table refuses new phones instead), and the code itself died after 5 wrong
    guesses -- counted in Redis, so no table of any instance can forget them."""
    # the per-IP login limit is off here so that the flood reaches the per-phone table
    r, srv = H.setup(threads=1, settings={"rate_ip_login": 0})
    h = srv.http()
    phone = "13900001234"
    code = H.send_code(srv, r, phone, h)
    wrong = ["%06d" % ((int(code) + k) % 1000000) for k in range(1, 11)]
    got = [h.api("POST", "/user/login", {"phone": phone, "code": w}) for w in wrong]
    check(all(st == 200 and j["errorMsg"] == H.MSG_BAD_CODE for st, j in got[:5]),
          "the first 5 wrong guesses: %r", got[:5])
    check(all(st in (200, 429) and j["success"] is False for st, j in got),
          "10 wrong guesses: %r", got)
    flood = [H.phone_for(i, "147") for i in range(12000)]
    t0 = time.monotonic()
    res = _pipelined_logins(srv.port, flood, "000000")
    H.log("flood of %d logins in %.1fs: %d refused with 429" % (
        len(flood), time.monotonic() - t0, sum(1 for st, m in res if st == 429)))
    check(all(st in (200, 429) for st, m in res), "flood replies: %r",
          [x for x in res if x[0] not in (200, 429)][:3])
    # the real code, right after the flood: refused (limited, and the code is gone)
    st, j = h.api("POST", "/user/login", {"phone": phone, "code": code})
    check(j["success"] is False, "the real code works after the flood: %r %r", st, j)
    check(_is_limited(st, j), "the phone's spent bucket was forgotten: %r %r", st, j)
    eq(r.cmd("EXISTS", "login:code:" + phone), 0, "the code after 5 wrong guesses")
    eq(srv.db().user_count(), 0, "users created")
    H.finish(srv)


def test_login_code_guesses_counted_in_redis_across_instances():
    """Wrong guesses are counted with the code in Redis: spread over two instances they
    still add up, the 5th kills the code, and a right code works once only."""
    r, a = H.setup(settings={"rate_phone_login": 0})
    b = H.start_server(r, settings={"rate_phone_login": 0})
    ha, hb = a.http(), b.http()
    phone = "13900005678"
    # 4 wrong guesses (2 per instance), then the right code works -- once
    code = H.send_code(a, r, phone, ha)
    for i in range(4):
        st, j = (ha, hb)[i % 2].api("POST", "/user/login",
                                    {"phone": phone, "code": "%06d" % ((int(code) + 1 + i) % 10 ** 6)})
        eq((st, j["errorMsg"]), (200, H.MSG_BAD_CODE), "wrong guess %d" % (i + 1))
    eq(r.cmd("GET", "{login:code:%s}:fails" % phone), "4", "wrong guesses counted in Redis")
    st, j = hb.api("POST", "/user/login", {"phone": phone, "code": code})
    check(st == 200 and j["success"], "the right code after 4 wrong guesses: %r %r", st, j)
    st, j = ha.api("POST", "/user/login", {"phone": phone, "code": code})
    eq((st, j["errorMsg"]), (200, H.MSG_BAD_CODE), "the same code a second time")
    # a new code: 5 wrong guesses over both instances kill it, the right one then fails
    code = H.send_code(b, r, phone, hb)
    eq(r.cmd("EXISTS", "{login:code:%s}:fails" % phone), 0, "a new code starts uncounted")
    for i in range(5):
        (hb, ha)[i % 2].api("POST", "/user/login",
                            {"phone": phone, "code": "%06d" % ((int(code) + 1 + i) % 10 ** 6)})
    eq(r.cmd("EXISTS", "login:code:" + phone), 0, "the code after 5 wrong guesses")
    st, j = ha.api("POST", "/user/login", {"phone": phone, "code": code})
    eq((st, j["errorMsg"]), (200, H.MSG_BAD_CODE), "the right code after 5 wrong guesses")
    eq(a.db().user_count(), 1, "users")
    H.finish(b)
    H.finish(a)


def test_rate_limit_ip_login_on_by_default():
    """The per-IP login limit is on without any flag (10/s, burst 100): a client sending
    150 logins at once has the rest refused, whatever phones they name."""
    r, srv = H.setup(threads=1, settings={"rate_ip_login": None})
    check("--rate-ip-login" not in srv.argv, "the test must run on the default")
    res = _pipelined_logins(srv.port, [H.phone_for(i, "150") for i in range(150)], "000000")
    ok = sum(1 for st, m in res if st == 200 and m == H.MSG_BAD_CODE)
    limited = sum(1 for st, m in res if st == 429 and m == RATE_MSG)
    eq(ok + limited, len(res), "every reply a wrong code or a 429")
    check(100 <= ok <= 110 and limited >= 40, "150 logins at once: %d answered, %d limited",
          ok, limited)
    check(_metric(srv, "seckill_rate_limited_by_limit_total", {"limit": "ip_login"}) >= 40,
          "per-IP login metric")
    H.finish(srv)


# ---------------------------------------------------------------------------------------
# the data directory: trusted only when it is ours alone

def _unprivileged():
    """argv prefix and (uid, gid) to run seckill as a user who is not the runner's other
    files' owner: `nobody` through setpriv when the runner is root, else the runner."""
    if os.geteuid() == 0:
        import pwd
        pw = pwd.getpwnam("nobody")
        return (["setpriv", "--reuid=%d" % pw.pw_uid, "--regid=%d" % pw.pw_gid,
                 "--clear-groups", "--"], pw.pw_uid, pw.pw_gid)
    return [], os.geteuid(), os.getegid()


def _shared_base():
    """A directory the unprivileged user can reach inside the test's temp dir. Removed
    when the test passes (_drop_base); kept with the temp dir when it fails."""
    import tempfile
    base = tempfile.mkdtemp(prefix="seckill-dd-", dir=H.tmpdir())
    # The test's dir and the runner's dir above it (SECKILL_TEST_TMP) are 0700 from
    # mkdtemp: let the other user pass through them (not list them), up to the system's
    # temp dir.
    stop = os.path.realpath(tempfile.gettempdir())
    d = os.path.realpath(H.tmpdir())
    while d not in (stop, "/") and d.startswith(stop + os.sep):
        os.chmod(d, os.stat(d).st_mode & 0o7777 | 0o111)
        d = os.path.dirname(d)
    os.chmod(base, 0o755)
    return base


def _drop_base(base):
    import shutil
    shutil.rmtree(base, ignore_errors=True)


def _serve_argv(data_dir, extra=()):
    return [H.binary(), "serve", "--data-dir", data_dir, "--threads", "1",
            "--listen", "127.0.0.1:%d" % H.free_port(), "--rate-ip-login", "0"] + list(extra)


def _refused(prefix, argv, cwd, what):
    p = subprocess.run(prefix + argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, env=H.san_env(), cwd=cwd, timeout=60)
    text = p.stdout.decode("utf-8", "replace")
    check(p.returncode != 0, "%s: seckill started (exit %d):\n%s", what, p.returncode, text)
    for m in H.SANITIZER_MARKERS:
        check(m not in text, "%s: sanitizer report:\n%s", what, text)
    return text


def test_data_dir_refused_unless_ours_alone():
    """A data directory of another user, or one others may write to, is refused with a
    clear error and a non-zero exit; a planted admin-token (a symlink, or a file others
    can read) is refused, and a symlink's target is never written."""
    prefix, uid, gid = _unprivileged()
    base = _shared_base()
    # another user's directory (root's when we run as nobody; /tmp's owner otherwise)
    foreign = os.path.join(base, "foreign")
    os.mkdir(foreign, 0o755)
    if os.geteuid() != 0:
        foreign = "/tmp"
    text = _refused(prefix, _serve_argv(foreign), base, "foreign-owned data dir")
    check("belongs to uid" in text and "not to this user" in text, "no reason given:\n%s", text)
    # ours, but group- or world-writable
    for mode, who in ((0o777, "every user"), (0o770, "its group")):
        d = os.path.join(base, "open-%o" % mode)
        os.mkdir(d)
        os.chown(d, uid, gid)
        os.chmod(d, mode)
        text = _refused(prefix, _serve_argv(d), base, "data dir mode %o" % mode)
        check("writable by " + who in text and "chmod 700" in text, "mode %o:\n%s", mode, text)
    # ours and 0700, but an admin-token symlink planted in it (say before a chmod)
    d = os.path.join(base, "planted")
    os.mkdir(d, 0o700)
    os.chown(d, uid, gid)
    target = os.path.join(base, "target")
    with open(target, "w") as f:
        f.write("precious\n")
    os.chown(target, uid, gid)
    os.symlink(target, os.path.join(d, "admin-token"))
    text = _refused(prefix, _serve_argv(d), base, "admin-token symlink")
    check("admin-token" in text and "symlink" in text, "symlink not named:\n%s", text)
    with open(target) as f:
        eq(f.read(), "precious\n", "the symlink's target")
    # a token file others can read is not trusted either
    os.unlink(os.path.join(d, "admin-token"))
    tok = os.path.join(d, "admin-token")
    with open(tok, "w") as f:
        f.write("planted-token-0123456789\n")
    os.chown(tok, uid, gid)
    os.chmod(tok, 0o644)
    text = _refused(prefix, _serve_argv(d), base, "admin-token mode 644")
    check("readable or writable by others" in text, "mode 644 token:\n%s", text)
    _drop_base(base)


def test_data_dir_created_private():
    """A new data directory (and its parents) is 0700; the admin token, the database and
    its WAL are 0600 (umask 077), all owned by the server's user."""
    prefix, uid, gid = _unprivileged()
    base = _shared_base()
    os.chown(base, uid, gid)
    d = os.path.join(base, "new", "var")
    port = H.free_port()
    argv = _serve_argv(d)
    argv[argv.index("--listen") + 1] = "127.0.0.1:%d" % port
    out = open(os.path.join(base, "private.out"), "wb")
    p = subprocess.Popen(prefix + argv, stdin=subprocess.DEVNULL, stdout=out,
                         stderr=subprocess.STDOUT, env=H.san_env(), cwd=base)
    try:
        def ready():
            check(p.poll() is None, "seckill exited %s", p.returncode)
            try:
                return H.Http(port, timeout=2).request("GET", "/health")[0] == 200
            except OSError:
                return False
        H.wait_until(ready, 60, what="seckill as an unprivileged user")
        st = {}
        for rel in ("new", "new/var", "new/var/admin-token", "new/var/seckill.db",
                    "new/var/seckill.db-wal", "new/var/redis"):
            s = os.stat(os.path.join(base, rel))
            st[rel] = (s.st_mode & 0o7777, s.st_uid)
        eq(st, {"new": (0o700, uid), "new/var": (0o700, uid),
                "new/var/admin-token": (0o600, uid), "new/var/seckill.db": (0o600, uid),
                "new/var/seckill.db-wal": (0o600, uid), "new/var/redis": (0o700, uid)},
           "modes and owners")
    finally:
        p.send_signal(15)
        rc = p.wait(60)
        out.close()
    with open(os.path.join(base, "private.out"), "rb") as f:
        text = f.read().decode("utf-8", "replace")
    eq(rc, 0, "exit code (log: %s)" % text[-2000:])
    for m in H.SANITIZER_MARKERS:
        check(m not in text, "sanitizer report:\n%s", text)
    _drop_base(base)


# ---------------------------------------------------------------------------------------
# secrets off the command line

def _secret_file(name, value):
    path = os.path.join(H.subdir("secrets"), name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    return path


def test_secrets_from_files_not_on_the_command_line():
    """--admin-token-file, --redis-password-file and --db-password-file: the server works
    with them and /proc/PID/cmdline shows none of the secrets. An admin token shorter
    than 16 characters is refused at start, as is a token given twice."""
    pw = "r3dis/pw@" + H.rand_hex(10)          # '/' and '@' survive the URL
    red = AuthRedis(H.free_port(), H.subdir("redis-auth"), pw).start()
    adm = "adm-" + H.rand_hex(24)
    d = H.subdir("srv")
    db_url = H.db_url_for(os.path.join(d, "seckill.db"))
    db_pw = None
    if db_url.startswith("mysql://"):     # the MariaDB pass: its password by file too
        m = re.match(r"^(mysql://[^:/@]+):([^@]*)@(.*)$", db_url)
        check(m is not None, "unexpected MariaDB URL shape")
        db_url, db_pw = m.group(1) + "@" + m.group(3), urllib.parse.unquote(m.group(2))
    port = H.free_port()
    argv = [H.binary(), "serve", "--listen", "127.0.0.1:%d" % port,
            "--redis", "redis://127.0.0.1:%d" % red.port,
            "--redis-password-file", _secret_file("redis-pw", pw),
            "--db", db_url, "--admin-token-file", _secret_file("admin", adm),
            "--threads", "1", "--data-dir", d, "--rate-ip-login", "0"]
    if db_pw is not None:
        argv += ["--db-password-file", _secret_file("db-pw", db_pw)]
    srv = H.Server(argv, d, port, adm, os.path.join(d, "seckill.db"), None,
                   db_url=H.db_url_for(os.path.join(d, "seckill.db"))).start()
    with open("/proc/%d/cmdline" % srv.proc.pid, "rb") as f:
        cmdline = f.read().decode("utf-8", "replace")
    for secret in [pw, adm] + ([db_pw] if db_pw else []):
        check(secret not in cmdline, "a secret is on the command line: %r", cmdline)
    h = srv.http()
    vid = H.create_seckill(srv, stock=2, http=h)          # the admin token from the file
    tok = H.login(srv, red, "13100000009", h)             # Redis AUTH from the file
    st, j = H.seckill(srv, tok, vid, h)
    check(st == 200 and j["success"], "seckill: %r %r", st, j)
    eq(H.wait_drained(srv, red, vid, 60), 1, "orders written")   # the database too
    srv.stop()
    text = srv.stderr_text() + srv.stdout_text()
    check(pw not in text and adm not in text, "a secret is in the log")
    # refused at start: a short admin token, a token given twice, a password twice
    base = [H.binary(), "serve", "--listen", "127.0.0.1:%d" % H.free_port(), "--redis",
            red.url, "--db", "sqlite:" + os.path.join(d, "x.db"), "--threads", "1",
            "--data-dir", d]
    for extra, why in ((["--admin-token", "short-token-15c"], "too short"),
                       (["--admin-token", adm, "--admin-token-file",
                         _secret_file("admin", adm)], "use one"),
                       (["--redis-password-file", _secret_file("redis-pw", pw)],
                        "password already")):
        text = _refused([], base + extra, d, extra[0])
        check(why in text, "%s: reason not given:\n%s", extra[0], text)
        check(pw not in text and adm not in text, "a secret in the refusal: %s", text)


# ---------------------------------------------------------------------------------------
# login codes: out of the log, into a delivery command

def test_login_codes_logged_only_when_asked():
    """A configured deployment does not write login codes to its log (the embedded
    default does, test_embedded.py; --log-login-codes does, test_api.py)."""
    r, srv = H.setup(settings={"log_level": "debug"})
    code = H.send_code(srv, r, "13700007777", srv.http())
    srv.stop()
    text = srv.stderr_text() + srv.stdout_text()
    check("verification code" not in text and code not in text,
          "a login code in the log of a configured deployment")
    check("neither delivered nor logged" in text, "no warning about undelivered codes")


def test_code_command_delivers_or_refuses():
    """--code-command: the phone and code reach the command through its environment
    (with no other SECKILL_* variable); a failing or slow command (killed at its time
    limit) gets the client an error and stores no code."""
    d = H.subdir("hook")
    out, envout = os.path.join(d, "sent"), os.path.join(d, "env")
    script = os.path.join(d, "send.sh")
    with open(script, "w") as f:
        f.write('case "$SECKILL_PHONE" in\n'
                '  *1) printf "%%s %%s\\n" "$SECKILL_PHONE" "$SECKILL_CODE" >> %s\n'
                '      env | grep "^SECKILL_" | sort >> %s ;;\n'
                '  *2) exit 3 ;;\n'
                '  *3) exec sleep 31.4159 ;;\n'
                'esac\n' % (out, envout))
    r, srv = H.setup(settings={"code_command": "sh " + script,
                               "code_command_timeout_ms": 300})
    h = srv.http()
    # delivered: the code the command got is the one Redis holds, and it logs in
    code = H.send_code(srv, r, "13700000001", h)
    with open(out) as f:
        eq(f.read(), "13700000001 %s\n" % code, "what the command received")
    with open(envout) as f:
        eq(f.read(), "SECKILL_CODE=%s\nSECKILL_PHONE=13700000001\n" % code,
           "SECKILL_* variables the command sees")
    st, j = h.api("POST", "/user/login", {"phone": "13700000001", "code": code})
    check(st == 200 and j["success"], "login with the delivered code: %r %r", st, j)
    # failing, then too slow: an error answer, nothing stored
    for phone, why in (("13700000002", "exit status 3"), ("13700000003", "timed out")):
        st, j = h.api("POST", "/user/code?phone=" + phone)
        check(st == 503 and j["success"] is False and "delivered" in j["errorMsg"],
              "%s: %r %r", why, st, j)
        eq(r.cmd("EXISTS", "login:code:" + phone), 0, "code stored although " + why)
        # the log masks the phone (test_sec_login.py::test_phones_masked_in_the_log)
        masked = phone[:3] + "\\*\\*\\*\\*" + phone[-4:]
        H.wait_until(lambda: srv.log_lines("code-command failed for %s \\(%s\\)" % (masked, why)),
                     5, what="the failure logged")

    def sleeper_gone():
        p = subprocess.run(["pgrep", "-f", "sleep 31.4159"], stdout=subprocess.PIPE)
        return p.returncode == 1
    H.wait_until(sleeper_gone, 10, what="the timed-out command killed")
    H.finish(srv)


# ---------------------------------------------------------------------------------------
# operations surface: the client behind a proxy, Retry-After, /metrics

def test_forwarded_for_only_from_trusted_proxies():
    """Per-IP limits see the client named by X-Forwarded-For only when the TCP peer is a
    --trusted-proxy (here 127.0.0.1, as nginx on the same host), reading the list from
    the right; a client's own header is ignored. A 429 says when to retry."""
    r, srv = H.setup(threads=1, settings={"rate_ip_code": "1/m:2",
                                          "trusted_proxy": "10.9.8.0/24, 127.0.0.1"})
    h = srv.http()

    def code(phone, xff=None):
        st, hd, body = h.request("POST", "/user/code?phone=" + phone,
                                 headers={"X-Forwarded-For": xff} if xff else None)
        return st, hd

    # client 203.0.113.7 through two proxies (a trusted 10.9.8.x hop, then us)
    got = [code("1370000010%d" % i, "198.51.100.1, 203.0.113.7, 10.9.8.5")[0]
           for i in range(3)]
    eq(got, [200, 200, 429], "client 203.0.113.7 (spoofed 198.51.100.1 ignored)")
    st, hd = code("13700000110", "203.0.113.7")
    eq(st, 429, "the same client, one hop")
    eq(hd.get("retry-after"), "60", "Retry-After of a 1/m limit")
    # another client behind the same proxy has its own bucket
    eq(code("13700000111", "203.0.113.8")[0], 200, "client 203.0.113.8")
    H.finish(srv)
    # without --trusted-proxy the header is the client's word: ignored, all one peer
    r, srv = H.setup(threads=1, settings={"rate_ip_code": "1/m:2"})
    h = srv.http()
    got = [code("1370000020%d" % i, "203.0.113.%d" % i)[0] for i in range(3)]
    eq(got, [200, 200, 429], "X-Forwarded-For from an untrusted peer")
    # a second X-Forwarded-For line is refused outright
    raw = (b"POST /user/code?phone=13700000300 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
           b"X-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2\r\n\r\n")
    st, hd, body = _raw(srv.port, raw)
    eq(st, 400, "two X-Forwarded-For lines")
    H.finish(srv)


def test_metrics_token():
    tok = "m-" + H.rand_hex(20)
    r, srv = H.setup(settings={"metrics_token": tok})
    h = srv.http()
    for hdr in (None, "Bearer", "Bearer " + tok[:-1], tok, "Bearer " + tok + "x",
                "bearer " + tok):
        st, hd, body = h.request("GET", "/metrics",
                                 headers={"authorization": hdr} if hdr else None)
        eq((st, body), (401, b""), "/metrics with authorization %r" % hdr)
    st, hd, body = h.request("GET", "/metrics", headers={"authorization": "Bearer " + tok})
    check(st == 200 and b"seckill_" in body, "/metrics with the token: %d %r", st, body[:100])
    eq(h.request("GET", "/health")[0], 200, "/health needs no token")
    H.finish(srv)


# ---------------------------------------------------------------------------------------
# the order writer checks what it reads

def test_writer_validates_stream_entries():
    """Well-formed stream entries the admission script never writes -- a far-future
    time, a user id out of range, a time outside the sale window, an order for a voucher
    SQL does not have, an entry in a form admit.lua does not write -- go to the dead
    letters with their reason, and never reach SQL. A year past 9999 is outside what
    MariaDB's DATETIME holds: in strict mode it fails the whole batch on every retry,
    stalling the real orders behind it; here the real order behind them must be written."""
    r, srv = H.setup()
    vid = H.create_seckill(srv, stock=10)
    now = int(time.time())
    forged = [("300000000000", "7", "year 11476", "time out of range"),
              (str(now), str(2 ** 62), "huge user id", "userId out of range"),
              ("1000000000", "8", "a time in 2001", "time outside the voucher's sale window")]
    for k, (ts, uid, what, why) in enumerate(forged):
        r.cmd("XADD", H.k_stream(vid), "*", "os", "%s 0 %d %s" % (ts, 4242424200 + k, uid))
    # one order per entry in named fields is not the entry format (src/sale/sentry.h)
    r.cmd("XADD", H.k_stream(vid), "*", "id", "4242424250", "userId", "11",
          "voucherId", str(vid), "ts", str(now), "ep", "0")
    forged.append((str(now), "11", "the named form", "no os field"))
    # an entry of one admission call carries several orders (os, src/sale/sentry.h): written
    # all, or -- one of them bad -- moved to the dead letters whole, none of it in SQL
    r.cmd("XADD", H.k_stream(vid), "*", "os", "%d 0 4242424260 12 4242424261 13" % now)
    r.cmd("HSET", H.k_buyers(vid), "12", "4242424260", "13", "4242424261")
    r.cmd("XADD", H.k_stream(vid), "*", "os",
          "%d 0 4242424270 14 4242424271 %d" % (now, 2 ** 62))
    forged.append((str(now), str(2 ** 62), "one bad order of two", "userId out of range"))
    ghost = 987654321
    r.cmd("SADD", "seckill:streams", str(ghost))
    r.cmd("XADD", H.k_stream(ghost), "*", "os", "%d 0 4242424299 9" % now)
    # a real order behind them is written: nothing stalls
    tok = H.login(srv, r, "13600000077", srv.http())
    st, j = H.seckill(srv, tok, vid, srv.http())
    check(st == 200 and j["success"], "the real order: %r %r", st, j)
    eq(H.wait_drained(srv, r, vid, 30), 3,
       "orders in SQL for the voucher (the two of one entry too)")

    def dead(v):
        out = []
        for eid, fields in r.cmd("XRANGE", "seckill:dead:{%d}" % v, "-", "+"):
            out.append(dict(zip(fields[::2], fields[1::2]))["reason"])
        return out
    H.wait_until(lambda: len(dead(vid)) == 5 and len(dead(ghost)) == 1, 30,
                 what="the forged entries in the dead letters")
    eq(sorted(dead(vid)), sorted(why for ts, uid, what, why in forged), "dead-letter reasons")
    eq(dead(ghost), ["no such flash-sale voucher in SQL"], "the ghost voucher's entry")
    eq(srv.db().scalar("SELECT COUNT(*) FROM tb_voucher_order WHERE id >= 4242424200 "
                       "AND id < 4242424300 AND id NOT IN (4242424260, 4242424261)"), 0,
       "forged orders in SQL (the named one, the good order of the bad entry too)")
    H.finish(srv)
