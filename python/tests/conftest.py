"""Fixtures of the symmem Python tests.

Run from the repository by `make test` (ctest's python_tests), which points
the tests at the build tree: PYTHONPATH=python and SYMMEM_LIBRARY=build/libsymmem.so.
Run by hand the same way, or against an installed package (`pip install .`).
"""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

if "SYMMEM_LIBRARY" not in os.environ:
    built = os.path.join(REPO, "build", "libsymmem.so")
    if os.path.exists(built):
        os.environ["SYMMEM_LIBRARY"] = built
try:
    import symmem  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(REPO, "python"))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(REPO, "python")] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    import symmem  # noqa: F401

# Every test runs on the host backend, whatever the machine has.
os.environ["SYMM_BACKEND"] = "host"


@pytest.fixture
def comm():
    """A one-rank communicator on the host backend."""
    import symmem
    with symmem.init(rank=0, world_size=1, backend="host", timeout_ms=5000) as c:
        yield c


class RankRun:
    """What a multi-rank run printed and returned."""

    def __init__(self, proc: subprocess.CompletedProcess) -> None:
        self.rc = proc.returncode
        self.out = proc.stdout

    def __repr__(self) -> str:
        return "exit %d\n%s" % (self.rc, self.out)


@pytest.fixture
def run_ranks():
    """run_ranks(n, case, *args, env=None, script="ranks_cases.py") runs
    SCRIPT CASE under `symmem-run -n N` and returns a RankRun; each case
    asserts by itself and prints "CASE ok" per rank."""
    import symmem

    def run(n, case, *args, env=None, timeout=120, script="ranks_cases.py"):
        full = dict(os.environ, SYMM_BACKEND="host", PYTHONUNBUFFERED="1")
        full.update(env or {})
        cmd = [symmem.tool_path("symmem-run"), "-n", str(n), "--timeout", str(timeout), "--",
               sys.executable, os.path.join(HERE, script), case] + list(args)
        proc = subprocess.run(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=timeout + 30)
        return RankRun(proc)

    return run
