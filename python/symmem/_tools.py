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
