#!/usr/bin/env python3
# Usage: python3 tools/check_names.py [FILE.c ...]   (default: every .c under src/)
"""The naming rule `make check` holds: a file's functions carry its name.

Every function with external linkage defined in src/<folder>/<name>.c is called <name>_...
(or <name> itself), so a reader who sees a call knows which file defines it. main() in
src/main.c is the one exception. Static functions are the file's own business and are not
checked. Prints each function that breaks the rule, then "N misnamed"; exit 1 if N > 0."""
import os
import re
import sys

# A definition starts at column 0 with its return type; static ones are skipped.
START = re.compile(r"^(?!static\b|typedef\b|extern\b|struct\s+\w+\s*\{|union\b|enum\b)"
                   r"[A-Za-z_]")
NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def definitions(path):
    """(line number, name) of each non-static function defined in the file."""
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    i, out = 0, []
    while i < len(lines):
        line = lines[i]
        if START.match(line) and "(" in line and not line.rstrip().endswith(";"):
            # gather the declarator up to the body's brace or a semicolon
            text, j = line, i
            while "{" not in text and ";" not in text and j + 1 < len(lines) and j < i + 12:
                j += 1
                text += " " + lines[j]
            brace, semi = text.find("{"), text.find(";")
            if brace >= 0 and (semi < 0 or brace < semi) and "=" not in text[:text.find("(")]:
                m = NAME.search(text)
                if m:
                    out.append((i + 1, m.group(1)))
            i = j + 1
            continue
        i += 1
    return out


def main(argv):
    files = argv[1:]
    if not files:
        for d, _, fs in os.walk("src"):
            files += [os.path.join(d, f) for f in fs if f.endswith(".c")]
    bad = 0
    for path in sorted(files):
        stem = os.path.splitext(os.path.basename(path))[0]
        for ln, name in definitions(path):
            if name == stem or name.startswith(stem + "_"):
                continue
            if stem == "main" and name == "main":
                continue
            print("%s:%d: %s() is not named %s_*" % (path, ln, name, stem))
            bad += 1
    print("%d misnamed" % bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
