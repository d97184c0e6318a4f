"""The Python examples, run as a user runs them: symmem-run, host backend.
Each checks its own result and prints OK per rank."""
import os
import subprocess
import sys

import pytest

import symmem

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def _run(n, script, *args):
    env = dict(os.environ, SYMM_BACKEND="host", PYTHONUNBUFFERED="1")
    cmd = [symmem.tool_path("symmem-run"), "-n", str(n), "--timeout", "120", "--",
           sys.executable, os.path.join(EXAMPLES, script)] + list(args)
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=150)
    assert proc.returncode == 0 and proc.stdout.count(": OK") == n, proc.stdout
    return proc.stdout


@pytest.mark.parametrize("n", [2, 4])
def test_allgather_matmul_numpy(n):
    _run(n, "allgather_matmul.py", "--numpy")


def test_allgather_matmul_torch_cpu():
    pytest.importorskip("torch", reason="PyTorch is not installed here")
    out = _run(2, "allgather_matmul.py")
    assert "torch on cpu" in out, out


@pytest.mark.parametrize("n", [2, 3])
def test_contiguous_view(n):
    _run(n, "contiguous_view.py")
