#!/bin/sh
# Launch settings of the native collectives side by side, in one run: bf16
# sum all-reduce in a CUDA graph (symmem-bench --graph, 20 calls), µs per
# call for each algorithm with programmatic dependent launch on and off
# (SYMM_GPU_PDL) and with the grid capped (SYMM_COLL_MAX_BLOCKS).
# Prints one table per algorithm: a row per size, a column per setting.
# TUNE_COLLS adds the other bandwidth collectives (all_gather,
# reduce_scatter), one table each.
#   bench/tune-native.sh [BUILD_DIR] [RANKS]
# TUNE_ALGOS, TUNE_COLLS, TUNE_BLOCKS, TUNE_MIN, TUNE_MAX override the sweep
# (TUNE_ALGOS="" with TUNE_COLLS: only those collectives);
# TUNE_CHECK=0 skips symmem-bench's check of the results (slow at 256 MiB).
# Kernel variants get a column each, loaded through SYMM_COLL_KERNELS:
#   TUNE_VARIANTS="unroll8=-DSYMM_COLL_UNROLL=8 b2=-DSYMM_LL128_BATCH=2"
#     (name=nvcc flags, several flags joined by commas),
#   TUNE_SOURCES="old=path/to/coll_kernels.cu" (another version of the file;
#     it must define the symm_coll_abi_* markers of this version's ABI),
# built with nvcc for TUNE_ARCH (default: the first GPU's, else 90), SASS
# and PTX.  Names are letters, digits and _, none of the settings' own.
# Settings get a column each too:
#   TUNE_SETTINGS="t256=SYMM_COLL_LL_THREADS=256 x=VAR=VALUE,VAR2=VALUE2"
set -u
BUILD=${1:-build}
RANKS=${2:-2}
ALGOS=${TUNE_ALGOS-"ll ll128 one_shot two_shot"}
COLLS=${TUNE_COLLS:-}
BLOCKS=${TUNE_BLOCKS-"16 32 64"}
MIN=${TUNE_MIN:-4K}
MAX=${TUNE_MAX:-64M}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
tmp=$(mktemp -d /tmp/symm-tune.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
# A trap on INT/TERM alone would run and then let the script go on without
# its temporary files; exiting runs the EXIT trap.
trap 'exit 130' INT
trap 'exit 143' TERM
status=0
SRC=$(cd "$(dirname "$0")/.." && pwd)
ARCH=${TUNE_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
  head -n 1 | tr -d '. ')}
ARCH=${ARCH:-90}
if [ -z "$ALGOS$COLLS" ]; then
  echo "tune-native: nothing to run (TUNE_ALGOS and TUNE_COLLS are both empty)" >&2
  exit 2
fi

# new_column KIND NAME: whether NAME can name a new column (letters, digits
# and _, none of the built-in columns', not taken); says why not.
new_column() {
  case $2 in
    "" | pdl | no_pdl | max[0-9]* | *[!A-Za-z0-9_]*)
      echo "tune-native: '$2' cannot name a $1" >&2
      status=1
      return 1
      ;;
  esac
  case " $variants $settings " in *" $2 "*)
    echo "tune-native: $1 $2 named twice" >&2
    status=1
    return 1
    ;;
  esac
}

# kernels NAME FILE FLAGS...: $tmp/NAME.fatbin from FILE (a coll_kernels.cu).
kernels() {
  kname=$1 kfile=$2
  shift 2
  new_column variant "$kname" || return 1
  ${NVCC:-nvcc} --fatbin -std=c++17 -O3 -gencode "arch=compute_$ARCH,code=sm_$ARCH" \
    -gencode "arch=compute_$ARCH,code=compute_$ARCH" "$@" \
    -I"$SRC/include" -I"$SRC/src" -o "$tmp/$kname.fatbin" "$kfile" ||
    { echo "tune-native: variant $kname does not build" >&2; status=1; return 1; }
  variants="$variants $kname"
}
variants= settings=
for v in ${TUNE_VARIANTS:-}; do
  # shellcheck disable=SC2046 # the flags split at commas
  kernels "${v%%=*}" "$SRC/src/kernels/coll_kernels.cu" $(printf '%s\n' "${v#*=}" | tr , ' ')
done
for v in ${TUNE_SOURCES:-}; do kernels "${v%%=*}" "${v#*=}"; done
# Columns of settings: name and VAR=VALUE list (commas).
for v in ${TUNE_SETTINGS:-}; do
  sname=${v%%=*}
  new_column "setting column" "$sname" || continue
  case ${v#*=} in *=*) ;; *)
    echo "tune-native: setting column $sname needs VAR=VALUE" >&2
    status=1
    continue
    ;;
  esac
  settings="$settings $sname"
  eval "setting_$sname=\${v#*=}"
done

# run NAME WHAT [VAR=VALUE ...]: size,time rows of one sweep into
# $tmp/WHAT.NAME; WHAT is an all-reduce algorithm or another collective.
run() {
  name=$1 what=$2
  shift 2
  case $what in
    all_gather | reduce_scatter) sel="--coll $what" ;;
    *) sel="--algo $what" ;;
  esac
  # shellcheck disable=SC2086 # $sel is two words
  env "$@" "$BUILD/tools/symmem-run" -n "$RANKS" -- "$BUILD/tools/symmem-bench" --graph \
    --dtype bf16 $sel -b "$MIN" -e "$MAX" -f 2 -n 20 -c "${TUNE_CHECK:-1}" --csv >"$tmp/out" 2>"$tmp/err" ||
    { echo "tune-native: $what $name failed:" >&2; cat "$tmp/err" >&2; status=1; return; }
  awk -F, 'NR > 1 { print $5 "," $9 }' "$tmp/out" >"$tmp/$what.$name"
}

for algo in $ALGOS $COLLS; do
  names="pdl no_pdl"
  run pdl "$algo"
  run no_pdl "$algo" SYMM_GPU_PDL=0
  for b in $BLOCKS; do
    names="$names max$b"
    run "max$b" "$algo" SYMM_COLL_MAX_BLOCKS="$b"
  done
  for v in $variants; do
    names="$names $v"
    run "$v" "$algo" SYMM_COLL_KERNELS="$tmp/$v.fatbin"
  done
  for v in $settings; do
    names="$names $v"
    eval "vals=\$setting_$v"
    # shellcheck disable=SC2046,SC2154 # the VAR=VALUE list splits at commas
    run "$v" "$algo" $(printf '%s\n' "$vals" | tr , ' ')
  done
  echo "## $algo, bf16, CUDA graph, $RANKS ranks, µs per call"
  printf '%10s' size
  for n in $names; do printf ' %9s' "$n"; done
  echo
  # One row per size of the first sweep; '-' where a sweep lacks it.
  for size in $(cut -d, -f1 "$tmp/$algo.pdl" 2>/dev/null); do
    printf '%10s' "$size"
    for n in $names; do
      t=$(awk -F, -v s="$size" '$1 == s { print $2 }' "$tmp/$algo.$n" 2>/dev/null)
      printf ' %9s' "${t:--}"
    done
    echo
  done
  echo
done
exit $status
