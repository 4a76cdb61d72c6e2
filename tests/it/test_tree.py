"""test_tree.py -- the source tree's two rules, which `make lint` (part of `make check`) holds:
tools/check_names.py (a file's non-static functions carry its name) and
tools/include_cycles.py (no include cycle between modules). Each tool is run on a small tree
made here that breaks its rule, and on one that keeps it, so a tool that stopped finding
anything would fail; then both are run on src/ itself.
"""

import os
import subprocess
import sys

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)   # no server, no database

TOOLS = os.path.join(H.ROOT, "tools")


def _run(tool, *args, cwd=None):
    p = subprocess.run([sys.executable, os.path.join(TOOLS, tool)] + list(args),
                       capture_output=True, text=True, timeout=60, cwd=cwd or H.ROOT)
    H.log("%s %s -> %d\n%s" % (tool, " ".join(args), p.returncode, p.stdout))
    return p


def _write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def test_check_names_finds_a_misnamed_function():
    d = H.tmpdir()
    good = _write(d, "src/sale/vcache.c",
                  "static int helper(void)\n{\n    return 0;\n}\n\n"
                  "int vcache_find(int a,\n                int b)\n{\n    return a + b;\n}\n\n"
                  "int vcache(void);\n")
    bad = _write(d, "src/sale/buckets.c",
                 "#include \"sale/buckets.h\"\n\nconst char *buckets_name(void)\n{\n"
                 "    return \"b\";\n}\n\nvoid *bk_lookup(void *c,\n"
                 "                int64_t id)\n{\n    return c;\n}\n")
    p = _run("check_names.py", good)
    eq(p.returncode, 0, "exit status on a file that keeps the rule")
    check("0 misnamed" in p.stdout, "the count of a clean file")
    p = _run("check_names.py", good, bad)
    eq(p.returncode, 1, "exit status with a misnamed function")
    check("bk_lookup() is not named buckets_*" in p.stdout, "the misnamed function is named")
    check("buckets_name" not in p.stdout and "helper" not in p.stdout,
          "well-named and static functions are not reported")
    check("1 misnamed" in p.stdout, "exactly one finding")


def test_include_cycles_finds_a_cycle():
    d = H.tmpdir()
    src = os.path.join(d, "src")
    _write(src, "redis/rds.h", "#include \"redis/rds_cluster.h\"\n")
    _write(src, "redis/rds.c", "#include \"redis/rds.h\"\n")
    _write(src, "redis/rds_cluster.c", "#include \"redis/rds_cluster.h\"\n")
    _write(src, "redis/rds_cluster.h", "struct x;\n")
    # a module's private header includes its public one: not a cycle
    _write(src, "store/store.c", "#include \"store/store_int.h\"\n")
    _write(src, "store/store.h", "struct s;\n")
    _write(src, "store/store_int.h", "#include \"store/store.h\"\n")
    p = _run("include_cycles.py", src)
    eq(p.returncode, 0, "exit status without a cycle")
    check("0 cycles" in p.stdout, "no cycle reported")
    _write(src, "redis/rds_cluster.c", "#include \"redis/rds_cluster.h\"\n#include \"redis/rds.h\"\n")
    p = _run("include_cycles.py", src)
    eq(p.returncode, 1, "exit status with rds <-> rds_cluster")
    check("cycle: rds <-> rds_cluster" in p.stdout, "the cycle is named")


def test_the_tree_keeps_both_rules():
    p = _run("check_names.py")
    eq(p.returncode, 0, "check_names.py on src/:\n" + p.stdout)
    p = _run("include_cycles.py")
    eq(p.returncode, 0, "include_cycles.py on src/:\n" + p.stdout)
