"""test_package.py -- `make deb`, lintian, an install into a scratch root, the man page.

The package is built by the Makefile as an operator would (`make deb`: a hardened
optimised build in build/pkg, then tools/mkdeb.sh), checked by lintian (no errors, no
warnings), unpacked with dpkg into a scratch root with its own dpkg database (dpkg --root;
--unpack: the postinst, which creates a system user, would run chrooted into a root that
has no adduser), and run from there. The man page must render without warnings and name
every subcommand and every flag the binary's --help texts list.
"""

import os
import re
import shutil
import subprocess

import harness as H
from harness import check, eq

DB_BACKENDS = ("sqlite",)      # nothing here touches a database


def _run(argv, timeout=120, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


def _deb():
    out = _run(["make", "-s", "-j2", "deb"], timeout=900, cwd=H.ROOT)
    check(out.returncode == 0, "make deb failed:\n%s%s", out.stdout[-3000:], out.stderr[-3000:])
    debs = [ln for ln in out.stdout.splitlines() if ln.endswith(".deb")]
    check(debs and os.path.exists(debs[-1]), "make deb named no package: %r", out.stdout)
    return debs[-1]


def _version(binary):
    return _run([binary, "--version"]).stdout.split()[-1]


def test_deb_lintian_install_man():
    deb = _deb()
    name = os.path.basename(deb)
    check(re.fullmatch(r"seckill_\d+\.\d+\.\d+_amd64\.deb", name), "package name %s", name)

    lint = shutil.which("lintian")
    check(lint is not None, "lintian not installed (sh tools/deps.sh test installs it)")
    out = _run([lint, "--fail-on", "error,warning", deb], timeout=300)
    tags = [ln for ln in out.stdout.splitlines() if re.match(r"^[EW]: ", ln)]
    check(out.returncode == 0 and not tags, "lintian:\n%s%s", out.stdout, out.stderr)

    # Contents and control data.
    files = _run(["dpkg-deb", "--contents", deb]).stdout
    for path in ("./usr/bin/seckill", "./usr/share/man/man1/seckill.1.gz",
                 "./lib/systemd/system/seckill.service", "./etc/seckill/seckill.conf",
                 "./usr/share/doc/seckill/copyright"):
        check(path in files, "%s not in the package:\n%s", path, files)
    eq(_run(["dpkg-deb", "--field", deb, "Version"]).stdout.strip(),
       _version(os.path.join(H.ROOT, "build", "pkg", "seckill")), "package version")
    conff = _run(["sh", "-c", "dpkg-deb --info '%s' conffiles" % deb]).stdout.split()
    eq(conff, ["/etc/seckill/seckill.conf"], "conffiles")

    # Install into a scratch root with its own dpkg database.
    root = H.subdir("root")
    for d in ("var/lib/dpkg/updates", "var/lib/dpkg/info"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    open(os.path.join(root, "var/lib/dpkg/status"), "w").close()
    out = _run(["dpkg", "--root", root, "--force-depends", "--force-not-root",
                "--log", os.devnull, "--unpack", deb])
    check(out.returncode == 0, "dpkg --unpack into %s:\n%s%s", root, out.stdout, out.stderr)
    st = _run(["dpkg", "--root", root, "-s", "seckill"]).stdout
    check("Status: install ok unpacked" in st, "dpkg status in the scratch root:\n%s", st)
    # The unit: a dedicated user, a state directory, a read-only system.
    with open(os.path.join(root, "lib/systemd/system/seckill.service")) as f:
        unit = f.read()
    for line in ("User=seckill", "ProtectSystem=strict", "StateDirectory=seckill",
                 "NoNewPrivileges=yes", "CapabilityBoundingSet=\n",
                 "ExecStart=/usr/bin/seckill serve --config /etc/seckill/seckill.conf"):
        check(line in unit, "unit lacks %r", line)

    # Run it from the scratch root.
    binary = os.path.join(root, "usr/bin/seckill")
    out = _run([binary, "--version"])
    check(out.returncode == 0 and re.fullmatch(r"seckill \d+\.\d+\.\d+\n", out.stdout),
          "installed seckill --version: %r %r", out.stdout, out.stderr)
    out = _run([binary, "serve", "--help"])
    check(out.returncode == 0 and "--listen" in out.stdout and "--admin-token" in out.stdout,
          "installed seckill serve --help: %r", out.stdout[:500])
    # The packaged config file parses (keys are serve's flags).
    out = _run([binary, "serve", "--config", os.path.join(root, "etc/seckill/seckill.conf"),
                "--help"])
    eq(out.returncode, 0, "serve --config seckill.conf --help")

    # The man page renders without warnings and covers every subcommand and flag.
    man = os.path.join(root, "usr/share/man/man1/seckill.1.gz")
    env = dict(os.environ, MANWIDTH="100", MAN_KEEP_FORMATTING="0")
    out = _run(["man", "--warnings", "-l", man], env=env)
    check(out.returncode == 0 and not out.stderr.strip(), "man -l: rc %d\n%s",
          out.returncode, out.stderr)
    text = re.sub(r".\x08", "", out.stdout)
    text = re.sub(r"\u2010\s*\n\s*", "", text)        # words hyphenated at a line end
    top = _run([binary, "--help"]).stdout
    cmds = re.findall(r"^  ([a-z]+)\s{2,}", top.split("commands:", 1)[1], re.M)
    check("serve" in cmds and "bench" in cmds and "audit" in cmds, "commands: %r", cmds)
    missing = []
    for c in cmds:
        if not re.search(r"^\s+%s\b" % c, text, re.M):
            missing.append(c)
        if c in ("version", "help"):
            continue
        helptext = _run([binary, c, "--help"]).stdout + _run([binary, c, "--help"]).stderr
        for flag in set(re.findall(r"^\s{1,4}(--[a-z][a-z0-9-]*)", helptext, re.M)):
            if not re.search(r"(^|\s)%s\b" % re.escape(flag), text, re.M):
                missing.append("%s %s" % (c, flag))
    check(not missing, "not in the man page: %s", ", ".join(sorted(missing)))
