#!/bin/sh
# Issue 21's figures on a GPU machine, in alternating rounds, after
# tests/gpu/run.sh has checked the bits:   tests/gpu/figures.sh BUILD_DIR [ROUNDS]
#  1. the HBM-resident regime (state in DRAM + HBM, no NVMe: the bound is
#     PCIe at the pinned rate measured in the run, or the update), the GPU
#     lane alone, gradients and copies in device, pinned and pageable memory:
#     3 GiB of fp32 state over a 1 GiB HBM tier (16 shards) and a 4 GiB DRAM
#     home (run.sh's check runs 1.5 GiB over 256 MiB, four shards);
#  2. the RAM-backed NVMe stand-in (examples/bench-step-ram.yaml: four tmpfs
#     paths; on the H100 machine 8, 16 or 32 wrote no faster, docs/
#     performance.md), all-CPU, all-GPU and auto, 4 GiB of fp32 state over
#     1 GiB DRAM.
# Every run is `tier-bench step --json`; the JSON lines go to
# $FIGURES_OUT (default $TMPDIR/tierstore-figures.jsonl), the first round's
# HBM-resident runs with device and with pageable gradients leave their
# TIER_TRACE in $FIGURES_OUT.device.trace.json and .host.trace.json (the
# overlap and the staging copies' share printed by scripts/trace-overlap.py),
# and a table with the ratios the acceptance asks for is printed last
# (scripts/step-figures.py).
set -u
build=${1:?usage: figures.sh BUILD_DIR [ROUNDS]}
rounds=${2:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
bench=$build/tools/tier-bench
tmp=${TMPDIR:-/tmp}/tierstore-figures
out=${FIGURES_OUT:-${TMPDIR:-/tmp}/tierstore-figures.jsonl}
limit=${TIER_GPU_STEP_TIMEOUT:-300}
mkdir -p "$tmp"
: >"$out"
cat >"$tmp/hbm.yaml" <<YAML
gpu:
  device: 0
  capacity: 1GiB
dram:
  capacity: 4GiB
YAML
run() {
	echo "== tier-bench step $*" >&2
	timeout -k 10 "$limit" "$bench" step --json --no-progress "$@" >>"$out" ||
		echo "== exit $? (tier-bench step $*)" >&2
}
r=1
while [ "$r" -le "$rounds" ]; do
	for g in device pinned host; do
		if [ "$r$g" = 1device ] || [ "$r$g" = 1host ]; then
			TIER_TRACE=$out.$g.trace.json run --manifest "$tmp/hbm.yaml" --dram 4GiB \
				--params 268435456 --steps 8 --offload-fraction 0 --grads "$g"
			printf '%s gradients: ' "$g"
			python3 "$root/scripts/trace-overlap.py" "$out.$g.trace.json" | tail -1
			continue
		fi
		run --manifest "$tmp/hbm.yaml" --dram 4GiB --params 268435456 --steps 8 \
			--offload-fraction 0 --grads "$g"
	done
	for f in 1 0 auto; do
		TIER_NVME0=/dev/shm/tierstore-ram/p0/ TIER_NVME1=/dev/shm/tierstore-ram/p1/ \
		TIER_NVME2=/dev/shm/tierstore-ram/p2/ TIER_NVME3=/dev/shm/tierstore-ram/p3/ \
			run --manifest "$root/examples/bench-step-ram.yaml" --params 357913941 \
			--steps 8 --offload-fraction "$f"
	done
	r=$((r + 1))
done
rm -rf /dev/shm/tierstore-ram
python3 "$root/scripts/step-figures.py" "$out"
