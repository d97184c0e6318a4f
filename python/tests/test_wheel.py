"""A clean install: the wheel of `pip wheel .` (tagged py3-none-<platform>)
into a fresh virtual environment, then a 2-rank run of the neighbour
exchange from another directory, with no LD_LIBRARY_PATH, PYTHONPATH or
SYMMEM_LIBRARY, and C programs built against the installed package.  The slowest test (it builds
the C library once more); the kernels are left out of this build
(SYMM_WITH_CUDA=OFF) since nothing here runs on a GPU."""
import os
import subprocess
import sys
import venv

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(cmd, env, cwd, timeout=900):
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=timeout)
    assert proc.returncode == 0, "%s: exit %d\n%s" % (" ".join(cmd), proc.returncode,
                                                      proc.stdout[-6000:])
    return proc.stdout


def _index_reachable(tmp_path):
    # Whether pip can fetch the build requirements (the GPU machine has no
    # network): one quick download, no retries.
    proc = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check",
                           "download", "--no-deps", "--timeout", "5", "--retries", "0",
                           "-d", str(tmp_path / "probe"), "scikit-build-core>=0.10"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=120)
    return proc.returncode == 0


def test_pip_install_then_two_ranks(tmp_path):
    # With the package index: a fresh venv and pip's isolated build.  Without
    # it: the venv sees this Python's packages and builds with the installed
    # scikit-build-core (--no-build-isolation), else SKIP.
    online = _index_reachable(tmp_path)
    if not online:
        try:
            import scikit_build_core  # noqa: F401
            import numpy  # noqa: F401
        except ImportError as e:
            pytest.skip("no package index reachable, and %s is not installed to build "
                        "without it" % e.name)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=not online).create(str(env_dir))
    bindir = env_dir / "bin"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "SYMMEM_LIBRARY", "LD_LIBRARY_PATH", "VIRTUAL_ENV")
           and not k.startswith("SYMM_")}
    env["PATH"] = str(bindir) + os.pathsep + env.get("PATH", "")
    env["SYMM_BACKEND"] = "host"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    pip = [str(bindir / "python"), "-m", "pip", "--disable-pip-version-check"]
    # The wheel first: one for every CPython 3 (ctypes, no extension module).
    wheels = tmp_path / "wheels"
    isolation = [] if online else ["--no-build-isolation"]
    _run(pip + ["wheel", "-q", "--no-deps", "-w", str(wheels), REPO,
                "--config-settings=cmake.define.SYMM_WITH_CUDA=OFF"] + isolation,
         env, str(elsewhere))
    built = sorted(os.listdir(str(wheels)))
    assert len(built) == 1 and "-py3-none-" in built[0], built
    _run(pip + ["install", "-q", str(wheels / built[0])], env, str(elsewhere))
    if online:
        _run(pip + ["install", "-q", "numpy"], env, str(elsewhere))
    where = _run([str(bindir / "python"), "-c",
                  "import symmem; print(symmem.library_path()); "
                  "print(symmem.tool_path('symmem-run')); print(symmem.__version__)"],
                 env, str(elsewhere)).split()
    assert where[0].startswith(str(env_dir)) and where[1].startswith(str(env_dir)), where
    out = _run(["symmem-run", "-n", "2", "python",
                os.path.join(REPO, "python", "examples", "neighbor_exchange.py")],
               env, str(elsewhere), timeout=120)
    sys.stdout.write("fresh venv, symmem %s, from %s:\n%s" % (where[2], elsewhere, out))
    assert out.count(" OK") == 2 and "FAIL" not in out, out
    info = _run(["symmem-info"], env, str(elsewhere), timeout=60)
    assert "host" in info
    # A C program against the pip-installed package, through pkg-config and
    # through CMake, runs with no LD_LIBRARY_PATH.
    dirs = _run([str(bindir / "python"), "-c",
                 "import symmem; print(symmem.include_dir()); print(symmem.pkgconfig_dir()); "
                 "print(symmem.cmake_dir())"], env, str(elsewhere)).split()
    assert all(d.startswith(str(env_dir)) for d in dirs), dirs
    assert os.path.exists(os.path.join(dirs[0], "symmem.h")), dirs
    example = os.path.join(REPO, "examples", "neighbor_exchange.c")
    pc_env = dict(env, PKG_CONFIG_PATH=dirs[1])
    flags = _run(["pkg-config", "--cflags", "--libs", "symmem"], pc_env, str(elsewhere)).split()
    _run(["cc", "-std=c11", "-o", str(tmp_path / "ex_pc"), example] + flags, env, str(elsewhere))
    cm = tmp_path / "cm"
    cm.mkdir()
    (cm / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(consumer C)\n"
        "find_package(symmem REQUIRED)\nadd_executable(ex ex.c)\n"
        "target_link_libraries(ex symmem::symmem)\n")
    (cm / "ex.c").write_text(open(example).read())
    _run(["cmake", "-S", str(cm), "-B", str(cm / "b"), "-Dsymmem_DIR=" + dirs[2]], env, str(cm))
    _run(["cmake", "--build", str(cm / "b")], env, str(cm))
    for exe in (tmp_path / "ex_pc", cm / "b" / "ex"):
        out = _run(["symmem-run", "-n", "2", str(exe)], env, str(elsewhere), timeout=120)
        assert out.count(" OK") == 2, (exe, out)
