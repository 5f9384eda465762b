#!/bin/sh
# Runs the manifest fuzzer for SECONDS (default 60) from the seed corpus.
# usage: tests/fuzz/run.sh BUILD_DIR [SECONDS]
set -eu
build=$1
secs=${2:-60}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here"/corpus/* "$work"/
# -rss_limit_mb: the parser must stay small whatever the input.
"$build"/tests/fuzz/fuzz_manifest -max_total_time="$secs" -rss_limit_mb=1024 \
	-timeout=10 -max_len=8192 -dict="$here/manifest.dict" \
	-artifact_prefix="$work/" "$work"
