#!/bin/sh
# Two builds of tier-bench side by side, in alternating rounds (A, B, B, A,
# A, B, ... so neither always runs first):
#   scripts/bench-ab.sh A_TIER_BENCH B_TIER_BENCH ROUNDS SUBCOMMAND [OPTIONS...]
# e.g. scripts/bench-ab.sh /tmp/old/tools/tier-bench build/tools/tier-bench 7 \
#          step --dram 256MiB --steps 4
# Runs `tier-bench SUBCOMMAND --json OPTIONS` once per build per round and
# prints, per round, each build's figures and the ratio B/A of each, then
# the median of the per-round ratios.  The figures: step: step_s and
# efficiency; io: write_GBps and read_GBps; adam: gelem_per_s and
# roofline_frac; cache: each policy's seconds per steady cycle.  For
# comparing two versions of the library on a shared, noisy machine.
set -eu
[ $# -ge 4 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
a=$1 b=$2 rounds=$3 sub=$4
shift 4
out=$(mktemp)
trap 'rm -f "$out"' EXIT
r=1
while [ "$r" -le "$rounds" ]; do
	case $((r % 4)) in
	1 | 0) order="A B" ;;
	*) order="B A" ;;
	esac
	for which in $order; do
		[ "$which" = A ] && bin=$a || bin=$b
		printf '%s %s ' "$r" "$which" >>"$out"
		"$bin" "$sub" --json "$@" | tail -n 1 >>"$out"
	done
	r=$((r + 1))
done
python3 - "$out" "$sub" <<'PY'
import json, statistics, sys
path, sub = sys.argv[1], sys.argv[2]
keys = {"step": ["step_s", "efficiency"], "io": ["write_GBps", "read_GBps"],
        "adam": ["gelem_per_s", "roofline_frac"]}.get(sub)
runs = {}
for line in open(path):
    r, which, js = line.split(" ", 2)
    runs.setdefault(int(r), {})[which] = json.loads(js)
if keys is None:
    keys = sorted(k for k, v in next(iter(runs.values()))["A"].items()
                  if isinstance(v, (int, float)) and not isinstance(v, bool))[:4]
ratios = {k: [] for k in keys}
print("round  " + "  ".join("%12s %12s %7s" % ("A " + k, "B " + k, "B/A") for k in keys))
for r in sorted(runs):
    cells = []
    for k in keys:
        va, vb = runs[r]["A"][k], runs[r]["B"][k]
        q = vb / va if va else float("nan")
        ratios[k].append(q)
        cells.append("%12.4f %12.4f %7.3f" % (va, vb, q))
    print("%5d  " % r + "  ".join(cells))
print("median B/A over %d rounds: " % len(runs) +
      ", ".join("%s %.3f" % (k, statistics.median(v)) for k, v in ratios.items()))
PY
