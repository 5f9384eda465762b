#!/bin/sh
# The store suite's stress case, many times in a row, while the machine is
# loaded with NVMe traffic (tier-bench io in a loop) and a compile job (the
# library rebuilt from scratch in a loop):
#   scripts/stress-under-load.sh BUILD_DIR [RUNS]
# BUILD_DIR is a build with tests (./test.sh BUILD_DIR).  Stops at the first
# failing run and prints its log; prints "N passed, 0 failed" when all pass.
set -eu
build=$(cd "$1" && pwd)
runs=${2:-50}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
load_pids=""
cleanup() {
	for p in $load_pids; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT INT TERM
# NVMe load: 256 MiB writes and reads, one after the other, without end.
(while :; do TIER_DATA="$work/io" "$build/tools/tier-bench" io --size 256MiB >/dev/null 2>&1 || true; done) &
load_pids="$load_pids $!"
# CPU load: the library compiled from scratch, again and again.
meson setup "$work/cc" "$here" -Dtests=disabled -Dcuda=disabled >/dev/null
(while :; do ninja -C "$work/cc" -t clean >/dev/null 2>&1; ninja -C "$work/cc" >/dev/null 2>&1 || true; done) &
load_pids="$load_pids $!"
mkdir -p "$work/tmp"
n=0
while [ "$n" -lt "$runs" ]; do
	if ! CK_RUN_CASE=stress TIER_TEST_TMPDIR="$work/tmp" CK_DEFAULT_TIMEOUT=300 \
		"$build/tests/test_store" >"$work/log" 2>&1; then
		cat "$work/log"
		echo "stress: run $((n + 1)) of $runs failed"
		echo "$n passed, 1 failed"
		exit 1
	fi
	n=$((n + 1))
done
echo "$n passed, 0 failed"
