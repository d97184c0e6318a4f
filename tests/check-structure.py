#!/usr/bin/env python3
"""The shape of the code (ctest structure_rules): no call circle between
the files of one layer, and no function over 100 lines.

  check-structure.py REPO

Call circles: in each folder below, a file calls another when it calls a
function defined there (names found by a light C parse: comments and
strings stripped, definitions at the start of a line); the folder's file
graph must have no strongly connected component of two files or more.
For python/symmem the same with the imports a module runs (not those under
TYPE_CHECKING, which exist for annotations only).  Function length: every
function of src/ and tools/ spans at most 100 lines, its signature
included.  Prints what it finds and exits 1 if anything breaks a rule.
"""
import ast
import glob
import os
import re
import sys

C_FOLDERS = ["src/base", "src/core", "src/bootstrap", "src/cpu", "src/gpu", "src/backends/util",
             "src/backends/host", "src/backends/native", "src/backends/cuda",
             "src/backends/nccl", "src/backends/nvshmem", "tools"]
MAX_LINES = 100


def strip_c(text):
    """Comments and string and char literals blanked, newlines kept."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"'(\\.|[^'\\\n])'", "''", text)


DEF = re.compile(r"^(?!static\b)[A-Za-z_][\w \*]*?\b(\w+)\([^;{]*\)\s*\{", re.M)
CALL = re.compile(r"\b(\w+)\s*\(")


def components(graph):
    """Strongly connected components of two nodes or more (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
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
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def c_circles(folder):
    files = sorted(glob.glob(os.path.join(folder, "*.c")))
    text = {f: strip_c(open(f, encoding="utf-8").read()) for f in files}
    defined = {}
    for f in files:
        for m in DEF.finditer(text[f]):
            defined.setdefault(m.group(1), f)
    graph = {f: set() for f in files}
    for f in files:
        for name in set(CALL.findall(text[f])):
            g = defined.get(name)
            if g and g != f:
                graph[f].add(g)
    return components(graph)


def runtime_imports(path, modules):
    """The package modules a module imports when it runs."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    typing_only = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            typing_only.update(id(n) for b in node.body for n in ast.walk(b))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level >= 1 and id(node) not in typing_only:
            target = (node.module or "").split(".")[0]
            names = [target] if target else [a.name for a in node.names]
            found.update(n for n in names if n in modules)
    return found


def python_circles(pkg):
    paths = {os.path.basename(p)[:-3]: p for p in glob.glob(os.path.join(pkg, "*.py"))}
    graph = {m: runtime_imports(p, paths) - {m} for m, p in paths.items()}
    return components(graph)


def long_functions(path):
    lines = strip_c(open(path, encoding="utf-8").read()).split("\n")
    depth, start, out = 0, None, []
    for i, line in enumerate(lines):
        if line.startswith("#"):
            continue
        opens, closes = line.count("{"), line.count("}")
        if (depth == 0 and opens > closes and ")" in "".join(lines[max(0, i - 3):i + 1])
                and not re.search(r"=\s*\{", line)
                and not re.match(r"\s*(typedef|struct|enum|union)\b", line)):
            start = i
        depth += opens - closes
        if depth == 0 and start is not None:
            if i - start + 1 > MAX_LINES:
                out.append((start + 1, i - start + 1))
            start = None
    return out


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else "."
    bad = []
    for folder in C_FOLDERS:
        for comp in c_circles(os.path.join(repo, folder)):
            bad.append("%s: files call each other in a circle: %s" %
                       (folder, " ".join(os.path.basename(f) for f in comp)))
    for comp in python_circles(os.path.join(repo, "python", "symmem")):
        bad.append("python/symmem: modules import each other in a circle: %s" % " ".join(comp))
    sources = glob.glob(os.path.join(repo, "src", "**", "*.c"), recursive=True)
    sources += glob.glob(os.path.join(repo, "tools", "*.c"))
    for path in sorted(sources):
        for line, n in long_functions(path):
            bad.append("%s:%d: a function of %d lines (at most %d)" %
                       (os.path.relpath(path, repo), line, n, MAX_LINES))
    for b in bad:
        print(b)
    print("structure: %d folders without call circles checked, %d files' functions; %d problem(s)"
          % (len(C_FOLDERS) + 1, len(sources), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
