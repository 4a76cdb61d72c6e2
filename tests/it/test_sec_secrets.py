"""test_sec_secrets.py -- secret files and the data dir (security review round 2).

M5: every secret file -- the data dir's token-key and admin-token, --token-key-file,
--admin-token-file, a --config holding a token -- is refused at start, exit 1 with the
file and the reason, unless it is a regular file (not a symlink) of ours (or root's), with
no access for others, holding a key of some variety; the data dir's database and private
Redis files with group/other bits are made private (logged).
M6: the data dir's path is resolved once: a symlink swapped in it after start-up's check
does not move the server's key, token or database.
L6: a voucher created off shelf, expired or of type 0 is not published and does not sell.
L7: `seckill lab` gives its servers the Redis URL and the admin token outside their argv.
"""

import os
import shutil
import signal
import subprocess

import harness as H
from harness import check, eq

ME_PATH = "/voucher-order/of/me"     # a login path that needs only the user id
GOOD_KEY = b"a well-mixed signing key 0123456789\n"


def _write(path, data, mode):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    os.chmod(path, mode)
    return path


def _refused(argv, what, cwd):
    """Runs serve, which must exit 1 at start; returns its output."""
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, env=H.san_env(), cwd=cwd, timeout=90)
    text = p.stdout.decode("utf-8", "replace")
    for m in H.SANITIZER_MARKERS:
        check(m not in text, "%s: sanitizer report:\n%s", what, text)
    eq(p.returncode, 1, "%s: exit status (output: %s)" % (what, text[-1500:]))
    return text


def _serve(data_dir, redis_url, extra=()):
    d = H.subdir("db")
    return [H.binary(), "serve", "--listen", "127.0.0.1:%d" % H.free_port(), "--threads", "1",
            "--redis", redis_url, "--db", H.db_url_for(os.path.join(d, "seckill.db")),
            "--data-dir", data_dir, "--rate-ip-login", "0"] + list(extra)


def _fresh_dir(name):
    d = os.path.join(H.subdir("dd"), name)
    os.mkdir(d, 0o700)
    return d


def test_unsafe_secret_files_refused_at_start():
    """A token key 0644 / 0666 / a symlink / of one repeated byte in the data dir, a 0644
    --token-key-file, --admin-token-file, a 0644 --config holding the admin token, and a
    low-variety admin token: each is refused at start with the file and the reason."""
    r = H.start_redis()
    cwd = H.subdir("cwd")
    adm = "adm-" + H.rand_hex(24)
    cases = []
    for mode in (0o644, 0o666, 0o640):
        d = _fresh_dir("key-%o" % mode)
        _write(os.path.join(d, "token-key"), GOOD_KEY, mode)
        cases.append(("data-dir token-key mode %o" % mode, d, [],
                      [os.path.join(d, "token-key"), "refused",
                       "by others" if mode & 0o7 else "by its group"]))
    d = _fresh_dir("key-link")
    target = _write(os.path.join(H.subdir("elsewhere"), "planted"), GOOD_KEY, 0o600)
    os.symlink(target, os.path.join(d, "token-key"))
    cases.append(("data-dir token-key symlink", d, [], ["token-key", "symlink"]))
    d = _fresh_dir("key-flat")
    _write(os.path.join(d, "token-key"), b"A" * 16 + b"\n", 0o600)
    cases.append(("16 identical bytes", d, [], ["token-key", "variety"]))
    d = _fresh_dir("key-file")
    kf = _write(os.path.join(H.subdir("keys"), "k644"), GOOD_KEY, 0o644)
    cases.append(("--token-key-file 0644", d, ["--token-key-file", kf],
                  ["token key file " + kf, "by others"]))
    af = _write(os.path.join(H.subdir("keys"), "admin644"), adm + "\n", 0o644)
    cases.append(("--admin-token-file 0644", _fresh_dir("adm-file"),
                  ["--admin-token-file", af], ["--admin-token-file " + af, "by others"]))
    cf = _write(os.path.join(H.subdir("keys"), "conf644"), "admin-token = %s\n" % adm, 0o644)
    cases.append(("--config 0644 with the admin token", _fresh_dir("conf"),
                  ["--config", cf], ["config file " + cf, "by others"]))
    cases.append(("an admin token of one repeated character", _fresh_dir("adm-flat"),
                  ["--admin-token", "x" * 24], ["admin token", "variety"]))
    for what, d, extra, want in cases:
        text = _refused(_serve(d, r.url, extra), what, cwd)
        for w in want:
            check(w in text, "%s: %r not in the refusal:\n%s", what, w, text[-1500:])
        check(adm not in text, "%s: the admin token is in the output", what)
    # The same files made private are accepted: a key file, the admin token file and a
    # config holding the token (0640 root:<our group> is the package's way).
    os.chmod(kf, 0o600)
    os.chmod(af, 0o600)
    os.chmod(cf, 0o640 if os.geteuid() == 0 else 0o600)
    d = _fresh_dir("ok")
    port = H.free_port()
    argv = _serve(d, r.url, ["--token-key-file", kf, "--config", cf])
    argv[argv.index("--listen") + 1] = "127.0.0.1:%d" % port
    srv = H.Server(argv, d, port, adm, None, None,
                   db_url=argv[argv.index("--db") + 1]).start()
    H.create_seckill(srv, stock=1)                         # the admin token from --config
    srv.stop()
    check(not os.path.exists(os.path.join(d, "token-key")), "a data-dir key was made")


def test_data_dir_files_made_private_or_refused():
    """A data dir from a build without umask 077: its 0644 database, a 0755 redis/ and a
    0644 file in it are made private at start (logged); a symlinked database and a key
    file of another user are refused."""
    prefix_uid = os.geteuid()
    r = H.start_redis()
    d = _fresh_dir("old")
    db = os.path.join(d, "seckill.db")
    _write(db, b"", 0o644)                        # an empty file is an empty SQLite db
    os.mkdir(os.path.join(d, "redis"), 0o755)
    os.chmod(os.path.join(d, "redis"), 0o755)
    _write(os.path.join(d, "redis", "redis.log"), b"old log\n", 0o644)
    port = H.free_port()
    argv = [H.binary(), "serve", "--listen", "127.0.0.1:%d" % port, "--threads", "1",
            "--redis", r.url, "--db", "sqlite:" + db, "--data-dir", d, "--rate-ip-login", "0"]
    if H.DB_KIND != "sqlite":
        argv[argv.index("--db") + 1] = H.db_url_for(db)
    srv = H.Server(argv, d, port, "", db, None, db_url=argv[argv.index("--db") + 1]).start()
    modes = {rel: os.stat(os.path.join(d, rel)).st_mode & 0o7777
             for rel in ("seckill.db", "redis", "redis/redis.log")}
    srv.stop()
    eq(modes, {"seckill.db": 0o600, "redis": 0o700, "redis/redis.log": 0o600}, "modes")
    text = srv.stderr_text()
    check("seckill.db had mode 0644" in text and "made 0600" in text,
          "the fix is not in the log:\n%s", text[-2000:])
    # a symlinked database would put the data wherever it points
    d = _fresh_dir("dblink")
    os.symlink(_write(os.path.join(H.subdir("elsewhere"), "x.db"), b"", 0o600),
               os.path.join(d, "seckill.db"))
    text = _refused(_serve(d, r.url), "symlinked seckill.db", H.subdir("cwd"))
    check("seckill.db is a symlink" in text, "reason:\n%s", text[-1500:])
    # a key of another user in our data dir (run as nobody when we are root)
    if prefix_uid == 0:
        import pwd
        pw = pwd.getpwnam("nobody")
        base = H.subdir("foreign-key")
        os.chmod(base, 0o755)
        d = os.path.join(base, "d")
        os.mkdir(d, 0o700)
        os.chown(d, pw.pw_uid, pw.pw_gid)
        _write(os.path.join(d, "token-key"), GOOD_KEY, 0o644)   # root's, readable by nobody
        stop = os.path.realpath("/tmp")
        p = os.path.realpath(base)
        while p not in (stop, "/") and p.startswith(stop + os.sep):
            os.chmod(p, os.stat(p).st_mode & 0o7777 | 0o111)
            p = os.path.dirname(p)
        prefix = ["setpriv", "--reuid=%d" % pw.pw_uid, "--regid=%d" % pw.pw_gid,
                  "--clear-groups", "--"]
        argv = _serve(d, r.url)
        argv[argv.index("--db") + 1] = "sqlite:" + os.path.join(d, "seckill.db")
        text = _refused(prefix + argv, "root's token-key in nobody's dir", base)
        check("token-key" in text and "owned by uid 0" in text, "reason:\n%s", text[-1500:])


def test_data_dir_path_swapped_after_the_check():
    """--data-dir reached through a symlink (base/link -> A) that is switched to B, where
    a key and a token are planted, after start-up's check: the switch is made by the
    private redis-server's start (a wrapper given as --redis-server-bin), i.e. after the
    data dir was checked and before the key, the admin token and the database are opened.
    The server keeps using A: its key, token and database are in A, and a token signed
    with B's planted key is refused."""
    base = H.subdir("swap")
    a, b = os.path.join(base, "A"), os.path.join(base, "B")
    os.makedirs(os.path.join(a, "var"), 0o700)
    os.makedirs(os.path.join(b, "var"), 0o700)
    planted = b"planted signing key 0123456789abcdef"
    _write(os.path.join(b, "var", "token-key"), planted + b"\n", 0o600)
    _write(os.path.join(b, "var", "admin-token"), "planted-admin-token-0123456789\n", 0o600)
    link = os.path.join(base, "link")
    os.symlink(a, link)
    real = shutil.which("redis-server") or H.REDIS_SERVER
    wrapper = os.path.join(base, "redis-wrapper.sh")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nln -s %s %s.new && mv -T %s.new %s\nexec %s \"$@\"\n"
                % (b, link, link, link, real))
    os.chmod(wrapper, 0o755)
    port = H.free_port()
    argv = [H.binary(), "serve", "--listen", "127.0.0.1:%d" % port, "--threads", "1",
            "--data-dir", os.path.join(link, "var"), "--redis-server-bin", wrapper,
            "--rate-ip-login", "0"]
    srv = H.Server(argv, base, port, "", None, None).start()
    try:
        eq(os.readlink(link), b, "the link after start (the wrapper ran)")
        for name in ("token-key", "admin-token", "seckill.db"):
            check(os.path.exists(os.path.join(a, "var", name)), "%s not in A", name)
        check(not os.path.exists(os.path.join(b, "var", "seckill.db")),
              "the database was written through the swapped link")
        with open(os.path.join(a, "var", "token-key"), "rb") as f:
            key = f.read().strip()
        h = srv.http()

        def local():
            return all(h.request("GET", ME_PATH, token=H.mint_token(key, 999999))[0] == 200
                       for _ in range(8))
        H.wait_until(local, 20, what="tokens signed with A's key accepted")
        st, _, _ = h.request("GET", ME_PATH, token=H.mint_token(planted, 1010))
        eq(st, 401, "a token signed with the planted key")
        with open(os.path.join(a, "var", "admin-token")) as f:
            srv.admin_token = f.read().strip()
        H.create_seckill(srv, stock=1, http=h)               # A's admin token
    finally:
        srv.stop()


def test_off_shelf_expired_and_normal_vouchers_do_not_sell():
    """POST /voucher/seckill with status 2 (off shelf), 3 (expired) or type 0: saved, not
    published (no Redis hash), not rebuilt from SQL, and a grab answers 优惠券不存在 and
    writes no order; a status 1, type 1 voucher beside them sells."""
    r, srv = H.setup()
    h = srv.http()
    made = {}
    for what, kw in (("off shelf", {"status": 2}), ("expired", {"status": 3}),
                     ("type 0", {"type": 0}), ("on sale", {})):
        body = H.seckill_body(stock=5, **kw)
        st, j = h.api("POST", "/voucher/seckill", body, admin=srv.admin_token)
        check(st == 200 and j["success"], "create %s: %r %r", what, st, j)
        made[what] = j["data"]
    tok = H.login(srv, r, "13100000777", h)
    for what, vid in made.items():
        st, j = H.seckill(srv, tok, vid, h)
        if what == "on sale":
            check(st == 200 and j["success"], "%s: %r %r", what, st, j)
            continue
        check(st == 200 and not j["success"] and j["errorMsg"] == "优惠券不存在",
              "%s sold or wrong answer: %r %r", what, st, j)
    # the rebuild from SQL (what the grab's poke and the periodic pass run) leaves them
    # out of Redis too
    rest = []
    for vid in (made["off shelf"], made["expired"], made["type 0"]):
        rest += ["--voucher", vid]
    # (the grabs above poked the server's own rebuild of the three: while it holds a
    # voucher's rebuild lock the tool answers "another instance is rebuilding it now")
    last = {}

    def rebuilt_none():
        last["run"] = H.run_tool(["redis", "rebuild", "--redis", r.url, "--db", srv.db_url]
                                 + rest)
        rc, _, err = last["run"]
        return rc == 1 and err.count("not on sale") == 3
    try:
        H.wait_until(rebuilt_none, 15, 0.2, "redis rebuild to call the three not on sale")
    except H.TestFailure:
        rc, out, err = last["run"]
        raise H.TestFailure("redis rebuild: exit %d\n%s%s" % (rc, out, err))
    for what, vid in made.items():
        eq(r.cmd("EXISTS", H.k_voucher(vid)), 0 if what != "on sale" else 1,
           "%s: Redis hash exists" % what)
        st, j = H.seckill(srv, tok, vid, h)
        check(not j["success"], "%s: second grab sold: %r", what, j)
    eq(H.wait_drained(srv, r, made["on sale"], 60), 1, "orders of the voucher on sale")
    db = srv.db()
    for what in ("off shelf", "expired", "type 0"):
        eq(db.order_count(made[what]), 0, "%s: orders" % what)
    H.finish(srv)


def _children(pid):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    out.append((int(p), f.read().split(b"\0")))
        except (OSError, ValueError, IndexError):
            pass
    return out


@H.timeout(300)
def test_lab_servers_get_no_secrets_in_argv():
    """`seckill lab --redis redis://:PASSWORD@...`: the `seckill serve` processes it starts
    have neither the password nor the admin token in /proc/PID/cmdline (they get them
    through their environment, readable by their user only)."""
    import test_security as TS
    pw = "labpw" + H.rand_hex(12)
    red = TS.AuthRedis(H.free_port(), H.subdir("redis-auth"), pw).start()
    d = H.subdir("lab")
    argv = [H.binary(), "lab", "--dir", os.path.join(d, "run"), "--redis", red.url,
            "--steps", "stream", "--stock", 5, "--users", 10, "--rate", 20, "--pause-ms", 300,
            "--lease-ms", 100]
    p = subprocess.Popen([str(a) for a in argv], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=H.san_env(),
                         cwd=d)
    seen = []
    try:
        def serve_child():
            check(p.poll() is None, "lab exited %s before a server was seen", p.returncode)
            seen.extend(c for c in _children(p.pid) if len(c[1]) > 1 and c[1][1] == b"serve")
            return bool(seen)
        H.wait_until(serve_child, 120, interval=0.02, what="a `seckill serve` of the lab")
        pid, cmd = seen[0]
        text = b" ".join(cmd).decode("utf-8", "replace")
        check(pw not in text and "--admin-token" not in text and "--redis" not in text,
              "secrets in a lab server's argv: %s", text)
        with open("/proc/%d/environ" % pid, "rb") as f:
            env = f.read().split(b"\0")
        check(any(e.startswith(b"SECKILL_REDIS=") and pw.encode() in e for e in env),
              "the lab server has no SECKILL_REDIS in its environment")
        check(any(e.startswith(b"SECKILL_ADMIN_TOKEN=") for e in env),
              "the lab server has no SECKILL_ADMIN_TOKEN in its environment")
        out, _ = p.communicate(timeout=240)
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            p.wait(60)
    text = out.decode("utf-8", "replace")
    eq(p.returncode, 0, "lab exit (output: %s)" % text[-3000:])
    for m in H.SANITIZER_MARKERS:
        check(m not in text, "sanitizer report:\n%s", text)


def test_deb_postinst_makes_the_config_private():
    """The package's postinst (configure) makes /etc/seckill/seckill.conf root:seckill
    0640: the file may hold the admin token. Run on a scratch root through DPKG_ROOT, with
    `getent` saying the user exists (no user is made on this host) and `chown` recording
    its arguments (this host has no group seckill); chmod and dpkg-statoverride are real."""
    root = H.subdir("debroot")
    os.makedirs(os.path.join(root, "etc", "seckill"))
    conf = _write(os.path.join(root, "etc", "seckill", "seckill.conf"), "listen = x\n", 0o644)
    shims = H.subdir("shims")
    log = os.path.join(shims, "chown.log")
    for name, body in (("getent", "exit 0"), ("chown", 'echo "$@" >> %s' % log)):
        with open(os.path.join(shims, name), "w") as f:
            f.write("#!/bin/sh\n%s\n" % body)
        os.chmod(os.path.join(shims, name), 0o755)
    env = dict(os.environ, DPKG_ROOT=root, PATH=shims + ":" + os.environ["PATH"])
    p = subprocess.run(["sh", os.path.join(H.ROOT, "deploy", "deb", "postinst"), "configure"],
                       env=env, capture_output=True, text=True, timeout=60)
    eq(p.returncode, 0, "postinst exit (%s%s)" % (p.stdout, p.stderr))
    eq(os.stat(conf).st_mode & 0o7777, 0o640, "seckill.conf mode")
    with open(log) as f:
        eq(f.read().split(), ["root:seckill", conf], "chown arguments")
