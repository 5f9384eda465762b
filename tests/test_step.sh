#!/bin/sh
# tier-bench step end to end, on a small manifest whose state is three
# times its DRAM tier, half the shards on the emulated HBM tier: the state
# after the steps equals tier_adam_step run in memory bit for bit
# (--verify), NVMe is really used, and the timeline it writes (TIER_TRACE)
# is valid with properly nested spans for every shard and stage
# (tests/trace_check.py).  $1 is tier-bench, $2 trace_check.py.
set -u
TB=$1
CHECK=$2
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
T=$(mktemp -d "${TIER_TEST_TMPDIR:-/tmp}/step-XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$T"' EXIT

cat >"$T/m.yaml" <<YAML
version: 1
name: step-test
gpu:
  device: none
dram:
  capacity: 8MiB
nvme:
  paths:
    - path: $T/data
      capacity: 256MiB
      create: true
optimizer:
  shard_size: 256KiB
YAML

STEPS=3
if ! TIER_TRACE="$T/trace.json" "$TB" step --manifest "$T/m.yaml" --params 2000000 \
	--steps $STEPS --offload-fraction 0.5 --hbm-capacity 2MiB --io-size 8MiB \
	--io-passes 1 --update-runs 1 --verify --json --no-progress >"$T/out.json" 2>"$T/err"; then
	echo "FAIL: tier-bench step exited $?"; sed 's/^/  /' "$T/err"
	exit 1
fi

python3 - "$T/out.json" "$CHECK" "$T/trace.json" "$STEPS" <<'PY' || exit 1
import json, subprocess, sys
out, check, trace, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
r = json.load(open(out))
fails = []
def want(cond, what):
    if not cond:
        fails.append(what)
want(r.get("verified") is True, "state not verified bit for bit: %r" % r.get("verified"))
want(r["state_bytes"] > 2 * r["dram_bytes"], "state %d not over twice DRAM %d" % (r["state_bytes"], r["dram_bytes"]))
want(r["gpu_shards"] > 0 and r["cpu_shards"] > 0, "both lanes used: cpu %d gpu %d" % (r["cpu_shards"], r["gpu_shards"]))
want(all(b > 0 for b in r["steps"]["nvme_read_bytes"][1:]), "NVMe read every step: %r" % r["steps"]["nvme_read_bytes"])
want(all(b > 0 for b in r["steps"]["h2d_bytes"]), "host-to-device every step: %r" % r["steps"]["h2d_bytes"])
shards = r["cpu_shards"] + r["gpu_shards"]
rc = subprocess.call([sys.executable, check, trace, "--shards", str(shards), "--steps", str(steps),
                      "--stages", "nvme_read,h2d,update_cpu,update_gpu,d2h,nvme_write"])
want(rc == 0, "trace_check.py failed")
for f in fails:
    print("FAIL:", f)
print("%d shards, %d steps: %s" % (shards, steps, "ok" if not fails else "%d failures" % len(fails)))
sys.exit(1 if fails else 0)
PY
