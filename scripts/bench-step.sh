#!/bin/sh
# The optimizer step against its bound, in rounds:
#   scripts/bench-step.sh [ROUNDS] [TIER-BENCH STEP OPTIONS...]
# e.g. scripts/bench-step.sh 5 --manifest examples/laptop.yaml --dram 256MiB
# Each round runs `tier-bench step --json` with the options given (the
# manifest, --dram, --params, ...; default: the embedded default manifest).
# Every round measures its own NVMe bandwidth (before and after its steps)
# and in-memory update time, so its bound is of that round.  Prints each round's
# median step time, bound, efficiency = bound / step time, the mixed bound
# and its efficiency (the NVMe rate with the step's reads and writes in
# flight together), stall share and NVMe bytes per step, then the medians
# over the rounds.  The binary is
# $TIER_BENCH (default build/tools/tier-bench).
set -eu
rounds=7
case ${1:-} in
[0-9]*) rounds=$1; shift ;;
esac
here=$(cd "$(dirname "$0")/.." && pwd)
bench=${TIER_BENCH:-$here/build/tools/tier-bench}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
r=1
while [ "$r" -le "$rounds" ]; do
	"$bench" step --json --no-progress "$@" >>"$out"
	r=$((r + 1))
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
if not rows:
    sys.exit("bench-step: no rounds")
j = rows[0]
print("tier-bench step: %d elements, state %d bytes, DRAM %d bytes, shard %d, moments %s, HBM %s, offload %s, %d steps"
      % (j["numel"], j["state_bytes"], j["dram_bytes"], j["shard_size"], j["moments"],
         j["hbm_backend"], j["offload_fraction"], j["nsteps"]))
print("round   step_s  bound_s  bound_by  efficiency  mixed_bound_s  mixed_eff  stall_frac  read_GBps  write_GBps  mixed_GBps  update_s  nvme_read/step  nvme_write/step  cpu_frac")
na = lambda v, f: f % v if v is not None else "-"
for k, j in enumerate(rows, 1):
    print("%5d %8.4f %8.4f  %-8s  %10.3f  %13s  %9s  %10.3f  %9.3f  %10.3f  %10s  %8.4f  %14.0f  %15.0f  %8.3f" % (
        k, j["step_s"], j["bound_s"], j["bound_by"], j["efficiency"],
        na(j["mixed_bound_s"], "%.4f"), na(j["mixed_efficiency"], "%.3f"), j["stall_frac"],
        j["read_GBps"], j["write_GBps"], na(j["mixed_GBps"], "%.3f"), j["update_s"],
        j["nvme_read_bytes_per_step"], j["nvme_write_bytes_per_step"], j.get("offload_fraction", j.get("cpu_fraction"))))
med = lambda key: statistics.median(x[key] for x in rows)
mixed = [x["mixed_efficiency"] for x in rows if x["mixed_efficiency"] is not None]
print("median over %d rounds: step %.4f s, bound %.4f s, efficiency %.3f, mixed efficiency %s, stall share %.3f, read %.3f GB/s, write %.3f GB/s" % (
    len(rows), med("step_s"), med("bound_s"), med("efficiency"),
    "%.3f" % statistics.median(mixed) if mixed else "-", med("stall_frac"),
    med("read_GBps"), med("write_GBps")))
PY
