"""test_gate.py -- the bot gate (docs/bot-gate.md, room/pow.h) over HTTP.

The /user/code gate (--code-gate always/sale/off): a code needs a solved
login-scope challenge, a refusal costs no Redis, a solution is used once (replay refused),
a tampered, wrong or foreign challenge is refused, the difficulty rises with the rate of
right solutions, and the pages' solver (web/pow.js, under node) produces solutions the
server accepts.

With the waiting room: the join's challenge verified and its replay refused, the join's
difficulty rising with the join rate, the /user/code gate during a gated sale, and
`seckill bench --waiting-room` end to end.
"""

import hashlib
import json
import os
import shutil
import subprocess

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)   # the gate decides before Redis and SQL: one SQL backend is enough

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
    room_present(srv, h)
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
    room_present(srv, h)
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
    room_present(srv, h)
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
    """A sale through the room with `seckill bench --waiting-room`: every buyer joins, polls
    and buys with its pass; exactly the stock sold, the audit clean; the early joiners'
    admission order uncorrelated with their join order (shuffled at beginTime), the late
    ones' nearly identical (first come, first served); passes at about R; the slow class
    (+50 ms a request) as likely to get a pass as the fast one."""
    r, srv = H.setup(settings=FAST)
    h = srv.http()
    room_present(srv, h)
    out = os.path.join(H.tmpdir(), "room.json")
    key = os.path.join(srv.data_dir, "token-key")
    rc, stdout, stderr = H.run_tool(["bench", "--target", "http://127.0.0.1:%d" % srv.port,
                      "--redis", r.url, "--db", srv.db_url, "--admin-token", srv.admin_token,
                      "--seed-tokens", "--token-key-file", key,
                      "--users", "300", "--stock", "250", "--begin-in", "4",
                      "--waiting-room", "--room-rate", "100", "--room-early", "0.5",
                      "--room-late", "2", "--room-slow-ms", "50", "--conns", "16",
                      "--quiet", "--json", out, "--seed", "7"], timeout=240)
    check(rc == 0, "bench --waiting-room: %s %s", stdout[-1500:], stderr[-500:])
    j = json.load(open(out))["waitingRoom"]
    H.log(json.dumps(j))
    eq(j["bought"], 250, "orders bought with a pass")
    eq(j["audit"], 0, "audit")
    eq(j["passesRefused"], 0, "passes refused")
    check(abs(j["spearmanEarly"]) < 0.35, "early joiners' rank correlation %r (n %d)",
          j["spearmanEarly"], j["earlyAdmitted"])
    # The admission is when the pass becomes valid: a late joiner's join hands out its pass
    # valid from its place's due moment (due within the pass lifetime), so the admission
    # order is the queue's, first come, first served (up to the order in which the bench's
    # concurrent joins reached the service).
    check(j["spearmanLate"] > 0.9, "late joiners' rank correlation %r (n %d)",
          j["spearmanLate"], j["lateAdmitted"])
    check(abs(j["rateShareOfR"] - 1) < 0.25, "admission rate %r against R 100",
          j["admissionRate"])
    e = j["early"]
    check(abs(e["fastPassShare"] - e["fastBuyerShare"]) < 0.2,
          "fast class: %.3f of early buyers but %.3f of their passes", e["fastBuyerShare"],
          e["fastPassShare"])
    H.finish(srv)


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
