#!/bin/sh
# Issue 21's figures on a GPU machine, in alternating rounds, after
# tests/gpu/run.sh has checked the bits:   tests/gpu/figures.sh BUILD_DIR [ROUNDS]
#  1. the HBM-resident regime (state in DRAM + HBM, no NVMe: the bound is
#     PCIe at the pinned rate measured in the run, or the update), the GPU
#     lane alone, gradients and copies in device, pinned and pageable memory:
#     3 GiB of fp32 state over a 1 GiB HBM tier (16 shards) and a 4 GiB DRAM
#     home (run.sh's check runs 1.5 GiB over 256 MiB, four shards);
#  2. the RAM-backed NVMe stand-in (examples/bench-step-ram.yaml: four tmpfs
#     paths), all-CPU, all-GPU and auto, 4 GiB of fp32 state over 1 GiB DRAM;
#     before the rounds, the stand-in's own rate with 4, 8 and 16 tmpfs paths
#     (`tier-bench io`, 3 alternating rounds, a line each: a buffered tmpfs
#     write holds its file's lock, so the paths may bound the writes).
# Every run is `tier-bench step --json`; the JSON lines go to
# $FIGURES_OUT (default $TMPDIR/tierstore-figures.jsonl), the first round's
# HBM-resident run with device gradients leaves its TIER_TRACE in
# $FIGURES_OUT.trace.json (its overlap printed by scripts/trace-overlap.py),
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
# the stand-in's rate on P tmpfs paths of 12/P GiB each: a line each
io_rate() {
	{
		printf 'dram:\n  capacity: 1GiB\nnvme:\n  direct: false\n  paths:\n'
		i=0
		while [ "$i" -lt "$1" ]; do
			printf '    - { path: /dev/shm/tierstore-io/p%d/, capacity: %dMiB, create: true }\n' \
				"$i" $((12288 / $1))
			i=$((i + 1))
		done
	} >"$tmp/io$1.yaml"
	timeout -k 10 "$limit" "$bench" io --manifest "$tmp/io$1.yaml" --size 4GiB --bs 64MiB --passes 2 \
		--qd 8 --json | python3 -c "import json, sys; d = json.load(sys.stdin); print('== stand-in, $1 paths: write %.1f GB/s, read %.1f GB/s' % (d['write_GBps'], d['read_GBps']))" >&2 ||
		echo "== exit $? (tier-bench io, $1 paths)" >&2
	rm -rf /dev/shm/tierstore-io
}
io_rate 16 2>/dev/null # a warm-up, not printed: a first run wrote slower (on the dev VM)
for order in "4 8 16" "16 8 4" "4 8 16"; do
	for p in $order; do
		io_rate "$p"
	done
done
run() {
	echo "== tier-bench step $*" >&2
	timeout -k 10 "$limit" "$bench" step --json --no-progress "$@" >>"$out" ||
		echo "== exit $? (tier-bench step $*)" >&2
}
r=1
while [ "$r" -le "$rounds" ]; do
	for g in device pinned host; do
		if [ "$r$g" = 1device ]; then
			TIER_TRACE=$out.trace.json run --manifest "$tmp/hbm.yaml" --dram 4GiB \
				--params 268435456 --steps 8 --offload-fraction 0 --grads "$g"
			python3 "$root/scripts/trace-overlap.py" "$out.trace.json" | tail -1
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
