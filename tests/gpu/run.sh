#!/bin/sh
# Runs the GPU checks on a machine with a CUDA device, from a build made
# elsewhere (or here):  tests/gpu/run.sh BUILD_DIR
# Prints what each step found; exits non-zero if any step fails or if no
# GPU is visible (on a GPU machine a SKIP is a failure).
set -u
build=${1:-build}
fail=0
step() {
	echo "== $*"
	"$@"
	rc=$?
	echo "== exit $rc"
	[ "$rc" -eq 0 ] || fail=1
}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
export TIER_TEST_TMPDIR="${TMPDIR:-/tmp}/tierstore-gpu-tests"
mkdir -p "$TIER_TEST_TMPDIR"
step "$build/tools/tier-stat" --version
step "$build/tools/tier-stat" --gpu-selftest 0
step "$build/tests/gpu/test_gpu"
step "$build/tests/gpu/test_gpu_hbm"
step "$build/tests/gpu/test_gpu_adamw"
step "$build/tests/gpu/test_gpu_optim"
TIER_TRAINER_HBM=cuda step "$build/tests/test_trainer"
TIER_DATA="$TIER_TEST_TMPDIR/data" step "$build/tools/tier-stat" --check
step "$build/tests/test_manifest"
exit $fail
