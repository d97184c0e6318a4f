#!/usr/bin/env python3
"""The layering of src/ (docs/design.md, Layers), checked on the sources:

  - the ground floor (src/base/) includes nothing above it: only system
    headers, the public header and its own;
  - a backend includes no header of the core, of the engines' insides or of
    another backend (backends/util/ is theirs to share; the GPU engine's
    seam is symm_gpu.h);
  - bootstrap and the engines do not reach up into the core's private
    header (core/internal.h);
  - tests reach inside the library only through src/include/symm_test_access.h
    (and the layers' own seams), never through the core's private header;
    the library's layers do not include that test header (its accessors
    are defined in src/core/test_access.c, which includes both);
  - the host backend compiles without any CUDA type in scope: no header it
    includes, however indirectly, is the GPU engine's;
  - every backend folder is a built-in backend with all that docs/design.md's
    checklist asks (its line in src/backends/builtin.h, its table
    symm_<name>_ops, its id in include/symmem.h, its row in the README's
    backend table, and, GPU backends, its conformance run in
    tests/gpu/CMakeLists.txt), and the built-in list names no other.

Usage: check-layers.py SOURCE_DIR.  Prints every breach and exits 1, or one
line "ok: ..." and exits 0."""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
SRC = os.path.join(ROOT, "src")
SEARCH = [SRC, os.path.join(SRC, "base"), os.path.join(SRC, "include"),
          os.path.join(ROOT, "include")]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(folder):
    for dirpath, _, names in os.walk(folder):
        for n in sorted(names):
            if n.endswith((".c", ".h", ".def", ".cuh", ".cu")):
                yield os.path.join(dirpath, n)


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return INCLUDE.findall(f.read())


def resolve(name, including):
    for d in [os.path.dirname(including)] + SEARCH:
        cand = os.path.normpath(os.path.join(d, name))
        if os.path.isfile(cand):
            return cand
    return None  # generated (symm_settings.def) or outside the tree


def rel(path):
    return os.path.relpath(path, ROOT)


def closure(path):
    seen, todo = set(), [path]
    while todo:
        p = todo.pop()
        for name in includes(p):
            r = resolve(name, p)
            if r and r not in seen:
                seen.add(r)
                todo.append(r)
    return seen


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def backend_checklist(backends):
    bad = []
    m = re.search(r"#define SYMM_BUILTIN_BACKENDS\(X\)(.*)", read("src", "backends", "builtin.h"))
    listed = re.findall(r"X\((\w+)\)", m.group(1)) if m else []
    folders = sorted(n for n in os.listdir(backends)
                     if os.path.isdir(os.path.join(backends, n)) and n != "util")
    public = read("include", "symmem.h")
    readme = read("README.md")
    conformance = read("tests", "gpu", "CMakeLists.txt")
    for name in sorted(set(listed) - set(folders)):
        bad.append("src/backends/builtin.h lists %s, which has no folder src/backends/%s/" %
                   (name, name))
    for name in folders:
        code = "".join(read(f) for f in sources(os.path.join(backends, name))
                       if f.endswith(".c"))
        if name not in listed:
            bad.append("src/backends/%s/ is not in src/backends/builtin.h" % name)
        if not re.search(r"const symm_backend_ops_t symm_%s_ops\s*=" % name, code):
            bad.append("src/backends/%s/ defines no table symm_%s_ops" % (name, name))
        if not re.search(r"SYMM_BACKEND_%s\s*=" % name.upper(), public):
            bad.append("include/symmem.h has no id SYMM_BACKEND_%s" % name.upper())
        if not re.search(r"^\| `%s` \|" % name, readme, re.M):
            bad.append("README.md's backend table has no row for %s" % name)
        if name != "host" and "symm_add_conformance(%s " % name not in conformance:
            bad.append("tests/gpu/CMakeLists.txt runs no conformance suite on %s" % name)
    return bad


TEST_ACCESS = os.path.join(SRC, "include", "symm_test_access.h")
TEST_ACCESS_DEFS = os.path.join(SRC, "core", "test_access.c")


def test_access_rules():
    bad = []
    tests = os.path.join(ROOT, "tests")
    for f in sources(tests):
        for r in closure(f):
            if rel(r).startswith("src/core/"):
                bad.append("%s includes %s: tests use src/include/symm_test_access.h" %
                           (rel(f), rel(r)))
                break
    for f in sources(SRC):
        if f != TEST_ACCESS_DEFS and TEST_ACCESS in closure(f):
            bad.append("%s includes symm_test_access.h, which is for tests only" % rel(f))
    return bad


def main():
    bad = []
    base = os.path.join(SRC, "base")
    public = os.path.join(ROOT, "include")
    for f in sources(base):
        for name in includes(f):
            r = resolve(name, f)
            if name == "symm_settings.def" and r is None:
                continue  # the build's list of every layer's settings
            if r is None or not (r.startswith(base + os.sep) or r.startswith(public + os.sep)):
                bad.append("%s includes %s, above the ground floor" % (rel(f), name))
    backends = os.path.join(SRC, "backends")
    for name in sorted(os.listdir(backends)):
        folder = os.path.join(backends, name)
        if not os.path.isdir(folder) or name == "util":
            continue
        for f in sources(folder):
            for inc in includes(f):
                r = resolve(inc, f)
                where = rel(r) if r else inc
                if (where.startswith("src/core/") or where.startswith("src/cpu/") or
                        (where.startswith("src/gpu/") and not where.endswith("cu_driver.h")) or
                        (where.startswith("src/backends/") and
                         not where.startswith("src/backends/%s/" % name) and
                         not where.startswith("src/backends/util/"))):
                    bad.append("%s includes %s" % (rel(f), where))
    for layer in ("bootstrap", "cpu", "gpu"):
        for f in sources(os.path.join(SRC, layer)):
            for inc in includes(f):
                r = resolve(inc, f)
                if r and rel(r).startswith("src/core/"):
                    bad.append("%s includes %s, the core's private header" % (rel(f), rel(r)))
    bad += test_access_rules()
    gpu_only = {os.path.join(SRC, "include", "symm_gpu.h"), os.path.join(SRC, "gpu", "cu_driver.h")}
    for f in sources(os.path.join(backends, "host")):
        for r in closure(f) & gpu_only:
            bad.append("%s has CUDA types in scope (through %s)" % (rel(f), rel(r)))
    bad += backend_checklist(backends)
    for b in bad:
        print("FAIL: " + b)
    if bad:
        return 1
    print("ok: src/base includes nothing above it; backends, bootstrap and engines keep to "
          "their seams; the host backend sees no CUDA type; every backend folder is a "
          "built-in backend with its checklist done; tests reach the core through "
          "symm_test_access.h only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
