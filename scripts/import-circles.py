#!/usr/bin/env python3
"""Lists the import circles among the modules of one crate.

Usage: scripts/import-circles.py CRATE_SRC_DIR

A module is a file under the crate's `src/` (a folder's `mod.rs` is the
folder's module). Module A imports B when A's code (not its comments or its tests) names `crate::B` (any
path below B counts as B's own file if it exists, else B). Prints each
strongly connected component of more than one module, largest first, and
exits 0; the component sizes are what issue 48 measures.
"""
import os
import re
import sys


def modules(src):
    found = {}
    for root, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                continue
            found["::".join(rel)] = path
    return found


def resolve(path, known):
    parts = path.split("::")
    while parts:
        candidate = "::".join(parts)
        if candidate in known:
            return candidate
        parts = parts[:-1]
    return None


def imports(text, me, known):
    out = set()
    # crate::a::b, and crate::a::{b, c::d}
    for m in re.finditer(r"crate::([A-Za-z_][\w:]*)(::\{([^}]*)\})?", text):
        head = m.group(1).rstrip(":")
        targets = [head]
        if m.group(3):
            targets = [head + "::" + t.strip().split(" ")[0] for t in m.group(3).split(",") if t.strip()]
        for t in targets:
            r = resolve(t, known)
            if r and r != me:
                out.add(r)
    # super:: inside a folder module
    for m in re.finditer(r"\bsuper::([A-Za-z_]\w*)", text):
        parent = me.split("::")[:-1]
        if me in folders:
            parent = me.split("::")
            parent = parent[:-1]
        r = resolve("::".join(parent + [m.group(1)]), known)
        if r and r != me:
            out.add(r)
    return out


def components(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            strong(v)
    return out


src = sys.argv[1]
known = modules(src)
folders = {m for m, p in known.items() if p.endswith("mod.rs")}
graph = {}
for m, p in known.items():
    with open(p) as f:
        text = f.read()
    # Drop a module's own tests (they may import anything) and comments
    # (a doc link is not a dependency).
    text = re.split(r"#\[cfg\(test\)\]\s*mod tests", text)[0]
    text = re.sub(r"//.*", "", text)
    graph[m] = imports(text, m, known)
circles = sorted((c for c in components(graph) if len(c) > 1), key=len, reverse=True)
print(f"{src}: {len(known)} modules, {len(circles)} circle(s)")
for c in circles:
    print(f"  {len(c)}: {' '.join(c)}")
    if "--edges" in sys.argv:
        for m in c:
            print(f"      {m} -> {' '.join(sorted(graph[m] & set(c)))}")
