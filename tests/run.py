#!/usr/bin/env python3
"""run.py -- the test runner behind `make check` (Python 3 standard library only).

    python3 tests/run.py --bin build/san/seckill --unit-dir build/san/tests [-k PATTERN]... [--long]
                         [--db sqlite|mysql|both] [-j N] [--durations N]

1. Unit tests: every executable in --unit-dir (cmocka), each with REDIS_URL pointing at a
   redis-server this runner starts for them (the lock library's tests need one), and, when
   MariaDB is part of the run, MYSQL_URL (mysql://user:pass@127.0.0.1:port/unit).
2. Integration tests: every function test_* in tests/it/test_*.py, each in its own child
   process (its own process group, so a timeout kills everything it started), with a
   timeout. After the test the child stops every server the test left running (SIGTERM,
   exit code checked) and scans each server's stderr for ASan/UBSan/LSan reports; any
   report fails the test.

--db picks the SQL backend of the integration tests: sqlite (default), mysql, or both (the
whole suite once per backend; `make check` runs both). With mysql, the runner starts ONE
private mariadbd for the run (mariadb-install-db into a temp datadir, a free loopback port,
a user with a password) and each test gets its own database t_<n> (harness.db_url_for).
Tests of the MariaDB pass are named `file::test[mysql]`. A test file may declare
`DB_BACKENDS = ("sqlite",)` (or ("mysql",)) at module level to run on those only; the
other pass lists it as skipped.

-j N runs N integration tests at a time (N unit binaries, each lane with its own
redis-server; N fuzz targets). Tests of a file that sets `SERIAL = True`, and tests
decorated with @harness.serial, run alone after the others: those that time themselves
against the wall clock or read host-wide state. `make check` passes -j 2. docs/testing.md.

3. (tests/reliability.py) With --fuzz-dir, --tsan-bin/--tsan-unit-dir and
   --valgrind-bin: each libFuzzer target for a bounded time (`fuzz/<target>`), the unit
   tests and one sale against the TSan build (`tsan/...`), one sale with the server under
   valgrind (`valgrind/...`). `make check` passes all three.

Prints `PASS name (1.2s)` / `FAIL name (1.2s)` with the captured output's tail, then each
stage's wall time, the --durations N slowest tests, and ends with exactly `N passed,
M failed` (plus `, K skipped`). Exit status 1 on any failure.

-k PATTERN selects tests whose name (e.g. `test_api.py::test_login_new_user`, `unit/test_sb`)
contains PATTERN, or matches it as a glob when it has * ? or [. Tests decorated with
@harness.long_test run only with --long. --list prints the selection and exits.
"""

import argparse
import ast
import contextlib
import concurrent.futures
import fnmatch
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reliability  # noqa: E402  -- tests/reliability.py: fuzz, TSan, valgrind stages

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IT_DIR = os.path.join(ROOT, "tests", "it")
DEFAULT_TIMEOUT = 240
UNIT_TIMEOUT = 300
TAIL_LINES = 60

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "LeakSanitizer",
                     "WARNING: ThreadSanitizer",
                     "ERROR: ThreadSanitizer", "SUMMARY: UndefinedBehaviorSanitizer")


# ---------------------------------------------------------------------------------------
# discovery

def _deco_info(dec):
    """('long', None) / ('serial', None) / ('timeout', N) / None for one decorator node."""
    name = None
    node = dec.func if isinstance(dec, ast.Call) else dec
    if isinstance(node, ast.Attribute):
        name = node.attr
    elif isinstance(node, ast.Name):
        name = node.id
    if name == "long_test":
        return ("long", None)
    if name == "serial":
        return ("serial", None)
    if name == "timeout" and isinstance(dec, ast.Call) and dec.args:
        a = dec.args[0]
        if isinstance(a, ast.Constant) and isinstance(a.value, (int, float)):
            return ("timeout", a.value)
    return None


def _module_const(tree, name, default):
    """The literal value of the module-level `name = ...`, or default."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and
                isinstance(node.targets[0], ast.Name) and node.targets[0].id == name):
            return ast.literal_eval(node.value)
    return default


def _db_backends(tree):
    """The module's DB_BACKENDS = ("sqlite", ...) if it sets one, else both."""
    v = _module_const(tree, "DB_BACKENDS", ("sqlite", "mysql"))
    return tuple([v] if isinstance(v, str) else v)


def discover_it():
    tests = []
    for fn in sorted(os.listdir(IT_DIR)):
        if not (fn.startswith("test_") and fn.endswith(".py")):
            continue
        path = os.path.join(IT_DIR, fn)
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        backends = _db_backends(tree)
        serial = bool(_module_const(tree, "SERIAL", False))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                t = {"name": "%s::%s" % (fn, node.name), "file": path, "func": node.name,
                     "long": False, "timeout": DEFAULT_TIMEOUT, "backends": backends,
                     "serial": serial}
                for d in node.decorator_list:
                    info = _deco_info(d)
                    if info and info[0] == "long":
                        t["long"] = True
                    elif info and info[0] == "serial":
                        t["serial"] = True
                    elif info and info[0] == "timeout":
                        t["timeout"] = info[1]
                tests.append(t)
    return tests


def discover_unit(unit_dir):
    if not unit_dir or not os.path.isdir(unit_dir):
        return []
    out = []
    for fn in sorted(os.listdir(unit_dir)):
        p = os.path.join(unit_dir, fn)
        if os.path.isfile(p) and os.access(p, os.X_OK) and not fn.endswith((".d", ".o")):
            out.append({"name": "unit/" + fn, "path": p})
    return out


def selected(name, patterns):
    if not patterns:
        return True
    for p in patterns:
        if any(c in p for c in "*?["):
            if fnmatch.fnmatch(name, p) or fnmatch.fnmatch(name, "*" + p + "*"):
                return True
        elif p in name:
            return True
    return False


# ---------------------------------------------------------------------------------------
# running

def tail_of(text, n=TAIL_LINES):
    lines = text.splitlines()
    if len(lines) > n:
        return "    ... (%d lines before)\n" % (len(lines) - n) + "\n".join(
            "    " + l for l in lines[-n:])
    return "\n".join("    " + l for l in lines)


_groups = set()          # process groups of the children running now (-j: several)
_groups_lock = threading.Lock()


def kill_running():
    """SIGKILL to every child's group still running (an interrupted run leaves none)."""
    with _groups_lock:
        pids = list(_groups)
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def run_group(argv, timeout, env, cwd, out_path):
    """Runs argv in its own session; on timeout kills the whole process group.
    Returns (returncode or None on timeout, seconds)."""
    t0 = time.monotonic()
    with open(out_path, "wb") as out:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             env=env, cwd=cwd, start_new_session=True)
        with _groups_lock:
            _groups.add(p.pid)
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
            rc = None
        # anything the test left behind in its group (it should have cleaned up)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        with _groups_lock:
            _groups.discard(p.pid)
    return rc, time.monotonic() - t0


_stages = []   # (name, wall seconds) of each stage of the run, in order


@contextlib.contextmanager
def stage(name):
    """Times one stage of the run (unit, integration, fuzz ...) for the closing summary."""
    t0 = time.monotonic()
    try:
        yield
    finally:
        _stages.append((name, time.monotonic() - t0))


def print_times(results, n):
    """The closing summary: each stage's wall time, then the n slowest tests."""
    if _stages:
        print("stage times: " + ", ".join("%s %.0fs" % st for st in _stages), flush=True)
    if n > 0 and results:
        print("slowest %d:" % min(n, len(results)))
        for name, _, secs in sorted(results, key=lambda r: -r[2])[:n]:
            print("  %7.1fs  %s" % (secs, name))


def read_text(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


# Unit binaries that run alone even under -j: rlock_test_process asserts wall-clock
# latencies (a lost-lock callback within lease/3 + 50 ms of a SIGSTOP). The others wait on
# leases and Redis, and pass under TSan's 5-15x slowdown (tests/reliability.py).
UNIT_ALONE = ("unit/rlock_test_process",)


def run_units(units, tmp, results, maria=None, prefix="", extra_env=None, jobs=1):
    """Runs each unit binary, jobs at a time (UNIT_ALONE's alone, after the others). Each
    lane has its own redis-server (REDIS_URL), flushed between binaries."""
    if not units:
        return
    sys.path.insert(0, IT_DIR)
    import harness
    os.environ["SECKILL_TEST_TMP"] = tmp
    harness.tmpdir()   # made once, before the lanes' threads start redis-servers in it
    env = harness.san_env()
    env.pop("MYSQL_URL", None)
    if maria:
        env["MYSQL_URL"] = maria.url("unit")
    env.update(extra_env or {})   # reliability.py: TSAN_OPTIONS
    todo_lock = threading.Lock()

    def lane(name, todo):
        redis = None
        try:
            redis = harness.start_redis(name)
        except Exception as e:
            print("WARN could not start redis-server for unit tests: %s" % e, flush=True)
        lenv = dict(env)
        if redis:
            lenv["REDIS_URL"] = redis.url
        while True:
            with todo_lock:
                if not todo:
                    return
                u = todo.pop(0)
            out_path = os.path.join(tmp, (prefix + u["name"]).replace("/", "_") + ".out")
            rc, secs = run_group([u["path"]], UNIT_TIMEOUT, lenv, ROOT, out_path)
            text = read_text(out_path)
            why = None
            if rc is None:
                why = "timed out after %ds" % UNIT_TIMEOUT
            elif rc != 0:
                why = "exit status %d" % rc
            else:
                for m in SANITIZER_MARKERS:
                    if m in text:
                        why = "sanitizer report (%s)" % m
                        break
            report(results, prefix + u["name"], why is None, secs, text, why)
            if redis:   # each binary starts from an empty Redis
                try:
                    redis.cmd("FLUSHALL")
                except Exception:
                    redis.stop()
                    name += "b"
                    redis = harness.start_redis(name)
                    lenv["REDIS_URL"] = redis.url

    jobs = max(1, jobs)
    shared = [u for u in units if jobs > 1 and u["name"] not in UNIT_ALONE]
    alone = [u for u in units if not (jobs > 1 and u["name"] not in UNIT_ALONE)]
    try:
        if shared:
            threads = [threading.Thread(target=lane, args=("unit-redis-%d" % i, shared))
                       for i in range(jobs)]
            for th in threads:
                th.start()
            try:
                for th in threads:
                    th.join()
            except BaseException:   # e.g. ^C: the lanes take nothing more
                with todo_lock:
                    del shared[:]
                kill_running()
                raise
        if alone:
            lane("unit-redis", alone)
    finally:
        harness.cleanup()


report_lock = threading.RLock()   # -j: one test's lines stay together


def report(results, name, ok, secs, text, why=None):
    """Appends (name, ok, seconds) to results and prints the PASS/FAIL line."""
    with report_lock:
        results.append((name, ok, secs))
        if ok:
            print("PASS %s (%.1fs)" % (name, secs), flush=True)
        else:
            print("FAIL %s (%.1fs)%s" % (name, secs, (": " + why) if why else ""),
                  flush=True)
            if text.strip():
                print(tail_of(text), flush=True)


def run_its(tests, args, tmp, results, maria=None, prefix="", bin_path=None,
            extra_env=None):
    """Runs tests, --jobs of them at a time; those of SERIAL files alone, after the others.
    prefix, bin_path, extra_env: the TSan and valgrind stages of reliability.py run
    tests again against another binary, under names starting with prefix."""
    bin_path = bin_path or args.bin
    env = dict(os.environ)
    env["SECKILL_BIN"] = os.path.abspath(bin_path)
    env.update(extra_env or {})
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    if args.keep:
        env["SECKILL_KEEP_TMP"] = "1"
    if maria:
        env["SECKILL_TEST_MYSQL"] = maria.base_url
    else:
        env.pop("SECKILL_TEST_MYSQL", None)

    def one(seq, t):
        # seq names the test's own MariaDB database (harness.db_url_for): unique per test
        tenv = dict(env, SECKILL_TEST_DB=t["db"], SECKILL_TEST_SEQ=str(seq))
        safe = t["name"].replace("/", "_").replace(":", "_").replace("[", "_").replace("]", "")
        out_path = os.path.join(tmp, prefix.replace("/", "_") + safe + ".out")
        res_path = out_path + ".json"
        argv = [sys.executable, os.path.abspath(__file__), "--child", t["name"],
                "--bin", bin_path, "--result", res_path, "--child-timeout",
                str(t["timeout"])]
        rc, secs = run_group(argv, t["timeout"] + 60, tenv, ROOT, out_path)
        text = read_text(out_path)
        why = None
        if rc is None:
            why = "timed out after %ds (killed)" % (t["timeout"] + 60)
        else:
            try:
                with open(res_path) as f:
                    res = json.load(f)
                if not res.get("ok"):
                    why = res.get("why") or "failed"
            except (OSError, ValueError):
                why = "child exited %s without a result" % rc
            if why is None and rc != 0:
                why = "child exit status %d" % rc
        report(results, prefix + t["name"], why is None, secs, text, why)

    numbered = list(enumerate(tests, 1))
    jobs = max(1, getattr(args, "jobs", 1))
    shared = [(n, t) for n, t in numbered if jobs > 1 and not t.get("serial")]
    alone = [(n, t) for n, t in numbered if jobs == 1 or t.get("serial")]
    if shared:
        pool = concurrent.futures.ThreadPoolExecutor(jobs)
        try:
            for f in [pool.submit(one, n, t) for n, t in shared]:
                f.result()
        except BaseException:   # e.g. ^C: no test of this run outlives it
            pool.shutdown(wait=False, cancel_futures=True)
            kill_running()
            raise
        pool.shutdown()
    for n, t in alone:
        one(n, t)


# ---------------------------------------------------------------------------------------
# child: one integration test in this process

def child_main(args):
    name = args.child
    fname, func = name.split("[")[0].split("::")
    sys.path.insert(0, IT_DIR)
    os.environ["SECKILL_BIN"] = os.path.abspath(args.bin)
    import harness
    ok, why = True, None
    t0 = time.monotonic()

    def on_alarm(signum, frame):
        raise harness.TestFailure("test timed out after %ss" % args.child_timeout)
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(max(1, int(args.child_timeout)))
    try:
        spec = importlib.util.spec_from_file_location(fname[:-3], os.path.join(IT_DIR, fname))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        getattr(mod, func)()
    except BaseException as e:   # noqa: B036 -- report everything, including timeouts
        ok = False
        why = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        traceback.print_exc()
    finally:
        signal.alarm(0)
    signal.alarm(60)   # cleanup itself must not hang
    try:
        problems = harness.cleanup()
    except BaseException as e:   # noqa: B036
        problems = ["cleanup failed: %r" % e]
    signal.alarm(0)
    if problems:
        for p in problems:
            print("CLEANUP: " + p)
        if ok:
            ok, why = False, problems[0].splitlines()[0]
    sans = harness.scan_sanitizers()
    for who, rep in sans:
        print("SANITIZER REPORT from %s:\n%s" % (who, rep))
    if sans and ok:
        ok, why = False, "sanitizer report from " + sans[0][0]
    if not ok:
        for who, text in harness.server_tails():
            print("---- log tail of %s\n%s" % (who, text))
        if harness._tmp_root:
            print("temp dir kept: %s" % harness._tmp_root)
    elif not os.environ.get("SECKILL_KEEP_TMP"):
        harness.remove_tmp()
    with open(args.result, "w") as f:
        json.dump({"ok": ok, "why": why, "seconds": time.monotonic() - t0}, f)
    sys.stdout.flush()
    return 0 if ok else 1


def start_run_mariadb(tmp):
    """The run's one mariadbd (tests/it/harness.py MariaDB), outside any test's registry."""
    sys.path.insert(0, IT_DIR)
    import harness
    t0 = time.monotonic()
    m = harness.MariaDB(os.path.join(tmp, "mariadb"), register=False).start()
    print("mariadbd for this run: %s (datadir %s, %.1fs)" % (
        m.base_url.split("@")[-1], m.datadir, time.monotonic() - t0), flush=True)
    return m


# ---------------------------------------------------------------------------------------

def main():
    sys.dont_write_bytecode = True
    ap = argparse.ArgumentParser(description="seckill unit + integration test runner")
    ap.add_argument("--bin", default="build/san/seckill")
    ap.add_argument("--unit-dir", default=None)
    ap.add_argument("-k", dest="patterns", action="append", default=[])
    ap.add_argument("--long", action="store_true", help="also run @long_test tests")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep temp dirs of passing tests")
    ap.add_argument("--no-unit", action="store_true")
    ap.add_argument("--no-it", action="store_true")
    ap.add_argument("--db", choices=("sqlite", "mysql", "both"), default="sqlite",
                    help="SQL backend(s) of the integration tests (default sqlite)")
    ap.add_argument("-j", "--jobs", type=int, default=1,
                    help="integration tests, unit binaries and fuzz targets run N at a "
                         "time; SERIAL files and @serial tests still run alone (default 1)")
    ap.add_argument("--durations", type=int, default=0, metavar="N",
                    help="end with the N slowest tests (stage times are always printed)")
    reliability.add_args(ap)   # --fuzz-dir, --tsan-bin, --valgrind-bin ...
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--child-timeout", type=float, default=DEFAULT_TIMEOUT,
                    help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        return child_main(args)

    dbs = ["sqlite", "mysql"] if args.db == "both" else [args.db]
    units = [] if args.no_unit else [u for u in discover_unit(args.unit_dir)
                                     if selected(u["name"], args.patterns)]
    its, skipped = [], []
    for db in dbs:
        for t in ([] if args.no_it else discover_it()):
            t = dict(t, db=db)
            if db != "sqlite":
                t["name"] += "[%s]" % db
            if not selected(t["name"], args.patterns):
                continue
            if db not in t["backends"]:
                t["why"] = "%s only" % "/".join(t["backends"])
                skipped.append(t)
            elif t["long"] and not args.long:
                t["why"] = "needs --long"
                skipped.append(t)
            else:
                its.append(t)
    if args.list:
        for u in units:
            print(u["name"])
        for t in its:
            print("%s (timeout %ss%s)" % (t["name"], t["timeout"],
                                          ", alone under -j" if t.get("serial") else ""))
        for t in skipped:
            print("%s (skipped: %s)" % (t["name"], t["why"]))
        return 0

    if args.unit_dir and not os.path.isdir(args.unit_dir) and not args.no_unit:
        print("WARN unit dir %s does not exist: no unit tests run" % args.unit_dir, flush=True)
    if its and not os.path.exists(args.bin):
        print("WARN %s does not exist: integration tests will fail" % args.bin, flush=True)
    print("running %d unit and %d integration tests (%d skipped)" % (
        len(units), len(its), len(skipped)), flush=True)

    t0 = time.monotonic()
    results = []
    tmp = tempfile.mkdtemp(prefix="seckill-run-")
    maria = None
    try:
        if "mysql" in dbs and (its or units):
            with stage("mariadbd"):
                maria = start_run_mariadb(tmp)
        if units:
            with stage("unit"):
                run_units(units, tmp, results, maria, jobs=args.jobs)
        if its:
            with stage("integration (-j %d)" % args.jobs):
                run_its(its, args, tmp, results, maria)
        if reliability.wanted(args):
            reliability.run(args, tmp, results, sys.modules[__name__])
    except KeyboardInterrupt:
        kill_running()
        print("interrupted", flush=True)
        results.append(("interrupted", False, 0.0))
    except Exception as e:   # e.g. mariadbd would not start: nothing ran, say so
        print("FAIL run setup: %s: %s" % (type(e).__name__, e), flush=True)
        results.append(("run setup", False, 0.0))
    finally:
        if maria:
            maria.stop()
    for t in skipped:
        print("SKIP %s (%s)" % (t["name"], t["why"]))
    passed = sum(1 for r in results if r[1])
    failed = len(results) - passed
    print_times(results, args.durations)
    if failed:
        print("failed: " + ", ".join(r[0] for r in results if not r[1]))
    print("total time %.1fs; outputs in %s" % (time.monotonic() - t0, tmp))
    line = "%d passed, %d failed" % (passed, failed)
    if skipped:
        line += ", %d skipped" % len(skipped)
    print(line, flush=True)
    if not failed and not args.keep:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
