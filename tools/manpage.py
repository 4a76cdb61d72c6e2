#!/usr/bin/env python3
"""manpage.py -- writes seckill(1) from the binary's own help texts.

    python3 tools/manpage.py BUILD/seckill OUT.1

The subcommands come from `seckill --help` (its "commands:" list) and each one's options
from `seckill CMD --help` -- for serve that text is printed from src/core/config.c's settings
table -- so a flag or subcommand added in the code is in the man page at the next build,
without anyone editing roff. The fixed parts (files, environment, examples) are below.
"""

import re
import subprocess
import sys

OPT = re.compile(r"^\s{1,4}(-{1,2}[A-Za-z][\w-]*(?: [A-Z][A-Z.:|_/-]*)?)\s{2,}(.*)$")
CMD = re.compile(r"^\s{2}([a-z][\w-]*)\s{2,}(.*)$")


def esc(s):
    """roff-safe text: backslashes, leading dots/quotes, hyphens of options."""
    s = s.replace("\\", "\\e")
    s = s.replace("-", "\\-")
    if s[:1] in (".", "'"):
        s = "\\&" + s
    return s


def help_of(binary, *args):
    out = subprocess.run([binary, *args], capture_output=True, text=True, timeout=30)
    text = out.stdout or out.stderr
    if not text.strip():
        sys.exit("manpage.py: %s %s printed nothing" % (binary, " ".join(args)))
    return text


def commands(top):
    cmds, on = [], False
    for line in top.splitlines():
        if line.strip() == "commands:":
            on = True
            continue
        if on:
            m = CMD.match(line)
            if m:
                cmds.append((m.group(1), m.group(2).strip()))
            elif not line.strip():
                if cmds:
                    break
    return cmds


def section(name, text):
    """One subcommand's --help as roff: the prose before the options, one .TP per option
    (continuation lines joined), then any prose after them (examples)."""
    lead, opts, tail = [], [], []
    for line in text.splitlines():
        if line.startswith("usage:"):
            continue
        m = OPT.match(line)
        if m:
            opts.append([m.group(1), m.group(2).strip()])
        elif opts and not tail and line.startswith("        ") and line.strip():
            opts[-1][1] += " " + line.strip()
        elif not opts:
            lead.append(line.rstrip())
        elif line.strip() or tail:
            tail.append(line.rstrip())
    out = [".SS seckill %s" % esc(name)]
    out += paragraphs(lead)
    for flag, desc in opts:
        out.append(".TP")
        parts = flag.split(" ", 1)
        if len(parts) == 2:
            out.append('.BI "%s " %s' % (esc(parts[0]), esc(parts[1])))
        else:
            out.append(".B %s" % esc(parts[0]))
        env = re.match(r"^(SECKILL_[A-Z_]+)\s+(.*)$", desc)
        if env:
            out.append("%s (environment \\fB%s\\fR)" % (esc(env.group(2)), esc(env.group(1))))
        else:
            out.append(esc(desc))
    out += paragraphs(tail)
    return out


def paragraphs(lines):
    out, buf, verbatim = [], [], False
    for ln in lines + [""]:
        if ln.strip().endswith(":") and not ln.startswith(" "):
            if buf:
                out += [".PP", esc(" ".join(buf))]
                buf = []
            out += [".PP", esc(ln.strip())]
            verbatim = True
            continue
        if verbatim and ln.startswith(" "):
            out += [".nf", ".RS 4", esc(ln.strip()), ".RE", ".fi"]
            continue
        verbatim = False
        if ln.strip():
            buf.append(ln.strip())
        elif buf:
            out += [".PP", esc(" ".join(buf))]
            buf = []
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    binary, dest = sys.argv[1], sys.argv[2]
    version = help_of(binary, "--version").split()[-1]
    top = help_of(binary, "--help")
    cmds = commands(top)
    if not cmds:
        sys.exit("manpage.py: no commands found in `seckill --help`")
    r = [
        '.TH SECKILL 1 "" "seckill %s" "User Commands"' % esc(version),
        ".SH NAME",
        "seckill \\- flash\\-sale voucher service, load rehearsal and invariant audit",
        ".SH SYNOPSIS",
        ".B seckill",
        ".I command",
        ".RI [ options ]",
        ".SH DESCRIPTION",
        "A flash\\-sale voucher service that speaks the HTTP API of the hm\\-dianping course",
        "project. Admission is one atomic Lua script in Redis (no oversell, one order per",
        "user); admitted orders reach SQLite or MariaDB through a Redis Stream consumer group.",
        "With no options, \\fBseckill serve\\fR starts a private redis\\-server and uses a",
        "SQLite file under its data directory.",
        ".SH COMMANDS",
    ]
    for name, desc in cmds:
        r += [".TP", ".B %s" % esc(name), esc(desc)]
    r += [".SH OPTIONS"]
    for name, _ in cmds:
        if name in ("version", "help"):
            continue
        r += section(name, help_of(binary, name, "--help"))
    r += [
        ".SH FILES",
        ".TP", ".I /etc/seckill/seckill.conf",
        "settings of the packaged service, \\fIkey = value\\fR lines, keys spelled like the",
        "flags of \\fBseckill serve\\fR without the dashes",
        ".TP", ".I /var/lib/seckill",
        "data directory of the packaged service: the SQLite file, the private redis\\-server's",
        "data and the generated admin token",
        ".SH HTTP",
        "\\fB/admin/\\fR is the sale board (log in with the admin token); \\fB/metrics\\fR is",
        "Prometheus text, private by default (\\fB\\-\\-metrics\\-listen\\fR or \\fB\\-\\-metrics\\-token\\fR);",
        "\\fB/health\\fR answers 200 when Redis and SQL answer.",
        ".SH EXIT STATUS",
        "0 on success; 1 when \\fBbench\\fR or \\fBaudit\\fR found an invariant violated;",
        "2 on bad usage or when the command could not run.",
        ".SH EXAMPLES",
        ".nf",
        ".RS 4",
        "seckill serve",
        "seckill bench \\-\\-data\\-dir ./var \\-\\-users 2000 \\-\\-stock 500",
        "seckill audit \\-\\-data\\-dir ./var",
        ".RE",
        ".fi",
        ".SH SEE ALSO",
        ".BR redis\\-server (1),",
        ".BR prometheus (1)",
    ]
    with open(dest, "w") as f:
        f.write("\n".join(r) + "\n")


if __name__ == "__main__":
    main()
