"""test_gate.py -- the bot gate (docs/bot-gate.md, room/pow.h) over HTTP.

Runs now: the /user/code gate (--code-gate always/sale/off): a code needs a solved
login-scope challenge, a refusal costs no Redis, a solution is used once (replay refused),
a tampered, wrong or foreign challenge is refused, the difficulty rises with the rate of
right solutions, and the pages' solver (web/pow.js, under node) produces solutions the
server accepts.

`seckill bench --waiting-room`'s driver and figures run now against a reference room: a
small Python server in this file that follows the contract (shuffle at beginTime, first
come first served after it, passes at R per second). It stands in for the room's endpoints
only; Redis and SQL take no part in that test.

With the waiting room: the join's challenge verified and its replay refused, the join's
difficulty rising with the join rate, the /user/code gate during a gated sale, and
`seckill bench --waiting-room` end to end.
"""

import hashlib
import http.server
import json
import os
import random
import re
import shutil
import subprocess
import threading
import time

import harness as H
from harness import check, eq

GATE_MSG = "请先完成验证"
FAST = {"pow_min_bits": 8, "pow_max_bits": 8}        # solvable in Python in ~1 ms
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def zero_bits(digest):
    bits = 0
    for b in digest:
        if b == 0:
            bits += 8
            continue
        return bits + 8 - b.bit_length()
    return bits


def solve(challenge, difficulty, start=0):
    """The smallest decimal s >= start with SHA-256(challenge ":" s) >= difficulty zero
    bits."""
    prefix = hashlib.sha256((challenge + ":").encode())
    i = start
    while True:
        h = prefix.copy()
        h.update(str(i).encode())
        if zero_bits(h.digest()) >= difficulty:
            return str(i)
        i += 1


def wrong(challenge, difficulty):
    """A decimal s whose hash falls short of difficulty."""
    i = 0
    while zero_bits(hashlib.sha256(("%s:%d" % (challenge, i)).encode()).digest()) >= difficulty:
        i += 1
    return str(i)


def code_challenge(h):
    st, j = h.api("GET", "/user/code/challenge")
    check(st == 200 and j and j["success"], "GET /user/code/challenge: %r %r", st, j)
    return j["data"]["challenge"], j["data"]["difficulty"]


def ask_code(h, phone, challenge=None, solution=None):
    q = "/user/code?phone=" + phone
    if challenge is not None:
        q += "&challenge=" + challenge
    if solution is not None:
        q += "&solution=" + solution
    return h.api("POST", q)


def refused(st, j):
    return st == 200 and j and not j["success"] and j.get("errorMsg") == GATE_MSG and \
        j.get("code") == "CHALLENGE_REQUIRED"


# ---------------------------------------------------------------------------------------
# the /user/code gate: runs now

def test_code_gate_always():
    """--code-gate always: /user/code without a solved challenge is refused with no Redis
    command; with one the code is sent and its challenge stored once in {0}'s slot; the
    same challenge again, a wrong solution, a tampered challenge are refused; login works."""
    r, srv = H.setup(settings=dict(FAST, code_gate="always"))
    h = srv.http()
    phone = H.phone_for(1, "139")
    sets = H.commandstats(r).get("set", 0)
    for args in ((None, None), ("v1.0.0.1.8.x.y", "1"), ("", "")):
        st, j = ask_code(h, phone, *args)
        check(refused(st, j), "no solved challenge %r: %r %r", args, st, j)
    ch, d = code_challenge(h)
    eq(d, 8, "difficulty at a quiet rate")
    check(ch.startswith("v1.0.0."), "login-scope challenge: %r", ch)
    st, j = ask_code(h, phone, ch, wrong(ch, d))
    check(refused(st, j), "wrong solution: %r %r", st, j)
    mac = ch.rsplit(".", 1)[1]
    tampered = ch[:-1] + ("0" if ch[-1] != "0" else "1")
    st, j = ask_code(h, phone, tampered, solve(tampered, d))
    check(refused(st, j), "tampered MAC: %r %r", st, j)
    # the replay set is written only for a right solution: no SET for any refusal
    eq(H.commandstats(r).get("set", 0), sets, "SET commands of the refusals")
    check(r.cmd("EXISTS", "login:code:" + phone) == 0, "a refused request sent a code")

    sol = solve(ch, d)
    st, j = ask_code(h, phone, ch, sol)
    check(st == 200 and j["success"], "solved: %r %r", st, j)
    check(r.cmd("EXISTS", "login:code:" + phone) == 1, "no code after a solved challenge")
    key = "seckill:pow:{0}:" + mac
    ttl = r.cmd("PTTL", key)
    check(0 < ttl <= 121000, "replay key %s PTTL %r", key, ttl)
    st, j = ask_code(h, H.phone_for(2, "139"), ch, sol)
    check(refused(st, j), "replayed challenge: %r %r", st, j)
    # another solution of the same challenge is the same challenge used again
    st, j = ask_code(h, H.phone_for(3, "139"), ch, solve(ch, d, int(sol) + 1))
    check(refused(st, j), "another solution of a used challenge: %r %r", st, j)
    code = r.cmd("GET", "login:code:" + phone)
    st, j = h.api("POST", "/user/login", {"phone": phone, "code": code})
    check(st == 200 and j["success"], "login after a gated code: %r %r", st, j)
    H.finish(srv)


def test_code_gate_off_and_sale_without_gated_sale():
    """Off (the default) and `sale` with no gated sale on: the course's login as before."""
    for gate in (None, "sale"):
        r, srv = H.setup(settings={"code_gate": gate} if gate else None)
        h = srv.http()
        tok = H.login(srv, r, H.phone_for(7, "139"), h)
        check(len(tok) == 32, "login with code_gate=%s", gate)
        ch, d = code_challenge(h)   # served either way; nothing asks for it
        eq(d, 16, "default difficulty")
        H.finish(srv)
        r.stop()


def test_code_gate_difficulty_rises_with_rate():
    """--pow-rate 1: a burst of right solutions raises the next challenge's difficulty by a
    bit per doubling of the rate over 1/s, up to --pow-max-bits; wrong ones do not count."""
    r, srv = H.setup(settings={"code_gate": "always", "pow_min_bits": 8, "pow_max_bits": 12,
                               "pow_rate": 1})
    h = srv.http()
    for i in range(10):
        st, j = ask_code(h, H.phone_for(100 + i, "139"), "v1.0.0.9.8.aa.bb", "1")
        check(refused(st, j), "garbage: %r", j)
    eq(code_challenge(h)[1], 8, "difficulty after wrong answers only")
    ch, d = code_challenge(h)
    sol = solve(ch, d)
    st, j = ask_code(h, H.phone_for(99, "139"), ch, sol)
    check(st == 200 and j["success"], "first use: %r %r", st, j)
    for i in range(20):
        st, j = ask_code(h, H.phone_for(200 + i, "139"), ch, sol)
        check(refused(st, j), "replay %d: %r", i, j)
    eq(code_challenge(h)[1], 8, "difficulty after one use and 20 replays")
    seen = []
    for i in range(30):
        ch, d = code_challenge(h)
        seen.append(d)
        st, j = ask_code(h, H.phone_for(i, "139"), ch, solve(ch, d))
        check(st == 200 and j["success"], "solved code %d: %r %r", i, st, j)
    last = code_challenge(h)[1]
    H.log("difficulties: %r, then %d" % (seen, last))
    check(seen == sorted(seen), "difficulty fell during a burst: %r", seen)
    check(last >= 11, "30 right solutions in a burst left the difficulty at %d", last)
    check(last <= 12, "difficulty %d above --pow-max-bits", last)
    H.finish(srv)


def test_js_solver_accepted():
    """web/pow.js (Web Crypto, under node) solves a served challenge; the server takes it."""
    node = shutil.which("node")
    check(node is not None, "node is needed for the pages' solver test")
    r, srv = H.setup(settings={"code_gate": "always", "pow_min_bits": 12, "pow_max_bits": 12})
    h = srv.http()
    ch, d = code_challenge(h)
    script = ("const {solve}=require(%s);solve(%s,%d).then(s=>console.log(s))" %
              (json.dumps(os.path.join(REPO, "web", "pow.js")), json.dumps(ch), d))
    out = subprocess.run([node, "-e", script], capture_output=True, text=True, timeout=120)
    check(out.returncode == 0, "node: %s", out.stderr[-500:])
    sol = out.stdout.strip()
    eq(sol, solve(ch, d), "the JS solver's answer (the smallest) against Python's")
    st, j = ask_code(h, H.phone_for(1, "139"), ch, sol)
    check(st == 200 and j["success"], "JS solution: %r %r", st, j)
    H.finish(srv)


# ---------------------------------------------------------------------------------------
# the waiting room's bot gate

def room_present(srv, h):
    st, _, _ = h.request("GET", "/seckill/challenge/1")
    check(st != 404, "GET /seckill/challenge/1 answers 404: no waiting room")
    return True


def gated_voucher(srv, h, stock=100, begin=None, end=None, rate=1000):
    return H.create_seckill(srv, stock=stock, begin=begin, end=end, http=h,
                            waitingRoom={"admitPerSecond": rate, "passTtlS": 60,
                                         "botGate": True})


def room_challenge(h, tok, vid):
    st, j = h.api("GET", "/seckill/challenge/%d" % vid, token=tok)
    check(st == 200 and j and j["success"], "challenge: %r %r", st, j)
    return j["data"]["challenge"], j["data"]["difficulty"]


def join(h, tok, vid, ch=None, sol=None):
    body = {} if ch is None else {"challenge": ch, "solution": sol}
    return h.api("POST", "/seckill/queue/%d" % vid, body, token=tok)


def test_room_join_challenge_and_replay():
    r, srv = H.setup(settings=FAST)
    h = srv.http()
    if not room_present(srv, h):
        return
    vid = gated_voucher(srv, h)
    a, b = H.login(srv, r, H.phone_for(1), h), H.login(srv, r, H.phone_for(2), h)
    st, j = join(h, a, vid)
    check(refused(st, j), "join without a solution: %r %r", st, j)
    ch, d = room_challenge(h, a, vid)
    check(ch.startswith("v1."), "challenge %r", ch)
    st, j = join(h, a, vid, ch, wrong(ch, d))
    check(refused(st, j), "wrong solution: %r %r", st, j)
    st, j = join(h, b, vid, ch, solve(ch, d))
    check(refused(st, j), "another user's challenge: %r %r", st, j)
    sol = solve(ch, d)
    st, j = join(h, a, vid, ch, sol)
    check(st == 200 and j["success"] and j["data"]["state"] in ("waiting", "admitted"),
          "solved join: %r %r", st, j)
    check(r.cmd("EXISTS", "seckill:pow:{%d}:%s" % (vid, ch.rsplit(".", 1)[1])) == 1,
          "the used challenge is not in the voucher's slot")
    st, j = join(h, a, vid, ch, sol)
    check(refused(st, j), "replayed join: %r %r", st, j)
    H.finish(srv)


def test_room_difficulty_rises_with_join_rate():
    r, srv = H.setup(settings={"pow_min_bits": 8, "pow_max_bits": 12, "pow_rate": 1})
    h = srv.http()
    if not room_present(srv, h):
        return
    vid = gated_voucher(srv, h, stock=1000)
    toks = H.login_many(srv, r, 30)
    first = room_challenge(h, toks[0], vid)[1]
    eq(first, 8, "difficulty at a quiet rate")
    for t in toks:
        ch, d = room_challenge(h, t, vid)
        st, j = join(h, t, vid, ch, solve(ch, d))
        check(st == 200 and j["success"], "join: %r %r", st, j)
    last = room_challenge(h, toks[0], vid)[1]
    check(11 <= last <= 12, "difficulty after 30 joins in a burst: %d", last)
    H.finish(srv)


def test_code_gate_during_gated_sale():
    r, srv = H.setup(settings=dict(FAST, code_gate="sale"))
    h = srv.http()
    if not room_present(srv, h):
        return
    tok = H.login(srv, r, H.phone_for(1), h)   # before any gated sale: no challenge
    check(len(tok) == 32, "login before the sale")
    gated_voucher(srv, h)
    st, j = ask_code(h, H.phone_for(2))
    check(refused(st, j), "/user/code during a gated sale without a solution: %r %r", st, j)
    ch, d = code_challenge(h)
    st, j = ask_code(h, H.phone_for(2), ch, solve(ch, d))
    check(st == 200 and j["success"], "solved: %r %r", st, j)
    H.finish(srv)


def test_bench_waiting_room():
    """A small sale through the room with `seckill bench --waiting-room`: the stock sold
    exactly, the audit clean, early joiners shuffled, late ones first come first served."""
    r, srv = H.setup(settings=FAST)
    h = srv.http()
    if not room_present(srv, h):
        return
    out = os.path.join(H.tmpdir(), "room.json")
    key = os.path.join(srv.data_dir, "token-key")
    rc, stdout, stderr = H.run_tool(["bench", "--target", "http://127.0.0.1:%d" % srv.port,
                      "--redis", r.url, "--db", srv.db_url, "--admin-token", srv.admin_token,
                      "--seed-tokens", "--token-key-file", key,
                      "--users", "400", "--stock", "100", "--begin-in", "4",
                      "--waiting-room", "--room-rate", "50", "--room-early", "0.5",
                      "--room-late", "2", "--room-slow-ms", "50", "--conns", "16",
                      "--quiet", "--json", out, "--seed", "7"], timeout=240)
    check(rc == 0, "bench --waiting-room: %s %s", stdout[-1500:], stderr[-500:])
    j = json.load(open(out))["waitingRoom"]
    H.log(json.dumps(j))
    eq(j["bought"], 100, "orders bought with a pass")
    eq(j["audit"], 0, "audit")
    eq(j["passesRefused"], 0, "passes refused")
    check(abs(j["spearmanEarly"]) < 0.35, "early joiners not shuffled: %r", j["spearmanEarly"])
    H.finish(srv)


# ---------------------------------------------------------------------------------------
# bench --waiting-room's driver against a reference room (runs now)

class RefRoom:
    """The contract's room, in memory: joins before beginTime are shuffled at beginTime,
    later ones are served in order; the k-th pass is issued at beginTime + k / R."""

    def __init__(self, rate, ttl_s, stock, gate_bits=0):
        self.rate, self.ttl_s, self.stock, self.gate_bits = rate, ttl_s, stock, gate_bits
        self.used = set()                          # challenges used (the replay set)
        self.lock = threading.Lock()
        self.begin = None
        self.early, self.queue, self.shuffled = [], [], False
        self.joined, self.passes = set(), {}      # user -> (pass, issued_ms)
        self.sold, self.orders = 0, 0

    def _advance(self, now):
        if self.begin is None or now < self.begin:
            return
        if not self.shuffled:
            random.Random(5).shuffle(self.early)
            self.queue = self.early + self.queue
            self.shuffled = True
        due = int((now - self.begin) * self.rate) + 1
        while len(self.passes) < min(due, len(self.passes) + len(self.queue)) and \
                len(self.passes) < self.stock:
            user = self.queue.pop(0)
            issued = int(self.begin * 1000 + len(self.passes) * 1000 / self.rate)
            self.passes[user] = ("p" + hashlib.sha256(user.encode()).hexdigest()[:20], issued)

    def state(self, user, now):
        self._advance(now)
        if user in self.passes:
            p, issued = self.passes[user]
            return {"state": "admitted", "position": 0, "waitS": 0, "pollAfterMs": 0,
                    "pass": p, "passExpiresAt": issued + self.ttl_s * 1000}
        if len(self.passes) >= self.stock:
            return {"state": "soldOut", "position": 0, "waitS": 0, "pollAfterMs": 0}
        if user not in self.joined:
            return {"state": "notQueued", "position": 0, "waitS": 0, "pollAfterMs": 0}
        pos = self.queue.index(user) + 1 if user in self.queue else len(self.early)
        return {"state": "waiting", "position": pos, "waitS": pos / self.rate,
                "pollAfterMs": 100}

    def challenge(self, user):
        return {"challenge": "v1.%s.77.%d" % (user[-6:], len(self.used)),
                "difficulty": self.gate_bits}

    def join(self, user, now, body):
        if self.gate_bits:
            ch, sol = body.get("challenge", ""), body.get("solution", "")
            digest = hashlib.sha256(("%s:%s" % (ch, sol)).encode()).digest()
            if not ch.startswith("v1.%s." % user[-6:]) or ch in self.used or \
                    zero_bits(digest) < self.gate_bits:
                return None
            self.used.add(ch)
        if user not in self.joined:
            self.joined.add(user)
            (self.queue if self.shuffled or now >= (self.begin or 0) and self.begin
             else self.early).append(user)
        return self.state(user, now)

    def buy(self, user, given):
        p = self.passes.get(user)
        if not p or p[0] != given:
            return {"success": False, "errorMsg": "请先排队", "code": "QUEUE_REQUIRED"}
        if self.sold >= self.stock:
            return {"success": False, "errorMsg": "库存不足", "code": "SOLD_OUT"}
        self.sold += 1
        return {"success": True, "data": 1000 + self.sold}


def ref_server(room):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, obj, status=200):
            body = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json;charset=UTF-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def body(self):
            n = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(n) or b"{}")

        def do_POST(self):
            user, now = self.headers.get("authorization", ""), time.time()
            if self.path == "/voucher/seckill":
                b = self.body()
                with room.lock:
                    room.begin = time.mktime(time.strptime(b["beginTime"],
                                                           "%Y-%m-%dT%H:%M:%S"))
                    room.rate = b["waitingRoom"]["admitPerSecond"]
                    room.stock = b["stock"]
                return self.reply({"success": True, "data": 77})
            body = self.body()
            with room.lock:
                if re.match(r"^/seckill/queue/77$", self.path):
                    st = room.join(user, now, body)
                    if st is None:
                        return self.reply({"success": False, "errorMsg": GATE_MSG,
                                           "code": "CHALLENGE_REQUIRED"})
                    return self.reply({"success": True, "data": st})
                if self.path == "/voucher-order/seckill/77":
                    return self.reply(room.buy(user, self.headers.get("x-seckill-pass")))
            self.reply({"success": False, "errorMsg": "Not Found"}, 404)

        def do_GET(self):
            user, now = self.headers.get("authorization", ""), time.time()
            with room.lock:
                if self.path == "/seckill/queue/77":
                    return self.reply({"success": True, "data": room.state(user, now)})
                if self.path == "/seckill/challenge/77" and room.gate_bits:
                    return self.reply({"success": True, "data": room.challenge(user)})
            self.reply({"success": False, "errorMsg": "Not Found"}, 404)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def run_ref_bench(stock, early, users=300, gate_bits=0):
    """bench --waiting-room against a fresh reference room: (its JSON, the room)."""
    room = RefRoom(rate=100, ttl_s=60, stock=stock, gate_bits=gate_bits)
    srv = ref_server(room)
    try:
        toks = os.path.join(H.tmpdir(), "tokens.txt")
        with open(toks, "w") as f:
            for i in range(users):
                f.write("%032x\n" % (i + 1))
        out = os.path.join(H.tmpdir(), "room.json")
        rc, stdout, stderr = H.run_tool(
            ["bench", "--target", "http://127.0.0.1:%d" % srv.server_address[1],
             "--admin-token", "x" * 20, "--tokens", toks, "--stock", str(stock),
             "--begin-in", "3", "--waiting-room", "--room-rate", "100", "--room-early",
             str(early), "--room-late", "2", "--room-slow-ms", "50", "--conns", "16",
             "--threads", "2", "--no-audit", "--quiet", "--json", out, "--seed", "11"] +
            (["--room-bot-gate"] if gate_bits else []), timeout=120)
        H.log(stdout)
        check(rc == 0, "bench --waiting-room: rc %d %s %s", rc, stdout[-1500:], stderr[-800:])
        with open(out) as f:
            return json.load(f)["waitingRoom"], room
    finally:
        srv.shutdown()


def test_bench_room_driver_reference_room():
    """bench --waiting-room against the reference room: every buyer joins, polls and buys;
    the figures are the room's: early joiners' order ~uncorrelated with admission, late
    ones' ~1, passes at R, exactly the stock sold; and with more early buyers than stock,
    the slow class (+50 ms a request) wins its share of passes."""
    j, room = run_ref_bench(stock=250, early=0.5)
    eq(j["buyers"], 300, "buyers")
    eq(j["joined"], 300, "joined")
    eq(j["bought"], 250, "bought: exactly the stock")
    eq(room.sold, 250, "the room's sales")
    eq(j["soldOut"], 50, "told sold out")
    eq(j["passesRefused"], 0, "passes refused")
    check(abs(j["spearmanEarly"]) < 0.3, "early joiners' rank correlation %r (n %d)",
          j["spearmanEarly"], j["earlyAdmitted"])
    check(j["spearmanLate"] > 0.9, "late joiners' rank correlation %r (n %d)",
          j["spearmanLate"], j["lateAdmitted"])
    check(abs(j["rateShareOfR"] - 1) < 0.05, "admission rate %r against R 100",
          j["admissionRate"])

    j, room = run_ref_bench(stock=100, early=1.0)
    eq(j["bought"], 100, "bought: exactly the stock")
    eq(j["earlyAdmitted"], 100, "early joiners admitted")
    e = j["early"]
    eq(e["fastBuyers"] + e["slowBuyers"], 300, "early buyers")
    check(abs(e["fastPassShare"] - e["fastBuyerShare"]) < 0.15,
          "fast class: %.3f of early buyers but %.3f of their passes", e["fastBuyerShare"],
          e["fastPassShare"])

    # with the bot gate: every join fetches a challenge and solves it (12 bits) first
    j, room = run_ref_bench(stock=50, early=0.5, users=100, gate_bits=12)
    eq(j["requests"]["challenge"], 100, "challenges fetched")
    eq(j["joined"], 100, "joined after solving")
    eq(len(room.used), 100, "solutions the room took")
    eq(j["bought"], 50, "bought")
    check(j["solveHashes"] >= 100 * 1024, "hashes solved: %d", j["solveHashes"])


def test_gate_flags_checked():
    """A bad --code-gate or --pow-min-bits above --pow-max-bits stops the start with a reason."""
    cases = ((["--code-gate", "maybe"], "code-gate"),
             (["--pow-min-bits", "21", "--pow-max-bits", "20"], "pow-min-bits"),
             (["--pow-max-bits", "33"], "pow-max-bits"))
    for i, (args, why) in enumerate(cases):
        rc, out, err = H.run_tool(["serve", "--data-dir", H.subdir("d%d" % i)] + args,
                                  timeout=30)
        eq(rc, 2, "exit status of serve %s" % " ".join(args))
        check(why in err, "serve %s: %r", " ".join(args), err[-300:])
