#!/bin/sh
# Runs the manifest fuzzer for SECONDS (default 60) from the seed corpus.
# usage: tests/fuzz/run.sh BUILD_DIR [SECONDS]
# On a failure it prints what the target said about the input (the lines
# before libFuzzer's own report) and the input itself, escaped, and keeps it
# as tests/fuzz/crash-* (git ignores those) so that it can be replayed:
#   BUILD_DIR/tests/fuzz/fuzz_manifest tests/fuzz/crash-...
set -eu
build=$1
secs=${2:-60}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here"/corpus/* "$work"/
mkdir "$work/out"
# -rss_limit_mb: the parser must stay small whatever the input.
rc=0
"$build"/tests/fuzz/fuzz_manifest -max_total_time="$secs" -rss_limit_mb=1024 \
	-timeout=10 -max_len=8192 -dict="$here/manifest.dict" \
	-artifact_prefix="$work/out/" "$work" >"$work/log" 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then
	grep -v '^#[0-9]' "$work/log" | tail -n 60
	for f in "$work"/out/*; do
		[ -f "$f" ] || continue
		echo "--- the input ($f, $(wc -c <"$f") bytes), escaped:"
		od -c "$f" | head -n 80
		cp "$f" "$here/"
	done
	exit "$rc"
fi
tail -n 3 "$work/log"
