"""test_runner.py -- tests/run.py's own scheduling (docs/testing.md): under -j 2 two
integration tests run at once and a SERIAL or @serial test runs alone; unit binaries run in
lanes, each lane with its own redis-server, rlock_test_process alone; --list names the tests
run alone and the files kept to one SQL backend; --durations prints the slowest tests and
each stage's wall time.

The runner's children are stood in for by a run_group that records who runs at the same
time: a shared test waits at a barrier for a second one (it passes only if two run at once),
a test that must be alone checks that nothing else is running.
"""

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import threading

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)   # no server, no database: the runner's own logic

sys.path.insert(0, os.path.join(H.ROOT, "tests"))
import run as runner  # noqa: E402  -- tests/run.py


class Recorder:
    """A run_group for run_its/run_units: shared items meet at a barrier of 2 (a lone one
    times out), items in `alone` must find nothing else running."""

    def __init__(self, alone):
        self.alone = set(alone)
        self.lock = threading.Lock()
        self.running = 0
        self.barrier = threading.Barrier(2)
        self.problems = []
        self.envs = {}

    def __call__(self, argv, timeout, env, cwd, out_path):
        name = argv[argv.index("--child") + 1] if "--child" in argv else argv[0]
        with self.lock:
            self.running += 1
            others = self.running - 1
            self.envs[name] = dict(env)
        try:
            if os.path.basename(name) in self.alone or name in self.alone:
                if others:
                    self.problems.append("%s ran beside %d others" % (name, others))
            else:
                try:
                    self.barrier.wait(10)   # a second shared test must be running too
                except threading.BrokenBarrierError:
                    self.problems.append("%s found no test running beside it" % name)
                    self.barrier.reset()
        finally:
            with self.lock:
                self.running -= 1
        if "--result" in argv:
            with open(argv[argv.index("--result") + 1], "w") as f:
                json.dump({"ok": True, "why": None, "seconds": 0}, f)
        with open(out_path, "w") as f:
            f.write("")
        return 0, 0.01


@contextlib.contextmanager
def _standing_in(rec):
    real = runner.run_group
    runner.run_group = rec
    try:
        with contextlib.redirect_stdout(io.StringIO()) as out:
            yield out
    finally:
        runner.run_group = real


def _t(name, serial=False):
    return {"name": name, "file": "", "func": name.split("::")[1], "long": False,
            "timeout": 30, "backends": ("sqlite",), "serial": serial, "db": "sqlite"}


def test_jobs_two_at_a_time_and_serial_alone():
    tests = [_t("a.py::test_1"), _t("a.py::test_2"), _t("b.py::test_timed", serial=True),
             _t("a.py::test_3"), _t("a.py::test_4"), _t("c.py::test_killer", serial=True)]
    rec = Recorder(alone={"b.py::test_timed", "c.py::test_killer"})
    args = argparse.Namespace(bin=os.environ["SECKILL_BIN"], keep=False, jobs=2)
    results = []
    with _standing_in(rec) as out:
        runner.run_its(tests, args, H.tmpdir(), results)
    H.log(out.getvalue())
    eq(rec.problems, [], "what ran beside what")
    eq(sorted(r[0] for r in results), sorted(t["name"] for t in tests), "every test reported")
    check(all(r[1] for r in results), "every test passed: %r", results)
    seqs = [e["SECKILL_TEST_SEQ"] for e in rec.envs.values()]
    eq(len(set(seqs)), len(tests), "a MariaDB database number of its own per test")


def test_unit_lanes_each_with_its_redis():
    units = [{"name": "unit/test_%d" % i, "path": "/nonexistent/test_%d" % i}
             for i in range(4)]
    units.append({"name": "unit/rlock_test_process", "path": "/nonexistent/rlock_test_process"})
    rec = Recorder(alone={"rlock_test_process"})
    results = []
    with _standing_in(rec) as out:
        runner.run_units(units, H.subdir("units"), results, jobs=2)
    H.log(out.getvalue())
    eq(rec.problems, [], "what ran beside what")
    eq(len(results), len(units), "every binary reported")
    urls = {rec.envs["/nonexistent/test_%d" % i]["REDIS_URL"] for i in range(4)}
    eq(len(urls), 2, "the two lanes' redis-servers: %r" % urls)


def test_list_marks_serial_and_one_backend():
    p = subprocess.run([sys.executable, os.path.join(H.ROOT, "tests", "run.py"), "--list",
                        "--no-unit", "--db", "both", "-k", "test_room.py", "-k",
                        "test_conns.py", "-k", "test_tokens.py"],
                       capture_output=True, text=True, timeout=60, cwd=H.ROOT)
    eq(p.returncode, 0, "run.py --list exit status")
    lines = p.stdout.splitlines()

    def line(name):
        found = [l for l in lines if l.startswith(name + " ")]
        eq(len(found), 1, "lines for %s" % name)
        return found[0]
    check("alone under -j" in line("test_conns.py::test_per_ip_connection_cap"),
          "a SERIAL file's test runs alone")
    check("alone under -j" in line("test_room.py::test_room_shuffle_fifo_and_rate_two_instances"),
          "an @serial test runs alone")
    check("alone under -j" not in line("test_room.py::test_room_option_and_pass"),
          "its neighbour does not")
    check("skipped: sqlite only" in line("test_tokens.py::test_expired_token_refused[mysql]"),
          "a DB_BACKENDS file's MariaDB pass is skipped")
    check("skipped" not in line("test_room.py::test_room_option_and_pass[mysql]"),
          "the waiting room runs on MariaDB too")


def test_durations_and_stage_times():
    runner._stages[:] = []
    with runner.stage("unit"):
        pass
    results = [("a", True, 1.5), ("b", False, 9.25), ("c", True, 4.0)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runner.print_times(results, 2)
    text = out.getvalue()
    H.log(text)
    check(text.startswith("stage times: unit 0s"), "the stage line:\n%s", text)
    eq(text.splitlines()[1:], ["slowest 2:", "      9.2s  b", "      4.0s  c"],
       "the slowest two, slowest first")
