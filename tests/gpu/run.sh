#!/bin/sh
# Runs the GPU checks on a machine with a CUDA device, from a build made
# elsewhere (or here):  tests/gpu/run.sh BUILD_DIR
# Prints what each step found; exits non-zero if any step fails or if no
# GPU is visible (on a GPU machine a SKIP is a failure).  A step that runs
# past $TIER_GPU_STEP_TIMEOUT seconds (default 300) is killed and fails
# (exit 124): a hang is a failure too, and the steps after it still run.
# $PYTHON (default /usr/bin/python3, else python3) runs the TierAdamW check.
set -u
build=${1:-build}
fail=0
limit=${TIER_GPU_STEP_TIMEOUT:-300}
step() {
	echo "== $*"
	timeout -k 10 "$limit" "$@"
	rc=$?
	echo "== exit $rc"
	[ "$rc" -eq 0 ] || fail=1
}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
root=$(cd "$(dirname "$0")/../.." && pwd)
export TIER_TEST_TMPDIR="${TMPDIR:-/tmp}/tierstore-gpu-tests"
mkdir -p "$TIER_TEST_TMPDIR"
step "$build/tools/tier-stat" --version
step "$build/tools/tier-stat" --gpu-selftest 0
step "$build/tests/gpu/test_gpu"
step "$build/tests/gpu/test_gpu_hbm"
step "$build/tests/gpu/test_gpu_adamw"
step "$build/tests/gpu/test_gpu_optim"
step "$build/tests/gpu/test_gpu_zero"
TIER_TRAINER_HBM=cuda step "$build/tests/test_trainer"
TIER_DATA="$TIER_TEST_TMPDIR/data" step "$build/tools/tier-stat" --check
step "$build/tests/test_manifest"
# The pipelined lane end to end, bit for bit (--verify), with the buffers in
# each place, in the HBM-resident regime (no NVMe: the bound is the link)
# and through NVMe; the adam kernel against its same-traffic kernel; the
# overlap of the copies and the update in the timeline.  Figures printed.
cat >"$TIER_TEST_TMPDIR/hbm.yaml" <<YAML
gpu:
  device: 0
  capacity: 256MiB
dram:
  capacity: 2GiB
YAML
for g in device pinned host; do
	TIER_TRACE="$TIER_TEST_TMPDIR/trace-$g.json" step "$build/tools/tier-bench" step \
		--manifest "$TIER_TEST_TMPDIR/hbm.yaml" --dram 2GiB --params 134217728 --steps 4 \
		--offload-fraction 0 --grads $g --verify --no-progress
	step "$root/scripts/trace-overlap.py" "$TIER_TEST_TMPDIR/trace-$g.json"
	# the slots' timed spans: a kernel each, and host buffers' copies
	case $g in device) st=update_gpu,kernel_gpu ;; *) st=update_gpu,kernel_gpu,grad_in,out_d2h ;; esac
	step python3 "$root/tests/formats/trace_check.py" "$TIER_TEST_TMPDIR/trace-$g.json" --steps 4 --stages $st
done
# The lane with one slot and with the most (TIER_GPU_SLOTS), and with the
# gradients queued ahead of their state (TIER_GPU_GRAD_AHEAD, traced: the
# spans of slots used ahead), bit for bit.
for v in 1:off:host 8:off:pinned 3:on:host 2:on:pinned; do
	g=${v##*:}
	a=${v#*:}
	TIER_GPU_SLOTS=${v%%:*} TIER_GPU_GRAD_AHEAD=${a%%:*} TIER_TRACE="$TIER_TEST_TMPDIR/trace-v.json" \
		step "$build/tools/tier-bench" step --manifest "$TIER_TEST_TMPDIR/hbm.yaml" --dram 2GiB \
		--params 134217728 --steps 3 --offload-fraction 0 --grads $g --verify --no-progress
	step python3 "$root/tests/formats/trace_check.py" "$TIER_TEST_TMPDIR/trace-v.json" --steps 3 \
		--stages update_gpu,kernel_gpu,grad_in,out_d2h
done
TIER_DATA="$TIER_TEST_TMPDIR/data" step "$build/tools/tier-bench" step --params 67108864 \
	--dram 256MiB --steps 4 --offload-fraction auto --verify --no-progress
for m in fp32 bf16 q8; do
	step "$build/tools/tier-bench" adam --gpu --moments $m --runs 7
done
# TierAdamW with CUDA tensors.  It exits 77 when this machine's python has
# no torch with CUDA: reported, not counted as a failure (the library's own
# GPU checks above are).
py=${PYTHON:-/usr/bin/python3}
command -v "$py" >/dev/null || py=python3
echo "== TierAdamW on CUDA ($py)"
TIERSTORE_LIBRARY="$build/libtierstore.so" PYTHONPATH="$root/python" \
	timeout -k 10 "$limit" "$py" "$root/tests/gpu/test_python_gpu.py"
rc=$?
echo "== exit $rc"
[ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || fail=1
exit $fail
