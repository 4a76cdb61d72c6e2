"""reliability.py -- the fuzzing, TSan and valgrind stages of tests/run.py.

run.py calls add_args() on its parser and run() after the ordinary tests; every stage
reports through run.py's own PASS/FAIL lines and counts in its closing "N passed, M failed".
Each stage runs only when its option is given (`make check` gives them all; see
tests/reliability.mk and docs/reliability.md):

  --fuzz-dir DIR          each libFuzzer target in DIR (fuzz_*; -j of them at a time), for
                          --fuzz-seconds each (0: only its corpus, once), starting from
                          fuzz/corpus/<target>/ and fuzz/<target>.dict. New inputs go to a
                          scratch corpus (--fuzz-keep DIR keeps them for `make fuzz-merge`).
                          A crash, leak, timeout or OOM fails, and its input is printed
                          (base64) and kept.
  --tsan-bin BIN          the integration tests named by --tsan-test (default: one sale)
                          against the ThreadSanitizer build ...
  --tsan-unit-dir DIR     ... and every unit test binary of its build.
  --valgrind-bin BIN      the --valgrind-test tests (default: one sale) with the server under
                          valgrind memcheck (--leak-check=full); any error or leak in its
                          report fails the test, and the summary is printed.
"""

import base64
import concurrent.futures
import glob
import os
import re
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUZZ_MAX_LEN = {"fuzz_http": 16384}
DEFAULT_SALE = "test_sale.py::test_sale_sells_out_exactly"
# Unit binaries left out of the TSan stage, and why. rlock_test_process asserts wall-clock
# latencies (a lost-lock callback within lease/3 + 50 ms of a SIGSTOP) that TSan's 5-15x
# slowdown breaks; the watchdog thread it times is raced-checked by rlock_test_basic/multi.
TSAN_UNIT_SKIP = ("unit/rlock_test_process",)
TSAN_OPTIONS = ("halt_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=" +
                os.path.join(ROOT, "tests", "tsan.supp"))


def add_args(ap):
    g = ap.add_argument_group("reliability stages")
    g.add_argument("--fuzz-dir", help="run the libFuzzer targets in this directory")
    g.add_argument("--fuzz-seconds", type=int, default=20, help="per target (0: corpus only)")
    g.add_argument("--fuzz-target", action="append", default=[],
                   help="only these targets (default: every fuzz_* in --fuzz-dir)")
    g.add_argument("--fuzz-keep", help="keep the new inputs in DIR/<target> (make fuzz-merge)")
    g.add_argument("--tsan-bin", help="ThreadSanitizer build of seckill")
    g.add_argument("--tsan-unit-dir", help="ThreadSanitizer unit test binaries")
    g.add_argument("--tsan-test", action="append", default=[],
                   help="integration tests to run under TSan (default: %s)" % DEFAULT_SALE)
    g.add_argument("--valgrind-bin", help="-O1 build of seckill to run under valgrind")
    g.add_argument("--valgrind-test", action="append", default=[],
                   help="integration tests to run under valgrind (default: %s)" % DEFAULT_SALE)


def wanted(args):
    return bool(args.fuzz_dir or args.tsan_bin or args.tsan_unit_dir or args.valgrind_bin)


def run(args, tmp, results, rp):
    """rp: the run.py module (its run_group, report, discover_*, run_units, run_its)."""
    if args.fuzz_dir:
        with rp.stage("fuzz"):
            run_fuzz(args, tmp, results, rp)
    if args.tsan_unit_dir or args.tsan_bin:
        with rp.stage("tsan"):
            run_tsan(args, tmp, results, rp)
    if args.valgrind_bin:
        with rp.stage("valgrind"):
            run_valgrind(args, tmp, results, rp)


def run_tsan(args, tmp, results, rp):
    """The unit tests and the --tsan-test tests against the ThreadSanitizer build."""
    env = {"TSAN_OPTIONS": os.environ.get("TSAN_OPTIONS", TSAN_OPTIONS)}
    if args.tsan_unit_dir:
        units = [u for u in rp.discover_unit(args.tsan_unit_dir)
                 if u["name"] not in TSAN_UNIT_SKIP]
        if not units:
            rp.report(results, "tsan/unit", False, 0, "", "no unit binaries in %s" %
                      args.tsan_unit_dir)
        rp.run_units(units, tmp, results, prefix="tsan/", extra_env=env,
                     jobs=getattr(args, "jobs", 1))
    if args.tsan_bin:
        run_named_its(args, tmp, results, rp, args.tsan_test or [DEFAULT_SALE], "tsan/",
                      os.path.abspath(args.tsan_bin), env)


def run_named_its(args, tmp, results, rp, names, prefix, bin_path, env):
    tests = [dict(t, db=t.get("db", "sqlite")) for t in rp.discover_it() if t["name"] in names]
    missing = set(names) - {t["name"] for t in tests}
    for m in sorted(missing):
        rp.report(results, prefix + m, False, 0, "", "no such test")
    rp.run_its(tests, args, tmp, results, prefix=prefix, bin_path=bin_path, extra_env=env)


# ---------------------------------------------------------------------------------------
# fuzzing

STAT_RE = re.compile(r"^stat::(\w+):\s+(\d+)", re.M)
COV_RE = re.compile(r"cov: (\d+) ft: (\d+) corp: (\d+)/")
# What says why a fuzz target failed, in libFuzzer's output: a sanitizer's or libFuzzer's
# ERROR line, UBSan's "runtime error", a leak's origin, the harness's own message before
# its abort() ("fuzz_http: ...", "fuzz: ..."), a timeout's ALARM and the SUMMARY; each is
# followed by up to REPORT_FRAMES frames of its stack.
REPORT_RE = re.compile(r"ERROR: \w+Sanitizer|ERROR: libFuzzer|runtime error:|^SUMMARY: |"
                       r"^(Direct|Indirect) leak of|^fuzz(_\w+)?: |ALARM: working on")
FRAME_RE = re.compile(r"^\s+#\d+ ")
REPORT_FRAMES = 6
REPORT_MAX = 30
INPUT_MAX = 16384   # fuzz_http's -max_len: the whole input, so it can be reproduced


def fuzz_report(text):
    """The lines of libFuzzer's output that say what went wrong, in order."""
    out, frames = [], None
    for line in text.splitlines():
        if REPORT_RE.search(line):
            out.append(line.rstrip())
            frames = 0
        elif frames is not None and frames < REPORT_FRAMES and FRAME_RE.match(line):
            out.append(line.rstrip())
            frames += 1
        if len(out) >= REPORT_MAX:
            break
    return out


def fuzz_cause(report):
    """One line for the FAIL line: the first report line that names the fault (not
    libFuzzer's "deadly signal", which only says that something aborted)."""
    heads = [l for l in report if not FRAME_RE.match(l)]
    for l in heads:
        if "deadly signal" not in l and not l.startswith("SUMMARY: libFuzzer"):
            return re.sub(r"^==\d+==\s*", "", l)[:200]
    return heads[0][:200] if heads else ""


def fuzz_failure_text(output, crashes, reproduce, tail_lines):
    """A failed fuzz run's text, made to survive a log cut after its first lines: what
    went wrong first, then each input (base64) and how to reproduce it, then only as
    much of libFuzzer's progress output as fits in tail_lines."""
    head = ["what went wrong:"] + ["  " + l for l in fuzz_report(output) or ["(no report)"]]
    for c in crashes[:3]:
        with open(c, "rb") as f:
            data = f.read()
        head.append("input %s (%d bytes%s), base64:" % (
            c, len(data), ", first %d" % INPUT_MAX if len(data) > INPUT_MAX else ""))
        head.append("  " + base64.b64encode(data[:INPUT_MAX]).decode())
    head += reproduce.splitlines()
    lines = output.splitlines()
    keep = max(10, tail_lines - len(head) - 1)
    head.append("libFuzzer's output%s:" % (
        ", its last %d lines" % keep if len(lines) > keep else ""))
    return "\n".join(head + lines[-keep:])


def fuzz_targets(args):
    names = []
    for fn in sorted(os.listdir(args.fuzz_dir)):
        p = os.path.join(args.fuzz_dir, fn)
        if fn.startswith("fuzz_") and "." not in fn and os.access(p, os.X_OK):
            names.append(fn)
    if args.fuzz_target:
        names = [n for n in names if n in args.fuzz_target]
    return names


def run_fuzz(args, tmp, results, rp):
    """Each target for --fuzz-seconds, --jobs of them at a time (each libFuzzer process is
    one thread: two on two cores each get a core for their seconds)."""
    names = fuzz_targets(args)
    if not names:
        rp.report(results, "fuzz", False, 0, "", "no fuzz targets in %s (make fuzz-build)" %
                  args.fuzz_dir)
        return
    jobs = max(1, getattr(args, "jobs", 1))
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for f in [pool.submit(fuzz_one, args, tmp, results, rp, n) for n in names]:
            f.result()


def fuzz_one(args, tmp, results, rp, name):
    """One target's run, reported as fuzz/<name>."""
    seeds = os.path.join(ROOT, "fuzz", "corpus", name)
    os.makedirs(seeds, exist_ok=True)
    if args.fuzz_keep:
        scratch = os.path.join(os.path.abspath(args.fuzz_keep), name)
    else:
        scratch = os.path.join(tmp, "fuzz-new", name)
    os.makedirs(scratch, exist_ok=True)
    art = os.path.join(tmp, "fuzz-artifacts", name)
    os.makedirs(art, exist_ok=True)
    argv = [os.path.abspath(os.path.join(args.fuzz_dir, name)),
            "-timeout=10", "-rss_limit_mb=2048", "-print_final_stats=1",
            "-max_len=%d" % FUZZ_MAX_LEN.get(name, 4096),
            "-artifact_prefix=" + art + "/"]
    d = os.path.join(ROOT, "fuzz", name + ".dict")
    if os.path.exists(d):
        argv.append("-dict=" + d)
    if args.fuzz_seconds > 0:
        argv += ["-max_total_time=%d" % args.fuzz_seconds, scratch, seeds]
    else:
        argv += ["-runs=0", seeds]
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:allocator_may_return_null=1")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    out_path = os.path.join(tmp, "fuzz_" + name + ".out")
    rc, secs = rp.run_group(argv, args.fuzz_seconds + 300, env, ROOT, out_path)
    text = rp.read_text(out_path)
    st = dict((k, int(v)) for k, v in STAT_RE.findall(text))
    cov = COV_RE.findall(text)
    nseeds = len(os.listdir(seeds))
    nnew = len(os.listdir(scratch)) if args.fuzz_seconds > 0 else 0
    summary = "%d runs, %d/s, cov %s ft %s, corpus %d + %d new" % (
        st.get("number_of_executed_units", 0), st.get("average_exec_per_sec", 0),
        cov[-1][0] if cov else "?", cov[-1][1] if cov else "?", nseeds, nnew)
    why = None
    if rc is None:
        why = "timed out"
    elif rc != 0:
        crashes = sorted(glob.glob(os.path.join(art, "*")))
        why = "libFuzzer exit %d (%s)" % (rc, ", ".join(os.path.basename(c)
                                                      for c in crashes) or "no artifact")
        cause = fuzz_cause(fuzz_report(text))
        if cause:
            why += ": " + cause
        reproduce = ("Reproduce: %s %s\nOnce fixed, add the input to %s/ as a "
                     "regression case." % (argv[0], crashes[0] if crashes else "<input>",
                                           os.path.relpath(seeds, ROOT)))
        text = fuzz_failure_text(text, crashes, reproduce,
                                 getattr(rp, "TAIL_LINES", 60))
    with rp.report_lock:   # the summary right under its PASS line
        rp.report(results, "fuzz/" + name, why is None, secs, text, why)
        if why is None:
            print("     %s: %s" % (name, summary), flush=True)


# ---------------------------------------------------------------------------------------
# valgrind

VG_SUMMARY_RE = re.compile(r"ERROR SUMMARY: (\d+) errors")


def run_valgrind(args, tmp, results, rp):
    if not shutil.which("valgrind"):
        rp.report(results, "valgrind", False, 0, "", "valgrind is not installed "
                  "(sh tools/deps.sh test)")
        return
    logdir = os.path.join(tmp, "valgrind")
    os.makedirs(logdir, exist_ok=True)
    env = {"VALGRIND_SECKILL_BIN": os.path.abspath(args.valgrind_bin),
           "VALGRIND_LOG_DIR": logdir}
    wrapper = os.path.join(ROOT, "tests", "valgrind-seckill.sh")
    names = args.valgrind_test or [DEFAULT_SALE]
    before = len(results)
    run_named_its(args, tmp, results, rp, names, "valgrind/", wrapper, env)
    # The reports: the test already failed on a non-zero exit (--error-exitcode); here
    # the figures are printed and a report with errors fails the stage even if not.
    logs = sorted(glob.glob(os.path.join(logdir, "*.log")))
    errors, lines = 0, []
    for lg in logs:
        text = rp.read_text(lg)
        m = VG_SUMMARY_RE.findall(text)
        errors += sum(int(x) for x in m)
        for l in text.splitlines():
            if any(k in l for k in ("ERROR SUMMARY", "definitely lost", "indirectly lost",
                                    "possibly lost", "in use at exit", "All heap blocks")):
                lines.append(l.split("== ", 1)[-1].strip())
    ok = bool(logs) and errors == 0 and all(r[1] for r in results[before:])
    why = None if ok else ("no valgrind report" if not logs else "%d valgrind errors" % errors)
    text = "\n".join(rp.read_text(lg) for lg in logs) if not ok else ""
    rp.report(results, "valgrind/report", ok, 0, text, why)
    for l in lines:
        print("     " + l, flush=True)
