#!/bin/sh
# tier-bench step end to end, on a small manifest whose state is three
# times its DRAM tier, half the shards on the emulated HBM tier: the state
# after the steps equals tier_adam_step run in memory bit for bit
# (--verify), NVMe is really used, and the timeline it writes (TIER_TRACE)
# is valid with properly nested spans for every shard and stage
# (tests/formats/trace_check.py), and the mixed measurement and bound.  Before
# that, tier-bench io --mix, and --checkpoint-every: its checkpoints and
# full copy in the JSON, its sentence in the text, its refusals; a step
# that failed part way with a transient error run again, to the same bytes.
# After, the GPU lane's run-time options (TIER_GPU_SLOTS,
# TIER_GPU_GRAD_AHEAD) as the trace shows them: on structure (the lane's
# own order of events), never on how fast anything ran, so a loaded
# machine passes too.  $1 is tier-bench, $2 trace_check.py.
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

# tier-bench io with ARGS, its JSON into $T/io.json; a failure ends the test.
io_json() {
	"$TB" io --manifest "$T/m.yaml" "$@" --json >"$T/io.json" 2>"$T/err"
	rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "FAIL: tier-bench io $*: exit $rc"; sed 's/^/  /' "$T/err"
		exit 1
	fi
}
# tier-bench io with ARGS (after $1, a message it must print) exits 2.
io_refused() {
	want=$1
	shift
	"$TB" io --manifest "$T/m.yaml" "$@" >/dev/null 2>"$T/err"
	rc=$?
	if [ "$rc" -ne 2 ] || ! grep -q "$want" "$T/err"; then
		echo "FAIL: tier-bench io $*: exit $rc, not 2 with \"$want\""
		sed 's/^/  /' "$T/err"
		exit 1
	fi
}

# tier-bench io --mix (requests of whole 1 MiB stripe units): the mixed
# pass reads the share asked for while it writes the rest (the device
# counters say so), and bad values exit 2.
io_json --size 8MiB --bs 1MiB --qd 4 --mix 0.25
python3 - "$T/io.json" <<'PY' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
size = r["size"]
fails = []
if r["mix_read_share"] != 0.25:
    fails.append("mix_read_share %r, not 0.25" % r["mix_read_share"])
# one write pass and one read pass of the whole object, then the mixed pass
if r["device_bytes_read"] != size + size // 4:
    fails.append("device bytes read %d, not %d" % (r["device_bytes_read"], size + size // 4))
if r["device_bytes_written"] != size + size * 3 // 4:
    fails.append("device bytes written %d, not %d" % (r["device_bytes_written"], size + size * 3 // 4))
if not r["mixed_GBps"] > 0 or abs(r["mixed_GBps"] - size / r["mixed_s"] * 1e-9) > 1e-3 * r["mixed_GBps"]:
    fails.append("mixed_GBps %r for %r s" % (r["mixed_GBps"], r["mixed_s"]))
for f in fails:
    print("FAIL: io --mix:", f)
sys.exit(1 if fails else 0)
PY
for bad in 0 1 1.5 -0.2 abc 0.5x; do
	io_refused "bad --mix '$bad'" --size 8MiB --mix "$bad"
done
io_refused "at least two requests" --size 256KiB --bs 256KiB --mix 0.5

# tier-bench io --passes: each pass writes then reads the whole object (the
# device counters say so), the JSON says how many, and bad values exit 2.
io_json --size 4MiB --bs 1MiB --qd 4 --passes 3
python3 - "$T/io.json" <<'PY' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
size, fails = r["size"], []
if r["passes"] != 3:
    fails.append("passes %r, not 3" % r["passes"])
for k in ("device_bytes_read", "device_bytes_written"):
    if r[k] != 3 * size:
        fails.append("%s %d, not %d" % (k, r[k], 3 * size))
for f in fails:
    print("FAIL: io --passes:", f)
sys.exit(1 if fails else 0)
PY
for bad in 0 9 x; do
	io_refused "bad --passes '$bad'" --size 4MiB --passes "$bad"
done

# A manifest that gives only the DRAM capacity (and a path): the shard size
# and the window are sized from it, and tier-bench step --dram runs and
# streams through NVMe (issue 16: a 64 MiB shard did not fit four times).
cat >"$T/dram-only.yaml" <<YAML
dram:
  capacity: 64MiB
nvme:
  paths:
    - path: $T/data2/
      capacity: 1GiB
      create: true
YAML
if ! "$TB" step --manifest "$T/dram-only.yaml" --dram 64MiB --steps 2 --io-size 8MiB \
	--io-passes 1 --update-runs 1 --verify --json --no-progress >"$T/small.json" 2>"$T/err"; then
	echo "FAIL: tier-bench step on a manifest with only dram.capacity: 64MiB exited $?"
	sed 's/^/  /' "$T/err"
	exit 1
fi
python3 - "$T/small.json" <<'PY' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
fails = []
if r.get("verified") is not True:
    fails.append("state not verified bit for bit")
if not r["shard_size"] <= r["dram_bytes"] // 8:
    fails.append("shard %d for a DRAM tier of %d" % (r["shard_size"], r["dram_bytes"]))
if not all(b > 0 for b in r["steps"]["nvme_read_bytes"][1:]):
    fails.append("no NVMe reads: %r" % r["steps"]["nvme_read_bytes"])
for f in fails:
    print("FAIL: dram-only manifest:", f)
sys.exit(1 if fails else 0)
PY

# bf16 and q8 moments (stochastic rounding, the default): --verify against
# tier_adam_step with the optimizer's rounding and streams (q8: codes and
# block scales, the read-back against their decoded values); the state
# bytes are 8 per element for bf16, 6 for q8 and 8 more per 256-element
# block of each of the eight parameters; NVMe is used.
for mom in bf16 q8; do
	if ! "$TB" step --manifest "$T/m.yaml" --params 3000001 --steps 3 --moments $mom \
		--io-size 8MiB --io-passes 1 --update-runs 1 --verify --json --no-progress \
		>"$T/$mom.json" 2>"$T/err"; then
		echo "FAIL: tier-bench step --moments $mom --verify exited $?"
		sed 's/^/  /' "$T/err"
		exit 1
	fi
	python3 - "$T/$mom.json" $mom <<'PY' || exit 1
import json, sys
r, mom = json.load(open(sys.argv[1])), sys.argv[2]
n = r["numel"]
fails = []
if r.get("verified") is not True:
    fails.append("state not verified bit for bit")
if r["moments"] != mom:
    fails.append("moments %r" % r["moments"])
if mom == "bf16" and r["state_bytes"] != 8 * n:
    fails.append("state_bytes %d for %d elements" % (r["state_bytes"], n))
if mom == "q8" and not 6 * n + 8 * (n // 256) <= r["state_bytes"] <= 6 * n + 8 * (n // 256 + 8):
    fails.append("state_bytes %d for %d elements" % (r["state_bytes"], n))
if not all(b > 0 for b in r["steps"]["nvme_read_bytes"][1:]):
    fails.append("no NVMe reads: %r" % r["steps"]["nvme_read_bytes"])
for f in fails:
    print("FAIL: --moments %s:" % mom, f)
sys.exit(1 if fails else 0)
PY
done

# --grads device on the emulated HBM tier: the gradients and the copies
# pushed as device memory, through the GPU lane's slots and the CPU lane,
# the state and copies bit for bit (--verify); auto is host without a GPU.
if ! "$TB" step --manifest "$T/m.yaml" --params 2000001 --steps 3 --offload-fraction 0.5 \
	--grads device --io-size 8MiB --io-passes 1 --update-runs 1 --verify --json \
	--no-progress >"$T/gdev.json" 2>"$T/err"; then
	echo "FAIL: tier-bench step --grads device --verify exited $?"; sed 's/^/  /' "$T/err"
	exit 1
fi
"$TB" step --manifest "$T/m.yaml" --params 300000 --steps 2 --io-size 8MiB --io-passes 1 \
	--update-runs 1 --json --no-progress >"$T/gauto.json" 2>"$T/err" || {
	echo "FAIL: tier-bench step (--grads auto) exited $?"; sed 's/^/  /' "$T/err"; exit 1; }
python3 - "$T/gdev.json" "$T/gauto.json" <<'PY' || exit 1
import json, sys
d, a = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
fails = []
if d.get("verified") is not True:
    fails.append("--grads device: not verified bit for bit")
if d["grads"] != "device" or d["hbm_backend"] != "host":
    fails.append("--grads device: grads %r, hbm_backend %r" % (d["grads"], d["hbm_backend"]))
if a["grads"] != "host":
    fails.append("--grads auto without a GPU: %r" % a["grads"])
for f in fails:
    print("FAIL:", f)
sys.exit(1 if fails else 0)
PY
# The HBM-resident regime (an HBM tier, no NVMe): the bound is the link's
# bytes at its rate (emulated: --hbm-bandwidth) or the update; the state
# streams between DRAM and a smaller HBM tier, the gradients in and the
# copies out cross the link too with --grads host; bit for bit.
cat >"$T/hbm.yaml" <<YAML
gpu:
  device: none
dram:
  capacity: 256MiB
YAML
for g in host device; do
	if ! "$TB" step --manifest "$T/hbm.yaml" --params 4000001 --steps 3 --offload-fraction 0 \
		--hbm-capacity 16MiB --hbm-bandwidth 5e9 --shard-size 2MiB --grads $g \
		--update-runs 1 --verify --json --no-progress >"$T/hbm-$g.json" 2>"$T/err"; then
		echo "FAIL: tier-bench step in the HBM-resident regime (--grads $g) exited $?"
		sed 's/^/  /' "$T/err"
		exit 1
	fi
done
python3 - "$T/hbm-host.json" "$T/hbm-device.json" "$T/gauto.json" <<'PY' || exit 1
import json, sys
h, d, n = (json.load(open(f)) for f in sys.argv[1:4])
fails = []
for r, g in ((h, "host"), (d, "device")):
    l = r.get("link")
    if r.get("verified") is not True:
        fails.append("%s: not verified bit for bit" % g)
    if r["regime"] != "hbm" or not l:
        fails.append("%s: regime %r, link %r" % (g, r["regime"], l))
        continue
    if not (l["h2d_GBps"] == 5.0 and l["d2h_GBps"] == 5.0 and l["gpu_share"] == 1.0):
        fails.append("%s: link %r" % (g, l))
    # the state streams both ways: at least the state less the HBM tier
    if not l["d2h_bytes_per_step"] >= r["state_bytes"] - r["hbm_capacity"] or \
            not l["h2d_bytes_per_step"] >= r["state_bytes"] - r["hbm_capacity"]:
        fails.append("%s: link bytes %r for state %d" % (g, l, r["state_bytes"]))
    want = max(l["h2d_bytes_per_step"], l["d2h_bytes_per_step"]) / 5e9
    if abs(l["link_s"] - want) > 1e-6 or r["bound_s"] < l["link_s"] - 1e-9:
        fails.append("%s: link_s %r (want %r), bound %r" % (g, l["link_s"], want, r["bound_s"]))
    if r["bound_by"] not in ("pcie", "update"):
        fails.append("%s: bound_by %r" % (g, r["bound_by"]))
# host gradients (fp32) in and bf16 copies out cross the link: 4 and 2 bytes
# an element more than with them in device memory
dh = h["link"]["h2d_bytes_per_step"] - d["link"]["h2d_bytes_per_step"]
dd = h["link"]["d2h_bytes_per_step"] - d["link"]["d2h_bytes_per_step"]
if abs(dh - 4 * h["numel"]) > 1 or abs(dd - 2 * h["numel"]) > 1:
    fails.append("host buffers over the link: %r and %r bytes more" % (dh, dd))
if n["regime"] != "nvme" or n["link"] is not None:
    fails.append("with NVMe: regime %r, link %r" % (n["regime"], n["link"]))
for f in fails:
    print("FAIL: HBM-resident regime:", f)
sys.exit(1 if fails else 0)
PY
# A step that fails part way with a transient error is run again (issue
# 41): with one EIO armed on the store's transfers (the fault site
# store_io), the run completes, exits 0, says which step it ran again and
# why, and ends in the same bytes as a run without the fault: --verify
# holds and the digest of the state read back (master weights, moments and
# copy-outs) is the clean run's, as are the steps' gradient norms.  On a
# store whose home is DRAM nothing passes that site before the steps, so
# its first call is step 1's first fill of the HBM tier, issued by begin on
# the calling thread: the fault always lands in step 1.  An EIO that
# persists is tried 3 times, then the run exits 1; a permanent error
# (ENOSPC) exits 1 at once, run once.  (Builds without fault sites, the
# release ones, cannot arm it.)
if "$TB" --version | grep -q "fault_sites=yes"; then
	retry_run() {
		name=$1
		shift
		env "$@" "$TB" step --manifest "$T/hbm.yaml" --params 2000001 --steps 3 \
			--offload-fraction 0 --hbm-capacity 8MiB --shard-size 1MiB --update-runs 1 \
			--verify --json --no-progress >"$T/$name.json" 2>"$T/$name.err"
	}
	retry_run clean TIER_FAULT= || {
		echo "FAIL: tier-bench step without a fault exited $?"; sed 's/^/  /' "$T/clean.err"; exit 1; }
	retry_run eio TIER_FAULT=store_io:1:1:EIO
	rc=$?
	want="tier-bench step: step 1 failed part way with a transient error (EIO: .*); running it again with the same gradients (try 2 of 3)"
	if [ "$rc" -ne 0 ] || [ "$(grep -c "^$want\$" "$T/eio.err")" -ne 1 ] ||
		[ "$(grep -c "running it again" "$T/eio.err")" -ne 1 ]; then
		echo "FAIL: one transient EIO in step 1: exit $rc (want 0), and one line"
		echo "  \"$want\":"; sed 's/^/  /' "$T/eio.err"
		exit 1
	fi
	python3 - "$T/clean.json" "$T/eio.json" <<'PY' || exit 1
import json, sys
c, e = (json.load(open(f)) for f in sys.argv[1:3])
fails = []
for r, name in ((c, "clean run"), (e, "run with one EIO")):
    if r.get("verified") is not True or not r.get("state_digest"):
        fails.append("%s: verified %r, state_digest %r" % (name, r.get("verified"), r.get("state_digest")))
if c["retries"] != 0 or c["steps"]["tries"] != [1, 1, 1]:
    fails.append("clean run: retries %r, tries %r" % (c["retries"], c["steps"]["tries"]))
if e["retries"] != 1 or e["steps"]["tries"] != [2, 1, 1]:
    fails.append("run with one EIO: retries %r, tries %r (want step 1 run twice)" % (e["retries"], e["steps"]["tries"]))
if e["state_digest"] != c["state_digest"]:
    fails.append("final state digest %r, the clean run's %r" % (e["state_digest"], c["state_digest"]))
if e["steps"]["grad_norm"] != c["steps"]["grad_norm"]:
    fails.append("gradient norms %r, the clean run's %r" % (e["steps"]["grad_norm"], c["steps"]["grad_norm"]))
for f in fails:
    print("FAIL: a step retried after a transient error:", f)
sys.exit(1 if fails else 0)
PY
	# The same with the EIO on the 45th transfer: a fill or a write-back in
	# the middle of some step, some of whose shards are then updated and
	# the rest only by the retry.  Which transfer is the 45th depends on
	# how the lane and the copy threads interleave (one that only makes
	# room may be retried by the store itself), so this asserts what holds
	# wherever it lands: exit 0, the clean run's bytes, at most one step
	# run twice and the retry named for that step.
	retry_run mid TIER_FAULT=store_io:45:1:EIO
	rc=$?
	python3 - "$T/clean.json" "$T/mid.json" "$T/mid.err" "$rc" <<'PY' || exit 1
import json, re, sys
c, m = (json.load(open(f)) for f in sys.argv[1:3])
err, rc = open(sys.argv[3]).read(), int(sys.argv[4])
fails = []
again = re.findall(r"^tier-bench step: step (\d+) failed part way with a transient error \(EIO: .*\);"
                   r" running it again with the same gradients \(try 2 of 3\)$", err, re.M)
twice = [k + 1 for k, n in enumerate(m["steps"]["tries"]) if n != 1]
if rc != 0:
    fails.append("exit %d" % rc)
elif m.get("verified") is not True or m["state_digest"] != c["state_digest"]:
    fails.append("verified %r, digest %r, the clean run's %r" % (m.get("verified"), m["state_digest"], c["state_digest"]))
elif len(twice) > 1 or any(m["steps"]["tries"][k - 1] != 2 for k in twice) or \
        [int(k) for k in again] != twice or err.count("running it again") != len(twice):
    fails.append("tries %r, retries announced for steps %r" % (m["steps"]["tries"], again))
for f in fails:
    print("FAIL: one EIO on the 45th transfer:", f)
    print(err)
sys.exit(1 if fails else 0)
PY
	retry_run persist TIER_FAULT=store_io:1:-1:EIO
	rc=$?
	if [ "$rc" -ne 1 ] || [ "$(grep -c "running it again" "$T/persist.err")" -ne 2 ] ||
		! grep -q "try 3 of 3" "$T/persist.err" ||
		! grep -q "^tier-bench step: step 1 failed 3 times with a transient error; giving up\$" "$T/persist.err" ||
		! grep -q "^tier-bench step: step 1: end: .*Input/output error" "$T/persist.err"; then
		echo "FAIL: a persistent EIO: exit $rc (want 1 after 3 tries of step 1):"
		sed 's/^/  /' "$T/persist.err"
		exit 1
	fi
	retry_run nospc TIER_FAULT=store_io:1:1:ENOSPC
	rc=$?
	if [ "$rc" -ne 1 ] || grep -q "running it again" "$T/nospc.err" ||
		! grep -q "^tier-bench step: step 1: end: .*No space left on device" "$T/nospc.err"; then
		echo "FAIL: one ENOSPC (permanent): exit $rc (want 1 at once, no retry):"
		sed 's/^/  /' "$T/nospc.err"
		exit 1
	fi
else
	echo "note: this build has no fault sites: the retry of a failed step is not tested"
fi
# ...and what it refuses: a bad value, pinned without a GPU, device with
# no HBM tier at all.
for args in "--grads gpu|bad --grads 'gpu'" "--grads pinned|--grads pinned needs a GPU" \
	"--grads device --offload-fraction 1|--grads device needs a GPU"; do
	a=${args%%|*} want=${args#*|}
	# shellcheck disable=SC2086
	"$TB" step --manifest "$T/m.yaml" --params 300000 --steps 1 $a >"$T/out" 2>"$T/err"
	rc=$?
	if [ "$rc" -ne 2 ] || ! grep -qF -e "$want" "$T/err"; then
		echo "FAIL: tier-bench step $a: exit $rc (want 2 and \"$want\"):"
		sed 's/^/  /' "$T/err"
		exit 1
	fi
done

# The text report ends with one plain sentence on what the efficiency means.
"$TB" step --manifest "$T/m.yaml" --params 300000 --steps 2 --io-size 8MiB --io-passes 1 \
	--update-runs 1 --no-progress >"$T/text.out" 2>"$T/err"
last=$(tail -n 1 "$T/text.out")
case "$last" in
"In short: a step took "*" of what the "*" allows: the run was "*-bound*) ;;
*) echo "FAIL: the text report's last line: $last"; exit 1 ;;
esac

# --checkpoint-every 2: a checkpoint after steps 2 and 4, each timed and
# writing dirty bytes home; one full copy of the state (its safetensors file
# at least the state's bytes, removed again); the results unchanged
# (--verify).
if ! "$TB" step --manifest "$T/m.yaml" --params 2000000 --steps 4 --checkpoint-every 2 \
	--io-size 8MiB --io-passes 1 --update-runs 1 --verify --json --no-progress \
	>"$T/ckpt.json" 2>"$T/err"; then
	echo "FAIL: tier-bench step --checkpoint-every 2 exited $?"; sed 's/^/  /' "$T/err"
	exit 1
fi
python3 - "$T/ckpt.json" 4 2 <<'PY' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
steps, every = int(sys.argv[2]), int(sys.argv[3])
c = r.get("checkpoints")
fails = []
def want(cond, what):
    if not cond:
        fails.append(what)
want(r.get("verified") is True, "state not verified bit for bit with checkpoints")
want(isinstance(c, dict), "no checkpoints part: %r" % c)
if isinstance(c, dict):
    want(c["every"] == every, "every %r" % c["every"])
    want(c["count"] == steps // every, "count %r, not %d" % (c["count"], steps // every))
    want(c["after_step"] == list(range(every, steps + 1, every)), "after_step %r" % c["after_step"])
    want(len(c["s"]) == c["count"] and all(t > 0 for t in c["s"]), "checkpoint times %r" % c["s"])
    want(c["median_s"] > 0 and c["max_s"] >= c["median_s"] and c["max_s"] == max(round(t, 6) for t in c["s"]),
         "median %r, max %r of %r" % (c["median_s"], c["max_s"], c["s"]))
    want(all(b > 0 for b in c["dirty_bytes"]), "dirty bytes written %r" % c["dirty_bytes"])
    want(all(b > 0 for b in c["table_bytes"]), "table bytes %r" % c["table_bytes"])
    want(c["generation"] == sorted(set(c["generation"])) and c["generation"][0] >= 1,
         "generations %r" % c["generation"])
    want(c["write_GBps"] > 0 and abs(c["write_GBps"] - r["write_GBps"]) < 1e-3,
         "write rate %r, the run's %r" % (c["write_GBps"], r["write_GBps"]))
    want(abs(c["predicted_s"] - c["median_dirty_bytes"] / (c["write_GBps"] * 1e9)) <= 1e-3 * c["predicted_s"] + 1e-6,
         "predicted_s %r for %r bytes" % (c["predicted_s"], c["median_dirty_bytes"]))
    want(abs(c["overhead_s"] - (c["median_s"] - c["predicted_s"])) <= 2e-6, "overhead_s %r" % c["overhead_s"])
    want(c["full_copy_s"] > 0, "full copy time %r" % c["full_copy_s"])
    want(c["full_copy_bytes"] >= r["state_bytes"], "full copy %r bytes for a state of %r"
         % (c["full_copy_bytes"], r["state_bytes"]))
    want(abs(c["ratio"] - c["median_s"] / c["full_copy_s"]) <= 1e-3 * c["ratio"] + 1e-5, "ratio %r" % c["ratio"])
    want(c["step_s_alone"] == r["step_s"], "step_s_alone %r, step_s %r" % (c["step_s_alone"], r["step_s"]))
    # The step times with and without the checkpoints, recomputed from the
    # per-step times: the median over the counted steps of each step with
    # its checkpoint added (never below the median without: a checkpoint
    # that lands on steps away from the middle leaves the median as it was),
    # and the mean (always above: every checkpoint takes time).
    first = r["nsteps"] - r["steps_counted"]
    st = r["steps"]["step_s"]
    ck = dict(zip(c["after_step"], c["s"]))
    alone = st[first:]
    withc = [st[k] + ck.get(k + 1, 0.0) for k in range(first, len(st))]
    def med(v):
        v = sorted(v)
        n = len(v)
        return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
    for key, want_v in (("step_s_with", med(withc)), ("step_s_alone", med(alone)),
                        ("amortized_step_s_with", sum(withc) / len(withc)),
                        ("amortized_step_s_alone", sum(alone) / len(alone))):
        want(abs(c[key] - want_v) <= 2e-6, "%s %r, from the steps' times %r" % (key, c[key], want_v))
    want(c["step_s_with"] >= c["step_s_alone"] and c["amortized_step_s_with"] > c["amortized_step_s_alone"],
         "step time with checkpoints %r / %r, alone %r / %r" % (c["step_s_with"], c["amortized_step_s_with"],
                                                            c["step_s_alone"], c["amortized_step_s_alone"]))
for f in fails:
    print("FAIL: --checkpoint-every:", f)
sys.exit(1 if fails else 0)
PY
if ls "$T"/*.safetensors* >/dev/null 2>&1; then
	echo "FAIL: --checkpoint-every left its full copy behind:"; ls "$T"
	exit 1
fi
# The text report says what a checkpoint cost in one sentence (before the
# "In short:" line, still the last).
"$TB" step --manifest "$T/m.yaml" --params 300000 --steps 2 --checkpoint-every 1 \
	--io-size 8MiB --io-passes 1 --update-runs 1 --no-progress >"$T/ckpt.out" 2>"$T/err"
if ! grep -q "^A checkpoint took .* of dirty state at the measured .* GB/s is .*, so the commit itself .*; a full copy of the .* state took .* (.*x)\.$" "$T/ckpt.out"; then
	echo "FAIL: no checkpoint sentence in the text report:"; sed 's/^/  /' "$T/ckpt.out" "$T/err"
	exit 1
fi
case "$(tail -n 1 "$T/ckpt.out")" in
"In short: "*) ;;
*) echo "FAIL: the text report with checkpoints does not end with 'In short:'"; exit 1 ;;
esac
# Refused: a K that is not a positive integer, and a manifest without NVMe.
for bad in 0 x; do
	"$TB" step --manifest "$T/m.yaml" --params 300000 --checkpoint-every "$bad" >/dev/null 2>"$T/err"
	rc=$?
	if [ "$rc" -ne 2 ] || ! grep -q "bad --checkpoint-every '$bad'" "$T/err"; then
		echo "FAIL: tier-bench step --checkpoint-every $bad: exit $rc"; sed 's/^/  /' "$T/err"
		exit 1
	fi
done
cat >"$T/no-nvme.yaml" <<YAML
version: 1
name: no-nvme
gpu:
  device: none
dram:
  capacity: 8MiB
YAML
"$TB" step --manifest "$T/no-nvme.yaml" --params 300000 --checkpoint-every 2 >/dev/null 2>"$T/err"
rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "checkpoint-every needs an NVMe tier" "$T/err"; then
	echo "FAIL: tier-bench step --checkpoint-every without NVMe: exit $rc"; sed 's/^/  /' "$T/err"
	exit 1
fi

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
# The mixed measurement after the steps: the step's reads and writes in
# flight together at its mix (to a block of the 8 MiB object), and the
# mixed bound and efficiency derived from it.
rd = r["nvme_read_bytes_per_step"]; wr = r["nvme_write_bytes_per_step"]
want(r["mixed_GBps"] is not None and r["mixed_GBps"] > 0, "no mixed rate: %r" % r.get("mixed_GBps"))
if r["mixed_GBps"]:
    blk = float(r["io_bs"]) / r["io_size"]
    want(abs(r["mixed_read_share"] - rd / (rd + wr)) <= blk / 2 + 1e-9,
         "mixed read share %r, the step's %r" % (r["mixed_read_share"], rd / (rd + wr)))
    want(len(r["io_mixed_GBps_passes"]) == r["io_passes"] // 2,
         "mixed passes %r for %d passes" % (r["io_mixed_GBps_passes"], r["io_passes"] // 2))
    want(abs(max(r["io_mixed_GBps_passes"]) - r["mixed_GBps"]) <= 1e-3 * r["mixed_GBps"] + 1e-4,
         "mixed rate %r is not the fastest pass of %r" % (r["mixed_GBps"], r["io_mixed_GBps_passes"]))
    want(abs(r["mixed_nvme_s"] - (rd + wr) / (r["mixed_GBps"] * 1e9)) <= 1e-3 * r["mixed_nvme_s"] + 1e-6,
         "mixed_nvme_s %r for %d bytes at %r GB/s" % (r["mixed_nvme_s"], rd + wr, r["mixed_GBps"]))
    want(abs(r["mixed_bound_s"] - max(r["mixed_nvme_s"], r["update_s"])) <= 1e-6,
         "mixed_bound_s %r" % r["mixed_bound_s"])
    want(abs(r["mixed_efficiency"] - r["mixed_bound_s"] / r["step_s"]) <= 1e-3,
         "mixed_efficiency %r" % r["mixed_efficiency"])
shards = r["cpu_shards"] + r["gpu_shards"]
rc = subprocess.call([sys.executable, check, trace, "--shards", str(shards), "--steps", str(steps),
                      "--stages", "nvme_read,h2d,update_cpu,update_gpu,d2h,nvme_write,staging,"
                      "grad_in,kernel_gpu,out_d2h"])
# The GPU lane's own stages: a host gradient in, the kernel and a host
# output out for each of its shards in each step, as many as its updates.
ev = json.load(open(trace))["traceEvents"]
count = {n: sum(1 for e in ev if e.get("ph") == "X" and e.get("name") == n)
         for n in ("update_gpu", "grad_in", "kernel_gpu", "out_d2h")}
want(count["update_gpu"] == r["gpu_shards"] * steps and
     all(count[n] == count["update_gpu"] for n in ("grad_in", "kernel_gpu", "out_d2h")),
     "the GPU lane's spans %r for %d shards in %d steps" % (count, r["gpu_shards"], steps))
want(rc == 0, "trace_check.py failed")
for f in fails:
    print("FAIL:", f)
print("%d shards, %d steps: %s" % (shards, steps, "ok" if not fails else "%d failures" % len(fails)))
sys.exit(1 if fails else 0)
PY

# scripts/trace-overlap.py: the fractions of each step with the copies and
# the GPU lane's update busy, exact on a made-up timeline (a 100 us step:
# h2d over 0-60 moving 600 kB, d2h over 40-100 moving 600 kB, update_gpu
# over 20-50 and 45-70, staging over 10-15 and 12-25 copying 225 kB: 15
# GB/s; the lane's gradients in over 55-70 and 65-80, 225 kB: link in over
# 0-80 at 825 kB / 80 us, 7.5 GB/s a copy; an output out over 30-45, 90
# kB: link out over 30-100 at 690 kB / 70 us, 6 GB/s a copy; kernels of 2,
# 4 and 6 us: median 4), and consistent on the run's (the emulated HBM tier
# stages every host gradient: staging above 0).
OVERLAP="$(dirname "$CHECK")/../../scripts/trace-overlap.py"
cat >"$T/made.json" <<'JSON'
{"traceEvents": [
 {"name": "step", "ph": "X", "ts": 0, "dur": 100, "pid": 1, "tid": 0, "args": {"step": 1}},
 {"name": "h2d", "ph": "X", "ts": 0, "dur": 30, "pid": 1, "tid": 1, "args": {"bytes": 300000}},
 {"name": "h2d", "ph": "X", "ts": 25, "dur": 35, "pid": 1, "tid": 2, "args": {"bytes": 300000}},
 {"name": "d2h", "ph": "X", "ts": 40, "dur": 60, "pid": 1, "tid": 1, "args": {"bytes": 600000}},
 {"name": "grad_in", "ph": "X", "ts": 55, "dur": 15, "pid": 1, "tid": 5, "args": {"bytes": 150000}},
 {"name": "grad_in", "ph": "X", "ts": 65, "dur": 15, "pid": 1, "tid": 6, "args": {"bytes": 75000}},
 {"name": "out_d2h", "ph": "X", "ts": 30, "dur": 15, "pid": 1, "tid": 5, "args": {"bytes": 90000}},
 {"name": "kernel_gpu", "ph": "X", "ts": 50, "dur": 2, "pid": 1, "tid": 7, "args": {}},
 {"name": "kernel_gpu", "ph": "X", "ts": 70, "dur": 4, "pid": 1, "tid": 7, "args": {}},
 {"name": "kernel_gpu", "ph": "X", "ts": 80, "dur": 6, "pid": 1, "tid": 7, "args": {}},
 {"name": "update_gpu", "ph": "X", "ts": 20, "dur": 30, "pid": 1, "tid": 3, "args": {}},
 {"name": "update_gpu", "ph": "X", "ts": 45, "dur": 25, "pid": 1, "tid": 4, "args": {}},
 {"name": "staging", "ph": "X", "ts": 10, "dur": 5, "pid": 1, "tid": 3, "args": {"bytes": 75000}},
 {"name": "staging", "ph": "X", "ts": 12, "dur": 13, "pid": 1, "tid": 4, "args": {"bytes": 150000}},
 {"name": "h2d", "ph": "X", "ts": 150, "dur": 10, "pid": 1, "tid": 1, "args": {}}]}
JSON
python3 "$OVERLAP" "$T/made.json" --json >"$T/made.out" 2>"$T/err" &&
	python3 "$OVERLAP" "$T/trace.json" --json >"$T/run.out" 2>>"$T/err" || {
	echo "FAIL: trace-overlap.py exited $?"; sed 's/^/  /' "$T/err"; exit 1; }
python3 - "$T/made.out" "$T/run.out" "$STEPS" <<'PY' || exit 1
import json, sys
m, r, steps = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
fails = []
want = {"h2d": 0.6, "d2h": 0.6, "update": 0.5, "h2d+d2h": 0.2, "all3": 0.2, "staging": 0.15,
        "staging_GBps": 15.0, "link_in": 0.8, "in_GBps": 825000 / 80e3, "link_out": 0.7,
        "out_GBps": 690000 / 70e3, "grad_in_GBps": 7.5, "out_d2h_GBps": 6.0, "kernel_us": 4.0}
rates = ("staging_GBps", "in_GBps", "out_GBps", "grad_in_GBps", "out_d2h_GBps", "kernel_us")
got = m["steps"][0]
for k, v in want.items():
    if abs(got[k] - v) > 1e-9 * max(1.0, v):
        fails.append("made-up timeline: %s %r, want %r" % (k, got[k], v))
if len(r["steps"]) != steps:
    fails.append("the run's timeline: %d steps, want %d" % (len(r["steps"]), steps))
for s in r["steps"]:
    if not all(0 <= s[k] <= 1 for k in want if k not in rates) or \
            s["all3"] > min(s["h2d+d2h"], s["update"]) + 1e-12 or s["update"] <= 0 or \
            s["staging"] <= 0 or not all(s[k] is not None and s[k] > 0 for k in rates) or \
            s["link_in"] < s["h2d"] or s["link_out"] < s["d2h"]:
        fails.append("the run's step %r: %r" % (s["step"], s))
for f in fails:
    print("FAIL: trace-overlap.py:", f)
sys.exit(1 if fails else 0)
PY
python3 "$OVERLAP" "$T/nothing.json" >/dev/null 2>"$T/err"
rc=$?
if [ "$rc" -ne 1 ] || ! grep -q "nothing.json" "$T/err"; then
	echo "FAIL: trace-overlap.py on a missing file: exit $rc"; sed 's/^/  /' "$T/err"; exit 1
fi

# TIER_GPU_SLOTS: the GPU lane keeps that many shards in flight.  At each
# shard's kernel, the shards in flight are those whose kernel has started
# and whose output has not gone out (an output goes when its slot ends).
# The lane never has more than the slots in flight, in any step.  It ends a
# slot early only when the next shard's state is not up yet, so how full
# the slots are while state is still moving depends on how the copy
# threads are scheduled (on a loaded machine step 1, which fills the
# emulated HBM tier, kept 1).  The state fits that tier, so from step 2 on
# nothing moves (no h2d or d2h span overlaps steps 2 and 3: checked), every
# shard is resident when the lane asks for it, and the lane fills exactly
# its slots in those steps, whatever the machine's load.  The result is the
# same bits for any count (--verify), and a count out of [1, 8] draws the
# options table's warning and keeps 3.
cat >"$T/slots.yaml" <<YAML
version: 1
name: slots-test
gpu:
  device: none
dram:
  capacity: 16MiB
optimizer:
  shard_size: 256KiB
YAML
for slots in 1 2 5 9; do
	want=$slots
	[ "$slots" = 9 ] && want=3
	rm -f "$T/slots.json"
	if ! TIER_GPU_SLOTS=$slots TIER_TRACE="$T/slots.json" "$TB" step --manifest "$T/slots.yaml" \
		--params 1000000 --steps 3 --offload-fraction 0 --hbm-capacity 64MiB --update-runs 1 \
		--verify --json --no-progress >"$T/out.json" 2>"$T/err"; then
		echo "FAIL: TIER_GPU_SLOTS=$slots tier-bench step exited $?"; sed 's/^/  /' "$T/err"
		exit 1
	fi
	if [ "$slots" = 9 ] && ! grep -q "invalid TIER_GPU_SLOTS='9' (expected an integer in \[1, 8\])" "$T/err"; then
		echo "FAIL: TIER_GPU_SLOTS=9: no warning"; sed 's/^/  /' "$T/err"; exit 1
	fi
	python3 - "$T/out.json" "$T/slots.json" "$want" "$slots" <<'PY' || exit 1
import json, sys
r, ev = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))["traceEvents"]
want, slots = int(sys.argv[3]), sys.argv[4]
fails = []
if r.get("verified") is not True or r["gpu_shards"] < 8 * want or r["cpu_shards"] != 0:
    fails.append("verified %r, gpu_shards %r, cpu_shards %r" % (r.get("verified"), r["gpu_shards"], r["cpu_shards"]))
steps, moves, span = {}, [], {}
for e in ev:
    if e.get("ph") != "X":
        continue
    if e["name"] in ("kernel_gpu", "out_d2h"):
        a = e["args"]
        steps.setdefault(a["step"], {}).setdefault(a["shard"], {})[e["name"]] = e["ts"]
    elif e["name"] in ("h2d", "d2h"):
        moves.append((e["ts"], e["ts"] + e["dur"]))
    elif e["name"] == "step":
        span[e["args"]["step"]] = (e["ts"], e["ts"] + e["dur"])
inflight = {}
for st in sorted(steps):
    d = steps[st]
    if len(d) != r["gpu_shards"] or any(len(v) != 2 for v in d.values()):
        fails.append("step %r: kernel and output spans of %d shards, want %d" % (st, len(d), r["gpu_shards"]))
        continue
    inflight[st] = max(sum(1 for w in d.values() if w["kernel_gpu"] <= v["kernel_gpu"] < w["out_d2h"])
                       for v in d.values())
quiet = [st for st in sorted(span)
         if not any(a < span[st][1] and b > span[st][0] for a, b in moves)]
if sorted(inflight) != [1, 2, 3]:
    fails.append("the lane's spans for steps %r, want 1, 2 and 3" % sorted(inflight))
if any(n > want for n in inflight.values()):
    fails.append("shards in flight per step %r: more than the %d slots" % (inflight, want))
if not {2, 3} <= set(quiet):
    fails.append("steps with no state moving %r: the state fits the HBM tier, so steps 2 and 3 "
                 "should move none" % quiet)
elif any(inflight.get(st) != want for st in quiet):
    fails.append("shards in flight per step %r, want %d in each step where no state moved (%r)"
                 % (inflight, want, quiet))
for f in fails:
    print("FAIL: TIER_GPU_SLOTS=%s:" % slots, f)
sys.exit(1 if fails else 0)
PY
done

# TIER_GPU_GRAD_AHEAD: with the state slow to come up (an HBM tier of a
# few shards behind a 20 MB/s link), "on" brings a shard's gradient in
# while the lane waits for its state; "off" never brings one in before its
# shard is taken (its update_gpu span).  Which shards the lane waits for
# depends on how the copy threads are scheduled, so the check reads the
# lane's own order of events off the trace (one thread, in program order):
# between the kernel of the shard before and the take of shard j, the lane
# ends slots only while j is not up yet.  So when it ended one there with a
# slot already free (fewer in flight than the 3 slots), or ended two, it
# found j not up with a slot free, and "on" must have brought j's gradient
# in there, before the take.  Every such shard, in every step; and the run
# must have waited so at least once (the 20 MB/s link is far slower than
# the lane), with "on" and with "off".  The bits are the same (--verify).
for ahead in off on; do
	rm -f "$T/ahead.json"
	if ! TIER_GPU_GRAD_AHEAD=$ahead TIER_TRACE="$T/ahead.json" "$TB" step --manifest "$T/slots.yaml" \
		--params 1000000 --steps 3 --offload-fraction 0 --hbm-capacity 2MiB --hbm-bandwidth 2e7 \
		--update-runs 1 --verify --json --no-progress >"$T/out.json" 2>"$T/err"; then
		echo "FAIL: TIER_GPU_GRAD_AHEAD=$ahead tier-bench step exited $?"; sed 's/^/  /' "$T/err"
		exit 1
	fi
	python3 - "$T/out.json" "$T/ahead.json" "$ahead" <<'PY' || exit 1
import json, sys
r, ev = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))["traceEvents"]
ahead = sys.argv[3] == "on"
SLOTS = 3  # the default TIER_GPU_SLOTS
sp, outs = {}, {}
for e in ev:
    if e.get("ph") == "X" and e["name"] in ("grad_in", "update_gpu", "kernel_gpu", "out_d2h"):
        a = e["args"]
        sp.setdefault((a["step"], a["shard"]), {})[e["name"]] = (e["ts"], e["ts"] + e["dur"])
        if e["name"] == "out_d2h":
            outs.setdefault(a["step"], []).append(e["ts"])
n = r["gpu_shards"] * 3
fails = []
if r.get("verified") is not True:
    fails.append("not verified: %r" % r.get("verified"))
if len(sp) != n or any(len(v) != 4 for v in sp.values()):
    fails.append("grad_in, update_gpu, kernel_gpu and out_d2h spans of %d shards, want %d" % (len(sp), n))
else:
    early = sum(1 for v in sp.values() if v["grad_in"][0] < v["update_gpu"][0])
    waited, missed = 0, []
    for st in sorted({s for s, _ in sp}):
        d = {k: v for (s, k), v in sp.items() if s == st}
        order = sorted(d, key=lambda k: d[k]["update_gpu"][0])  # the lane's takes
        for prev, j in zip(order, order[1:]):
            k_prev, take = d[prev]["kernel_gpu"], d[j]["update_gpu"][0]
            n0 = sum(1 for w in d.values()
                     if w["kernel_gpu"][0] <= k_prev[0] < w["out_d2h"][0])
            ends = sum(1 for t in outs[st] if k_prev[1] <= t < take)
            if (n0 < SLOTS and ends >= 1) or ends >= 2:
                waited += 1
                if ahead and not d[j]["grad_in"][0] < take:
                    missed.append((st, j))
    if not waited:
        fails.append("the lane never waited for a shard's state with a slot free")
    if ahead and missed:
        fails.append("%d of %d shards waited for with a slot free had no gradient in ahead: %r"
                     % (len(missed), waited, missed[:8]))
    if not ahead and early:
        fails.append("%d of %d gradients in before their shard was taken" % (early, n))
    print("TIER_GPU_GRAD_AHEAD=%s: %d of %d shards waited for with a slot free, %d gradients in early"
          % (sys.argv[3], waited, n, early))
for f in fails:
    print("FAIL: TIER_GPU_GRAD_AHEAD=%s:" % sys.argv[3], f)
sys.exit(1 if fails else 0)
PY
done
