#!/bin/sh
# Packs what tests/gpu/run.sh and tests/gpu/figures.sh need from a CUDA
# build made here, for a GPU machine that has no build tools or packages of
# ours:   tests/gpu/pack.sh BUILD_DIR DEST
# DEST/build keeps the build's layout (tools/, tests/, tests/gpu/, the
# library, stripped), DEST/lib the shared libraries the binaries need that a
# bare machine may lack (libyaml, liburing, libnuma, libsubunit; not libc,
# libstdc++ or libgcc_s, and not NCCL, which is large and which the GPU
# machine's own CUDA packages provide: run.sh's caller puts its directory
# on LD_LIBRARY_PATH).  Then:  LD_LIBRARY_PATH=DEST/lib tests/gpu/run.sh DEST/build
set -eu
build=${1:?usage: pack.sh BUILD_DIR DEST}
dest=${2:?usage: pack.sh BUILD_DIR DEST}
[ -x "$build/tools/tier-bench" ] || { echo "pack.sh: $build/tools/tier-bench: no such program (build it first)" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest/build/tools" "$dest/build/tests/gpu" "$dest/lib"
find "$build" -maxdepth 1 -name "libtierstore.so*" ! -type d -exec cp -P {} "$dest/build/" \;
cp "$build/tools/tier-bench" "$build/tools/tier-stat" "$dest/build/tools/"
cp "$build/tests/test_trainer" "$build/tests/test_manifest" "$dest/build/tests/"
find "$build/tests/gpu" -maxdepth 1 -name "test_*" -type f -perm -u+x -exec cp {} "$dest/build/tests/gpu/" \;
find "$dest/build" -type f -perm -u+x -exec strip --strip-unneeded {} + 2>/dev/null || true
strip --strip-unneeded "$dest"/build/libtierstore.so.*.* 2>/dev/null || true
for f in "$dest"/build/tools/* "$dest"/build/tests/test_* "$dest"/build/tests/gpu/test_* "$dest"/build/libtierstore.so; do
	ldd "$f" 2>/dev/null
done | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
while read -r name path; do
	case $name in
	libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libstdc++*|libgcc_s*|libnccl*|libtierstore*|ld-linux*) ;;
	*) cp -L "$path" "$dest/lib/$name" ;;
	esac
done
du -sh "$dest"
