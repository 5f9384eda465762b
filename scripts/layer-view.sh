#!/bin/sh
# Builds the include view of one layer: a folder holding links to the
# folders of that layer and of the layers below it, to config.h and to the
# public headers the layer may use, and nothing else.  The layer's sources
# are compiled with that folder as their only include root, so an include
# that goes up a layer ("runtime/manifest/manifest.h" from tiers/) finds no file and
# the build stops there.  meson runs this at configure time.  A public
# header is include/HEADER of the source tree, or, for one meson generates
# (tierstore/version.h), of the build tree.
#   layer-view.sh VIEW SRCROOT BUILDROOT LAYER... -- PUBLIC_HEADER...
set -eu
view=$1 src=$2 build=$3
shift 3
rm -rf "$view"
mkdir -p "$view"
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
	ln -s "$src/$1" "$view/$1"
	shift
done
[ $# -gt 0 ] && shift
ln -s "$build/config.h" "$view/config.h"
for h in "$@"; do
	mkdir -p "$view/$(dirname "$h")"
	if [ -e "$src/include/$h" ]; then
		ln -s "$src/include/$h" "$view/$h"
	elif [ -e "$build/include/$h" ]; then
		ln -s "$build/include/$h" "$view/$h"
	else
		echo "layer-view.sh: no public header $h in $src/include or $build/include" >&2
		exit 1
	fi
done
