#!/usr/bin/env python3
"""seeds.py -- writes the hand-made seed inputs of fuzz/corpus/<target>/seed-*.

    python3 fuzz/seeds.py        (re-run after changing a seed; the files are committed)

Inputs found by fuzzing (named by libFuzzer after their SHA-1) live beside the seeds and
are kept as regression cases. The layout of each target's input is in its .c file."""
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
ADMIN = "fuzz-admin-token-0123456789abcdef"
TOKEN = "0123456789abcdef0123456789abcdef"


def req(method, path, headers=(), body=None, version="HTTP/1.1"):
    h = ["Host: 127.0.0.1"] + list(headers)
    if body is not None:
        h.append("Content-Length: %d" % len(body.encode()))
    return ("%s %s %s\r\n" % (method, path, version) + "".join(x + "\r\n" for x in h) +
            "\r\n" + (body or "")).encode()


VOUCHER = ('{"shopId":1,"title":"100元代金券","subTitle":"周一至周日","rules":"全场通用\\n无需预约",'
           '"payValue":8000,"actualValue":10000,"type":1,"stock":100,'
           '"beginTime":"2024-01-01T00:00:00","endTime":"2099-01-01T00:00:00"}')
LOGIN = '{"phone":"13800000000","code":"123456"}'

http = {
    "health": b"\x00" + req("GET", "/health"),
    "metrics": b"\x00" + req("GET", "/metrics"),
    "code": b"\x00" + req("POST", "/user/code?phone=13800000000", body=""),
    "code-async": b"\x01" + req("POST", "/api/user/code?phone=138%300000000", body=""),
    "login": b"\x03" + req("POST", "/user/login", ["Content-Type: application/json"], LOGIN),
    "voucher": b"\x03" + req("POST", "/voucher/seckill", ["x-admin-token: " + ADMIN], VOUCHER),
    "voucher-list": b"\x02" + req("GET", "/voucher/list/1"),
    "order-user": b"\x04" + req("POST", "/voucher-order/seckill/42",
                                ["authorization: " + TOKEN], ""),
    "order-async": b"\x05" + req("POST", "/voucher-order/seckill/42",
                                 ["authorization: " + TOKEN], ""),
    "order-ok": b"\x0d" + req("POST", "/voucher-order/seckill/42",
                              ["authorization: " + TOKEN], "") * 2,
    "me": b"\x04" + req("GET", "/user/me", ["authorization: " + TOKEN]),
    "of-me": b"\x07" + req("GET", "/voucher-order/of/me", ["authorization: " + TOKEN]),
    "order-get": b"\x07" + req("GET", "/voucher-order/123", ["authorization: " + TOKEN]),
    "logout": b"\x05" + req("POST", "/user/logout", ["authorization: " + TOKEN], ""),
    "pipeline": b"\x01" + req("GET", "/health") + req("POST", "/user/code?phone=13800000001",
                                                      body="") + req("GET", "/nope"),
    "pipeline-chunks": b"\x31" + req("GET", "/metrics") * 3,
    "chunked": b"\x00" + (b"POST /user/login HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
                          b"\r\n\r\n5\r\n{\"pho\r\n22\r\nne\":\"13800000000\",\"code\":\"123456\"}"
                          b"\r\n0\r\n\r\n"),
    "expect": b"\x00" + req("POST", "/user/login", ["Expect: 100-continue"], LOGIN),
    "head": b"\x00" + req("HEAD", "/health"),
    "http10": b"\x00" + req("GET", "/health", ["Connection: keep-alive"], version="HTTP/1.0"),
    "close": b"\x00" + req("GET", "/health", ["Connection: close"]) + req("GET", "/health"),
    "absolute": b"\x00" + req("GET", "http://127.0.0.1:8081/api/health?x=1#frag"),
    "bad-id": b"\x00" + req("POST", "/voucher-order/seckill/-1", ["authorization: " + TOKEN]),
    "two-auth": b"\x00" + req("GET", "/user/me", ["authorization: a", "Authorization: b"]),
    "method": b"\x00" + req("DELETE", "/voucher/list/1"),
    "upgrade": b"\x00" + req("GET", "/health", ["Upgrade: websocket", "Connection: Upgrade"]),
    "garbage": b"\x00GET / HTTP/1.1\r\nHost x\r\n\r\n",
    "big-header": b"\x00" + req("GET", "/health", ["X-Pad: " + "a" * 5000]),
    "big-body": b"\x10" + req("POST", "/user/login", [], "x" * 9000),
    "crlf-token": b"\x04" + b"GET /user/me HTTP/1.1\r\nauthorization: " + TOKEN.encode() +
                  b"\r\n x-admin-token: evil\r\n\r\n",
}

json_ = {
    "login": b"\x00" + LOGIN.encode(),
    "login-code": b"\x18" + LOGIN.encode(),
    "login-badphone": b"\x00" + b'{"phone":"12345","code":"1"}',
    "login-types": b"\x00" + b'{"phone":13800000000,"code":null}',
    "login-dup": b"\x00" + b'{"phone":"13800000000","phone":"13800000001"}',
    "voucher": b"\x09" + VOUCHER.replace(',"stock":100', '').encode(),
    "seckill": b"\x0a" + VOUCHER.encode(),
    "seckill-wrongtoken": b"\x06" + VOUCHER.encode(),
    "seckill-sql": b"\x0a" + VOUCHER.replace("100元代金券", "'; DROP TABLE tb_voucher; --")
                                     .encode(),
    "seckill-times": b"\x0a" + VOUCHER.replace("2099-01-01T00:00:00", "2023-02-30T25:61:61")
                                      .encode(),
    "seckill-big": b"\x0a" + VOUCHER.replace('"stock":100', '"stock":1e99').encode(),
    "not-object": b"\x01[1,2,3]",
    "bad-json": b"\x02{\"shopId\":1,",
    "bad-utf8": b"\x02{\"title\":\"\xff\xfe\"}",
    "code": b"\x03phone=13800000000",
    "code-enc": b"\x03a=1&phone=%31%33%38%30%30%30%30%30%30%30%30&b",
    "code-nul": b"\x03phone=1380000000%00",
}

config = {
    "file": (b"listen = 127.0.0.1:8081\nthreads = 4\nredis = redis://:secret@127.0.0.1:6379/0\n"
             b"# comment\nmode = stream\nlog-level = debug\nrate-user-seckill = 20/s:40\n"
             b"rate-phone-code = \"1/m:3\"\nmax-body-bytes = 65536\n"),
    "flags": (b"threads = 2\n\x00--listen\x00[::1]:9000\x00--rate-ip-code=30/m\x00"
              b"--appendfsync-always\x00--name\x00x"),
    "bad": b"listen = nope\n",
    "unknown": b"colour = blue\n",
    "empty": b"",
    "bool": b"\x00--appendfsync-always\x00--threads\x003",
    "range": b"threads = 257\n",
    "long": b"admin-token = " + b"a" * 200 + b"\n",
}


def resp(x):
    if x is None:
        return b"*-1\r\n"
    if isinstance(x, int):
        return b":%d\r\n" % x
    if isinstance(x, str):
        x = x.encode()
    if isinstance(x, bytes):
        return b"$%d\r\n%s\r\n" % (len(x), x)
    if isinstance(x, tuple) and x[0] == "err":
        return b"-" + x[1].encode() + b"\r\n"
    if isinstance(x, tuple) and x[0] == "status":
        return b"+" + x[1].encode() + b"\r\n"
    return b"*%d\r\n" % len(x) + b"".join(resp(e) for e in x)


def entry(eid, **f):
    return [eid, [v for kv in f.items() for v in kv]]


S1, S42 = "seckill:stream:{1}", "seckill:stream:{42}"
redis = {
    "xread": b"\x00" + resp([[S42, [entry("1700000000000-0", os="1700000000 0 123 7 125 9"),
                                      entry("1700000000000-1", os="0 2 124 8")]]]),
    "xread-pending": b"\x01" + resp([[S1, [entry("1-0", os="1700000000 0 5 6")]],
                                     [S42, []]]),
    "xread-dead": b"\x00" + resp([[S42, [entry("2-0", os="1700000000 0 x 7"),
                                         entry("2-1", id="9", userId="7", voucherId="42"),
                                         ["2-2", None], ["2-3", ["os"]],
                                         ["2-4", ["os", 5]]]]]),
    "xread-events": b"\x00" + resp([[S42, [entry("3-0", ev="c 123 7 1700000000 0"),
                                           entry("3-1", evs="t 1700000000 2 124 8 125 9"),
                                           entry("3-2", evs="t 1700000000 0 126 10",
                                                 free="1"),
                                           entry("3-3", evs="t 1700000000 0 127"),
                                           entry("3-4", ev="t 1 2 3 0", evs="t 1 0 4 5")]]]),
    "xread-nil": b"\x00" + resp(None),
    "admit-ok": b"\x02" + resp(0),
    "admit-soldout": b"\x02" + resp(1),
    "admit-odd": b"\x02" + resp(99),
    "admit-err": b"\x02" + resp(("err", "NOSCRIPT No matching script")),
    "user": b"\x03" + resp(["id", "7", "nickName", "user_abc", "icon", "/imgs/x.png"]),
    "user-utf8": b"\x03" + resp(["id", "7", "nickName", "小明" * 30, "icon", ""]),
    "user-empty": b"\x03" + resp([]),
    "user-badid": b"\x03" + resp(["id", "-7", "nickName", "x"]),
    "publish": b"\x04" + resp(("status", "OK")),
    "publish-busy": b"\x04" + resp(("err", "BUSYGROUP Consumer Group name already exists")),
    "code": b"\x05" + resp("123456"),
    "code-wrong": b"\x05" + resp("654321"),
    "code-set": b"\x06" + resp(("status", "OK")),
    "ping": b"\x07" + resp(("status", "PONG")),
}


def write(target, seeds):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, "seed-" + name), "wb") as f:
            f.write(data)


write("fuzz_http", http)
write("fuzz_json", json_)
write("fuzz_config", config)
write("fuzz_redis_reply", redis)
print("seeds written under", ROOT)
