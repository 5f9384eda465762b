#!/bin/sh
# tier-bench step under mpirun on 2 ranks (the partitioned optimizer): each
# rank's piece of the state and its gathered copy-out equal tier_adam_step
# in memory bit for bit (--verify), every rank really goes through NVMe in
# a directory of its own (${RANK} in the manifest), and the JSON has the
# table of ranks and the world's figures, consistent with each other.
# Then the text report, each rank's TIER_TRACE file with its collectives, and the embedded default's directory per rank.
# $1 mpirun, $2 tier-bench, the rest mpirun's own arguments.
set -u
MPIRUN=$1
TB=$2
shift 2
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
T=$(mktemp -d "${TIER_TEST_TMPDIR:-/tmp}/step-mpi-XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$T"' EXIT

# Each rank: 8 MiB of DRAM, its piece of a 48 MiB state (24 MiB) through
# NVMe in its own directory.
cat >"$T/m.yaml" <<YAML
version: 1
name: step-mpi-r\${RANK}
gpu:
  device: none
dram:
  capacity: 8MiB
nvme:
  paths:
    - path: "$T/data/rank\${RANK}/"
      capacity: 512MiB/local_world
      create: true
optimizer:
  shard_size: 256KiB
YAML

run() {
	"$MPIRUN" -np 2 "$@"
}

if ! TIER_TRACE="$T/trace.rank\${RANK}.json" run "$@" "$TB" step --manifest "$T/m.yaml" --steps 4 \
	--params 4M --io-size 8MiB --io-passes 1 --update-runs 1 --verify --json --no-progress \
	>"$T/out.json" 2>"$T/err"; then
	echo "FAIL: mpirun -np 2 tier-bench step --verify --json exited $?"; sed 's/^/  /' "$T/err"
	exit 1
fi
python3 - "$T/out.json" "$T" <<'PY' || exit 1
import json, os, statistics, sys
r = json.load(open(sys.argv[1]))
T = sys.argv[2]
fails = []
def check(cond, what):
    if not cond:
        fails.append(what)
c = r.get("comm")
if not isinstance(c, dict):
    print("FAIL: no \"comm\" object:", c)
    sys.exit(1)
check(c["backend"] == "mpi", "backend %r" % c["backend"])
check(c["world_size"] == 2, "world_size %r" % c["world_size"])
check(c["numel"] == r["numel"] == 4 << 20, "numel %r / %r" % (c["numel"], r["numel"]))
ranks = c["ranks"]
check(len(ranks) == 2, "%d ranks" % len(ranks))
keys = ["rank", "part_elems", "part_state_bytes", "step_s", "nvme_read_bytes_per_step",
        "nvme_write_bytes_per_step", "bound_s", "bound_by", "efficiency", "nvme_s", "update_s",
        "read_GBps", "write_GBps", "collectives_per_step", "comm_bytes_per_step", "comm_s",
        "comm_wait_s", "overlap", "comm_share", "comm_wait_share", "verified", "steps"]
first = r["nsteps"] - r["steps_counted"]
for i, k in enumerate(ranks):
    for key in keys:
        check(key in k, "rank %d: no %s" % (i, key))
    if fails:
        break
    check(k["rank"] == i, "rank %d says %r" % (i, k["rank"]))
    check(k["verified"] is True, "rank %d: verified %r" % (i, k["verified"]))
    # its piece (24 MiB of state) is 3x its DRAM: it goes through NVMe
    check(k["nvme_read_bytes_per_step"] > 0 and k["nvme_write_bytes_per_step"] > 0,
          "rank %d: no NVMe traffic" % i)
    check(abs(k["part_elems"] - (2 << 20)) <= 64 * 8, "rank %d: piece %d" % (i, k["part_elems"]))
    # a reduce-scatter and an all-gather per parameter, at least
    check(k["collectives_per_step"] >= 16, "rank %d: %r collectives" % (i, k["collectives_per_step"]))
    check(k["comm_bytes_per_step"] >= 4 * (4 << 20), "rank %d: comm bytes %r" % (i, k["comm_bytes_per_step"]))
    check(k["comm_s"] > 0 and 0 <= k["comm_wait_s"] <= k["comm_s"] * 1.0001,
          "rank %d: comm_s %r, comm_wait_s %r" % (i, k["comm_s"], k["comm_wait_s"]))
    check(-1e-3 <= k["overlap"] <= 1, "rank %d: overlap %r" % (i, k["overlap"]))
    check(k["bound_s"] > 0 and abs(k["efficiency"] - k["bound_s"] / k["step_s"]) < 1e-3,
          "rank %d: bound %r, efficiency %r" % (i, k["bound_s"], k["efficiency"]))
    st = k["steps"]
    check(len(st["step_s"]) == 4 and len(st["comm_wait_s"]) == 4, "rank %d: per-step arrays" % i)
    check(abs(statistics.median(st["step_s"][first:]) - k["step_s"]) < 1e-5,
          "rank %d: step_s is not the median of its steps" % i)
check(sum(k["part_elems"] for k in ranks) == r["numel"], "pieces do not add up to the model")
w = c["world"]
for key in ["step_s", "step_s_per_step", "nvme_read_bytes_per_step", "nvme_write_bytes_per_step",
            "bound_s", "bound_rank", "efficiency", "comm_bytes_per_step", "comm_s", "comm_wait_s",
            "overlap", "comm_share", "comm_wait_share", "verified"]:
    check(key in w, "world: no %s" % key)
if not fails:
    per = [max(k["steps"]["step_s"][s] for k in ranks) for s in range(4)]
    check(all(abs(a - b) < 1e-6 for a, b in zip(per, w["step_s_per_step"])),
          "world step_s_per_step %r, not the slowest rank's %r" % (w["step_s_per_step"], per))
    check(abs(statistics.median(per[first:]) - w["step_s"]) < 1e-5, "world step_s %r" % w["step_s"])
    rd = [sum(k["steps"]["nvme_read_bytes"][s] for k in ranks) for s in range(4)]
    check(abs(statistics.median(rd[first:]) - w["nvme_read_bytes_per_step"]) < 2,
          "world NVMe read %r, not the sum of the ranks' %r" % (w["nvme_read_bytes_per_step"], rd))
    check(w["bound_s"] == max(k["bound_s"] for k in ranks), "world bound is not the largest")
    check(abs(w["efficiency"] - w["bound_s"] / w["step_s"]) < 1e-3, "world efficiency")
    check(-1e-3 <= w["overlap"] <= 1, "world overlap %r" % w["overlap"])
    check(w["verified"] is True and r["verified"] is True, "verified %r" % w["verified"])
# each rank's own backing directory, and its own trace with its collectives
for i in range(2):
    check(os.path.isdir(os.path.join(T, "data", "rank%d" % i)), "no data/rank%d" % i)
    tp = os.path.join(T, "trace.rank%d.json" % i)
    if not os.path.exists(tp):
        fails.append("no %s" % tp)
        continue
    ev = json.load(open(tp))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    check(any(e.get("name") == "comm" or e.get("cat") == "comm" for e in ev),
          "%s: no comm span" % tp)
for f in fails:
    print("FAIL:", f)
sys.exit(1 if fails else 0)
PY

# The text: the table of ranks, the world's lines, the verdict.
if ! run "$@" "$TB" step --manifest "$T/m.yaml" --steps 3 --params 4M --io-size 8MiB \
	--io-passes 1 --update-runs 1 --verify --no-progress >"$T/out.txt" 2>"$T/err"; then
	echo "FAIL: mpirun -np 2 tier-bench step --verify exited $?"; sed 's/^/  /' "$T/err"
	exit 1
fi
for want in "partitioned over 2 ranks (mpi)" "world step time" "world bound" \
	"world NVMe per step" "overlap" "equal tier_adam_step in memory, bit for bit"; do
	if ! grep -q "$want" "$T/out.txt"; then
		echo "FAIL: the text has no '$want':"; sed 's/^/  /' "$T/out.txt"
		exit 1
	fi
done
if [ "$(grep -cE '^ +[01] +[0-9]+ .* equal$' "$T/out.txt")" -ne 2 ]; then
	echo "FAIL: the text has no row per rank:"; sed 's/^/  /' "$T/out.txt"
	exit 1
fi

# The embedded default (TIER_DATA): a directory of its own per rank.
if ! TIER_DATA="$T/default" run "$@" "$TB" step --steps 2 --params 1M --dram 8MiB \
	--shard-size 256KiB --io-size 4MiB --io-passes 1 --update-runs 1 --json --no-progress \
	>"$T/def.json" 2>"$T/err"; then
	echo "FAIL: mpirun -np 2 tier-bench step on the embedded default exited $?"
	sed 's/^/  /' "$T/err"
	exit 1
fi
for i in 0 1; do
	if [ ! -d "$T/default/rank$i" ]; then
		echo "FAIL: the embedded default gave rank $i no directory $T/default/rank$i:"
		ls -R "$T/default" | sed 's/^/  /'
		exit 1
	fi
done

# q8 moments on 2 ranks: pieces aligned to 256 elements, each bit for bit
# (--verify), each rank's part_state_bytes 6 per element and 8 per
# 256-element block of its pieces, summing to the model's state_bytes.
if ! run "$@" "$TB" step --manifest "$T/m.yaml" --steps 3 --params 4000001 --moments q8 \
	--io-size 8MiB --io-passes 1 --update-runs 1 --verify --json --no-progress \
	>"$T/q8.json" 2>"$T/err"; then
	echo "FAIL: mpirun -np 2 tier-bench step --moments q8 --verify exited $?"
	sed 's/^/  /' "$T/err"
	exit 1
fi
python3 - "$T/q8.json" <<'PY' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
fails = []
ranks = (r.get("comm") or {}).get("ranks") or []
if r.get("verified") is not True or r.get("moments") != "q8":
    fails.append("verified %r, moments %r" % (r.get("verified"), r.get("moments")))
if len(ranks) != 2:
    fails.append("%d ranks in the JSON" % len(ranks))
for k in ranks:
    n, b = k["part_elems"], k["part_state_bytes"]
    if not 6 * n + 8 * (n // 256) <= b <= 6 * n + 8 * (n // 256 + 8):
        fails.append("rank %d: part_state_bytes %d for %d elements" % (k["rank"], b, n))
if sum(k["part_state_bytes"] for k in ranks) != r["state_bytes"]:
    fails.append("the ranks' part_state_bytes do not sum to state_bytes %d" % r["state_bytes"])
for f in fails:
    print("FAIL: q8:", f)
sys.exit(1 if fails else 0)
PY
echo "ok: 2 ranks, bit for bit, table of ranks and world figures; q8"
