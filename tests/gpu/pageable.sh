#!/bin/sh
# The GPU lane with pageable host gradients, against the optimizer's thread
# count: what bounds the staging copies (docs/performance.md, "Pageable
# gradients: streaming stores").   tests/gpu/pageable.sh BUILD_DIR [T ...]
# For each thread count T (default 4 8 16), in two rounds (the second in
# the reverse order), one `tier-bench step --grads host --threads T` in the
# HBM-resident regime (3 GiB of fp32 state over a 1 GiB HBM tier and a 4 GiB
# DRAM home, no NVMe, the GPU lane alone), traced; then one run with pinned
# gradients.  A line a run: the step, its efficiency against the PCIe bound,
# and from the trace (scripts/trace-overlap.py) the share of the step with
# a staging copy running and the copies' rate; then the link: the share of
# the step with a copy in flight each way (state fills and host gradients
# in; write-backs and host outputs out) and the bytes over that time, the
# rate of one host gradient's and one output's copy (from queued to done:
# a copy that waits behind the fills shows a low rate), and the kernel.  If
# more threads copy no faster, host memory bounds the copies; if the rate is
# high but the share large, starting them does; if the link is busy nearly
# all the step below its measured rate, the copies in flight together slow
# it; if it idles, the lane's order leaves it idle.  Then one run with
# pinned and one with device gradients, the same lines.  With
# PAGEABLE_KEEP=DIR the traces of the last host, pinned and device runs
# are kept there.  Exits 1 if a run fails.  PAGEABLE_PARAMS, PAGEABLE_DRAM
# and PAGEABLE_HBM shrink the run (the emulated HBM tier runs it without a
# GPU).
#
# With PAGEABLE_SLOTS it measures the GPU lane's variants instead of the
# threads: a list of TIER_GPU_SLOTS counts, each alone or as N:on for
# TIER_GPU_GRAD_AHEAD=on (e.g. "3 3:on 6"), the first the one to compare
# against.  PAGEABLE_ROUNDS rounds (default 7), the variants' order
# reversed every other round, one host and one pinned run each (host only
# without a GPU) with the most threads given, the same lines with the
# variant; then per variant and gradients the median step and efficiency,
# and the median of the per-round ratios of the first variant's step to
# this one's (above 1: faster).
set -u
build=${1:?usage: pageable.sh BUILD_DIR [THREADS ...]}
shift
threads=${*:-4 8 16}
root=$(cd "$(dirname "$0")/../.." && pwd)
bench=$build/tools/tier-bench
tmp=${TMPDIR:-/tmp}/tierstore-pageable
limit=${TIER_GPU_STEP_TIMEOUT:-300}
params=${PAGEABLE_PARAMS:-268435456}
dram=${PAGEABLE_DRAM:-4GiB}
mkdir -p "$tmp"
printf 'gpu:\n  device: auto\n  capacity: %s\ndram:\n  capacity: %s\n' \
	"${PAGEABLE_HBM:-1GiB}" "$dram" >"$tmp/hbm.yaml"
fail=0
: >"$tmp/runs.jsonl"
one() { # grads threads [variant: slots, or slots:on]
	rm -f "$tmp/trace.json"
	v=${3:-3}
	ahead=off
	case $v in *:on) ahead=on ;; esac
	TIER_GPU_SLOTS=${v%%:*} TIER_GPU_GRAD_AHEAD=$ahead TIER_TRACE=$tmp/trace.json timeout -k 10 "$limit" "$bench" step --json --no-progress \
		--manifest "$tmp/hbm.yaml" --dram "$dram" --params "$params" --steps 6 \
		--offload-fraction 0 --grads "$1" --threads "$2" >"$tmp/run.json"
	rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "== exit $rc (tier-bench step --grads $1 --threads $2, variant $v)"
		fail=1
		return
	fi
	python3 "$root/scripts/trace-overlap.py" "$tmp/trace.json" --json >"$tmp/overlap.json" ||
		{ fail=1; return; }
	python3 - "$tmp/run.json" "$tmp/overlap.json" "$1" "$2" "$v" "$round" "$tmp/runs.jsonl" <<'PY'
import json, sys
r, o = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))["median"]
with open(sys.argv[7], "a") as f:
    f.write(json.dumps({"grads": sys.argv[3], "threads": int(sys.argv[4]), "variant": sys.argv[5],
                        "round": int(sys.argv[6]), "step_s": r["step_s"],
                        "efficiency": r["efficiency"], "overlap": o}) + "\n")
def gb(k):
    return "-" if o[k] is None else "%.1f GB/s" % o[k]
print("grads %-7s threads %3s variant %-4s  step %7.1f ms  efficiency %.3f  staging %.3f of the step%s"
      % (sys.argv[3], sys.argv[4], sys.argv[5], r["step_s"] * 1e3, r["efficiency"], o["staging"],
         "" if o["staging_GBps"] is None else " at %.1f GB/s" % o["staging_GBps"]))
link = r.get("link") or {}
print("    link in %.3f of the step at %s (its rate both ways at once %s), out %.3f at %s (%s);"
      " a gradient in %s, an output out %s, kernel %s"
      % (o["link_in"], gb("in_GBps"), "%.1f" % link["h2d_both_GBps"] if link else "-",
         o["link_out"], gb("out_GBps"), "%.1f" % link["d2h_both_GBps"] if link else "-",
         gb("grad_in_GBps"), gb("out_d2h_GBps"),
         "-" if o["kernel_us"] is None else "%.0f us" % o["kernel_us"]))
PY
	[ -n "${PAGEABLE_KEEP:-}" ] && mkdir -p "$PAGEABLE_KEEP" &&
		cp "$tmp/trace.json" "$PAGEABLE_KEEP/trace-$1${3:+-$(echo "$3" | tr : -)}.json"
	return 0
}
round=0
most=$(echo "$threads" | tr ' ' '\n' | sort -n | tail -1)
gpu=0
command -v nvidia-smi >/dev/null && gpu=1
if [ -n "${PAGEABLE_SLOTS:-}" ]; then
	rounds=${PAGEABLE_ROUNDS:-7}
	grads=host
	[ "$gpu" = 1 ] && grads="host pinned"
	while [ "$round" -lt "$rounds" ]; do
		round=$((round + 1))
		order=$PAGEABLE_SLOTS
		[ $((round % 2)) = 0 ] && order=$(echo "$PAGEABLE_SLOTS" | tr ' ' '\n' | tac | tr '\n' ' ')
		for n in $order; do
			for g in $grads; do one "$g" "$most" "$n"; done
		done
	done
	python3 - "$tmp/runs.jsonl" "$PAGEABLE_SLOTS" <<'PY' || fail=1
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
counts = sys.argv[2].split()
base = counts[0]
for g in sorted({r["grads"] for r in runs}):
    for n in counts:
        mine = [r for r in runs if r["grads"] == g and r["variant"] == n]
        ratios = []
        for r in mine:
            b = [x for x in runs if x["grads"] == g and x["variant"] == base and x["round"] == r["round"]]
            if b:
                ratios.append(b[0]["step_s"] / r["step_s"])
        if not mine:
            continue
        print("grads %-7s variant %-4s: %d runs, step median %.1f ms, efficiency median %.3f (%.3f-%.3f),"
              " %s's step over this one's, median of the rounds %.3f (%.3f-%.3f)"
              % (g, n, len(mine), statistics.median(r["step_s"] for r in mine) * 1e3,
                 statistics.median(r["efficiency"] for r in mine),
                 min(r["efficiency"] for r in mine), max(r["efficiency"] for r in mine),
                 base, statistics.median(ratios), min(ratios), max(ratios)))
PY
	[ -n "${PAGEABLE_KEEP:-}" ] && cp "$tmp/runs.jsonl" "$PAGEABLE_KEEP/runs.jsonl"
	rm -rf "$tmp"
	exit $fail
fi
for t in $threads; do one host "$t"; done
for t in $(echo "$threads" | tr ' ' '\n' | sort -rn); do one host "$t"; done
if [ "$gpu" = 1 ]; then
	one pinned "$most"
	one device "$most"
else
	echo "no GPU: no pinned run (the emulated HBM tier stages every host gradient)"
fi
rm -rf "$tmp"
exit $fail
