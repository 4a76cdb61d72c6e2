"""test_sec_http.py -- the HTTP layer's buffers and sockets against abusive clients
(docs/reliability.md, "Security review findings", M2-M4, L4, L5):

- a body (over 64 bytes) on a route that reads none is refused with 413 from the head, before a byte
  of it is buffered; login and voucher creation keep their own limits (M2);
- one client address holds at most its share of --max-buffered-bytes, so another address
  still gets its request in (M2); a body of known length is reserved at that length, not
  doubled (M2); a body that trickles in slower than --min-body-rate gets 408 (M2);
- --max-conns-per-ip counts an IPv6 client by its /64, and caps its /48 (M3);
- a client that requests large replies and never reads them is closed at the write
  timeout, and its socket's send queue stays within the fixed SO_SNDBUF (M4);
- every answer under /admin carries anti-framing, CSP, nosniff and no-store (L4);
- /metrics is private by default: not on --listen without --metrics-token or
  --metrics-public (L5).
"""

import socket
import subprocess
import threading
import time

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)   # the HTTP layer only: one SQL backend is enough
# run alone under tests/run.py -j: reads host-wide TCP memory (/proc/net/sockstat)
SERIAL = True


def _read_reply(s, timeout):
    """The first reply's status line and head on socket s, or None if none came within
    timeout seconds (the connection stays open) or it closed without one."""
    s.settimeout(timeout)
    got = b""
    try:
        while b"\r\n\r\n" not in got:
            d = s.recv(65536)
            if not d:
                break
            got += d
    except socket.timeout:
        return None
    except OSError:
        pass
    return got.split(b"\r\n\r\n", 1)[0] if got else None


def _status(head):
    return int(head.split(b" ", 2)[1]) if head else None


def _head(path, method="GET", extra=""):
    return ("%s %s HTTP/1.1\r\nHost: x\r\n%s\r\n" % (method, path, extra)).encode()


# ---------------------------------------------------------------------------------------
# M2: body limits per route, per-address share of the budget, exact reservation, rate

def test_body_limit_per_route_from_the_head():
    r, srv = H.setup()
    # Routes that read no body: 413 from the head alone; the body is never sent.
    for method, path in (("GET", "/voucher/list/1"), ("HEAD", "/voucher/list/1"),
                         ("POST", "/voucher-order/seckill/1"), ("POST", "/user/code?phone=1"),
                         ("GET", "/admin/"), ("POST", "/nowhere")):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(_head(path, method, "Content-Length: 60000\r\n"))
        head = _read_reply(s, 3)
        s.close()
        check(head is not None, "%s %s with Content-Length 60000 and no body sent: no answer "
              "within 3 s (the server waits to buffer a body the route never reads)",
              method, path)
        eq(_status(head), 413, "%s %s with a 60000-byte body" % (method, path))
    # A chunked body on the order POST: 413 at its first chunk.
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(_head("/voucher-order/seckill/1", "POST", "Transfer-Encoding: chunked\r\n") +
              b"400\r\n" + b"x" * 100)
    eq(_status(_read_reply(s, 3)), 413, "a chunked body on the order POST")
    s.close()
    # Login: its own small limit; a login-sized body is read and answered.
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(_head("/user/login", "POST", "Content-Length: 60000\r\n"))
    eq(_status(_read_reply(s, 3)), 413, "a 60000-byte login body")
    s.close()
    h = srv.http()
    st, _, body = h.request("POST", "/user/login", body={"phone": "1", "code": "x" * 3000})
    check(st != 413, "a 3 KB login body: %d %r", st, body[:200])
    # Voucher creation keeps --max-body-bytes; an empty POST body is still fine anywhere.
    st, _, body = h.request("POST", "/voucher", body=b"{" + b" " * 60000 + b"}")
    check(st != 413, "a 60000-byte voucher body: %d %r", st, body[:200])
    st, _, body = h.request("POST", "/voucher-order/seckill/1")   # Content-Length: 0
    check(st != 413, "the order POST with Content-Length 0: %d %r", st, body[:200])
    H.finish(srv)


def _partial_body(port, src, length, send):
    """A connection from source address src with a POST /voucher of Content-Length length
    of which send bytes are sent."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((src, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    s.sendall(_head("/voucher", "POST", "Content-Type: application/json\r\n"
                    "Content-Length: %d\r\n" % length) + b"{" + b" " * (send - 1))
    return s


def test_one_address_cannot_take_the_whole_budget():
    """Before: 5 addresses x 1,000 unfinished 64 KB bodies made everyone's requests 503.
    Now an address holds at most --max-buffered-ip-pct (10 %) of --max-buffered-bytes."""
    budget = 1 << 20
    r, srv = H.setup(settings={"max_buffered_bytes": budget, "header_timeout_s": 30})
    hog = []
    refused = 0
    for i in range(16):
        s = _partial_body(srv.port, "127.0.0.1", 60000, 50000)
        hog.append(s)
        head = _read_reply(s, 0.3)
        if head is not None:
            eq(_status(head), 503, "a refused body of 127.0.0.1's connection %d" % i)
            refused += 1
    H.log("127.0.0.1: %d of 16 unfinished 60000-byte bodies refused" % refused)
    # Another address still gets a body of the same size in and answered.
    s = _partial_body(srv.port, "127.0.0.2", 60000, 60000)
    head = _read_reply(s, 10)
    s.close()
    check(head is not None, "127.0.0.2's complete request: no answer")
    check(_status(head) != 503, "127.0.0.2's request while 127.0.0.1 holds 16 unfinished "
          "bodies: %r (one address took the whole budget)", head)
    check(refused >= 14, "127.0.0.1 held %d of 16 60000-byte bodies within 10 %% of %d bytes"
          % (16 - refused, budget))
    for s in hog:
        s.close()
    H.finish(srv)


def test_body_reserved_at_its_length():
    """A 65536-byte body fits a 100,000-byte budget: its buffer is its Content-Length (+1),
    not the next power of two (128 KiB). (No per-address cap, so no per-address share:
    the process-wide budget alone decides.)"""
    r, srv = H.setup(settings={"max_buffered_bytes": 100000, "max_body_bytes": 65536,
                               "max_conns_per_ip": 0})
    s = _partial_body(srv.port, "127.0.0.1", 65536, 65000)
    s.sendall(b" " * 535 + b"}")
    head = _read_reply(s, 10)
    s.close()
    check(head is not None, "a 65536-byte body: no answer")
    check(_status(head) != 503, "a 65536-byte body in a budget of 100,000 bytes: %r", head)
    H.finish(srv)


def test_slow_body_gets_408():
    """A body that trickles (1 byte a second) is refused with 408 within a few seconds
    (--min-body-rate 1024 B/s after a 2 s grace), not held until the header timeout."""
    r, srv = H.setup(settings={"header_timeout_s": 60})
    s = _partial_body(srv.port, "127.0.0.1", 60000, 10)
    t0 = time.monotonic()
    head = None
    while head is None and time.monotonic() - t0 < 15:
        try:
            s.sendall(b" ")
        except OSError:
            break
        head = _read_reply(s, 1)
    took = time.monotonic() - t0
    s.close()
    check(head is not None, "a body at 1 byte/s: no answer within %.0f s" % took)
    eq(_status(head), 408, "a body at 1 byte/s")
    check(took < 8, "408 after %.1f s" % took)
    H.log("slow body refused with 408 after %.1f s" % took)
    H.finish(srv)


# ---------------------------------------------------------------------------------------
# M3: IPv6 clients counted by their /64, their /48 capped

V6_64 = ["fd5e:c0::%x" % (i + 1) for i in range(8)]                 # one /64
V6_48 = ["fd5e:c0:0:%x::1" % (i + 1) for i in range(5)]             # five /64s, one /48


def _add_v6_addresses():
    """Adds the test's addresses to lo (root, in the test's network namespace). Returns
    the ones added, to remove after."""
    if subprocess.run(["id", "-u"], capture_output=True).stdout.strip() != b"0":
        raise H.TestFailure("adding IPv6 addresses to lo needs root")
    added = []
    for a in V6_64 + V6_48:
        p = subprocess.run(["ip", "-6", "addr", "add", a + "/128", "dev", "lo", "nodad"],
                           capture_output=True)
        if p.returncode != 0 and b"File exists" not in p.stderr:
            raise H.TestFailure("ip -6 addr add %s: %s" % (a, p.stderr.decode()))
        added.append(a)
    return added


def _v6_conn(port, src):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.bind((src, 0))
    s.settimeout(10)
    s.connect(("::1", port))
    return s


def _admitted(s):
    """Whether the server keeps connection s (answers a request on it) or refused it (a
    503 it sends at once, before any request: read first, or our request could meet the
    closed socket and a RST destroy that 503)."""
    head = _read_reply(s, 0.5)
    if head is None:
        s.sendall(_head("/health"))
        head = _read_reply(s, 10)
    check(head is not None, "no answer on an IPv6 connection")
    return _status(head) == 200


def test_ipv6_conns_capped_per_64_and_48():
    added = _add_v6_addresses()
    try:
        port = H.free_port()
        r = H.start_redis()
        srv = H.start_server(r, port=port, settings={"max_conns_per_ip": 4},
                             extra=["--listen", "[::]:%d" % port])
        conns = [_v6_conn(port, a) for a in V6_64]
        ok = [_admitted(s) for s in conns]
        H.log("8 connections from 8 addresses of one /64, cap 4: admitted %r" % ok)
        eq(sum(ok), 4, "connections admitted from one /64 with --max-conns-per-ip 4")
        for s in conns:
            s.close()
        H.finish(srv)
        # The /48: 4 x the cap over all its /64s (2 x 4 = 8 of 5 x 2).
        srv = H.start_server(r, port=port, settings={"max_conns_per_ip": 2},
                             extra=["--listen", "[::]:%d" % port])
        conns = [_v6_conn(port, a) for a in V6_48 for _ in range(2)]
        ok = [_admitted(s) for s in conns]
        eq(sum(ok), 8, "connections admitted from five /64s of one /48 (cap 2, /48: 8)")
        for s in conns:
            s.close()
        H.finish(srv)
    finally:
        for a in added:
            subprocess.run(["ip", "-6", "addr", "del", a + "/128", "dev", "lo"],
                           capture_output=True)


# ---------------------------------------------------------------------------------------
# M4: clients that do not read their replies

def _server_send_queues(port):
    """Send-Q of every established connection of the server's port (its side)."""
    out = subprocess.run(["ss", "-tnH", "state", "established", "( sport = :%d )" % port],
                         capture_output=True, text=True).stdout
    return [int(line.split()[1]) for line in out.splitlines() if line.strip()]


def test_non_reading_client_closed_and_send_buffer_bounded():
    r, srv = H.setup(settings={"idle_timeout_s": 120})
    n = 10
    socks = []
    req = _head("/admin/board.js") * 800           # 800 x 16 KB of replies asked for
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        s.connect(("127.0.0.1", srv.port))
        s.setblocking(False)
        try:
            s.send(req)
        except BlockingIOError:
            pass
        socks.append(s)
    mem0 = _sockstat_mem()
    # The server fills each socket's send buffer, then waits: its Send-Q stops growing.
    last = [None]

    def settled():
        q = _server_send_queues(srv.port)
        stable = last[0] == q and len(q) == n
        last[0] = q
        return q if stable and min(q) > 0 else None
    q = H.wait_until(settled, 20, 0.5, "the server's send queues to fill and stay")
    H.log("server send queues of %d non-reading clients: %r bytes; TCP mem %s -> %s pages"
          % (n, q, mem0, _sockstat_mem()))
    check(max(q) <= 400 * 1024, "a non-reading client pins %d bytes of kernel send buffer "
          "(SO_SNDBUF 64 KiB: at most 2 x that plus a little)" % max(q))
    t0 = time.monotonic()
    H.wait_until(lambda: not _server_send_queues(srv.port), 30, 0.5,
                 "the non-reading connections to be closed (write timeout 10 s; idle 120 s)")
    took = time.monotonic() - t0
    H.log("non-reading connections closed %.1f s after their queues filled" % took)
    check(took < 15, "closed after %.1f s (write timeout 10 s)" % took)
    for s in socks:
        s.close()
    H.finish(srv)


def _sockstat_mem():
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                p = line.split()
                return int(p[p.index("mem") + 1])
    return None


# ---------------------------------------------------------------------------------------
# L4, L5

ADMIN_HEADERS = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
}


def test_admin_answers_carry_security_headers():
    r, srv = H.setup()
    h = srv.http()
    for path, admin in (("/admin/", None), ("/admin/board.js", None), ("/admin/board.css", None),
                        ("/admin/api/board", None), ("/admin/api/board", srv.admin_token),
                        ("/api/admin/", None), ("/admin/nothing", None)):
        st, hd, _ = h.request("GET", path, admin=admin)
        for k, v in ADMIN_HEADERS.items():
            eq(hd.get(k), v, "%s of GET %s (%d)" % (k, path, st))
        csp = hd.get("content-security-policy", "")
        for part in ("frame-ancestors 'none'", "default-src 'none'", "script-src 'self'"):
            check(part in csp, "CSP of GET %s: %r lacks %s", path, csp, part)
    st, hd, _ = h.request("GET", "/voucher/list/1")
    check("content-security-policy" not in hd, "a public API answer with the board's CSP")
    H.finish(srv)


def test_metrics_private_by_default():
    """No --metrics-listen, --metrics-token or --metrics-public: /metrics is not served on
    --listen to anyone, a loopback peer included (nginx on the same host forwards the
    public from 127.0.0.1)."""
    r, srv = H.setup(settings={"metrics_public": None})
    h = srv.http()
    for path in ("/metrics", "/api/metrics"):
        st, _, body = h.request("GET", path)
        eq(st, 404, "GET %s on --listen by default" % path)
        check(b"seckill_" not in body, "metrics in the answer: %r", body[:200])
    # Through the nginx of deploy/ (whose requests come from 127.0.0.1): not served either.
    ngx = H.start_nginx(["127.0.0.1:%d" % srv.port], workers=1)
    n = H.Http(ngx.port)
    for path in ("/metrics", "/api/metrics"):
        st, _, body = n.request("GET", path)
        eq(st, 404, "GET %s through nginx" % path)
        check(b"seckill_" not in body, "metrics through nginx: %r", body[:200])
    n.close()
    H.finish(srv)
    # With a token it is served on --listen to whoever has the token.
    srv = H.start_server(r, settings={"metrics_public": None, "metrics_token": "m" * 24})
    h = srv.http()
    eq(h.request("GET", "/metrics")[0], 401, "/metrics with --metrics-token, without it")
    st, _, body = h.request("GET", "/metrics", headers={"authorization": "Bearer " + "m" * 24})
    check(st == 200 and b"seckill_" in body, "/metrics with the token: %d", st)
    H.finish(srv)
