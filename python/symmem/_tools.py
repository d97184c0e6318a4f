"""The command-line tools shipped inside the package, and their PATH entries."""
from __future__ import annotations

import os
import sys
from typing import List, NoReturn, Optional

from ._lib import LIB_PATH, _HERE

TOOLS = ("symmem-run", "symmem-info", "symmem-bench")


def tool_path(name: str) -> str:
    """Absolute path of a tool ("symmem-run", "symmem-info", "symmem-bench").

    The package's own ``bin/`` when installed; next to a SYMMEM_LIBRARY given
    from a build tree (``tools/``, or ``../bin`` of an install prefix).
    FileNotFoundError if it is not there.
    """
    if name not in TOOLS:
        raise ValueError("no symmem tool %r; the tools are %s" % (name, ", ".join(TOOLS)))
    lib_dir = os.path.dirname(os.path.abspath(LIB_PATH))
    for d in (os.path.join(_HERE, "bin"), os.path.join(lib_dir, "tools"),
              os.path.join(lib_dir, os.pardir, "bin")):
        cand = os.path.normpath(os.path.join(d, name))
        if os.access(cand, os.X_OK):
            return cand
    raise FileNotFoundError("symmem: %s is not installed with the package (%s/bin)" %
                            (name, _HERE))


def _prefix_dir(sub: str, marker: str) -> str:
    # The package's own install (its folder is the CMake install prefix),
    # else the prefix that a SYMMEM_LIBRARY in <prefix>/lib belongs to.
    lib_dir = os.path.dirname(os.path.abspath(LIB_PATH))
    for prefix in (_HERE, os.path.join(lib_dir, os.pardir)):
        cand = os.path.normpath(os.path.join(prefix, sub))
        if os.path.exists(os.path.join(cand, marker)):
            return cand
    raise FileNotFoundError("symmem: no %s here: the package at %s has none, nor has the "
                            "prefix of %s (a build tree has no install layout; use "
                            "`cmake --install`)" % (os.path.join(sub, marker), _HERE, LIB_PATH))


def include_dir() -> str:
    """The folder of symmem.h (and symmem_device.cuh), for ``-I``."""
    return _prefix_dir("include", "symmem.h")


def cmake_dir() -> str:
    """The folder of symmemConfig.cmake: ``-Dsymmem_DIR=...`` (or put it in
    ``CMAKE_PREFIX_PATH``) for ``find_package(symmem)``."""
    return _prefix_dir(os.path.join("lib", "cmake", "symmem"), "symmemConfig.cmake")


def pkgconfig_dir() -> str:
    """The folder of symmem.pc, for ``PKG_CONFIG_PATH``; programs built with
    its ``--libs`` find the library through their run path."""
    return _prefix_dir(os.path.join("lib", "pkgconfig"), "symmem.pc")


def _exec(name: str, argv: Optional[List[str]] = None) -> NoReturn:
    path = tool_path(name)
    args = sys.argv[1:] if argv is None else argv
    os.execv(path, [name] + list(args))


def symmem_run() -> NoReturn:
    """Entry point of the ``symmem-run`` command."""
    _exec("symmem-run")


def symmem_info() -> NoReturn:
    """Entry point of the ``symmem-info`` command."""
    _exec("symmem-info")


def symmem_bench() -> NoReturn:
    """Entry point of the ``symmem-bench`` command."""
    _exec("symmem-bench")
