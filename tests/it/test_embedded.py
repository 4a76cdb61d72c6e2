"""test_embedded.py -- `seckill serve` with nothing configured: it starts its own private
redis-server (Unix socket, AOF) and SQLite under --data-dir, generates and prints an admin
token, sells, and on SIGTERM exits 0 leaving no redis-server behind.
"""

import os
import re
import signal
import stat
import subprocess
import time

import harness as H
from harness import check, eq

# The embedded default is SQLite by definition (the file under --data-dir is checked).
DB_BACKENDS = ("sqlite",)

TOKEN_LINE = re.compile(r"admin[ _-]?token[^:=\n]*[:=]\s*['\"]?([A-Za-z0-9_\-.]{8,})", re.I)


class UnixRedis:
    """The embedded Redis, reached through its Unix socket (same interface as H.Redis)."""

    def __init__(self, path):
        self.path = path

    def client(self, timeout=5.0):
        return H.Resp(unix=self.path, timeout=timeout)

    def cmd(self, *args):
        c = self.client()
        try:
            return c.cmd(*args)
        finally:
            c.close()


def _children(pid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...
        rest = st[st.rfind(")") + 2:].split()
        if int(rest[1]) == pid:
            comm = st[st.find("(") + 1:st.rfind(")")]
            out.append((int(d), comm))
    return out


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
    except OSError:
        return False
    return st[st.rfind(")") + 2:].split()[0] != "Z"


def _sockets(root):
    found = []
    for dp, dns, fns in os.walk(root):
        for fn in fns:
            p = os.path.join(dp, fn)
            try:
                if stat.S_ISSOCK(os.lstat(p).st_mode):
                    found.append(p)
            except OSError:
                pass
    return found


def _start_embedded(data_dir, port=None, extra=()):
    port = port or H.free_port()
    argv = [H.binary(), "serve", "--data-dir", data_dir, "--listen", "127.0.0.1:%d" % port]
    argv += list(extra)
    srv = H.Server(argv, data_dir, port, None, os.path.join(data_dir, "seckill.db"), None)
    srv.start(ready_timeout=60)

    def token():
        for line in srv.log_lines():
            m = TOKEN_LINE.search(line)
            if m:
                return m.group(1)
        return None
    srv.admin_token = H.wait_until(token, 10, what="an admin token line in the server output")
    kids = [(p, c) for p, c in _children(srv.proc.pid) if "redis" in c]
    eq(len(kids), 1, "redis-server children of the embedded server (%r)" %
       _children(srv.proc.pid))
    socks = [s for s in _sockets(data_dir)]
    check(socks, "no Unix socket under %s", data_dir)
    red = None
    for s in socks:
        try:
            if UnixRedis(s).cmd("PING") == "PONG":
                red = UnixRedis(s)
                break
        except Exception:
            pass
    check(red is not None, "no socket under %s answers PING: %r", data_dir, socks)
    return srv, red, kids[0][0]


def _stop_embedded(srv, red, child_pid):
    srv.stop()          # exit 0, no sanitizer report
    check(not _alive(child_pid), "redis-server child %d still running after exit", child_pid)
    try:
        red.cmd("PING")
        raise H.TestFailure("the embedded Redis socket %s still answers" % red.path)
    except (OSError, ConnectionError):
        pass


@H.timeout(240)
def test_embedded_default_sale():
    d = H.subdir("embedded")
    srv, red, child = _start_embedded(d)
    H.log("admin token %s, redis child %d, socket %s" % (srv.admin_token, child, red.path))
    # the ready lines tell how to use it
    check(srv.log_lines(r"127\.0\.0\.1:%d" % srv.port), "no line naming the URL served")
    # no TCP port for the private redis (Unix socket only)
    tokens = H.login_many(srv, red, 12, threads=4)
    vid = H.create_seckill(srv, stock=5)
    recs = H.run_sale(srv, vid, tokens, attempts=2)
    H.log("outcomes %r" % H.summarize(recs))
    eq(sum(1 for x in recs if x.ok), 5, "successes")
    bad = [x for x in recs if not x.ok and x.msg not in (H.MSG_SOLD_OUT, H.MSG_DUPLICATE)]
    check(not bad, "unexpected replies: %r", bad[:5])
    eq(H.wait_drained(srv, red, vid, 60), 5, "orders in SQL")
    H.check_sale_consistency(srv, red, vid, 5, recs, tokens)
    check(os.path.exists(os.path.join(d, "seckill.db")), "no seckill.db in the data dir")
    aof = [os.path.join(dp, f) for dp, _, fs in os.walk(d) for f in fs if "appendonly" in f]
    check(aof, "no AOF file under the data dir (AOF must be on)")
    _stop_embedded(srv, red, child)


@H.timeout(240)
def test_embedded_restart_keeps_state():
    d = H.subdir("embedded")
    srv, red, child = _start_embedded(d)
    a = H.login(srv, red, "13800001111", srv.http())
    vid = H.create_seckill(srv, stock=3)
    st, j = H.seckill(srv, a, vid, srv.http())
    check(j["success"], "A buys: %r", j)
    oid = j["data"]
    _stop_embedded(srv, red, child)
    # an order admitted just before SIGTERM may still sit in the stream (kept by the AOF);
    # the next start must persist it
    H.log("orders in SQL at exit: %d" % srv.db().order_count(vid))
    srv2, red2, child2 = _start_embedded(d)
    check(child2 != child, "same redis child pid after restart")
    h = srv2.http()
    st, j = h.api("GET", "/user/me", token=a)
    check(st == 200 and j["success"], "login survives a restart (AOF): %r %r", st, j)
    st, j = H.seckill(srv2, a, vid, h)
    check(not j["success"] and j["errorMsg"] == H.MSG_DUPLICATE, "A again: %r", j)
    b = H.login(srv2, red2, "13800001112", h)
    st, j = H.seckill(srv2, b, vid, h)
    check(j["success"], "B buys after the restart: %r", j)
    eq(H.wait_drained(srv2, red2, vid, 60), 2, "orders in SQL")
    eq(red2.cmd("HGET", H.k_voucher(vid), "stock"), "1", "Redis stock")
    eq(srv2.db().stock(vid), 1, "SQL stock")
    eq(oid in [x[0] for x in srv2.db().orders(vid)], True, "A's order id in SQL")
    _stop_embedded(srv2, red2, child2)


@H.timeout(120)
def test_embedded_missing_redis_server_binary():
    d = H.subdir("embedded")
    port = H.free_port()
    argv = [H.binary(), "serve", "--data-dir", d, "--listen", "127.0.0.1:%d" % port,
            "--redis-server-bin", "/nonexistent/redis-server"]
    srv = H.Server(argv, d, port, None, os.path.join(d, "seckill.db"), None)
    srv.start(wait_ready=False)
    try:
        rc = srv.proc.wait(30)
    except subprocess.TimeoutExpired:
        raise H.TestFailure("seckill still running 30 s after a missing redis-server binary")
    srv.exit_code = rc
    srv._close_files()
    check(rc != 0, "exit status 0 with a missing redis-server binary")
    check(rc > 0, "killed by signal %d instead of exiting", -rc)
    rep = srv.sanitizer_report()
    check(rep is None, "sanitizer report on the error path:\n%s", rep)
    lines = [l for l in srv.log_lines() if l.strip()]
    check(lines, "no output at all")
    clear = [l for l in lines if ("redis-server" in l or "/nonexistent" in l) and
             re.search(r"not found|no such|nonexistent|cannot|can't|missing|failed", l, re.I)]
    check(clear, "no clear line naming the missing redis-server; output:\n%s",
          "\n".join(lines[-10:]))
    H.log("the error line: %s" % clear[0])
    # nothing listens
    try:
        H.Http(port, timeout=1).close()
        raise H.TestFailure("something listens on port %d after the failed start" % port)
    except OSError:
        pass


@H.timeout(240)
def test_embedded_kill9_leaves_no_redis():
    """kill -9 of the server: its private redis-server goes too (PR_SET_PDEATHSIG), and the
    next start finds the data (AOF) and runs."""
    d = H.subdir("embedded")
    srv, red, child = _start_embedded(d)
    a = H.login(srv, red, "13800002221", srv.http())
    vid = H.create_seckill(srv, stock=3)
    st, j = H.seckill(srv, a, vid, srv.http())
    check(j["success"], "A buys: %r", j)
    oid = j["data"]
    eq(H.wait_drained(srv, red, vid, 30), 1, "orders in SQL")

    def in_aof():   # appendfsync everysec: wait until the admission reached the file
        for dp, _, fs in os.walk(d):
            for f in fs:
                if "appendonly" in f and f.endswith(".aof"):
                    with open(os.path.join(dp, f), "rb") as fh:
                        if str(oid).encode() in fh.read():
                            return True
        return False
    H.wait_until(in_aof, 10, what="order %d in the AOF" % oid)
    srv.kill9()
    H.wait_until(lambda: not _alive(child), 10,
                 what="redis-server child %d to exit after kill -9 of its parent" % child)
    srv2, red2, child2 = _start_embedded(d)
    st, j = H.seckill(srv2, a, vid, srv2.http())
    check(not j["success"] and j["errorMsg"] == H.MSG_DUPLICATE, "A after restart: %r", j)
    eq(red2.cmd("HGET", H.k_voucher(vid), "stock"), "2", "Redis stock after restart")
    eq(srv2.db().order_count(vid), 1, "orders in SQL after restart")
    _stop_embedded(srv2, red2, child2)


@H.timeout(300)
def test_embedded_redis_killed_mid_sale_is_restarted():
    """kill -9 of the private redis-server mid-sale: the server starts it again on the same
    socket, from its AOF (Redis writes the AOF before it replies, so a process crash loses
    nothing it answered), the buyers' retries go through, the sale sells exactly its stock
    and no answered order is lost (seckill audit clean)."""
    d = H.subdir("embedded")
    # 100 buyers from 127.0.0.1 ask for codes: past the default per-client code limit
    srv, red, child = _start_embedded(d, extra=("--rate-ip-code", "0"))
    tokens = H.login_many(srv, red, 100, threads=4)
    stock = 60
    vid = H.create_seckill(srv, stock=stock)
    buyers = H.RetryingBuyers(srv.port, vid, tokens, nthreads=6, pace=0.05, user_gap=0.15,
                              deadline=time.monotonic() + 120)
    H.wait_until(lambda: sum(1 for r in buyers.snapshot() if r.ok) >= 5, 60,
                 what="the first orders")
    os.kill(child, signal.SIGKILL)
    H.log("killed the private redis-server %d after %d successes" % (
        child, sum(1 for r in buyers.snapshot() if r.ok)))

    def new_child():
        kids = [p for p, c in _children(srv.proc.pid) if "redis" in c and p != child and _alive(p)]
        return kids[0] if kids and red.cmd("PING") == "PONG" else None
    child2 = H.wait_until(new_child, 30, what="a new private redis-server answering on %s" % red.path)
    check(not _alive(child), "the killed redis-server %d was not reaped", child)
    buyers.join(150)
    recs = buyers.snapshot()
    H.log("outcomes %r" % H.summarize(recs))
    eq(buyers.done_users, len(tokens), "buyers with a definitive answer")
    check(sum(1 for r in recs if r.ok) <= stock, "more successes than stock")
    eq(H.wait_drained(srv, red, vid, 60), stock, "orders in SQL")
    H.check_sale_consistency(srv, red, vid, stock, recs, tokens)
    rc, out = H.audit("unix:" + red.path, "sqlite:" + os.path.join(d, "seckill.db"), vid)
    eq(rc, 0, "seckill audit exit status; output:\n%s" % out[-3000:])
    _stop_embedded(srv, red, child2)
