"""harness.py -- shared helpers for the seckill integration tests (Python 3 stdlib only).

Real processes, no mocks: every test starts its own redis-server on a free loopback port in
its own temp dir, and the seckill binary (SECKILL_BIN, set by tests/run.py) against it.

Pieces:
  tmpdir()                       the current test's private directory
  Redis / start_redis()          a redis-server child (AOF everysec, no RDB) + RESP client
  Resp                           a tiny RESP2 client (socket)
  Server / start_server()        a seckill child: stderr captured to a file, /health readiness,
                                 SIGTERM stop with exit-code check, kill -9, log parsing
  Http                           a keep-alive HTTP/1.1 client on a raw socket (one per thread)
  login(), create_seckill()...   API helpers
  Db                             read-only SQL helpers on the server's database (SQLite or
                                 MariaDB: the same methods, `?` placeholders on both)
  hold_db_lock()                 another session that blocks the order writer's inserts
  MariaDB / start_mariadb()      a private mariadbd (own datadir, loopback port, real user)
  Nginx / start_nginx()          nginx from deploy/nginx.conf.in in front of instances
  wait_until()                   await a condition with an overall timeout (no fixed sleeps)

The database backend of a run: SECKILL_TEST_DB=sqlite (default) or mysql. With mysql,
SECKILL_TEST_MYSQL is the URL of a MariaDB server (mysql://user:pass@127.0.0.1:port, no
database; tests/run.py starts one per run) and each test gets its own database t_<n>
(n = SECKILL_TEST_SEQ, set by the runner per test), created by seckill's store_open.
A test file whose module sets DB_BACKENDS = ("sqlite",) (or ("mysql",)) runs only there.
Under run.py -j, the tests of a file that sets SERIAL = True, and a test decorated @serial,
run alone (docs/testing.md).

Every process started here is registered; cleanup() (called by the runner after each test)
stops what is still running and scan_sanitizers() reads every server's stderr for ASan/UBSan/
LSan reports.
"""

import json
import os
import random
import re
import signal
import socket
import sqlite3
import string
import subprocess
import tempfile
import threading
import time

ORDERID_EPOCH = 1640995200

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "LeakSanitizer",
                     "ERROR: ThreadSanitizer", "WARNING: ThreadSanitizer",
                     "SUMMARY: UndefinedBehaviorSanitizer")

REDIS_SERVER = os.environ.get("REDIS_SERVER_BIN", "/usr/bin/redis-server")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The database backend the servers of this run use (see the module docstring).
DB_KIND = os.environ.get("SECKILL_TEST_DB", "sqlite")
MYSQL_BASE = os.environ.get("SECKILL_TEST_MYSQL", "")
if DB_KIND not in ("sqlite", "mysql"):
    raise RuntimeError("SECKILL_TEST_DB must be sqlite or mysql, not %r" % DB_KIND)

MSG_BAD_PHONE = "手机号格式错误！"
MSG_BAD_CODE = "验证码错误"
MSG_SOLD_OUT = "库存不足"
MSG_DUPLICATE = "不能重复下单"
MSG_NOT_STARTED = "秒杀尚未开始！"
MSG_ENDED = "秒杀已经结束！"
MSG_NO_VOUCHER = "优惠券不存在"


class TestFailure(AssertionError):
    pass


# ---------------------------------------------------------------------------------------
# registry of what the current test started

_registry_lock = threading.Lock()
_servers = []       # Server objects started in this process
_redises = []       # Redis objects
_procs = []         # other Popen objects (e.g. embedded runs)
_tmp_root = None


def binary():
    b = os.environ.get("SECKILL_BIN")
    if not b:
        here = os.path.dirname(os.path.abspath(__file__))
        b = os.path.join(here, "..", "..", "build", "san", "seckill")
    b = os.path.abspath(b)
    if not os.path.exists(b):
        raise TestFailure("seckill binary not found: %s (build it with make SAN=1)" % b)
    return b


def tmpdir():
    """The current test's private temp directory (created on first use)."""
    global _tmp_root
    if _tmp_root is None:
        base = os.environ.get("SECKILL_TEST_TMP") or None
        _tmp_root = tempfile.mkdtemp(prefix="seckill-it-", dir=base)
    return _tmp_root


def subdir(name):
    d = os.path.join(tmpdir(), name)
    os.makedirs(d, exist_ok=True)
    return d


def pay_key_file(key, name="pay-key"):
    """A --pay-key-file holding key, 0600, in the test's temp directory: its path."""
    path = os.path.join(tmpdir(), "%s-%d" % (name, os.getpid()))
    with open(path, "w") as f:
        f.write(key + "\n")
    os.chmod(path, 0o600)
    return path


def log(*args):
    print("[%s]" % time.strftime("%H:%M:%S"), *args, flush=True)


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_until(pred, timeout, interval=0.05, what="condition"):
    """Polls pred() until it returns a truthy value (returned) or timeout passes (raises)."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:   # a predicate may fail while things come up
            last_exc = e
        if time.monotonic() >= deadline:
            raise TestFailure("timed out after %.1fs waiting for %s%s" % (
                timeout, what, (" (last error: %r)" % last_exc) if last_exc else ""))
        time.sleep(interval)


def check(cond, msg, *fmt):
    if not cond:
        raise TestFailure(msg % fmt if fmt else msg)


def eq(got, expected, what):
    if got != expected:
        raise TestFailure("%s: expected %r, got %r" % (what, expected, got))


# ---------------------------------------------------------------------------------------
# RESP client

class RedisError(Exception):
    pass


class Resp:
    """Minimal RESP2 client: cmd(*args) -> str/int/list/None; RedisError on -ERR."""

    def __init__(self, host="127.0.0.1", port=6379, timeout=5.0, unix=None):
        if unix:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(unix)
            self.buf = b""
            return
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _readline(self):
        while b"\r\n" not in self.buf:
            d = self.sock.recv(65536)
            if not d:
                raise ConnectionError("redis closed the connection")
            self.buf += d
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _readn(self, n):
        while len(self.buf) < n + 2:
            d = self.sock.recv(65536)
            if not d:
                raise ConnectionError("redis closed the connection")
            self.buf += d
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _read(self):
        line = self._readline()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return RedisError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            return self._readn(n).decode("utf-8", "replace")
        if t == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self._read() for _ in range(n)]
        raise RedisError("bad RESP type %r" % line)

    def send(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, bytes):
                b = a
            else:
                b = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(out))

    def cmd(self, *args):
        self.send(*args)
        r = self._read()
        if isinstance(r, RedisError):
            raise r
        return r


# ---------------------------------------------------------------------------------------
# redis-server

class PortTaken(TestFailure):
    """A port found free was bound by another process (e.g. as a client's ephemeral port)
    before redis-server could listen on it."""


def start_fresh_redis(make, pick, tries=5):
    """Starts make(port) on pick()'d ports until one binds: a free port can be taken
    between free_port() and redis-server's bind. For first starts only: a restart must
    keep its port."""
    for i in range(tries):
        r = make(pick())
        try:
            return r.start()
        except PortTaken:
            r.forget()
            if i == tries - 1:
                raise


class Redis:
    def __init__(self, port, dir_, extra=()):
        self.port = port
        self.dir = dir_
        self.extra = list(extra)
        self.proc = None
        self.url = "redis://127.0.0.1:%d" % port

    def argv(self):
        return [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", self.dir, "--appendonly", "yes", "--appendfsync", "everysec",
                "--save", "", "--daemonize", "no", "--protected-mode", "no",
                "--logfile", os.path.join(self.dir, "redis.log")] + self.extra

    def start(self, timeout=20):
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with _registry_lock:
            if self not in _redises:
                _redises.append(self)

        def ready():
            if self.proc.poll() is not None:
                return "exited"     # ends the wait: it will not come up by itself
            try:
                c = Resp(port=self.port, timeout=1)
            except OSError:
                return False
            try:
                return c.cmd("PING") == "PONG"
            except (RedisError, OSError):
                return False
            finally:
                c.close()
        if wait_until(ready, timeout, what="redis-server on port %d" % self.port) == "exited":
            log = tail(os.path.join(self.dir, "redis.log"))
            if "Address already in use" in log:
                raise PortTaken("redis-server: port %d (or its bus port) was taken by "
                                "another process after it was found free" % self.port)
            raise TestFailure("redis-server exited with %s: %s" % (self.proc.returncode, log))
        return self

    def forget(self):
        """A node that never started: out of the registry that cleanup walks."""
        with _registry_lock:
            if self in _redises:
                _redises.remove(self)

    def client(self, timeout=5.0):
        return Resp(port=self.port, timeout=timeout)

    def cmd(self, *args):
        c = self.client()
        try:
            return c.cmd(*args)
        finally:
            c.close()

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def shutdown(self, timeout=20):
        """Clean stop: SHUTDOWN (AOF flushed), wait for the process."""
        if not self.running():
            return
        try:
            c = self.client()
            try:
                c.send("SHUTDOWN")
                try:
                    c._read()
                except (ConnectionError, OSError):
                    pass
            finally:
                c.close()
        except OSError:
            self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill(self):
        if self.running():
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        if self.running():
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def setup(settings=None, name=None, threads=2, extra=()):
    """The usual test start: a fresh redis-server and a seckill against it."""
    r = start_redis()
    s = start_server(r, name=name, settings=settings, threads=threads, extra=extra)
    return r, s


def finish(srv):
    """The server must still be healthy, then stop cleanly with exit 0."""
    h = Http(srv.port, timeout=10)
    try:
        st, _, body = h.request("GET", "/health")
    finally:
        h.close()
    check(st == 200, "GET /health at the end: HTTP %d %r", st, body[:200])
    srv.stop()


def start_redis(name="redis", port=None, extra=()):
    d = subdir(name)
    if port is not None:
        return Redis(port, d, extra).start()
    # a cluster-enabled node needs its bus port (port + 10000) to exist and be free
    pick = (lambda: cluster_ports(1)[0]) if "--cluster-enabled" in extra else free_port
    return start_fresh_redis(lambda p: Redis(p, d, extra), pick)


# ---------------------------------------------------------------------------------------
# Redis Cluster (deploy/redis-cluster.sh forms it; the nodes are ordinary Redis objects,
# so cleanup and kill -9 work as for a single redis-server)

CLUSTER_SCRIPT = os.path.join(ROOT, "deploy", "redis-cluster.sh")


def cluster_ports(n):
    """n free loopback ports <= 55535 whose cluster bus port (+10000) is free too."""
    out = []
    while len(out) < n:
        p = free_port()
        if p > 55535 or p in out:
            continue
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", p + 10000))
        except OSError:
            continue
        finally:
            s.close()
        out.append(p)
    return out


class RedisCluster:
    """A test cluster: .nodes (Redis objects), .url (redis+cluster://...), and cmd(*args),
    which follows MOVED/ASK like a cluster client, so the single-node helpers (login,
    k_voucher reads...) work against it."""

    def __init__(self, nodes):
        self.nodes = nodes
        self.url = "redis+cluster://" + ",".join("127.0.0.1:%d" % r.port for r in nodes)
        self.port = nodes[0].port

    def alive(self):
        return [r for r in self.nodes if r.running()]

    def masters(self):
        """Redis objects that are masters now (ROLE)."""
        out = []
        for r in self.alive():
            try:
                if r.cmd("ROLE")[0] == "master":
                    out.append(r)
            except (RedisError, OSError):
                pass
        return out

    def node_for(self, key):
        """The Redis object owning key's slot (CLUSTER KEYSLOT + CLUSTER SLOTS)."""
        r0 = self.alive()[0]
        slot = r0.cmd("CLUSTER", "KEYSLOT", key)
        for lo, hi, master, *_ in r0.cmd("CLUSTER", "SLOTS"):
            if lo <= slot <= hi:
                port = int(master[1])
                return next(r for r in self.nodes if r.port == port)
        raise TestFailure("slot %d of %r has no owner" % (slot, key))

    def cmd(self, *args):
        target = self.alive()[0].port
        asking = False
        for _ in range(8):
            c = Resp(port=target)
            try:
                if asking:
                    c.cmd("ASKING")
                c.send(*args)
                r = c._read()
            finally:
                c.close()
            if isinstance(r, RedisError):
                msg = str(r)
                if msg.startswith(("MOVED ", "ASK ")):
                    asking = msg.startswith("ASK ")
                    target = int(msg.rsplit(":", 1)[1])
                    continue
                if msg.startswith(("TRYAGAIN", "CLUSTERDOWN")):
                    time.sleep(0.05)
                    continue
                raise r
            return r
        raise TestFailure("cluster command %r: too many redirects" % (args,))

    def client(self, timeout=5.0):
        """Something with cmd() and close(), as Redis.client() returns (routes per call)."""
        return _ClusterClient(self)

    def replica_of(self, master):
        """The live Redis object replicating master (ROLE)."""
        for r in self.alive():
            role = r.cmd("ROLE")
            if role[0] == "slave" and int(role[2]) == master.port:
                return r
        raise TestFailure("no replica of %d" % master.port)

    def slot_ranges(self):
        """[(lo, hi, master port, master node id)] from CLUSTER SLOTS."""
        return [(lo, hi, int(m[1]), m[2]) for lo, hi, m, *_ in
                self.alive()[0].cmd("CLUSTER", "SLOTS")]

    def wait_ok(self, timeout=30):
        def ok():
            for r in self.alive():
                info = r.cmd("CLUSTER", "INFO")
                if "cluster_state:ok" not in info or "cluster_slots_ok:16384" not in info:
                    return False
            return True
        wait_until(ok, timeout, what="cluster state ok on every live node")


class _ClusterClient:
    def __init__(self, cluster):
        self.cluster = cluster

    def cmd(self, *args):
        return self.cluster.cmd(*args)

    def close(self):
        pass


def start_one_node_cluster():
    """One redis-server in cluster mode holding every slot (a Redis Cluster's client paths
    on one process); its url is redis:// -- the server wants redis+cluster:// of its port."""
    r = start_redis(extra=["--cluster-enabled", "yes", "--cluster-config-file",
                           os.path.join(subdir("cl"), "nodes.conf")])
    r.cmd("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
    wait_until(lambda: "cluster_state:ok" in r.cmd("CLUSTER", "INFO"), 20,
               what="the one-node cluster")
    return r


def start_redis_cluster(masters=3, replicas=1, node_timeout_ms=1000, extra=()):
    """masters x (1 + replicas) cluster nodes on free ports, formed by
    deploy/redis-cluster.sh create; waits for state ok and replicas in sync."""
    n = masters * (1 + replicas)
    first = iter(cluster_ports(n))
    nodes = []

    def node(p):
        d = subdir("cluster-%d" % p)
        return Redis(p, d, ["--cluster-enabled", "yes",
                            "--cluster-config-file", os.path.join(d, "nodes.conf"),
                            "--cluster-node-timeout", str(node_timeout_ms)] + list(extra))

    def pick():
        # the planned port first; if another process took it meanwhile, a new one
        p = next(first, None)
        while p is None or p in [r.port for r in nodes]:
            p = cluster_ports(1)[0]
        return p
    for _ in range(n):
        nodes.append(start_fresh_redis(node, pick))
    ports = [r.port for r in nodes]
    env = dict(os.environ, REPLICAS=str(replicas),
               CREATE_LOG=os.path.join(tmpdir(), "cluster-create.log"))
    p = subprocess.run(["sh", CLUSTER_SCRIPT, "create"] + [str(x) for x in ports], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    if p.returncode != 0:
        raise TestFailure("redis-cluster.sh create failed: %s\n%s" % (
            p.stdout.decode(errors="replace"), tail(env["CREATE_LOG"])))
    return RedisCluster(nodes)


# ---------------------------------------------------------------------------------------
# seckill server

def _flag(name):
    return "--" + name.replace("_", "-")


def san_env(env=None):
    e = dict(os.environ if env is None else env)
    e.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:halt_on_error=1")
    e.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    e.setdefault("LSAN_OPTIONS", "")
    # settings must come from the test's flags only
    for k in list(e):
        if k.startswith("SECKILL_") and k not in ("SECKILL_BIN", "SECKILL_TEST_TMP"):
            del e[k]
    return e


class Server:
    """One `seckill serve` child. stderr (and stdout) go to files in its data dir."""
    _seq = 0

    def __init__(self, argv, data_dir, port, admin_token, db_path, name, db_url=None):
        self.argv = argv
        self.data_dir = data_dir
        self.port = port
        self.admin_token = admin_token
        self.db_path = db_path
        self.db_url = db_url or ("sqlite:" + db_path if db_path else None)
        self.name = name
        self.proc = None
        Server._seq += 1
        self.stderr_path = os.path.join(data_dir, "seckill.stderr.%d.%d" % (os.getpid(),
                                                                          Server._seq))
        self.stdout_path = self.stderr_path.replace("stderr", "stdout")
        self.exit_code = None
        self.stopped_by = None

    def start(self, ready_timeout=60, wait_ready=True):
        self.errf = open(self.stderr_path, "wb")
        self.outf = open(self.stdout_path, "wb")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self.outf,
                                     stderr=self.errf, env=san_env(), cwd=self.data_dir)
        with _registry_lock:
            _servers.append(self)
        log("started seckill pid %d port %d: %s (stderr %s)" % (
            self.proc.pid, self.port, " ".join(self.argv[1:]), self.stderr_path))
        if wait_ready:
            self.wait_ready(ready_timeout)
        return self

    def wait_ready(self, timeout=60):
        def ready():
            if self.proc.poll() is not None:
                self.exit_code = self.proc.returncode
                raise TestFailure("seckill exited with %s before it was ready:\n%s" % (
                    self.proc.returncode, self.log_tail()))
            try:
                h = Http(self.port, timeout=2)
                try:
                    st, _, _ = h.request("GET", "/health")
                finally:
                    h.close()
                return st == 200
            except OSError:
                return False
        wait_until(ready, timeout, interval=0.05, what="seckill /health 200 on port %d" % self.port)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stderr_text(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stdout_text(self):
        try:
            with open(self.stdout_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, n=40):
        lines = self.stderr_text().splitlines()
        out = "\n".join(lines[-n:])
        so = self.stdout_text().strip()
        if so:
            out += "\n-- stdout:\n" + "\n".join(so.splitlines()[-10:])
        return out

    def log_lines(self, pattern=None):
        lines = self.stderr_text().splitlines() + self.stdout_text().splitlines()
        if pattern is None:
            return lines
        rx = re.compile(pattern)
        return [l for l in lines if rx.search(l)]

    def sanitizer_report(self):
        text = self.stderr_text() + self.stdout_text()
        for m in SANITIZER_MARKERS:
            i = text.find(m)
            if i >= 0:
                start = text.rfind("\n", 0, max(0, i - 200)) + 1
                return text[start:start + 6000]
        return None

    def _close_files(self):
        for f in (getattr(self, "errf", None), getattr(self, "outf", None)):
            if f:
                try:
                    f.close()
                except OSError:
                    pass

    def stop(self, timeout=45, expect_code=0):
        """SIGTERM, wait, check the exit code and the sanitizer output."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.stopped_by = "SIGTERM"
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self._close_files()
                raise TestFailure("seckill did not exit within %ds of SIGTERM:\n%s" % (
                    timeout, self.log_tail()))
        self.exit_code = self.proc.returncode
        self._close_files()
        rep = self.sanitizer_report()
        if rep:
            raise TestFailure("sanitizer report in seckill stderr:\n" + rep)
        if expect_code is not None and self.exit_code != expect_code:
            raise TestFailure("seckill exit code %s after %s (expected %s):\n%s" % (
                self.exit_code, self.stopped_by or "exit", expect_code, self.log_tail()))
        return self.exit_code

    def kill9(self):
        if self.proc is not None and self.proc.poll() is None:
            self.stopped_by = "SIGKILL"
            self.proc.kill()
            self.proc.wait()
            self.exit_code = self.proc.returncode
        self._close_files()

    def http(self, timeout=10.0):
        return Http(self.port, timeout=timeout)

    def db(self):
        return Db(self.db_url)


# Settings every test server gets unless the test names them (None = the server's own
# default): every test client is 127.0.0.1, so the per-IP login and code limits would
# turn the many logins of a sale into 429s. test_security.py and test_sec_login.py test
# them on, and test_sec_login.py the instance's code budget (tests log in thousands of
# buyers a minute). /metrics is private by default; the tests read it on --listen
# (test_sec_http.py tests the default).
# Tools seed course-style random tokens straight into Redis (bench --seed-tokens without
# a key file), which a signed-format server accepts only with --token-accept-opaque:
# test_sec_tokens.py tests the default (off).
TEST_SETTINGS = {"rate_ip_login": 0, "rate_ip_code": 0, "code_budget": 0, "metrics_public": 1,
                 "token_accept_opaque": 1}


def server_argv(port, redis_url, db_url, admin_token, data_dir, threads=2, name=None,
                settings=None, extra=()):
    """db_url: a database URL (sqlite:PATH, mysql://...); a bare path means sqlite:PATH.
    settings: {name: value} as flags, over TEST_SETTINGS; a value None leaves it out."""
    if ":" not in db_url.split("/")[0]:
        db_url = "sqlite:" + db_url
    argv = [binary(), "serve", "--listen", "127.0.0.1:%d" % port,
            "--redis", redis_url, "--db", db_url,
            "--admin-token", admin_token, "--threads", str(threads), "--data-dir", data_dir]
    if name:
        argv += ["--name", name]
    for k, v in dict(TEST_SETTINGS, **(settings or {})).items():
        if v is not None:
            argv += [_flag(k), str(v)]
    argv += list(extra)
    return argv


def start_server(redis, name=None, settings=None, threads=2, data_dir=None, db_path=None,
                 admin_token=None, port=None, extra=(), ready_timeout=60, db_url=None):
    """Starts seckill against `redis` (a Redis object or a URL) and waits for /health 200.
    The database: db_url if given, else the run's backend for db_path (db_url_for)."""
    data_dir = data_dir or subdir("seckill-data")
    db_path = db_path or os.path.join(data_dir, "seckill.db")
    admin_token = admin_token or ("adm" + "".join(random.choice("0123456789abcdef")
                                                  for _ in range(29)))
    port = port or free_port()
    url = redis.url if isinstance(redis, Redis) else redis
    db_url = db_url or db_url_for(db_path)
    argv = server_argv(port, url, db_url, admin_token, data_dir, threads, name, settings,
                       extra)
    s = Server(argv, data_dir, port, admin_token, db_path, name, db_url=db_url)
    return s.start(ready_timeout=ready_timeout)


def restart_server(old, name=None, settings=None, same_port=True, extra=(), threads=2):
    """A new server with the same redis/db/data dir/admin token (old must be stopped)."""
    port = old.port if same_port else free_port()
    redis_url = old.argv[old.argv.index("--redis") + 1]
    argv = server_argv(port, redis_url, old.db_url, old.admin_token, old.data_dir, threads,
                       name, settings, extra)
    s = Server(argv, old.data_dir, port, old.admin_token, old.db_path, name,
               db_url=old.db_url)
    return s.start()


# ---------------------------------------------------------------------------------------
# the database of a test

_mysql_dbs = {}     # db_path -> MariaDB database name, for this test


def run_seq():
    """This test's number in the run (the runner's SECKILL_TEST_SEQ; else the pid)."""
    return os.environ.get("SECKILL_TEST_SEQ") or str(os.getpid())


def db_url_for(db_path):
    """The database URL a server of this run uses for db_path (a SQLite file name). On
    SQLite that file; on MariaDB one database per distinct path in this test: t_<n> for
    the first, t_<n>_<k> after it, so servers given the same path share a database, as
    they share the file on SQLite."""
    if DB_KIND == "sqlite":
        return "sqlite:" + db_path
    check(MYSQL_BASE, "SECKILL_TEST_DB=mysql needs SECKILL_TEST_MYSQL (tests/run.py sets it)")
    name = _mysql_dbs.get(db_path)
    if name is None:
        name = "t_%s" % run_seq()
        if _mysql_dbs:
            name += "_%d" % len(_mysql_dbs)
        _mysql_dbs[db_path] = name
    return MYSQL_BASE.rstrip("/") + "/" + name


# ---------------------------------------------------------------------------------------
# HTTP/1.1 client on a raw socket

class HttpError(Exception):
    pass


class Http:
    """Keep-alive HTTP/1.1 client (one per thread). request() reconnects once if the
    kept-alive connection was closed by the server before the request was sent."""

    def __init__(self, port, host="127.0.0.1", timeout=10.0, connect=True):
        self.host, self.port, self.timeout = host, port, timeout
        self.sock = None
        self.buf = b""
        if connect:
            self.connect()

    def connect(self):
        self.close()
        self.sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None

    def settimeout(self, t):
        self.timeout = t
        if self.sock:
            self.sock.settimeout(t)

    @staticmethod
    def build(method, path, headers=None, body=None, token=None, admin=None):
        if isinstance(body, (dict, list)):
            body = json.dumps(body, ensure_ascii=False).encode()
        elif isinstance(body, str):
            body = body.encode()
        h = [("Host", "127.0.0.1")]
        if token is not None:
            h.append(("authorization", token))
        if admin is not None:
            h.append(("x-admin-token", admin))
        if body is not None:
            h.append(("Content-Type", "application/json"))
            h.append(("Content-Length", str(len(body))))
        elif method in ("POST", "PUT"):
            h.append(("Content-Length", "0"))
        for k, v in (headers or {}).items() if isinstance(headers, dict) else (headers or []):
            h.append((k, v))
        head = "%s %s HTTP/1.1\r\n" % (method, path) + "".join(
            "%s: %s\r\n" % (k, v) for k, v in h) + "\r\n"
        return head.encode() + (body or b"")

    def send_raw(self, data):
        if self.sock is None:
            self.connect()
        self.sock.sendall(data)

    def _fill(self):
        d = self.sock.recv(65536)
        if not d:
            raise HttpError("connection closed by server")
        self.buf += d

    def read_response(self, method="GET"):
        """Reads one response: (status, headers dict lowercased, body bytes)."""
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        m = re.match(r"HTTP/1\.[01] (\d{3})", lines[0])
        if not m:
            raise HttpError("bad status line %r" % lines[0])
        status = int(m.group(1))
        headers = {}
        for l in lines[1:]:
            k, _, v = l.partition(":")
            headers[k.strip().lower()] = v.strip()
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return status, headers, b""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = b""
            while True:
                while b"\r\n" not in self.buf:
                    self._fill()
                szline, self.buf = self.buf.split(b"\r\n", 1)
                sz = int(szline.split(b";")[0], 16)
                while len(self.buf) < sz + 2:
                    self._fill()
                body += self.buf[:sz]
                self.buf = self.buf[sz + 2:]
                if sz == 0:
                    break
            return status, headers, body
        if "content-length" in headers:
            n = int(headers["content-length"])
            while len(self.buf) < n:
                self._fill()
            body, self.buf = self.buf[:n], self.buf[n:]
            return status, headers, body
        # read to close
        while True:
            try:
                self._fill()
            except HttpError:
                break
        body, self.buf = self.buf, b""
        self.close()
        return status, headers, body

    def request(self, method, path, body=None, token=None, admin=None, headers=None):
        """One request/response on the kept-alive connection: (status, headers, body).
        If a reused connection turns out closed before any reply byte arrived (the server
        closed it while idle), reconnects and sends once more."""
        data = self.build(method, path, headers, body, token, admin)
        reused = self.sock is not None
        if not reused:
            self.connect()
        try:
            self.sock.sendall(data)
            st, hd, bd = self.read_response(method)
        except (HttpError, ConnectionResetError, BrokenPipeError) as e:
            partial = bool(self.buf)
            self.close()
            if not reused or partial:
                raise HttpError("%s %s: %s" % (method, path, e))
            self.connect()
            try:
                self.sock.sendall(data)
                st, hd, bd = self.read_response(method)
            except (HttpError, ConnectionResetError, BrokenPipeError) as e2:
                self.close()
                raise HttpError("%s %s: %s" % (method, path, e2))
        if hd.get("connection", "").lower() == "close":
            self.close()
        return st, hd, bd

    def api(self, method, path, body=None, token=None, admin=None, headers=None,
            expect_status=None):
        """A JSON API call: returns (status, parsed envelope or None for empty body).
        Checks the envelope rules on every JSON reply."""
        st, hd, bd = self.request(method, path, body, token, admin, headers)
        if expect_status is not None and st != expect_status:
            raise TestFailure("%s %s: HTTP %d, expected %d; body %r" % (
                method, path, st, expect_status, bd[:300]))
        if not bd:
            return st, None
        try:
            j = json.loads(bd.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise TestFailure("%s %s: HTTP %d with a non-JSON body %r" % (method, path, st,
                                                                           bd[:300]))
        check_envelope(j, "%s %s" % (method, path))
        return st, j


ENVELOPE_KEYS = {"success", "errorMsg", "data", "total", "code"}


def no_nulls(v, where):
    if v is None:
        raise TestFailure("%s: JSON contains null" % where)
    if isinstance(v, dict):
        for k, x in v.items():
            no_nulls(x, where + "." + k)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            no_nulls(x, "%s[%d]" % (where, i))


def check_envelope(j, what):
    check(isinstance(j, dict), "%s: reply is not a JSON object: %r", what, j)
    check("success" in j and isinstance(j["success"], bool),
          "%s: envelope without boolean success: %r", what, j)
    extra = set(j) - ENVELOPE_KEYS
    check(not extra, "%s: unexpected envelope members %s in %r", what, sorted(extra), j)
    no_nulls(j, what)
    if j["success"]:
        check("errorMsg" not in j, "%s: success with errorMsg: %r", what, j)
    else:
        check(isinstance(j.get("errorMsg"), str) and j["errorMsg"],
              "%s: failure without errorMsg: %r", what, j)
    if "code" in j:
        check(isinstance(j["code"], str), "%s: code not a string: %r", what, j)


_tls = threading.local()


def thread_http(port, timeout=10.0):
    """A keep-alive client for this thread and port."""
    d = getattr(_tls, "conns", None)
    if d is None:
        d = _tls.conns = {}
    h = d.get(port)
    if h is None:
        h = d[port] = Http(port, timeout=timeout, connect=False)
    return h


# ---------------------------------------------------------------------------------------
# API helpers

def phone_for(i, prefix="138"):
    """A valid, unique phone number for index i (0 <= i < 10^8)."""
    return "%s%08d" % (prefix, i)


TOKEN_RE = re.compile(r"^[0-9a-f]{32}$")
NICK_RE = re.compile(r"^user_[a-z0-9]{10}$")


def send_code(srv, redis, phone, http=None):
    h = http or thread_http(srv.port)
    st, j = h.api("POST", "/user/code?phone=" + phone)
    check(st == 200 and j and j["success"], "POST /user/code %s: %r %r", phone, st, j)
    code = redis.cmd("GET", "login:code:" + phone)
    check(code is not None, "no login:code:%s in Redis after /user/code", phone)
    return code


def login(srv, redis, phone, http=None):
    """POST /user/code, read the code from Redis, POST /user/login -> token."""
    h = http or thread_http(srv.port)
    code = send_code(srv, redis, phone, h)
    st, j = h.api("POST", "/user/login", {"phone": phone, "code": code})
    check(st == 200 and j and j["success"], "POST /user/login %s: %r %r", phone, st, j)
    tok = j.get("data")
    check(isinstance(tok, str) and TOKEN_RE.match(tok), "login token not 32 hex: %r", tok)
    return tok


def login_many(srv, redis, n, threads=16, prefix="138", start=0):
    """Logs in n distinct users concurrently; returns their tokens (index order)."""
    tokens = [None] * n
    errors = []
    idx = iter(range(n))
    lock = threading.Lock()

    def run():
        h = Http(srv.port, timeout=30, connect=False)
        rc = redis.client(timeout=10)
        try:
            while True:
                with lock:
                    i = next(idx, None)
                if i is None:
                    return
                phone = phone_for(start + i, prefix)
                try:
                    st, j = h.api("POST", "/user/code?phone=" + phone)
                    check(st == 200 and j["success"], "code %s: %r %r", phone, st, j)
                    code = rc.cmd("GET", "login:code:" + phone)
                    check(code is not None, "no code for %s", phone)
                    st, j = h.api("POST", "/user/login", {"phone": phone, "code": code})
                    check(st == 200 and j["success"] and TOKEN_RE.match(j.get("data", "")),
                          "login %s: %r %r", phone, st, j)
                    tokens[i] = j["data"]
                except Exception as e:
                    with lock:
                        errors.append("%s: %r" % (phone, e))
        finally:
            h.close()
            rc.close()
    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(not errors, "%d logins failed, first: %s", len(errors), errors[:3])
    check(len(set(tokens)) == n, "duplicate tokens among %d logins", n)
    return tokens


def fmt_time(t):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(int(t)))


def seckill_body(stock=100, begin=None, end=None, shop_id=1, title="100元代金券", **kw):
    now = time.time()
    b = {"shopId": shop_id, "title": title, "subTitle": "周一至周五均可使用",
         "rules": "全场通用\\n无需预约", "payValue": 8000, "actualValue": 10000, "type": 1,
         "stock": stock,
         "beginTime": fmt_time(now - 3600 if begin is None else begin),
         "endTime": fmt_time(now + 3600 if end is None else end)}
    if stock == 0 or (end is not None and end <= now):
        b["allowClosed"] = True   # a sale that cannot sell is refused unless asked for
    b.update(kw)
    return b


def create_seckill(srv, stock=100, begin=None, end=None, shop_id=1, http=None, **kw):
    h = http or thread_http(srv.port)
    body = seckill_body(stock, begin, end, shop_id, **kw)
    st, j = h.api("POST", "/voucher/seckill", body, admin=srv.admin_token)
    check(st == 200 and j and j["success"] and isinstance(j.get("data"), int),
          "create seckill voucher: %r %r", st, j)
    return j["data"]


def create_voucher(srv, shop_id=1, http=None, **kw):
    h = http or thread_http(srv.port)
    body = {"shopId": shop_id, "title": "50元代金券", "subTitle": "周一至周日均可使用",
            "rules": "全场通用", "payValue": 4750, "actualValue": 5000, "type": 0}
    body.update(kw)
    st, j = h.api("POST", "/voucher", body, admin=srv.admin_token)
    check(st == 200 and j and j["success"] and isinstance(j.get("data"), int),
          "create voucher: %r %r", st, j)
    return j["data"]


def seckill(srv, token, voucher_id, http=None):
    """One flash-sale attempt: (status, envelope)."""
    h = http or thread_http(srv.port)
    return h.api("POST", "/voucher-order/seckill/%d" % voucher_id, token=token)


# ---------------------------------------------------------------------------------------
# Redis-side helpers (keys.h)

def k_voucher(v):
    return "seckill:voucher:{%d}" % v


def k_buyers(v):
    return "seckill:order:{%d}" % v


def k_stream(v):
    return "seckill:stream:{%d}" % v


def key_slot(key):
    """Redis Cluster's slot of a key without hash tags: CRC16-XMODEM mod 16384."""
    crc = 0
    for byte in key.encode():
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc % 16384


def bucket_tag(vid, b, k):
    """Stock bucket b's hash tag of a K-bucket voucher (keys.c key_bsalt): "<vid>" for
    bucket 0, else the first "<vid>.b<b>.<salt>" whose slot is within 32 after a b/K turn
    of the slot ring from bucket 0's."""
    if b == 0:
        return str(vid)
    target = (key_slot(str(vid)) + (b * 16384 + k // 2) // k) % 16384
    for s in range(65536):
        tag = "%d.b%d.%d" % (vid, b, s)
        if (key_slot(tag) - target) % 16384 < 32:
            return tag
    return "%d.b%d.0" % (vid, b)


def bucket_keys(vid, b, k):
    """The keys of stock bucket b (keys.h): voucher, buyers, stream, log, applied."""
    t = bucket_tag(vid, b, k)
    return {"voucher": "seckill:voucher:{%s}" % t, "buyers": "seckill:order:{%s}" % t,
            "stream": "seckill:stream:{%s}" % t, "log": "seckill:xfer:{%s}" % t,
            "applied": "seckill:xfer:applied:{%s}" % t}


def bucket_home(uid, k):
    """A buyer's home bucket (buckets.c buckets_home: splitmix64 of the user id, mod K)."""
    m = (1 << 64) - 1
    z = (uid + 0x9e3779b97f4a7c15) & m
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & m
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & m
    z ^= z >> 31
    return z % k


def xpending_count(redis, voucher_id, group="g1"):
    r = redis.cmd("XPENDING", k_stream(voucher_id), group)
    return int(r[0])


def group_state(redis, voucher_id, group="g1"):
    """(pending, lag) of the group from ONE XINFO GROUPS reply: entries delivered and not
    acked, entries not yet delivered. Ask "has the writer written everything?" with this,
    never with XPENDING and a second read: the writer's XREADGROUP moves entries from
    undelivered to pending in one step, so XPENDING read before it (0) and lag read after
    it (0) say "nothing left" while the batch is still on its way to SQL."""
    for g in redis.cmd("XINFO", "GROUPS", k_stream(voucher_id)):
        d = dict(zip(g[::2], g[1::2]))
        if d.get("name") == group:
            lag = d.get("lag")
            if lag is None:
                # Redis cannot tell (deleted entries): compare the snapshot's last-delivered
                # id with the stream's last id, read after it (ids only grow: an entry
                # added since counts as undelivered, never the other way round)
                info = redis.cmd("XINFO", "STREAM", k_stream(voucher_id))
                si = dict(zip(info[::2], info[1::2]))
                lag = 0 if si.get("last-generated-id") == d.get("last-delivered-id") else 1
            return int(d["pending"]), int(lag)
    raise TestFailure("no group %s on %s" % (group, k_stream(voucher_id)))


def group_settled(redis, voucher_id, group="g1"):
    """Nothing pending and nothing undelivered, in one snapshot (group_state): the writer
    acks only after the commit, so every order the stream holds is in SQL."""
    return group_state(redis, voucher_id, group) == (0, 0)


def group_lag(redis, voucher_id, group="g1"):
    """Entries not yet delivered to the group (XINFO GROUPS lag; Redis 7)."""
    return group_state(redis, voucher_id, group)[1]



def entry_orders(fields):
    """The orders [(orderId, userId), ...] of one order-stream entry, in any of its forms
    (src/sale/sentry.h): os = "ts ep orderId userId ..." (every order of one admission call),
    o = "orderId userId ts ep", or the named fields id, userId, ..."""
    d = dict(zip(fields[::2], fields[1::2]))
    if "os" in d:
        n = d["os"].split(" ")[2:]
        return [(int(n[i]), int(n[i + 1])) for i in range(0, len(n), 2)]
    if "o" in d:
        oid, uid = d["o"].split(" ")[:2]
        return [(int(oid), int(uid))]
    return [(int(d["id"]), int(d["userId"]))]


def stream_orders(redis, voucher_id, key=None):
    """Every order the voucher's stream holds, as {entryId: [(orderId, userId), ...]}: an
    entry holds the orders of one admission call, so entries are not orders."""
    return {eid: entry_orders(f)
            for eid, f in redis.cmd("XRANGE", key or k_stream(voucher_id), "-", "+")}


def unacked_orders(redis, voucher_id, group="g1", pending_only=False, ids=False):
    """Orders in the entries the group has not acked: delivered and pending, plus (unless
    pending_only) not yet delivered -- what the writer has still to put into SQL. With ids
    the set of their order ids, else how many."""
    key = k_stream(voucher_id)
    ents = stream_orders(redis, voucher_id)
    pend = [p[0] for p in redis.cmd("XPENDING", key, group, "-", "+", "1000000")]
    if not pending_only:
        last = None
        for g in redis.cmd("XINFO", "GROUPS", key):
            d = dict(zip(g[::2], g[1::2]))
            if d.get("name") == group:
                last = tuple(int(x) for x in d["last-delivered-id"].split("-"))
        if last is None:
            raise TestFailure("no group %s on %s" % (group, key))
        pend += [eid for eid in ents if tuple(int(x) for x in eid.split("-")) > last]
    if ids:
        return {o for eid in pend for o, _ in ents.get(eid, [])}
    return sum(len(ents.get(eid, [])) for eid in pend)

def voucher_present(redis, voucher_id):
    """The voucher's Redis hash has its stock (False while Redis does not answer)."""
    try:
        return redis.cmd("HEXISTS", k_voucher(voucher_id), "stock") == 1
    except (OSError, RedisError):
        return False


def rebuild_epoch(srv, voucher_id):
    """The voucher's Redis generation in SQL (raised by each rebuild from SQL)."""
    return srv.db().scalar("SELECT coalesce((SELECT epoch FROM tb_seckill_epoch "
                           "WHERE voucher_id = ?), 0)", voucher_id)


def metric(srv, name):
    """An unlabelled series of the server's /metrics (a gauge or a counter), as a float."""
    st, _, body = srv.http().request("GET", "/metrics")
    check(st == 200, "/metrics: HTTP %d", st)
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise TestFailure("no %s in /metrics" % name)


def wait_drained(srv, redis, voucher_id, timeout=90):
    """Waits until every admitted order (HLEN of the buyers hash) is in SQL and the stream
    has nothing pending or undelivered. Returns the SQL order count."""
    db = srv.db() if isinstance(srv, Server) else srv

    def drained():
        admitted = int(redis.cmd("HLEN", k_buyers(voucher_id)))
        settled = group_settled(redis, voucher_id)
        n = db.order_count(voucher_id)
        return (n == admitted and settled) and (True, n)
    try:
        return wait_until(drained, timeout, interval=0.2,
                          what="voucher %d drained to SQL" % voucher_id)[1]
    except TestFailure as e:
        try:
            state = "HLEN=%s XPENDING=%s lag=%s sql=%s" % (
                redis.cmd("HLEN", k_buyers(voucher_id)), xpending_count(redis, voucher_id),
                group_lag(redis, voucher_id), db.order_count(voucher_id))
        except Exception as e2:
            state = repr(e2)
        raise TestFailure("%s; %s" % (e, state))


# ---------------------------------------------------------------------------------------
# SQL read helpers (SQLite or MariaDB)

def pymysql():
    """The pymysql module (Debian's python3-pymysql). The interpreter running the tests may
    not be Debian's (pyenv), so Debian's dist-packages is tried as a fallback."""
    try:
        import pymysql as m
    except ImportError:
        import sys
        for d in ("/usr/lib/python3/dist-packages",):
            if d not in sys.path:
                sys.path.append(d)
        try:
            import pymysql as m
        except ImportError:
            raise TestFailure("pymysql is not installed (apt-get install python3-pymysql)")
    return m


def mysql_params(url):
    """mysql://user:pass@host:port/db[?socket=P] -> keyword arguments of pymysql.connect."""
    from urllib.parse import urlsplit, unquote, parse_qs
    u = urlsplit(url)
    check(u.scheme in ("mysql", "mariadb"), "not a mysql URL: %r", url)
    kw = {"host": u.hostname or "127.0.0.1", "port": u.port or 3306,
          "user": unquote(u.username or ""), "password": unquote(u.password or ""),
          "database": u.path.lstrip("/") or None, "charset": "utf8mb4", "autocommit": True,
          "connect_timeout": 10, "read_timeout": 60, "write_timeout": 60}
    sock = parse_qs(u.query).get("socket")
    if sock:
        kw["unix_socket"] = sock[0]
    return kw


def mysql_connect(url, **over):
    kw = mysql_params(url)
    kw.update(over)
    return pymysql().connect(**kw)


def sql_write(srv, sql, *args):
    """One write of a test's own on srv's database (Db only reads); ? placeholders."""
    url = getattr(srv, "db_url", None) or "sqlite:" + srv.db_path
    if url.startswith(("mysql:", "mariadb:")):
        c = mysql_connect(url)
        try:
            c.cursor().execute(sql.replace("?", "%s"), args)
            c.commit()
        finally:
            c.close()
        return
    c = sqlite3.connect(url[len("sqlite:"):] if url.startswith("sqlite:") else url, timeout=30)
    try:
        c.execute(sql, args)
        c.commit()
    finally:
        c.close()


class Db:
    """Read helpers on a server's database. url: sqlite:PATH, a bare SQLite path, or
    mysql://... SQL is written once with `?` placeholders and SQL both engines accept."""

    def __init__(self, url):
        if url.startswith("sqlite:"):
            url = url[len("sqlite:"):]
        self.url = url
        self.kind = "mysql" if url.startswith(("mysql:", "mariadb:")) else "sqlite"
        self.path = url if self.kind == "sqlite" else None

    def _conn(self):
        if self.kind == "mysql":
            return mysql_connect(self.url)
        c = sqlite3.connect("file:%s?mode=ro" % self.path, uri=True, timeout=10)
        return c

    def query(self, sql, *args):
        c = self._conn()
        try:
            if self.kind == "mysql":
                cur = c.cursor()
                cur.execute(sql.replace("%", "%%").replace("?", "%s"), args)
                return [tuple(r) for r in cur.fetchall()]
            return c.execute(sql, args).fetchall()
        finally:
            c.close()

    def scalar(self, sql, *args):
        r = self.query(sql, *args)
        return r[0][0] if r else None

    def order_count(self, voucher_id):
        return self.scalar("SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id=?",
                           voucher_id)

    def orders(self, voucher_id):
        """[(id, user_id)] of a voucher."""
        return self.query("SELECT id, user_id FROM tb_voucher_order WHERE voucher_id=?",
                          voucher_id)

    def per_user_max(self, voucher_id):
        return self.scalar("SELECT COALESCE(MAX(n),0) FROM (SELECT COUNT(*) n FROM "
                           "tb_voucher_order WHERE voucher_id=? GROUP BY user_id) t",
                           voucher_id)

    def stock(self, voucher_id):
        return self.scalar("SELECT stock FROM tb_seckill_voucher WHERE voucher_id=?",
                           voucher_id)

    def user_count(self):
        return self.scalar("SELECT COUNT(*) FROM tb_user")


class _MysqlLock:
    """LOCK TABLES tb_voucher_order WRITE from another session, with the part of the
    sqlite3.Connection interface the tests use (execute(...).fetchone(), rollback, close)."""

    def __init__(self, url):
        self.c = mysql_connect(url)
        self.cur = self.c.cursor()
        self.cur.execute("LOCK TABLES tb_voucher_order WRITE")

    def execute(self, sql, args=()):
        self.cur.execute(sql.replace("%", "%%").replace("?", "%s"), args)
        return self.cur

    def rollback(self):
        try:
            self.cur.execute("UNLOCK TABLES")
        except Exception:
            pass

    def close(self):
        try:
            self.c.close()
        except Exception:
            pass


def hold_db_lock(srv):
    """Another session that keeps the server's order writer from committing, until
    .rollback() (then .close()). SQLite: BEGIN EXCLUSIVE on the file. MariaDB: LOCK TABLES
    tb_voucher_order WRITE -- the writer's INSERT waits on the table lock and gives up at
    its deadline (lock_wait_timeout), as it does on SQLite's busy lock."""
    url = srv.db_url if isinstance(srv, Server) else srv
    if url.startswith(("mysql:", "mariadb:")):
        return _MysqlLock(url)
    path = url[len("sqlite:"):] if url.startswith("sqlite:") else url
    c = sqlite3.connect(path, timeout=30, isolation_level=None)
    c.execute("BEGIN EXCLUSIVE")
    return c


# ---------------------------------------------------------------------------------------
# MariaDB server

MARIADBD = os.environ.get("MARIADBD_BIN", "/usr/sbin/mariadbd")
MARIADB_INSTALL_DB = os.environ.get("MARIADB_INSTALL_DB_BIN", "/usr/bin/mariadb-install-db")


def _die_with_parent():
    """preexec_fn: the child gets SIGTERM when the process that started it dies."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class MariaDB:
    """A private mariadbd: its own datadir (made by mariadb-install-db), a loopback port and
    a Unix socket, and a user with a password (seckill connects as that user, over TCP).
    Never port 3306, never the system's service."""
    USER = "seckill"
    PASSWORD = "seckill-test"

    def __init__(self, dir_, port=None, register=True):
        self.dir = dir_
        self.port = port or free_port()
        self.datadir = os.path.join(dir_, "data")
        self.socket = os.path.join(dir_, "mysqld.sock")
        self.log = os.path.join(dir_, "mariadbd.err")
        self.proc = None
        self.register = register
        self.base_url = "mysql://%s:%s@127.0.0.1:%d" % (self.USER, self.PASSWORD, self.port)

    def url(self, db):
        return "%s/%s" % (self.base_url, db)

    def _install(self):
        argv = [MARIADB_INSTALL_DB, "--no-defaults", "--datadir=" + self.datadir,
                "--auth-root-authentication-method=normal", "--skip-test-db",
                "--skip-name-resolve"]
        if os.geteuid() == 0:
            argv.append("--user=root")
        out = os.path.join(self.dir, "install-db.log")
        with open(out, "wb") as f:
            rc = subprocess.call(argv, stdout=f, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
        if rc != 0:
            raise TestFailure("mariadb-install-db exited %d: %s" % (rc, tail(out)))

    def argv(self):
        a = [MARIADBD, "--no-defaults", "--datadir=" + self.datadir, "--socket=" + self.socket,
             "--port=%d" % self.port, "--bind-address=127.0.0.1", "--skip-name-resolve",
             "--pid-file=" + os.path.join(self.dir, "mariadbd.pid"), "--log-error=" + self.log,
             "--tmpdir=" + self.dir, "--innodb-buffer-pool-size=256M",
             "--innodb-log-file-size=64M", "--innodb-flush-log-at-trx-commit=1",
             "--max-connections=1000", "--performance-schema=OFF",
             "--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci"]
        if os.geteuid() == 0:
            a.append("--user=root")
        return a

    def start(self, timeout=60):
        os.makedirs(self.dir, exist_ok=True)
        fresh = not os.path.isdir(os.path.join(self.datadir, "mysql"))
        if fresh:
            self._install()
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent)
        self.proc.stderr_path = self.log
        if self.register:
            register_proc(self.proc)

        def ready():
            if self.proc.poll() is not None:
                raise TestFailure("mariadbd exited with %s: %s" % (self.proc.returncode,
                                                                   tail(self.log)))
            try:
                c = pymysql().connect(unix_socket=self.socket, user="root", password="",
                                      connect_timeout=2)
            except Exception:
                return False
            c.close()
            return True
        wait_until(ready, timeout, interval=0.1, what="mariadbd on port %d" % self.port)
        if fresh:
            c = pymysql().connect(unix_socket=self.socket, user="root", password="",
                                  autocommit=True)
            try:
                cur = c.cursor()
                cur.execute("CREATE USER IF NOT EXISTS '%s'@'%%' IDENTIFIED BY '%s'" % (
                    self.USER, self.PASSWORD))
                cur.execute("GRANT ALL PRIVILEGES ON *.* TO '%s'@'%%' WITH GRANT OPTION" %
                            self.USER)
            finally:
                c.close()
        return self

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def root(self):
        """A root session over the Unix socket (autocommit)."""
        return pymysql().connect(unix_socket=self.socket, user="root", password="",
                                 autocommit=True)

    def stop(self, timeout=60):
        if self.running():
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self):
        if self.running():
            self.proc.kill()
            self.proc.wait()


def start_mariadb(name="mariadb", port=None):
    """A private MariaDB for this test (most tests use the run's: SECKILL_TEST_MYSQL)."""
    return MariaDB(subdir(name), port).start()


# ---------------------------------------------------------------------------------------
# nginx in front of instances (deploy/nginx.conf.in, the config the deploy example uses)

NGINX = os.environ.get("NGINX_BIN", "/usr/sbin/nginx")
# An instance nginx failed to reach is left out this long (max_fails=1), then tried again:
# nginx (open source) has no active health checks. A rolling restart waits this long after
# an instance is back before it stops the next one (deploy/cluster.sh restart does too).
NGINX_FAIL_TIMEOUT_S = 1


def render_nginx_conf(prefix, listen, backends, workers=2, html=None):
    """deploy/nginx.conf.in with its @PLACEHOLDERS@ filled (deploy/cluster.sh does the
    same with sed)."""
    with open(os.path.join(ROOT, "deploy", "nginx.conf.in"), encoding="utf-8") as f:
        conf = f.read()
    upstreams = "\n".join("        server %s max_fails=1 fail_timeout=%ds;" % (
        b, NGINX_FAIL_TIMEOUT_S) for b in backends)
    if not html:
        html = os.path.join(prefix, "html")
        os.makedirs(html, exist_ok=True)
        with open(os.path.join(html, "index.html"), "w") as f:
            f.write("<!doctype html><title>seckill</title><p>seckill cluster</p>\n")
    for k, v in (("@PREFIX@", prefix), ("@LISTEN@", listen), ("@WORKERS@", str(workers)),
                 ("@UPSTREAMS@", upstreams), ("@HTML@", html)):
        conf = conf.replace(k, v)
    left = re.findall(r"@[A-Z_]+@", re.sub(r"#[^\n]*", "", conf))
    check(not left, "unfilled placeholders in the nginx config: %r", left)
    return conf


class Nginx:
    def __init__(self, dir_, port, backends, workers=2):
        self.dir = dir_
        self.port = port
        self.backends = list(backends)
        self.workers = workers
        self.proc = None
        self.conf = os.path.join(dir_, "nginx.conf")

    def write_conf(self):
        os.makedirs(os.path.join(self.dir, "logs"), exist_ok=True)
        with open(self.conf, "w", encoding="utf-8") as f:
            f.write(render_nginx_conf(self.dir, "127.0.0.1:%d" % self.port, self.backends,
                                      self.workers))

    def start(self, timeout=20):
        self.write_conf()
        err = os.path.join(self.dir, "nginx.stderr")
        with open(err, "wb") as ef:
            self.proc = subprocess.Popen([NGINX, "-p", self.dir, "-c", self.conf,
                                          "-g", "daemon off;"], stdin=subprocess.DEVNULL,
                                         stdout=ef, stderr=ef, preexec_fn=_die_with_parent)
        self.proc.stderr_path = err
        register_proc(self.proc)

        def ready():
            if self.proc.poll() is not None:
                raise TestFailure("nginx exited with %s: %s %s" % (
                    self.proc.returncode, tail(err), tail(os.path.join(self.dir, "error.log"))))
            try:
                Http(self.port, timeout=1).close()
                return True
            except OSError:
                return False
        wait_until(ready, timeout, what="nginx on port %d" % self.port)
        return self

    def error_log(self):
        return tail(os.path.join(self.dir, "error.log"), 200)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_nginx(backends, name="nginx", port=None, workers=2):
    """nginx on a free loopback port proxying to backends (host:port strings)."""
    return Nginx(subdir(name), port or free_port(), backends, workers).start()


# ---------------------------------------------------------------------------------------
# cleanup and sanitizer scan (called by the runner after every test)

def tail(path, n=30):
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
        return "\n".join(lines[-n:])
    except OSError:
        return ""


def register_proc(p):
    with _registry_lock:
        _procs.append(p)
    return p


def cleanup():
    """Stops everything the test left running. Returns a list of problems (strings):
    servers that did not stop cleanly."""
    problems = []
    for s in list(_servers):
        if s.running():
            try:
                s.stop()
            except TestFailure as e:
                problems.append("server on port %d at cleanup: %s" % (s.port, e))
        else:
            s._close_files()
            if s.exit_code is None and s.stopped_by is None:
                # it died on its own and the test never looked at how
                s.exit_code = s.proc.returncode
                problems.append("seckill on port %d exited by itself with status %s:\n%s" % (
                    s.port, s.exit_code, s.log_tail()))
    for p in list(_procs):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    for r in list(_redises):
        try:
            r.stop()
        except Exception as e:
            problems.append("redis %d: %r" % (r.port, e))
    return problems


import atexit  # noqa: E402  -- ad-hoc use (python3 -i, scripts): never leave children behind
atexit.register(cleanup)


def scan_sanitizers():
    """(server description, report excerpt) for every server whose output has one."""
    out = []
    for s in list(_servers):
        rep = s.sanitizer_report()
        if rep:
            out.append(("seckill on port %d (%s)" % (s.port, s.stopped_by or "exited"), rep))
    for p in list(_procs):
        path = getattr(p, "stderr_path", None)
        if path:
            try:
                with open(path, "rb") as f:
                    text = f.read().decode("utf-8", "replace")
            except OSError:
                continue
            for m in SANITIZER_MARKERS:
                i = text.find(m)
                if i >= 0:
                    out.append((path, text[max(0, i - 200):i + 6000]))
                    break
    return out


def server_tails(n=40):
    return [("seckill on port %d, %s" % (s.port, s.stderr_path), s.log_tail(n))
            for s in list(_servers)]


def remove_tmp():
    import shutil
    global _tmp_root
    if _tmp_root and os.path.isdir(_tmp_root):
        shutil.rmtree(_tmp_root, ignore_errors=True)
    _tmp_root = None


# ---------------------------------------------------------------------------------------
# decorators read by the runner (tests/run.py reads them from the source with ast)

def run_tool(args, timeout=120):
    """Runs `seckill <args>` (the binary under test, sanitizer env); (rc, stdout, stderr)."""
    argv = [binary()] + [str(a) for a in args]
    log("run: " + " ".join(argv[1:]))
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                       env=san_env(), cwd=tmpdir())
    out = p.stdout.decode("utf-8", "replace")
    err = p.stderr.decode("utf-8", "replace")
    for m in SANITIZER_MARKERS:
        check(m not in err and m not in out, "sanitizer report from seckill %s:\n%s", args[0],
              err[-6000:])
    return p.returncode, out, err


def long_test(fn):
    """Only runs with run.py --long."""
    fn.long_test = True
    return fn


def serial(fn):
    """Runs alone under run.py -j (a whole file: SERIAL = True); for a test that times
    itself against the wall clock."""
    fn.serial = True
    return fn


def timeout(seconds):
    """Per-test timeout for the runner (default 240 s)."""
    def deco(fn):
        fn.timeout = seconds
        return fn
    return deco


def rand_hex(n):
    return "".join(random.choice("0123456789abcdef") for _ in range(n))


def rand_str(n):
    return "".join(random.choice(string.ascii_lowercase) for _ in range(n))


# ---------------------------------------------------------------------------------------
# a concurrent sale

class Rec:
    """One flash-sale request and its outcome."""
    __slots__ = ("user", "status", "j", "error", "t_send", "t_recv", "port")

    def __init__(self, user, port=None):
        self.user = user
        self.port = port
        self.status = None
        self.j = None
        self.error = None
        self.t_send = self.t_recv = None

    @property
    def ok(self):
        return self.status == 200 and self.j is not None and self.j.get("success") is True

    @property
    def msg(self):
        if self.error:
            return "error: " + self.error
        if self.j is None:
            return "HTTP %s (no body)" % self.status
        if self.j.get("success"):
            return "success"
        return self.j.get("errorMsg")

    @property
    def latency(self):
        return (self.t_recv or time.monotonic()) - self.t_send

    def __repr__(self):
        return "Rec(user=%s, status=%s, msg=%r, %.3fs)" % (self.user, self.status, self.msg,
                                                          self.latency)


FINAL_MSGS = (MSG_SOLD_OUT, MSG_DUPLICATE)   # answers after which a buyer stops asking


class RetryingBuyers:
    """Buyers on keep-alive connections (thread tid serves users[tid::nthreads]), each
    asking POST prefix/voucher-order/seckill/vid until a definitive answer (success, sold
    out, duplicate), retrying anything else -- 503s, dropped connections, a dead server or
    Redis -- after `pace` seconds; until `deadline` (time.monotonic(); None: no limit) or
    stop(). Between users a thread waits `pace`, or a random 0..2*user_gap when given (so
    that a fault finds requests in flight). .recs fills while they run (one Rec each)."""

    def __init__(self, port, vid, tokens, nthreads=20, pace=0.03, client_timeout=5.0,
                 users=None, deadline=None, prefix="", user_gap=0.0):
        self.recs = []
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.done_users = 0
        path = prefix + "/voucher-order/seckill/%d" % vid
        users = list(range(len(tokens))) if users is None else list(users)

        def going():
            return not self.stop_ev.is_set() and (deadline is None or time.monotonic() < deadline)

        def run(tid):
            h = Http(port, timeout=client_timeout, connect=False)
            for u in users[tid::nthreads]:
                while going():
                    rec = Rec(u, port)
                    rec.t_send = time.monotonic()
                    try:
                        st, _, body = h.request("POST", path, token=tokens[u])
                        rec.status = st
                        if body:
                            rec.j = json.loads(body)
                            check_envelope(rec.j, "seckill reply")
                    except Exception as e:
                        rec.error = "%s: %s" % (type(e).__name__, e)
                        h.close()
                    rec.t_recv = time.monotonic()
                    with self.lock:
                        self.recs.append(rec)
                    if rec.ok or rec.msg in FINAL_MSGS:
                        with self.lock:
                            self.done_users += 1
                        break
                    self.stop_ev.wait(pace)
                if not going():
                    break
                self.stop_ev.wait(random.uniform(0, 2 * user_gap) if user_gap else pace)
            h.close()
        # daemon: a failing test must not hang on its buyers
        self.threads = [threading.Thread(target=run, args=(i,), daemon=True)
                        for i in range(nthreads)]
        for t in self.threads:
            t.start()

    def snapshot(self):
        with self.lock:
            return list(self.recs)

    def stop(self):
        self.stop_ev.set()
        self.join()

    def join(self, timeout=120):
        for t in self.threads:
            t.join(timeout)
            check(not t.is_alive(), "a buyer thread did not finish")


def run_sale(srv, voucher_id, tokens, attempts=4, nthreads=None, timeout=20.0, users=None,
             ports=None, pace=0.0, prefix=""):
    """Every user (index into tokens) sends `attempts` requests at the same moment, each on
    its own keep-alive connection; threads share the users. With ports, the connections
    of each thread go round-robin to those servers; pace (seconds) spaces each thread's
    users out in time; prefix goes before the path ("/api" through nginx, as the course's
    pages call it). Returns the list of Rec."""
    users = list(range(len(tokens))) if users is None else list(users)
    nthreads = nthreads or max(1, min(len(users), 100))
    path = prefix + "/voucher-order/seckill/%d" % voucher_id
    recs = []
    lock = threading.Lock()
    go = threading.Event()
    ready = threading.Semaphore(0)
    port = srv.port if isinstance(srv, Server) else srv
    ports = list(ports or [port])

    def run(tid):
        conns = [Http(ports[i % len(ports)], timeout=timeout, connect=False)
                 for i in range(attempts)]
        for c in conns:
            try:
                c.connect()
            except OSError:
                pass
        ready.release()
        go.wait()
        mine = []
        for u in users[tid::nthreads]:
            if pace and mine:
                time.sleep(pace)
            data = Http.build("POST", path, token=tokens[u])
            batch = []
            for c in conns:
                rec = Rec(u, c.port)
                rec.t_send = time.monotonic()
                try:
                    c.send_raw(data)
                except OSError as e:
                    rec.error = "send: %r" % e
                    c.close()
                batch.append((c, rec))
            for c, rec in batch:
                if rec.error is None:
                    try:
                        st, hd, body = c.read_response("POST")
                        rec.status = st
                        if body:
                            rec.j = json.loads(body.decode("utf-8"))
                            check_envelope(rec.j, "seckill reply")
                        if hd.get("connection", "").lower() == "close":
                            c.close()
                    except socket.timeout:
                        rec.error = "timeout after %.1fs" % timeout
                        c.close()
                    except (OSError, HttpError, ValueError, TestFailure) as e:
                        rec.error = "%s: %s" % (type(e).__name__, e)
                        c.close()
                rec.t_recv = time.monotonic()
                mine.append(rec)
        for c in conns:
            c.close()
        with lock:
            recs.extend(mine)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(nthreads)]
    for t in ts:
        t.start()
    for _ in ts:
        ready.acquire()
    t0 = time.monotonic()
    go.set()
    for t in ts:
        t.join()
    log("sale of voucher %d: %d requests from %d users in %.2fs" % (
        voucher_id, len(recs), len(users), time.monotonic() - t0))
    return recs


def audit(redis, db_url, voucher_id=None, wait_drain=60):
    """`seckill audit` on this Redis and database: (exit status, output). The audit is
    read-only and exits 1 on any violated invariant."""
    url = redis.url if isinstance(redis, (Redis, RedisCluster)) else redis
    argv = [binary(), "audit", "--redis", url, "--db", db_url, "--wait-drain", str(wait_drain)]
    if voucher_id is not None:
        argv += ["--voucher", str(voucher_id)]
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, env=san_env(), timeout=wait_drain + 120)
    out = p.stdout.decode("utf-8", "replace")
    for m in SANITIZER_MARKERS:
        check(m not in out, "sanitizer report from seckill audit:\n%s", out[-6000:])
    return p.returncode, out


def summarize(recs):
    from collections import Counter
    return dict(Counter(r.msg for r in recs))


def user_ids(redis, tokens):
    """user id of each token (from the course's Redis login hash)."""
    c = redis.client()
    try:
        return [int(c.cmd("HGET", "login:token:" + t, "id")) for t in tokens]
    finally:
        c.close()


def check_sale_consistency(srv, redis, voucher_id, initial_stock, recs, tokens,
                           require_all_answered=True):
    """After drain: the invariants of seckill-anchors 5.2 against SQL and Redis.
    Returns the number of orders."""
    db = srv.db() if isinstance(srv, Server) else srv
    succ = [r for r in recs if r.ok]
    ids = [r.j.get("data") for r in succ]
    check(all(isinstance(i, int) and i > 0 for i in ids), "non-integer order ids: %r",
          [i for i in ids if not isinstance(i, int)][:5])
    check(len(ids) == len(set(ids)), "an order id was answered twice: %r",
          sorted(i for i in set(ids) if ids.count(i) > 1)[:5])
    per_user = {}
    for r in succ:
        per_user.setdefault(r.user, []).append(r.j["data"])
    twice = {u: v for u, v in per_user.items() if len(v) > 1}
    check(not twice, "users answered success more than once: %r", list(twice.items())[:5])
    rows = db.orders(voucher_id)
    sql_ids = [row[0] for row in rows]
    n = len(rows)
    check(n <= initial_stock, "OVERSELL: %d orders for stock %d", n, initial_stock)
    check(len(sql_ids) == len(set(sql_ids)), "duplicate order ids in SQL")
    check(db.per_user_max(voucher_id) <= 1, "a user has %d orders", db.per_user_max(voucher_id))
    missing = set(ids) - set(sql_ids)
    check(not missing, "%d orders answered success are not in SQL, e.g. %r", len(missing),
          sorted(missing)[:5])
    if require_all_answered:
        extra = set(sql_ids) - set(ids)
        check(not extra, "%d SQL orders were never answered success, e.g. %r", len(extra),
              sorted(extra)[:5])
    # the user of each answered order is the user who asked
    if succ:
        uids = user_ids(redis, [tokens[r.user] for r in succ])
        sql_user = dict(rows)
        wrong = [(r.j["data"], uid, sql_user.get(r.j["data"])) for r, uid in zip(succ, uids)
                 if sql_user.get(r.j["data"]) != uid]
        check(not wrong, "orders stored for the wrong user (id, asked by, stored): %r",
              wrong[:5])
    # Redis agrees with SQL
    hv = redis.cmd("HGETALL", k_buyers(voucher_id)) or []
    buyers = {int(k): int(v) for k, v in zip(hv[::2], hv[1::2])}
    sql_buyers = {u: i for i, u in rows}
    eq(buyers, sql_buyers, "Redis buyers hash vs SQL orders (user -> order id)")
    rstock = int(redis.cmd("HGET", k_voucher(voucher_id), "stock"))
    sstock = db.stock(voucher_id)
    check(rstock >= 0, "Redis stock negative: %d", rstock)
    eq(sstock, initial_stock - n, "SQL stock (initial - orders)")
    eq(rstock, sstock, "Redis stock vs SQL stock")
    eq(xpending_count(redis, voucher_id), 0, "XPENDING after drain")
    return n


# ---------------------------------------------------------------------------------------
# signed login tokens (src/auth/token.h), minted here independently of the C code

TOKEN_EPOCH = 1704067200   # 2024-01-01T00:00:00Z


def token_key(data_dir):
    """The key a server with this data dir signs with (<data-dir>/token-key)."""
    with open(os.path.join(data_dir, "token-key"), "rb") as f:
        return f.read().rstrip(b" \t\r\n")


def mint_token(key, user_id, issued=None, nonce=None):
    """A signed token as token.h lays it out: issue minute, user id, second of the minute
    and 10 random bits, 7 MAC bytes."""
    import hashlib
    import hmac
    issued = int(time.time()) if issued is None else int(issued)
    nonce = random.getrandbits(10) if nonce is None else nonce
    age = issued - TOKEN_EPOCH
    body = ((age // 60).to_bytes(3, "big") + user_id.to_bytes(4, "big") +
            ((age % 60) << 10 | nonce).to_bytes(2, "big"))
    return (body + hmac.new(key, body, hashlib.sha256).digest()[:7]).hex()


def parse_token(tok):
    """(issued unix seconds, user id, nonce) of a signed token (the MAC unchecked)."""
    b = bytes.fromhex(tok)
    return (TOKEN_EPOCH + int.from_bytes(b[0:3], "big") * 60 + (b[7] >> 2),
            int.from_bytes(b[3:7], "big"), int.from_bytes(b[7:9], "big") & 0x3FF)


def commandstats(redis):
    """INFO commandstats as {command: calls}."""
    out = {}
    for line in redis.cmd("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            out[name] = int(rest.split(",")[0].split("=")[1])
    return out
