#!/bin/sh
# tier-bench io against fio, back to back, in alternating rounds.
#   scripts/bench-io-vs-fio.sh DIR [ROUNDS] [SIZE] [BS] [QD] [PATHS]
# Both write then read SIZE bytes (default 1G) in BS requests (1M) with QD
# (32) in flight, io_uring and O_DIRECT, on the file system of DIR, each on
# a freshly preallocated file.  tierstore runs with checksums on (crc32c),
# striped over PATHS (1) files in DIR.  Prints every round's figures, the
# per-round ratios tierstore/fio and their medians.  FIO_EXTRA adds fio
# options (e.g. "--fixedbufs --registerfiles", the io_uring features the
# tier uses); CHECKSUM=none runs tierstore without checksums.
set -eu
dir=$1
rounds=${2:-7}
size=${3:-1G}
bs=${4:-1M}
qd=${5:-32}
npaths=${6:-1}
here=$(cd "$(dirname "$0")/.." && pwd)
bench=${TIER_BENCH:-$here/build/tools/tier-bench}
mkdir -p "$dir"
man="$dir/bench-manifest.yaml"
{
	echo "dram:"
	echo "  capacity: 1GiB"
	echo "nvme:"
	echo "  checksum: ${CHECKSUM:-crc32c}"
	echo "  paths:"
	i=0
	while [ "$i" -lt "$npaths" ]; do
		mkdir -p "$dir/p$i"
		echo "    - {path: \"$dir/p$i/\", capacity: $size, queue_depth: $qd}"
		i=$((i + 1))
	done
} >"$man"

fio_run() { # rw -> bytes per second
	fio --name=f --filename="$dir/fio.dat" --rw="$1" --bs="$bs" --iodepth="$qd" \
		--ioengine=io_uring --direct=1 --size="$size" ${FIO_EXTRA:-} --output-format=json 2>/dev/null |
		python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print(j['$1']['bw_bytes'])"
}

tier_run() { # -> "write_GBps read_GBps"
	"$bench" io --manifest "$man" --size "$size" --bs "$bs" --qd "$qd" --json |
		python3 -c "import json,sys; j=json.load(sys.stdin); print(j['write_GBps'], j['read_GBps'])"
}

echo "round order fio_write_GBps tier_write_GBps write_ratio fio_read_GBps tier_read_GBps read_ratio"
r=1
wr=""
rr=""
while [ "$r" -le "$rounds" ]; do
	rm -f "$dir/fio.dat"
	if [ $((r % 2)) -eq 1 ]; then
		order="fio-first"
		fw=$(fio_run write); fr=$(fio_run read)
		set -- $(tier_run); tw=$1; tr=$2
	else
		order="tier-first"
		set -- $(tier_run); tw=$1; tr=$2
		fw=$(fio_run write); fr=$(fio_run read)
	fi
	rm -f "$dir/fio.dat"
	line=$(python3 -c "
fw=$fw/1e9; fr=$fr/1e9; tw=$tw; tr=$tr
print('%d %s %.3f %.3f %.3f %.3f %.3f %.3f' % ($r, '$order', fw, tw, tw/fw, fr, tr, tr/fr))")
	echo "$line"
	wr="$wr $(echo "$line" | cut -d' ' -f5)"
	rr="$rr $(echo "$line" | cut -d' ' -f8)"
	r=$((r + 1))
done
python3 -c "
import statistics
w=[float(x) for x in '$wr'.split()]; r=[float(x) for x in '$rr'.split()]
print('median write ratio %.3f  median read ratio %.3f  (%d rounds)' % (statistics.median(w), statistics.median(r), len(w)))"
