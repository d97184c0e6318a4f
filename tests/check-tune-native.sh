#!/bin/sh
# bench/tune-native.sh against stub tools (no GPU, no nvcc needed): one
# column per launch setting, per kernel variant and per TUNE_SETTINGS entry, each variant built with
# its own flags and loaded through SYMM_COLL_KERNELS, a variant that does
# not build reported and left out, and the exit status saying so.
#   tests/check-tune-native.sh SOURCE_DIR
set -u
SRC=${1:?source dir}
tmp=$(mktemp -d /tmp/symm-tune-test.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
# A trap on INT/TERM alone would run and then let the script go on without
# its temporary files; exiting runs the EXIT trap.
trap 'exit 130' INT
trap 'exit 143' TERM
fail() { echo "check-tune-native: FAIL: $*"; cat "$tmp/out" 2>/dev/null; exit 1; }

mkdir -p "$tmp/build/tools"
# symmem-run -n N -- PROGRAM ARGS: runs PROGRAM once.
cat >"$tmp/build/tools/symmem-run" <<'STUB'
#!/bin/sh
while [ "$1" != "--" ]; do shift; done
shift
exec "$@"
STUB
# symmem-bench --csv: a time per setting, so that the table shows which
# column ran with which setting; a variant's kernel file must exist.
cat >"$tmp/build/tools/symmem-bench" <<'STUB'
#!/bin/sh
t=1.0
[ "${SYMM_GPU_PDL:-1}" = 0 ] && t=2.0
[ -n "${SYMM_COLL_MAX_BLOCKS:-}" ] && t=3.$SYMM_COLL_MAX_BLOCKS
[ -n "${SYMM_COLL_LL_THREADS:-}" ] && t=6.$SYMM_COLL_LL_THREADS${SYMM_COLL_MAX_BLOCKS:-}
# STUB_TERM_LOG: record the script's temporary folder (where our stdout
# goes), then SIGTERM the script (our parent), as Ctrl-C or a job's end would.
if [ -n "${STUB_TERM_LOG:-}" ]; then
  dirname "$(readlink /proc/$$/fd/1)" >"$STUB_TERM_LOG"
  kill -TERM "$PPID"
fi
if [ -n "${SYMM_COLL_KERNELS:-}" ]; then
  [ -f "$SYMM_COLL_KERNELS" ] || { echo "no kernel file $SYMM_COLL_KERNELS" >&2; exit 1; }
  t=$(cat "$SYMM_COLL_KERNELS")
fi
echo "collective,backend,ranks,inplace,size_bytes,count,type,op,time_us,algbw,busbw,wrong"
for s in 4096 8192; do echo "all_reduce,native,2,1,$s,$((s / 2)),bf16,sum,$t,0,0,0"; done
STUB
# nvcc: records its arguments; the "kernel file" holds the time the stub
# bench will print for it; -DFAIL does not compile.
cat >"$tmp/nvcc" <<'STUB'
#!/bin/sh
echo "$*" >>"$NVCC_LOG"
out=
for a in "$@"; do
  case $a in -DFAIL) exit 1 ;; esac
  [ "$prev" = -o ] && out=$a
  prev=$a
done
case $out in *v1.fatbin) echo 4.0 ;; *old.fatbin) echo 5.0 ;; *) echo 9.9 ;; esac >"$out"
STUB
chmod +x "$tmp/build/tools/symmem-run" "$tmp/build/tools/symmem-bench" "$tmp/nvcc"
echo "// another coll_kernels.cu" >"$tmp/old.cu"

NVCC="$tmp/nvcc" NVCC_LOG="$tmp/nvcc.log" TUNE_ALGOS=ll TUNE_BLOCKS=8 TUNE_MIN=4K TUNE_MAX=8K \
  TUNE_ARCH=90 TUNE_VARIANTS="v1=-DSYMM_COLL_UNROLL=8,-DSYMM_LL128_BATCH=2 broken=-DFAIL \
  pdl=-DX max8=-DX v1=-DX bad/name=-DX" \
  TUNE_SOURCES="old=$tmp/old.cu" \
  TUNE_SETTINGS="t64=SYMM_COLL_LL_THREADS=64 both=SYMM_COLL_LL_THREADS=32,SYMM_COLL_MAX_BLOCKS=9 \
  no_pdl=X=1 v1=X=1 lone=SYMM_COLL_LL_THREADS bad-name=X=1" \
  sh "$SRC/bench/tune-native.sh" "$tmp/build" 2 >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
[ $rc -ne 0 ] || fail "exit status 0 although a variant did not build"
grep -q "variant broken does not build" "$tmp/out" || fail "the broken variant is not named"
for name in pdl max8 bad/name; do
  grep -q "'$name' cannot name a variant" "$tmp/out" || fail "variant name $name was taken"
done
grep -q "variant v1 named twice" "$tmp/out" || fail "a second v1 was taken"
for name in no_pdl bad-name; do
  grep -q "'$name' cannot name a setting column" "$tmp/out" || fail "setting column $name was taken"
done
grep -q "column v1 named twice" "$tmp/out" || fail "a setting column named like a variant was taken"
grep -q "setting column lone needs VAR=VALUE" "$tmp/out" || fail "a column without a value was taken"
grep -q -- "-DSYMM_COLL_UNROLL=8 -DSYMM_LL128_BATCH=2 .*coll_kernels.cu" "$tmp/nvcc.log" ||
  fail "v1 was not built with both of its flags: $(cat "$tmp/nvcc.log")"
grep -q "arch=compute_90,code=sm_90.* $tmp/old.cu" "$tmp/nvcc.log" ||
  fail "the other source was not built: $(cat "$tmp/nvcc.log")"
head=$(grep -E '^ +size ' "$tmp/out" | tr -s ' ')
[ "$head" = " size pdl no_pdl max8 v1 old t64 both" ] || fail "columns: '$head'"
for s in 4096 8192; do
  row=$(grep -E "^ +$s " "$tmp/out" | tr -s ' ')
  [ "$row" = " $s 1.0 2.0 3.8 4.0 5.0 6.64 6.329" ] || fail "row $s: '$row'"
done
# Nothing to run is an error, not an empty success.
TUNE_ALGOS='' sh "$SRC/bench/tune-native.sh" "$tmp/build" 2 >"$tmp/out" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "nothing to run" "$tmp/out"; then
  fail "empty TUNE_ALGOS: exit $rc"
fi
# SIGTERM ends the script (143) with its temporary folder removed, instead
# of the cleanup running and the sweep going on without the folder.
STUB_TERM_LOG="$tmp/term.log" TUNE_ALGOS="ll one_shot" TUNE_BLOCKS=8 \
  sh "$SRC/bench/tune-native.sh" "$tmp/build" 2 >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
[ $rc -eq 143 ] || fail "SIGTERM: exit $rc, not 143"
script_tmp=$(cat "$tmp/term.log")
case $script_tmp in /tmp/symm-tune.*) ;; *) fail "SIGTERM: temporary folder '$script_tmp'" ;; esac
[ ! -e "$script_tmp" ] || fail "SIGTERM: $script_tmp left behind"
! grep -q "^## \|failed" "$tmp/out" || fail "SIGTERM: the sweep went on"
echo "check-tune-native: passed"
