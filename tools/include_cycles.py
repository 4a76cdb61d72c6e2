#!/usr/bin/env python3
# Usage: python3 tools/include_cycles.py [src]   -- prints each cycle, then "N cycles".
"""Module include graph of src/ and its cycles (strongly connected components with more than
one module). A module is foo.c, foo.h and foo_int.h (its private header, which its own .c
includes and which includes foo.h); nothing else is grouped. Exit 1 if there is a cycle."""
import os, re, sys, collections
root = sys.argv[1] if len(sys.argv) > 1 else "src"
files = []
for d, _, fs in os.walk(root):
    files += [os.path.join(d, f) for f in fs if f.endswith((".c", ".h"))]
def mod(path):
    m = os.path.splitext(os.path.basename(path))[0]
    return m[:-4] if m.endswith("_int") else m
names = {mod(f) for f in files}
g = collections.defaultdict(set)
for f in files:
    m = mod(f)
    for line in open(f, errors="replace"):
        x = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if x:
            t = mod(x.group(1))
            if t in names and t != m:
                g[m].add(t)
# Tarjan
index, low, st, on, out, i = {}, {}, [], set(), [], [0]
def sc(v):
    index[v] = low[v] = i[0]; i[0] += 1; st.append(v); on.add(v)
    for w in g[v]:
        if w not in index:
            sc(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: out.append(sorted(comp))
sys.setrecursionlimit(10000)
for v in sorted(names):
    if v not in index: sc(v)
for c in out:
    print("cycle:", " <-> ".join(c))
    for a in c:
        print("   %s -> %s" % (a, ", ".join(sorted(t for t in g[a] if t in c))))
print("%d cycles" % len(out))
sys.exit(1 if out else 0)
