#!/bin/sh
# Builds tierstore and runs its test suites.
#   ./test.sh                      build/ (debugoptimized, CUDA when nvcc is found)
#   ./test.sh DIR [MESON_OPTION...] [-- MESON_TEST_ARGS...]
# A new DIR is configured with the options given; an existing one is
# reconfigured with them.  Warnings in our code fail the build (werror).
set -eu
cd "$(dirname "$0")"
dir=${1:-build}
[ $# -gt 0 ] && shift
opts=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
	opts="$opts $1"
	shift
done
[ "${1:-}" = "--" ] && shift
if [ -d "$dir/meson-private" ]; then
	# shellcheck disable=SC2086
	meson configure "$dir" -Dwerror=true -Dtests=enabled $opts >/dev/null
else
	# shellcheck disable=SC2086
	meson setup "$dir" -Dwerror=true -Dtests=enabled $opts >/dev/null
fi
ninja -C "$dir"
meson test -C "$dir" --print-errorlogs "$@"
