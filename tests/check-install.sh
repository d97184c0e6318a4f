#!/bin/sh
# `cmake --install` into a scratch prefix, then build a program against the
# installed library twice: through pkg-config and through the CMake package.
set -e
# LIBDIR: CMAKE_INSTALL_LIBDIR of the build (lib, lib64, lib/x86_64-linux-gnu
# for PREFIX=/usr on Debian ...); without it, wherever libsymmem.so landed.
build="$1"; src="$2"; libdir_rel="${3:-}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
for f in include/symmem.h include/symmem_device.cuh bin/symmem-run bin/symmem-info bin/symmem-bench; do
  [ -e "$tmp/prefix/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
case $libdir_rel in
  "") libdir=$(dirname "$(find "$tmp/prefix" -name libsymmem.so | head -n 1)") ;;
  /*) libdir=$libdir_rel ;; # an absolute CMAKE_INSTALL_LIBDIR ignores --prefix
  *) libdir="$tmp/prefix/$libdir_rel" ;;
esac
[ -e "$libdir/libsymmem.so" ] && [ -e "$libdir/libsymmem.a" ] || { echo "FAIL: libraries"; exit 1; }
# NVSHMEM's bootstrap plugin beside the library (where the nvshmem backend
# looks), exporting NVSHMEM's entry point and symmem's binding, nothing else.
plugin="$libdir/libsymmem_nvshmem_bootstrap.so"
[ -e "$plugin" ] || { echo "FAIL: $plugin not installed"; exit 1; }
exports=$(nm -D --defined-only "$plugin" | awk '{print $3}' | sort | tr '\n' ' ')
[ "$exports" = "nvshmemi_bootstrap_plugin_init symm_nvshmem_bootstrap_bind " ] ||
  { echo "FAIL: the plugin exports: $exports"; exit 1; }
PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --exists symmem || { echo "FAIL: pkg-config"; exit 1; }
cc -std=c11 -o "$tmp/ex" "$src/examples/neighbor_exchange.c" \
  $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs symmem)
# No LD_LIBRARY_PATH: the run path from --libs finds the library.
env -u LD_LIBRARY_PATH SYMM_BACKEND=host "$tmp/prefix/bin/symmem-run" -n 2 -- "$tmp/ex" >"$tmp/out"
grep -q " OK" "$tmp/out" || { cat "$tmp/out"; echo "FAIL: example via pkg-config"; exit 1; }
mkdir "$tmp/cm"
cat >"$tmp/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.18)
project(consumer C)
find_package(symmem REQUIRED)
add_executable(ex ex.c)
target_link_libraries(ex symmem::symmem)
CM
cp "$src/examples/neighbor_exchange.c" "$tmp/cm/ex.c"
cmake -S "$tmp/cm" -B "$tmp/cm/b" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm/b" >/dev/null
echo "ok: installed (the NVSHMEM bootstrap plugin beside the library), built with pkg-config and find_package(symmem)"
