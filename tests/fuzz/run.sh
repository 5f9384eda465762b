#!/bin/sh
# Runs each fuzzer for SECONDS (default 60) from its seed corpus:
#   manifest     the manifest parser (fuzz_manifest.c, corpus/, manifest.dict),
#                inputs up to the manifest size cap (1 MiB, and one byte over it);
#   safetensors  the safetensors reader and header parser (fuzz_safetensors.c,
#                corpus-safetensors/, safetensors.dict), inputs up to 64 KiB.
# usage: tests/fuzz/run.sh BUILD_DIR [SECONDS [TARGET...]]   (default: both)
# On a failure it prints what the target said about the input (the lines
# before libFuzzer's own report) and the input itself, as hex, and keeps it
# (TARGET-crash-*, -leak-*, -timeout-*, -oom-*) in $FUZZ_ARTIFACTS (default
# BUILD_DIR/fuzz-artifacts), whose path it prints, so that CI can show it
# and it can be replayed:
#   BUILD_DIR/tests/fuzz/fuzz_TARGET BUILD_DIR/fuzz-artifacts/TARGET-crash-...
# The remaining targets still run; the exit status is the first failure's.
set -eu
build=$(cd "$1" && pwd)
secs=${2:-60}
[ $# -ge 2 ] && shift 2 || shift $#
targets=${*:-manifest safetensors}
here=$(cd "$(dirname "$0")" && pwd)
keep=${FUZZ_ARTIFACTS:-$build/fuzz-artifacts}
mkdir -p "$keep"
keep=$(cd "$keep" && pwd)
work=$(mktemp -d)
# The safetensors target writes (and fsyncs) two files an input: on a
# tmpfs where there is one.
scratch=$(mktemp -d /dev/shm/fuzz-st-XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$work" "$scratch"' EXIT

# -rss_limit_mb: the parsers must stay small whatever the input.
# -timeout=10: a 1 MiB manifest is answered within a second (test_manifest).
# The probed manifest parse resolves relative paths under a scratch directory.
fuzz_one() {
	name=$1
	case $name in
	manifest)
		corpus=corpus dict=manifest.dict max_len=1048577 ;;
	safetensors)
		corpus=corpus-safetensors dict=safetensors.dict max_len=65536 ;;
	*)
		echo "run.sh: no fuzzer '$name' (manifest, safetensors)" >&2
		return 2 ;;
	esac
	mkdir "$work/$name" "$work/$name/seeds" "$work/$name/out" "$work/$name/cwd"
	cp "$here/$corpus"/* "$work/$name/seeds/"
	rc=0
	(cd "$work/$name/cwd" && FUZZ_SCRATCH="$scratch" "$build/tests/fuzz/fuzz_$name" \
		-max_total_time="$secs" -rss_limit_mb=1024 -timeout=10 -max_len="$max_len" \
		-dict="$here/$dict" -artifact_prefix="$work/$name/out/$name-" \
		"$work/$name/seeds") >"$work/$name/log" 2>&1 || rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "--- fuzz_$name failed ($rc):"
		grep -v '^#[0-9]' "$work/$name/log" | tail -n 60
		for f in "$work/$name"/out/*; do
			[ -f "$f" ] || continue
			cp "$f" "$keep/"
			echo "--- the input, kept as $keep/$(basename "$f") ($(wc -c <"$f") bytes), as hex:"
			od -A x -t x1z -v "$f" | head -n 200
		done
		echo "fuzz artifacts: $keep"
		return "$rc"
	fi
	echo "--- fuzz_$name: ${secs} s"
	tail -n 3 "$work/$name/log"
}

status=0
for t in $targets; do
	fuzz_one "$t" || { rc=$?; [ "$status" -ne 0 ] || status=$rc; }
done
exit "$status"
