"""test_fuzz_finds.py -- what the CI's fuzz stage (tests/reliability.py run_fuzz) prints when
a target fails: the fault first, then the input and how to reproduce it, then only the end of
libFuzzer's progress output. A CI log cut a few lines after the FAIL line must still say
what crashed and hold the input (a fuzz_http crash once reached the lead as a FAIL line and
a screen of "#126742 REDUCE ..." lines, the report and the input lost).

The target here is a stand-in script in a temporary --fuzz-dir that prints what libFuzzer
prints for a crash (thousands of progress lines, then the sanitizer's report) and writes
the crash artifact; run_fuzz runs it exactly as it runs build/fuzz/fuzz/fuzz_*.
"""

import argparse
import base64
import contextlib
import io
import os
import stat
import sys

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)   # no server, no database

sys.path.insert(0, os.path.join(H.ROOT, "tests"))
import reliability  # noqa: E402
import run as runpy_module  # noqa: E402  -- tests/run.py: report, run_group, TAIL_LINES

CUT = 12   # lines of the failure that a cut log is assumed to keep after the FAIL line
INPUT = b"\x01GET /shop-type/list HTTP/1.1\r\nHost:\r\n\r\n"

UBSAN = """\
src/cache/cacheaside.c:147:38: runtime error: member access within null pointer of type 'struct metrics'
    #0 0x55d15fd49ae3 in submit_load /work/main/src/cache/cacheaside.c:147:38
    #1 0x55d15fd48fdb in on_get /work/main/src/cache/cacheaside.c:202:9
    #2 0x55d15fcfd0b3 in redis_answer /work/main/fuzz/fuzz_common.c:122:5
    #3 0x55d15fcee69e in LLVMFuzzerTestOneInput /work/main/fuzz/fuzz_http.c:132:9

SUMMARY: UndefinedBehaviorSanitizer: undefined-behavior src/cache/cacheaside.c:147:38 in
"""

HARNESS = """\
fuzz_http: connection never freed after the client finished
==4242== ERROR: libFuzzer: deadly signal
    #0 0x55d15fc09e03 in __sanitizer_print_stack_trace
    #1 0x55d15fc09529 in fuzzer::PrintStackTrace()
    #2 0x7ff5be65a26b in abort
    #3 0x55d15fcee69e in LLVMFuzzerTestOneInput /work/main/fuzz/fuzz_http.c:150:13

NOTE: libFuzzer has rudimentary signal handlers.
SUMMARY: libFuzzer: deadly signal
"""

FAKE = r'''#!%(python)s
import sys
prefix = [a.split("=", 1)[1] for a in sys.argv if a.startswith("-artifact_prefix=")][0]
print("INFO: Seed: 1")
for i in range(3000):
    print("#%%d\tREDUCE cov: 1375 ft: 4943 corp: 569/324Kb exec/s: 5726 rss: 418Mb" %% i)
sys.stdout.write(open(%(report)r).read())
name = prefix + "crash-e5d96e27086fab8d4d15579e9525c65ca74f0c3b"
open(name, "wb").write(open(%(input)r, "rb").read())
print("artifact_prefix='%%s'; Test unit written to %%s" %% (prefix, name))
print("stat::number_of_executed_units: 132161")
sys.exit(1)
'''


def _fail_text(report):
    """Runs run_fuzz on a stand-in target that crashes with this report; returns what it
    printed, from the FAIL line on."""
    d = H.tmpdir()
    fuzz_dir = os.path.join(d, "fuzzbin-%d" % abs(hash(report)))
    os.makedirs(fuzz_dir)
    with open(os.path.join(fuzz_dir, "report.txt"), "w") as f:
        f.write(report)
    with open(os.path.join(fuzz_dir, "input.bin"), "wb") as f:
        f.write(INPUT)
    fake = os.path.join(fuzz_dir, "fuzz_fake")
    with open(fake, "w") as f:
        f.write(FAKE % {"python": sys.executable,
                        "report": os.path.join(fuzz_dir, "report.txt"),
                        "input": os.path.join(fuzz_dir, "input.bin")})
    os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
    args = argparse.Namespace(fuzz_dir=fuzz_dir, fuzz_target=[], fuzz_keep=None,
                              fuzz_seconds=1)
    tmp = os.path.join(fuzz_dir, "run")
    os.makedirs(tmp)
    results = []
    out = io.StringIO()
    root = reliability.ROOT
    reliability.ROOT = fuzz_dir       # its fuzz/corpus/fuzz_fake, not the repository's
    try:
        with contextlib.redirect_stdout(out):
            reliability.run_fuzz(args, tmp, results, runpy_module)
    finally:
        reliability.ROOT = root
    text = out.getvalue()
    H.log("run_fuzz printed:\n" + text[:6000])
    eq([r[:2] for r in results], [("fuzz/fuzz_fake", False)], "the stage's result (name, ok)")
    lines = text.splitlines()
    first = [i for i, l in enumerate(lines) if l.startswith("FAIL fuzz/fuzz_fake")]
    check(first, "no FAIL line for the target")
    return lines[first[0]:]


def test_fuzz_failure_names_the_fault_first():
    lines = _fail_text(UBSAN)
    kept = "\n".join(lines[:1 + CUT])
    check("runtime error: member access within null pointer" in lines[0],
          "the FAIL line names the fault: %r", lines[0])
    check("cacheaside.c:147:38" in kept and "submit_load" in kept,
          "the report and its first frame are in the first %d lines:\n%s", CUT, kept)
    check(base64.b64encode(INPUT).decode() in "\n".join(lines[:1 + 2 * CUT]),
          "the input (base64) follows the report")
    check(len(lines) <= runpy_module.TAIL_LINES + 2,
          "the failure fits in run.py's %d lines (%d)", runpy_module.TAIL_LINES, len(lines))
    check(any("REDUCE cov" in l for l in lines[-10:]), "the progress output's end comes last")


def test_fuzz_failure_names_the_harness_message():
    lines = _fail_text(HARNESS)
    check("fuzz_http: connection never freed after the client finished" in lines[0],
          "the FAIL line gives the harness's own message, not only 'deadly signal': %r",
          lines[0])
    kept = "\n".join(lines[:1 + CUT])
    check("LLVMFuzzerTestOneInput" in kept, "the frames under the abort:\n%s", kept)
