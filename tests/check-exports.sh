#!/bin/sh
# Every symbol libsymmem.so defines for the dynamic linker starts with symm_,
# and every function of the public header is among them.
set -e
lib="$1"; header="$2"
defined=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | sort -u)
bad=$(printf '%s\n' "$defined" | grep -v '^symm_' || true)
if [ -n "$bad" ]; then
  echo "FAIL: exported symbols without the symm_ prefix:"; echo "$bad"; exit 1
fi
missing=0
for f in $(grep -oE '\bsymm_[a-z0-9_]+\(' "$header" | tr -d '(' | sort -u); do
  printf '%s\n' "$defined" | grep -qx "$f" || { echo "FAIL: $f declared but not exported"; missing=1; }
done
[ $missing -eq 0 ] || exit 1
# The GPU safety rule (docs/design.md), kept by construction: the library does not
# even name a multicast entry point, so nothing can resolve or call one.
if grep -aq 'cuMulticast' "$lib"; then
  echo "FAIL: $lib names a cuMulticast entry point"; exit 1
fi
echo "ok: $(printf '%s\n' "$defined" | wc -l) exported symbols, all symm_"
