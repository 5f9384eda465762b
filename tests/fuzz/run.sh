#!/bin/sh
# Runs the manifest fuzzer for SECONDS (default 60) from the seed corpus,
# with inputs up to the manifest size cap (1 MiB, and one byte over it).
# usage: tests/fuzz/run.sh BUILD_DIR [SECONDS]
# On a failure it prints what the target said about the input (the lines
# before libFuzzer's own report) and the input itself, as hex, and keeps it
# (crash-*, leak-*, timeout-*, oom-*) in $FUZZ_ARTIFACTS (default
# BUILD_DIR/fuzz-artifacts), whose path it prints, so that CI can show it
# and it can be replayed:
#   BUILD_DIR/tests/fuzz/fuzz_manifest BUILD_DIR/fuzz-artifacts/crash-...
set -eu
build=$(cd "$1" && pwd)
secs=${2:-60}
here=$(cd "$(dirname "$0")" && pwd)
keep=${FUZZ_ARTIFACTS:-$build/fuzz-artifacts}
mkdir -p "$keep"
keep=$(cd "$keep" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here"/corpus/* "$work"/
mkdir "$work/out" "$work/cwd"
# -rss_limit_mb: the parser must stay small whatever the input.
# -timeout=10: a 1 MiB input is answered within a second (test_manifest).
# The probed parse resolves relative paths under a scratch directory.
rc=0
(cd "$work/cwd" && "$build"/tests/fuzz/fuzz_manifest -max_total_time="$secs" \
	-rss_limit_mb=1024 -timeout=10 -max_len=1048577 -dict="$here/manifest.dict" \
	-artifact_prefix="$work/out/" "$work") >"$work/log" 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then
	grep -v '^#[0-9]' "$work/log" | tail -n 60
	for f in "$work"/out/*; do
		[ -f "$f" ] || continue
		cp "$f" "$keep/"
		echo "--- the input, kept as $keep/$(basename "$f") ($(wc -c <"$f") bytes), as hex:"
		od -A x -t x1z -v "$f" | head -n 200
	done
	echo "fuzz artifacts: $keep"
	exit "$rc"
fi
tail -n 3 "$work/log"
