#!/bin/sh
# Striping over two files on one disk against one file, in alternating
# rounds:  scripts/bench-stripe.sh DIR [ROUNDS] [SIZE]
# Both runs: tier-bench io, 1 MiB requests, 32 in flight, checksums on.
# Prints every round and the median ratios two-paths / one-path.
set -eu
dir=$1
rounds=${2:-7}
size=${3:-1G}
here=$(cd "$(dirname "$0")/.." && pwd)
bench=${TIER_BENCH:-$here/build/tools/tier-bench}
mkdir -p "$dir/a" "$dir/b"
printf 'dram:\n  capacity: 1GiB\nnvme:\n  paths:\n    - {path: "%s/a/", capacity: 2GiB, queue_depth: 32}\n' \
	"$dir" >"$dir/one.yaml"
printf 'dram:\n  capacity: 1GiB\nnvme:\n  paths:\n    - {path: "%s/a/", capacity: 1GiB, queue_depth: 32}\n    - {path: "%s/b/", capacity: 1GiB, queue_depth: 32}\n' \
	"$dir" "$dir" >"$dir/two.yaml"
run() {
	"$bench" io --manifest "$1" --size "$size" --json |
		python3 -c "import json,sys; j=json.load(sys.stdin); print(j['write_GBps'], j['read_GBps'])"
}
echo "round order one_write one_read two_write two_read write_ratio read_ratio"
r=1
ws=""
rs=""
while [ "$r" -le "$rounds" ]; do
	if [ $((r % 2)) -eq 1 ]; then
		order=one-first
		o=$(run "$dir/one.yaml"); t=$(run "$dir/two.yaml")
	else
		order=two-first
		t=$(run "$dir/two.yaml"); o=$(run "$dir/one.yaml")
	fi
	line=$(python3 -c "
ow,orr='$o'.split(); tw,tr='$t'.split()
ow,orr,tw,tr=map(float,(ow,orr,tw,tr))
print('%d %s %.3f %.3f %.3f %.3f %.3f %.3f' % ($r,'$order',ow,orr,tw,tr,tw/ow,tr/orr))")
	echo "$line"
	ws="$ws $(echo "$line" | cut -d' ' -f7)"
	rs="$rs $(echo "$line" | cut -d' ' -f8)"
	r=$((r + 1))
done
python3 -c "
import statistics
w=[float(x) for x in '$ws'.split()]; r=[float(x) for x in '$rs'.split()]
print('median write ratio %.3f  median read ratio %.3f  (%d rounds)' % (statistics.median(w), statistics.median(r), len(w)))"
