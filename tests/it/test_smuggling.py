"""test_smuggling.py -- request framing (RFC 9112) and request smuggling.

One table of crafted requests. Each case is sent twice on a fresh connection:

1. directly to seckill: the replies must be exactly the expected ones (the strict parser
   refuses every ambiguous framing with one error reply and closes), and
2. through the nginx front of deploy/ (deploy/nginx.conf.in): nginx and seckill must agree
   on where every request ends. Seckill's request counter (seckill_http_requests_total)
   must grow by exactly the number of replies of seckill that reached the client, and a
   probe request sent afterwards (on a new connection, which nginx may serve over the same
   pooled upstream connection) must get its own reply: nothing was smuggled past nginx
   into the upstream stream.

Every request targets GET /voucher/list/<TAG>; seckill answers it with 400 "invalid id:
<TAG>", so each reply says which request it answers. A framing error of seckill is a JSON
error without that echo; nginx's own errors are HTML.
"""

import re
import socket
import time

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)   # the HTTP layer only: one SQL backend is enough

HOST = b"Host: x\r\n"


def req(tag, headers=b"", body=b"", version=b"HTTP/1.1", host=True, close=False):
    return (b"GET /voucher/list/" + tag + b" " + version + b"\r\n" + (HOST if host else b"") +
            headers + (b"Connection: close\r\n" if close else b"") + b"\r\n" + body)


A = b"A"
S = b"S"                                   # the request a smuggler wants answered
SMUG = req(S, close=True)                  # a complete request, as a body or after one


def chunked(body, tag=A, extra=b""):
    return req(tag, b"Transfer-Encoding: chunked\r\n" + extra, body)


# (name, bytes, replies expected directly from seckill). A reply is "A"/"S" (the request
# with that tag was answered) or "E<status>" (a framing error reply, then close).
CASES = [
    # well-formed: everything answered, in order
    ("valid_one", req(A, close=True), ["A"]),
    ("valid_pipelined", req(A) + SMUG, ["A", "S"]),
    ("valid_length_body", req(A, b"Content-Length: 5\r\n", b"hello") + SMUG, ["A", "S"]),
    ("valid_length_leading_zeros", req(A, b"Content-Length: 005\r\n", b"hello") + SMUG,
     ["A", "S"]),
    ("valid_chunked", chunked(b"5\r\nhello\r\n0\r\n\r\n") + SMUG, ["A", "S"]),
    ("valid_chunked_upper", req(A, b"Transfer-Encoding: CHUNKED\r\n",
                                b"5\r\nhello\r\n0\r\n\r\n") + SMUG, ["A", "S"]),
    ("valid_chunk_extension", chunked(b"5;name=val\r\nhello\r\n0\r\n\r\n") + SMUG, ["A", "S"]),
    ("valid_trailer_ignored", chunked(b"0\r\nContent-Length: 60\r\n\r\n") + SMUG, ["A", "S"]),
    ("valid_leading_crlf", b"\r\n" + req(A, close=True), ["A"]),
    ("valid_crlf_after_body", req(A, b"Content-Length: 2\r\n", b"hi") + b"\r\n" + SMUG,
     ["A", "S"]),
    ("valid_http10_close", req(A, version=b"HTTP/1.0", host=False) + SMUG, ["A"]),
    ("valid_http10_keepalive", req(A, b"Connection: keep-alive\r\n", version=b"HTTP/1.0",
                                   host=False) + SMUG, ["A", "S"]),
    ("valid_absolute_form", b"GET http://x/voucher/list/A HTTP/1.1\r\nHost: x\r\n\r\n" + SMUG,
     ["A", "S"]),
    ("valid_upgrade_closes", req(A, b"Connection: Upgrade\r\nUpgrade: h2c\r\n") + SMUG, ["A"]),
    # whitespace between the field name and the colon
    ("cl_space_colon", req(A, b"Content-Length : %d\r\n" % len(SMUG), SMUG), ["E400"]),
    ("cl_tab_colon", req(A, b"Content-Length\t: %d\r\n" % len(SMUG), SMUG), ["E400"]),
    ("te_space_colon", req(A, b"Transfer-Encoding : chunked\r\n",
                           b"0\r\n\r\n") + SMUG, ["E400"]),
    ("host_space_colon", b"GET /voucher/list/A HTTP/1.1\r\nHost : x\r\n\r\n" + SMUG, ["E400"]),
    ("name_with_space", req(A, b"X Y: 1\r\n") + SMUG, ["E400"]),
    # obs-fold continuation lines
    ("obs_fold", req(A, b"X-A: 1\r\n 2\r\n") + SMUG, ["E400"]),
    ("obs_fold_tab", req(A, b"X-A: 1\r\n\t2\r\n") + SMUG, ["E400"]),
    ("obs_fold_te", req(A, b"X-A: 1\r\n Transfer-Encoding: chunked\r\n", b"0\r\n\r\n") + SMUG,
     ["E400"]),
    ("obs_fold_first_line", b"GET /voucher/list/A HTTP/1.1\r\n Host: x\r\nHost: x\r\n\r\n" +
     SMUG, ["E400"]),
    # line ends
    ("bare_lf_request_line", b"GET /voucher/list/A HTTP/1.1\nHost: x\r\n\r\n" + SMUG, ["E400"]),
    ("bare_lf_header", b"GET /voucher/list/A HTTP/1.1\r\nHost: x\nX: y\r\n\r\n" + SMUG,
     ["E400"]),
    ("bare_lf_end", b"GET /voucher/list/A HTTP/1.1\r\nHost: x\r\n\n" + SMUG, ["E400"]),
    ("bare_cr_header", req(A, b"X-A: 1\rX-B: 2\r\n") + SMUG, ["E400"]),
    ("nul_in_value", req(A, b"X-A: a\x00b\r\n") + SMUG, ["E400"]),
    ("double_space_request_line", b"GET  /voucher/list/A HTTP/1.1\r\nHost: x\r\n\r\n" + SMUG,
     ["E400"]),
    # chunk framing
    ("chunk_data_bad_end", chunked(b"5\r\nhelloXX0\r\n\r\n") + SMUG, ["E400"]),
    ("chunk_data_lf_end", chunked(b"5\r\nhello\n0\r\n\r\n") + SMUG, ["E400"]),
    ("chunk_data_too_long", chunked(b"3\r\nhello\r\n0\r\n\r\n") + SMUG, ["E400"]),
    ("chunk_size_0x", chunked(b"0x5\r\nhello\r\n0\r\n\r\n") + SMUG, ["E400"]),
    ("chunk_size_negative", chunked(b"-5\r\nhello\r\n0\r\n\r\n") + SMUG, ["E400"]),
    ("chunk_size_space", chunked(b"5 \r\nhello\r\n0\r\n\r\n") + SMUG, ["E400"]),
    ("chunk_size_empty", chunked(b"\r\nhello\r\n0\r\n\r\n") + SMUG, ["E400"]),
    ("chunk_size_lf", chunked(b"5\nhello\r\n0\r\n\r\n") + SMUG, ["E400"]),
    ("chunk_size_huge", chunked(b"ffffffffffffffffffff\r\nhello\r\n0\r\n\r\n") + SMUG, ["E413"]),
    ("chunk_ext_bare_lf", chunked(b"5;a\nb\r\nhello\r\n0\r\n\r\n") + SMUG, ["E400"]),
    ("chunk_last_bad_end", chunked(b"0\r\nX") + SMUG, ["E400"]),
    ("trailer_obs_fold", chunked(b"0\r\nX-T: 1\r\n 2\r\n\r\n") + SMUG, ["E400"]),
    # HTTP versions and Host
    ("chunked_http10", req(A, b"Transfer-Encoding: chunked\r\n", b"0\r\n\r\n",
                           version=b"HTTP/1.0") + SMUG, ["E400"]),
    ("version_1_2", req(A, version=b"HTTP/1.2") + SMUG, ["E400"]),
    ("version_2_0", req(A, version=b"HTTP/2.0") + SMUG, ["E400"]),
    ("version_0_9", b"GET /voucher/list/A\r\n\r\n" + SMUG, ["E400"]),
    ("version_lowercase", req(A, version=b"http/1.1") + SMUG, ["E400"]),
    ("version_extra_digit", req(A, version=b"HTTP/1.10") + SMUG, ["E400"]),
    ("no_host_http11", req(A, host=False) + SMUG, ["E400"]),
    ("two_hosts", req(A, b"Host: y\r\n") + SMUG, ["E400"]),
    # Content-Length and Transfer-Encoding
    ("cl_and_te", req(A, b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
                      b"0\r\n\r\n") + SMUG, ["E400"]),
    ("te_and_cl", req(A, b"Transfer-Encoding: chunked\r\nContent-Length: %d\r\n" % (
        5 + len(SMUG)), b"0\r\n\r\n") + SMUG, ["E400"]),
    ("cl_twice_same", req(A, b"Content-Length: 5\r\nContent-Length: 5\r\n", b"hello") + SMUG,
     ["E400"]),
    ("cl_twice_different", req(A, b"Content-Length: 5\r\nContent-Length: %d\r\n" % (
        5 + len(SMUG)), b"hello") + SMUG, ["E400"]),
    ("cl_list", req(A, b"Content-Length: 5, 5\r\n", b"hello") + SMUG, ["E400"]),
    ("cl_plus", req(A, b"Content-Length: +5\r\n", b"hello") + SMUG, ["E400"]),
    ("cl_negative", req(A, b"Content-Length: -1\r\n") + SMUG, ["E400"]),
    ("cl_hex", req(A, b"Content-Length: 0x5\r\n", b"hello") + SMUG, ["E400"]),
    ("cl_inner_space", req(A, b"Content-Length: 1 5\r\n", b"hello") + SMUG, ["E400"]),
    ("cl_empty", req(A, b"Content-Length: \r\n") + SMUG, ["E400"]),
    ("te_twice", req(A, b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                     b"0\r\n\r\n") + SMUG, ["E400"]),
    ("te_xchunked", req(A, b"Transfer-Encoding: xchunked\r\n", b"0\r\n\r\n") + SMUG, ["E501"]),
    ("te_gzip_chunked", req(A, b"Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n") + SMUG,
     ["E501"]),
    ("te_identity", req(A, b"Transfer-Encoding: identity\r\nContent-Length: 5\r\n", b"hello") +
     SMUG, ["E400"]),
]

ECHO = re.compile(rb'"invalid id: ([A-Za-z0-9]+)"')


def read_replies(sock, idle=0.6, total=5.0):
    """Reads responses until the peer closes or nothing arrives for `idle` seconds. Returns
    (list of (status, body, content_type), closed)."""
    sock.settimeout(idle)
    buf = b""
    closed = False
    end = time.time() + total
    while time.time() < end:
        try:
            d = sock.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            closed = True
            break
        if not d:
            closed = True
            break
        buf += d
    out = []
    while buf:
        m = re.match(rb"HTTP/1\.[01] (\d{3})[^\r\n]*\r\n", buf)
        if not m or b"\r\n\r\n" not in buf:
            out.append((0, buf[:200], ""))     # not a response: recorded, fails the case
            break
        head, rest = buf.split(b"\r\n\r\n", 1)
        hd = {}
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            hd[k.strip().lower()] = v.strip()
        status = int(m.group(1))
        n = int(hd.get(b"content-length", b"0"))
        body, buf = rest[:n], rest[n:]
        if 100 <= status < 200:
            continue
        out.append((status, body, hd.get(b"content-type", b"").decode("latin-1")))
    return out, closed


def label(reply):
    """'A'/'S'... for a reply of seckill echoing its request's tag, 'E<status>' for a JSON
    error of seckill, 'N<status>' for a reply nginx made itself (HTML)."""
    status, body, ctype = reply
    m = ECHO.search(body)
    if m:
        return m.group(1).decode()
    if ctype.startswith("application/json") and body.startswith(b"{"):
        return "E%d" % status
    return "N%d" % status


def send_case(port, data):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(data)
        return read_replies(s)
    finally:
        s.close()


def requests_total(srv):
    st, _, body = srv.http().request("GET", "/metrics")
    eq(st, 200, "metrics status")
    m = re.search(rb"^seckill_http_requests_total (\d+)$", body, re.M)
    check(m, "no seckill_http_requests_total in /metrics")
    return int(m.group(1))


def test_smuggling_table():
    check(len(CASES) >= 40, "the table has %d cases", len(CASES))
    names = [c[0] for c in CASES]
    eq(len(set(names)), len(names), "case names are unique")
    _, srv = H.setup(threads=2)
    ngx = H.start_nginx(["127.0.0.1:%d" % srv.port], workers=1)
    # A /metrics fetch counts itself (or not): measure it once.
    a = requests_total(srv)
    per_fetch = requests_total(srv) - a

    bad = []
    for i, (name, data, want) in enumerate(CASES):
        # 1. directly
        replies, closed = send_case(srv.port, data)
        got = [label(r) for r in replies]
        if got != want:
            bad.append("%s: direct: got %r, want %r" % (name, got, want))
        if want and want[-1].startswith("E") and not closed:
            bad.append("%s: direct: connection left open after %s" % (name, want[-1]))
        # 2. through nginx: seckill's count of requests must match the replies of seckill
        # the client got, and the next request through nginx must get its own reply
        before = requests_total(srv)
        replies, _ = send_case(ngx.port, data)
        via = [label(r) for r in replies]
        ours = [l for l in via if not l.startswith("N")]
        seen = requests_total(srv) - before - per_fetch
        if seen != len(ours):
            bad.append("%s: via nginx: seckill answered %d requests, the client got %d of its "
                       "replies (%r)" % (name, seen, len(ours), via))
        probe = ("P%d" % i).encode()
        preplies, _ = send_case(ngx.port, req(probe, close=True))
        plabels = [label(r) for r in preplies]
        if plabels != [probe.decode()]:
            bad.append("%s: via nginx: the next request got %r" % (name, plabels))
        H.log("%-28s direct %-12s nginx %s" % (name, ",".join(got), ",".join(via)))
    check(not bad, "%d of %d cases failed:\n  %s", len(bad), len(CASES), "\n  ".join(bad))


def test_trailers_never_set_headers():
    """A credential sent as a trailer field after a chunked body is not a credential."""
    r, srv = H.setup(settings={"token_cache_ms": 0})
    token = H.login(srv, r, H.phone_for(1))
    st, _, _ = srv.http().request("GET", "/user/me", token=token)
    eq(st, 200, "/user/me with the token in the header")
    for field, method, path, refused in (
            (b"authorization: " + token.encode(), b"GET", b"/user/me", 401),
            (b"x-admin-token: " + srv.admin_token.encode(), b"POST", b"/voucher", 403)):
        body = b'{"shopId":1,"title":"t","payValue":1,"actualValue":2,"type":0}'
        data = (method + b" " + path + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                b"Content-Type: application/json\r\n\r\n" +
                b"%x\r\n" % len(body) + body + b"\r\n0\r\n" + field + b"\r\n\r\n")
        replies, _ = send_case(srv.port, data)
        eq([x[0] for x in replies], [refused], "%s as a trailer" % field.split(b":")[0].decode())
