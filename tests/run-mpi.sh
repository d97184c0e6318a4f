#!/bin/sh
# Runs tests/progs/mpi_job.c, built with <flavor>'s mpicc, on <n> ranks
# under <flavor>'s launcher (openmpi: mpirun.openmpi, mpich:
# mpirun.mpich), host backend unless SYMM_BACKEND says another.  Exit 77 (SKIP) with the reason when that
# MPI is not installed (.ci/install-deps installs both).
# Usage: run-mpi.sh <flavor> <n> <mpi_job binary> [TEXT]
# TEXT: a line the output must also contain (e.g. the INFO line that names
# the bootstrap), besides every rank's "ok" and a zero exit.
flavor=$1 n=$2 prog=$3 want=${4:-}
launcher=$(command -v "mpirun.$flavor")
if [ -z "$launcher" ] || [ ! -x "$prog" ]; then
  echo "SKIP: no $flavor job here: mpirun.$flavor missing, or $prog not built (no mpicc.$flavor when configured, or a sanitizer build, whose library an MPI program built outside it cannot load)"
  exit 77
fi
flags=""
if [ "$flavor" = openmpi ]; then
  # Open MPI counts hardware threads strictly and refuses root unless told.
  flags="--oversubscribe"
  [ "$(id -u)" = 0 ] && flags="$flags --allow-run-as-root"
fi
out=$(SYMM_BACKEND=${SYMM_BACKEND:-host} SYMM_TIMEOUT_MS=20000 "$launcher" $flags -n "$n" "$prog" 2>&1)
rc=$?
echo "$out"
oks=$(echo "$out" | grep -c "^mpi_job: rank .* ok")
if [ -n "$want" ] && ! echo "$out" | grep -qF "$want"; then
  echo "FAIL: $flavor at $n ranks: no line says \"$want\""
  exit 1
fi
[ "$rc" -eq 0 ] && [ "$oks" -eq "$n" ] && exit 0
echo "FAIL: $flavor at $n ranks: exit $rc, $oks of $n ranks ok"
exit 1
