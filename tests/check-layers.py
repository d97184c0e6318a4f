#!/usr/bin/env python3
"""The layering of src/ (docs/design.md, Layers), checked on the sources:

  - the ground floor (src/base/) includes nothing above it: only system
    headers, the public header and its own;
  - a backend includes no header of the core, of the engines' insides or of
    another backend (backends/util/ is theirs to share; the GPU engine's
    seam is symm_gpu.h);
  - bootstrap and the engines do not reach up into the core's private
    header (core/internal.h);
  - the host backend compiles without any CUDA type in scope: no header it
    includes, however indirectly, is the GPU engine's.

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
    gpu_only = {os.path.join(SRC, "include", "symm_gpu.h"), os.path.join(SRC, "gpu", "cu_driver.h")}
    for f in sources(os.path.join(backends, "host")):
        for r in closure(f) & gpu_only:
            bad.append("%s has CUDA types in scope (through %s)" % (rel(f), rel(r)))
    for b in bad:
        print("FAIL: " + b)
    if bad:
        return 1
    print("ok: src/base includes nothing above it; backends, bootstrap and engines keep to "
          "their seams; the host backend sees no CUDA type")
    return 0


if __name__ == "__main__":
    sys.exit(main())
