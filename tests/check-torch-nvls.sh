#!/bin/sh
# The GPU safety rule (docs/design.md) in the PyTorch scripts of bench/: each one turns
# NVLS / multicast off for NCCL, PyTorch and NVSHMEM before torch loads, over
# whatever the environment says.  A stub torch package (no GPU, no PyTorch
# needed) prints the three variables as torch's import sees them.  The
# inherited values are placeholders that a script must replace; nothing
# here ever asks for multicast, not even of a stub.
#   tests/check-torch-nvls.sh SOURCE_DIR PYTHON3
set -u
SRC=${1:?source dir}
PY=${2:-python3}
tmp=$(mktemp -d /tmp/symm-torch-nvls.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir "$tmp/torch"
cat >"$tmp/torch/__init__.py" <<'STUB'
import os
print("NVLS", os.environ.get("NCCL_NVLS_ENABLE"), os.environ.get("TORCH_SYMM_MEM_DISABLE_MULTICAST"),
      os.environ.get("NVSHMEM_DISABLE_NVLS"))
raise SystemExit(0)
STUB
n=0
for script in "$SRC"/bench/*.py; do
  grep -q '^import torch' "$script" || continue
  n=$((n + 1))
  out=$(NCCL_NVLS_ENABLE=inherited TORCH_SYMM_MEM_DISABLE_MULTICAST=inherited \
    NVSHMEM_DISABLE_NVLS=inherited PYTHONPATH="$tmp" "$PY" "$script" 2>&1)
  echo "$script: $out"
  case $out in
    *"NVLS 0 1 1"*) ;;
    *) echo "check-torch-nvls: FAIL: $script leaves NVLS or multicast on"; exit 1 ;;
  esac
done
[ $n -ge 2 ] || { echo "check-torch-nvls: FAIL: only $n torch scripts found"; exit 1; }
echo "check-torch-nvls: passed"
