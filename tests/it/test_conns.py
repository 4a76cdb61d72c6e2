"""test_conns.py -- connection-level limits of the HTTP layer (docs/http.md, "Limits"):
a connection that never sends a byte is closed at the header timeout; connections per
client address are capped (--max-conns-per-ip); request bytes held in memory have a
process-wide budget (--max-buffered-bytes, 503 over it); RLIMIT_NOFILE is raised for
max-conns x workers (or start-up stops with a clear error); /metrics on its own listener
(--metrics-listen); a request that arrives with the client's FIN in the same segment is
answered and the connection closed at once, not at the idle timeout.
"""

import os
import re
import socket
import subprocess
import threading
import time

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)   # the HTTP layer only: one SQL backend is enough
# run alone under tests/run.py -j: thousands of connections, closes timed in seconds
SERIAL = True


def _closed_within(s, seconds, got=None):
    """Blocks until the server closes s; returns the seconds it took, or None. What it
    sent meanwhile is appended to the bytearray got, if given."""
    t = time.monotonic()
    s.settimeout(seconds)
    try:
        while True:
            d = s.recv(65536)
            if not d:
                return time.monotonic() - t
            if got is not None:
                got += d
    except socket.timeout:
        return None
    except OSError:
        return time.monotonic() - t


def test_silent_connection_closed_at_header_timeout():
    r, srv = H.setup(settings={"header_timeout_s": 2, "idle_timeout_s": 60})
    kept = srv.http()
    eq(kept.request("GET", "/metrics")[0], 200, "a request on the kept-alive connection")
    silent = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    took = _closed_within(silent, 30)
    silent.close()
    check(took is not None, "a connection that sent nothing was still open after 30 s "
          "(idle timeout 60 s, header timeout 2 s)")
    # the kept-alive connection that did send a request is only idle: still open
    eq(kept.request("GET", "/metrics")[0], 200, "the kept-alive connection after that")
    H.log("silent connection closed after %.1f s" % took)
    H.finish(srv)


def test_per_ip_connection_cap():
    r, srv = H.setup(settings={"max_conns_per_ip": 5})
    conns = []
    for i in range(5):
        h = H.Http(srv.port)
        eq(h.request("GET", "/metrics")[0], 200, "connection %d" % (i + 1))
        conns.append(h)
    extra = H.Http(srv.port)
    st, _, body = extra.read_response()
    eq(st, 503, "the 6th connection from one address")
    check(b"Too many connections from your address" in body, "503 body: %r", body)
    extra.close()
    conns.pop().close()     # one of the five goes: a new one is let in

    def admitted():
        h = H.Http(srv.port, timeout=5)
        try:
            st, _, _ = h.request("GET", "/metrics")
            return st == 200
        except (H.HttpError, OSError):
            return False
        finally:
            h.close()
    H.wait_until(admitted, 10, what="a connection admitted after one of the five closed")
    for h in conns:
        h.close()

    def open_conns():
        # the server's own count (its gauge), seen through one more connection: a close
        # reaches the server after the client's close() returns, and H.finish's /health
        # is a connection from the same capped address
        h = H.Http(srv.port, timeout=5)
        try:
            st, _, body = h.request("GET", "/metrics")
            if st != 200:
                return None
            return sum(int(float(line.split()[-1])) for line in body.decode().splitlines()
                       if line.startswith("seckill_http_connections{"))
        except (H.HttpError, OSError):
            return None
        finally:
            h.close()
    H.wait_until(lambda: open_conns() == 1, 10, what="the server to see the closes")
    H.finish(srv)
    # a trusted reverse proxy carries many clients: its connections are not capped
    srv = H.start_server(r, settings={"max_conns_per_ip": 2, "trusted_proxy": "127.0.0.1"})
    conns = [H.Http(srv.port) for _ in range(6)]    # all open at once
    for i, h in enumerate(conns):
        eq(h.request("GET", "/metrics")[0], 200, "connection %d from a trusted proxy" % (i + 1))
    for h in conns:
        h.close()
    H.finish(srv)


def test_request_buffer_budget():
    """Many clients each holding a large part of a body: past the budget the server answers
    503 instead of allocating; the budget is given back when those connections go."""
    budget = 65536
    # one client address (127.0.0.1) may take the whole budget here: test_sec_http.py
    # tests its share; /voucher is a route that reads bodies up to --max-body-bytes
    r, srv = H.setup(settings={"max_buffered_bytes": budget, "max_body_bytes": 65536,
                               "max_buffered_ip_pct": 100})
    socks = []
    head = (b"POST /voucher HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 30000\r\n\r\n")
    for _ in range(4):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(head + b"x" * 20000)
        socks.append(s)
        time.sleep(0.05)    # in order: the first ones fit, the later ones do not
    refused = []
    for i, s in enumerate(socks):
        s.settimeout(0.5)
        try:
            d = s.recv(4096)
        except socket.timeout:
            d = b""
        if d:
            check(d.startswith(b"HTTP/1.1 503 ") and b"Server busy" in d,
                  "connection %d: %r", i, d[:200])
            refused.append(i)
    check(refused, "4 x 20,000 buffered bytes with a budget of %d: nothing refused" % budget)
    check(0 not in refused, "the first connection was refused: %r", refused)
    # the first one completes its body and gets its answer (not a 503)
    socks[0].sendall(b"x" * 10000)
    c = H.Http(srv.port, connect=False)
    c.sock = socks[0]
    c.sock.settimeout(10)
    st, _, _ = c.read_response()
    check(st != 503, "the first request, completed: %d", st)
    for s in socks:
        s.close()
    # everything given back: a request with a large body fits again (a 20,000-byte body
    # takes 20,001 bytes: it did not fit beside two 30,000-byte bodies above)
    def fits():
        h = H.Http(srv.port, timeout=5)
        try:
            st, _, _ = h.request("POST", "/voucher", body=b"{" + b" " * 20000 + b"}")
            return st != 503
        finally:
            h.close()
    H.wait_until(fits, 10, what="the budget given back")
    H.finish(srv)


def _max_open_files(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    raise H.TestFailure("no Max open files in /proc/%d/limits" % pid)


def test_fd_limit_raised_or_refused():
    r, srv = H.setup(settings={"max_conns": 4000}, threads=2)
    have = _max_open_files(srv.proc.pid)
    check(have >= 8000, "RLIMIT_NOFILE of a server for 4000 x 2 connections: %d", have)
    lines = srv.log_lines("file descriptors: limit")
    check(lines, "no 'file descriptors: limit' line in the log")
    H.log(lines[-1])
    H.finish(srv)
    # more than any limit allows (fs.nr_open is at most 2^20 per process): a clear error
    argv = H.server_argv(H.free_port(), r.url, "sqlite:" + os.path.join(H.tmpdir(), "x.db"),
                         "adm0123456789abcdef0123456789ab", H.subdir("fdlimit"), threads=2,
                         settings={"max_conns": 1000000})
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                       env=H.san_env())
    check(p.returncode != 0, "a server for 1,000,000 x 2 connections started")
    err = p.stderr.decode("utf-8", "replace")
    check(re.search(r"--max-conns 1000000 x 2 workers needs \d+ file descriptors", err),
          "start-up error: %r", err[-2000:])


def test_metrics_listen():
    mport = H.free_port()
    r, srv = H.setup(settings={"metrics_listen": "127.0.0.1:%d" % mport})
    h = srv.http()
    eq(h.request("GET", "/metrics")[0], 404, "/metrics on the public listener")
    eq(h.request("GET", "/api/metrics")[0], 404, "/api/metrics on the public listener")
    m = H.Http(mport)
    st, hd, body = m.request("GET", "/metrics")
    eq(st, 200, "/metrics on the metrics listener")
    check(b"seckill_http_requests_total" in body, "metrics body: %r", body[:200])
    eq(m.request("GET", "/health")[0], 404, "/health on the metrics listener")
    eq(m.request("GET", "/voucher/list/1")[0], 404, "/voucher/list/1 on the metrics listener")
    m.close()
    H.finish(srv)


class _SlowStartProxy:
    """A TCP proxy to Redis that holds back the first reply of every new connection for
    `delay` seconds: Redis connections that come up slowly, as on a busy host."""

    def __init__(self, upstream_port, delay):
        self.upstream, self.delay = upstream_port, delay
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(64)
        self.port = self.ls.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            u = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._pump, args=(c, u, 0), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, self.delay), daemon=True).start()

    @staticmethod
    def _pump(src, dst, first_delay):
        try:
            while True:
                d = src.recv(65536)
                if not d:
                    break
                if first_delay:
                    time.sleep(first_delay)   # the injected slowness itself, not a wait
                    first_delay = 0
                dst.sendall(d)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.ls.close()


def test_first_request_waits_for_redis_not_503():
    """A worker opens its listener only once its Redis client is up (docs/http.md): a
    request sent the moment the port accepts -- what nginx does with a restarted instance
    -- waits in the backlog and is answered, not refused with 503 because the worker's
    Redis connection was still being made."""
    r = H.start_redis()
    proxy = _SlowStartProxy(r.port, 0.3)
    d = H.subdir("seckill-data")
    port = H.free_port()
    admin = "adm" + H.rand_hex(29)   # a random token: one of little variety is refused
    argv = H.server_argv(port, "redis://127.0.0.1:%d" % proxy.port,
                         H.db_url_for(os.path.join(d, "seckill.db")), admin, d)
    srv = H.Server(argv, d, port, admin, os.path.join(d, "seckill.db"), None)
    srv.start(wait_ready=False)
    try:
        def connected():
            try:
                return socket.create_connection(("127.0.0.1", port), timeout=10)
            except OSError:
                return None
        s = H.wait_until(connected, 60, interval=0.002, what="the port to accept")
        s.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        head = b""
        while b"\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                break
            head += chunk
        s.close()
        status = head.split(b"\r\n", 1)[0].decode(errors="replace")
        eq(status, "HTTP/1.1 200 OK", "the first request's answer")
        srv.wait_ready()
        H.finish(srv)
    finally:
        proxy.close()


def test_request_with_fin_in_one_segment_is_answered_and_closed():
    """`printf 'GET ...' | nc -N`: the request and the client's shutdown arrive together.
    The read event is edge-triggered, and a FIN that comes with the data makes no edge of
    its own: the server must read on to the end of stream (EV_CLOSED says it is there),
    answer, and close, well before the 60 s idle timeout."""
    r, srv = H.setup()
    req = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    for i in range(20):
        for pipelined in (1, 3):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            # MSG_MORE holds the bytes back; shutdown() sends them with the FIN, one segment.
            s.sendall(req * pipelined, socket.MSG_MORE)
            s.shutdown(socket.SHUT_WR)
            got = bytearray()
            took = _closed_within(s, 5, got)
            s.close()
            eq(got.count(b"HTTP/1.1 200 "), pipelined, "answers to %d request(s) sent with the FIN (try %d)"
               % (pipelined, i))
            check(took is not None, "the server closed within 5 s of a request sent with the FIN (try %d)" % i)
    H.finish(srv)
