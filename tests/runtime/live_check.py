#!/usr/bin/env python3
"""Checks tier-stat's live view against a running store (tests/runtime/test_live.c
runs it while the store is open).

  live_check.py --tier-stat BIN --dir DIR report --pid PID --expect FILE
      tier-stat --json PID must hold every key of FILE (the store's own
      counters) with the same value; the table report must run; every line
      of --prometheus must be a valid sample of the text exposition format
      (and parse with prometheus_client when it is installed), and its
      samples must equal the same counters.
  ... commit --pid PID --generation G [--kept K --oldest O --time-ns T]
      the store's last commit as tier-stat shows it: --json
      (commit_generation, commit_time_ns, commits_kept,
      commit_oldest_generation), the report's "commit:" line, the list's
      COMMIT column, and --prometheus (tierstore_commit_generation,
      tierstore_last_commit_timestamp_seconds, ...); G 0: none.
  ... stale --pid PID --path SEGMENT
      a segment left by a dead process: listed as stale, refused by PID
      (exit 1), kept until --remove-stale, then gone.
  ... refuse --pid PID --path SEGMENT
      another layout version and another user's segment are refused with
      exit 1 and a message naming the cause; a PID without a store exits 1;
      a malformed PID is a usage error (2).

Exit status 0 when every check passes; the failures are printed.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys

FAILS = []


def fail(msg):
    FAILS.append(msg)
    print("FAIL: " + msg)


def run(args, ts, d):
    p = subprocess.run([ts, "--dir", d] + args, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def compare(exp, got, where):
    if isinstance(exp, dict):
        if not isinstance(got, dict):
            fail(f"{where}: expected an object, got {got!r}")
            return
        for k, v in exp.items():
            if k not in got:
                fail(f"{where}.{k}: missing")
                continue
            compare(v, got[k], f"{where}.{k}")
    elif isinstance(exp, list):
        if not isinstance(got, list) or len(got) != len(exp):
            fail(f"{where}: expected {len(exp)} entries, got {got!r}")
            return
        for i, (e, g) in enumerate(zip(exp, got)):
            compare(e, g, f"{where}[{i}]")
    elif isinstance(exp, float) or isinstance(got, float):
        if not isinstance(got, (int, float)) or isinstance(got, bool) or \
                not math.isclose(float(exp), float(got), rel_tol=1e-12, abs_tol=1e-12):
            fail(f"{where}: {got!r}, the store says {exp!r}")
    elif exp != got or type(exp) is not type(got):
        fail(f"{where}: {got!r}, the store says {exp!r}")


# The text exposition format, line by line.
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
VALUE = r"(?:[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)|[+-]Inf|NaN)"
SAMPLE = re.compile(rf"^({NAME})(?:\{{((?:{LABEL})(?:,{LABEL})*)?\}})? ({VALUE})(?: -?\d+)?$")
HELP = re.compile(rf"^# HELP ({NAME}) .*$")
TYPE = re.compile(rf"^# TYPE ({NAME}) (counter|gauge|histogram|summary|untyped)$")
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def parse_prometheus(text):
    """Validates every line; returns {(name, frozenset(labels)): value}."""
    samples = {}
    types = {}
    seen_done = set()
    current = None
    if not text.endswith("\n"):
        fail("prometheus: the output does not end with a newline")
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("# HELP"):
            if not HELP.match(line):
                fail(f"prometheus line {n}: bad HELP: {line!r}")
            continue
        if line.startswith("# TYPE"):
            m = TYPE.match(line)
            if not m:
                fail(f"prometheus line {n}: bad TYPE: {line!r}")
                continue
            if m.group(1) in types:
                fail(f"prometheus line {n}: TYPE of {m.group(1)} given twice")
            types[m.group(1)] = m.group(2)
            if current:
                seen_done.add(current)
            current = m.group(1)
            continue
        if line.startswith("#") or not line.strip():
            fail(f"prometheus line {n}: unexpected {line!r}")
            continue
        m = SAMPLE.match(line)
        if not m:
            fail(f"prometheus line {n}: not a valid sample: {line!r}")
            continue
        name = m.group(1)
        family = re.sub(r"_(sum|count)$", "", name) if name not in types else name
        if family != current:
            fail(f"prometheus line {n}: sample of {family} outside its family block")
        if not name.startswith("tierstore_"):
            fail(f"prometheus line {n}: {name} lacks the tierstore_ prefix")
        labels = frozenset(LABEL_RE.findall(m.group(2) or ""))
        key = (name, labels)
        if key in samples:
            fail(f"prometheus line {n}: duplicate sample {line!r}")
        samples[key] = float(m.group(3))
    for fam, t in types.items():
        if t == "counter" and not fam.endswith("_total"):
            fail(f"prometheus: counter {fam} does not end in _total")
    return samples, types


def with_client(text):
    try:
        import prometheus_client.parser as pp  # noqa: F401
    except ImportError:
        sys.path.append("/usr/lib/python3/dist-packages")
        try:
            import prometheus_client.parser as pp  # noqa: F811
        except ImportError:
            print("note: prometheus_client is not installed; checked with the line grammar only")
            return
    try:
        fams = list(pp.text_string_to_metric_families(text))
    except Exception as e:  # the parser raises plain ValueErrors
        fail(f"prometheus_client cannot parse the output: {e}")
        return
    if not fams:
        fail("prometheus_client found no metric families")
    print(f"prometheus_client parsed {len(fams)} families, "
          f"{sum(len(f.samples) for f in fams)} samples")


def prom_value(samples, name, **labels):
    for (n, ls), v in samples.items():
        d = dict(ls)
        if n == name and all(d.get(k) == str(val) for k, val in labels.items()):
            return v
    return None


def cmd_report(a):
    exp = json.load(open(a.expect))
    rc, out, err = run(["--json", str(a.pid)], a.tier_stat, a.dir)
    if rc != 0:
        fail(f"--json {a.pid}: exit {rc}: {err.strip()}")
        return
    try:
        got = json.loads(out)
    except ValueError as e:
        fail(f"--json output is not JSON: {e}: {out[:200]!r}")
        return
    compare(exp, got, "json")
    for k in ("manifest", "uptime_s", "publishes", "time_ns", "start_time_ns"):
        if k not in got:
            fail(f"json.{k}: missing")
    if f"name: \"{exp['name']}\"" not in got.get("manifest", ""):
        fail("json.manifest: not the store's manifest")
    p = got["paths"][0]
    if p["latency_count"] <= 0 or not (0 < p["latency_p50_seconds"] <= p["latency_p99_seconds"]):
        fail(f"json.paths[0]: latency count {p['latency_count']}, p50 "
             f"{p['latency_p50_seconds']}, p99 {p['latency_p99_seconds']}")

    # all stores: an object with a list, ours in it
    rc, out, err = run(["--json"], a.tier_stat, a.dir)
    allj = json.loads(out) if rc == 0 else {}
    if rc != 0 or not any(s.get("pid") == a.pid for s in allj.get("stores", [])):
        fail(f"--json (all): exit {rc}, our store not listed: {out[:200]!r} {err.strip()}")

    rc, out, err = run([str(a.pid)], a.tier_stat, a.dir)
    if rc != 0 or f"store '{exp['name']}'" not in out or "dram" not in out or "PATH" not in out:
        fail(f"report {a.pid}: exit {rc}: {out!r} {err.strip()}")
    if exp.get("commit_generation") == 0 and not re.search(r"^commit: none$", out, re.M):
        fail(f"report {a.pid}: no 'commit: none' line: {out!r}")
    rc, out, err = run([], a.tier_stat, a.dir)
    if rc != 0 or not re.search(rf"^{a.pid}\s+{re.escape(exp['name'])}\s.*running", out, re.M):
        fail(f"list: exit {rc}, our store not listed as running: {out!r}")
    rc, out, err = run(["-w", "0.3", "-c", "2", "--json", str(a.pid)], a.tier_stat, a.dir)
    lines = out.splitlines()
    if rc != 0 or len(lines) != 2 or "interval_seconds" not in json.loads(lines[1]):
        fail(f"-w 0.3 -c 2 --json: exit {rc}, {len(lines)} lines: {out[:300]!r}")

    rc, out, err = run(["--prometheus", str(a.pid)], a.tier_stat, a.dir)
    if rc != 0:
        fail(f"--prometheus: exit {rc}: {err.strip()}")
        return
    samples, types = parse_prometheus(out)
    with_client(out)
    base = {"pid": a.pid, "store": exp["name"]}
    checks = [
        ("tierstore_info", {"version": exp["version"]}, 1),
        ("tierstore_objects", {}, exp["objects"]),
        ("tierstore_optimizer_steps_total", {}, exp["optimizer"]["step"]),
        ("tierstore_optimizer_skipped_steps_total", {}, exp["optimizer"]["skipped_steps"]),
        ("tierstore_optimizer_loss_scale", {}, exp["optimizer"]["loss_scale"]),
        ("tierstore_optimizer_grad_norm", {}, exp["optimizer"]["grad_norm"]),
        ("tierstore_nvme_path_read_bytes_total", {"path": 0}, exp["paths"][0]["bytes_read"]),
        ("tierstore_nvme_path_written_bytes_total", {"path": 0},
         exp["paths"][0]["bytes_written"]),
        ("tierstore_nvme_path_latency_seconds_count", {"path": 0}, p["latency_count"]),
        ("tierstore_nvme_path_latency_seconds", {"path": 0, "quantile": "0.99"},
         p["latency_p99_seconds"]),
    ]
    for tier in ("hbm", "dram", "nvme"):
        t = exp["tiers"][tier]
        for fam, key in (("capacity_bytes", "capacity_bytes"), ("used_bytes", "used_bytes"),
                         ("dirty_bytes", "dirty_bytes"), ("hits_total", "hits"),
                         ("misses_total", "misses"), ("evictions_total", "evictions"),
                         ("prefetch_skipped_total", "prefetch_skipped"),
                         ("in_bytes_total", "bytes_in"), ("out_bytes_total", "bytes_out")):
            checks.append((f"tierstore_tier_{fam}", {"tier": tier}, t[key]))
    for name, labels, want in checks:
        v = prom_value(samples, name, **base, **labels)
        if v is None:
            fail(f"prometheus: no sample {name} {labels}")
        elif not math.isclose(v, float(want), rel_tol=1e-12, abs_tol=1e-12):
            fail(f"prometheus: {name} {labels} = {v}, the store says {want}")
    for fam in ("tierstore_uptime_seconds", "tierstore_tier_in_bytes_per_second",
                "tierstore_nvme_path_inflight", "tierstore_prefetch_stall_seconds_total"):
        if fam not in types:
            fail(f"prometheus: family {fam} missing")
    print(f"checked {len(checks)} prometheus samples of {len(samples)}, "
          f"{len(types)} families")


def cmd_commit(a):
    gen = a.generation
    rc, out, err = run(["--json", str(a.pid)], a.tier_stat, a.dir)
    if rc != 0:
        fail(f"--json {a.pid}: exit {rc}: {err.strip()}")
        return
    got = json.loads(out)
    want = {"commit_generation": gen}
    if gen:
        want.update(commit_time_ns=a.time_ns, commits_kept=a.kept,
                    commit_oldest_generation=a.oldest)
    else:
        want.update(commit_time_ns=0, commits_kept=0, commit_oldest_generation=0)
    compare(want, got, "json")

    rc, out, err = run([str(a.pid)], a.tier_stat, a.dir)
    if gen:
        m = re.search(rf"^commit: generation {gen}, (\d+\.\d) s ago "
                      rf"\({a.kept} kept, oldest {a.oldest}\)$", out, re.M)
        if rc != 0 or not m or float(m.group(1)) > 30:
            fail(f"report {a.pid}: exit {rc}, no commit line for generation {gen}: {out!r}")
    elif rc != 0 or not re.search(r"^commit: none$", out, re.M):
        fail(f"report {a.pid}: exit {rc}, no 'commit: none' line: {out!r}")

    rc, out, err = run([], a.tier_stat, a.dir)
    lines = out.splitlines()
    head = lines[0].split() if lines else []
    row = [ln.split() for ln in lines[1:] if ln.split()[:1] == [str(a.pid)]]
    if rc != 0 or "COMMIT" not in head or len(row) != 1 or \
            row[0][head.index("COMMIT")] != (str(gen) if gen else "-"):
        fail(f"list: exit {rc}, COMMIT column not {gen or '-'}: {out!r}")

    rc, out, err = run(["--prometheus", str(a.pid)], a.tier_stat, a.dir)
    if rc != 0:
        fail(f"--prometheus: exit {rc}: {err.strip()}")
        return
    samples, types = parse_prometheus(out)
    with_client(out)
    base = {"pid": a.pid}
    for name, v in (("tierstore_commit_generation", gen),
                    ("tierstore_last_commit_timestamp_seconds", (a.time_ns or 0) * 1e-9 if gen else 0),
                    ("tierstore_commits_kept", a.kept if gen else 0),
                    ("tierstore_commit_oldest_generation", a.oldest if gen else 0)):
        got_v = prom_value(samples, name, **base)
        if types.get(name) != "gauge":
            fail(f"prometheus: {name} is {types.get(name)!r}, not a gauge")
        if got_v is None or not math.isclose(got_v, float(v), rel_tol=1e-15, abs_tol=0):
            fail(f"prometheus: {name} = {got_v}, the store says {v}")


def cmd_rank(a):
    """The store's rank and world size in every view; --rank -1: a segment
    whose writer did not say (null in the JSON, '-' in the list, no label)."""
    known = a.rank >= 0
    want = {"rank": a.rank, "local_rank": a.local_rank, "world_size": a.world_size,
            "local_world_size": a.local_world_size} if known else \
        {"rank": None, "local_rank": None, "world_size": None, "local_world_size": None}
    rc, out, err = run(["--json", str(a.pid)], a.tier_stat, a.dir)
    if rc != 0:
        fail(f"--json {a.pid}: exit {rc}: {err.strip()}")
        return
    got = json.loads(out)
    for k, v in want.items():
        if k not in got or got[k] != v:
            fail(f"json: {k} = {got.get(k, '(missing)')!r}, want {v!r}")

    rc, out, err = run([str(a.pid)], a.tier_stat, a.dir)
    line = f"  rank {a.rank} of {a.world_size} (local {a.local_rank} of {a.local_world_size})"
    first = out.splitlines()[0] if out else ""
    if rc != 0 or (line in first) != known or (not known and " rank " in first):
        fail(f"report {a.pid}: exit {rc}, first line {first!r} {'lacks' if known else 'has'} "
             f"the rank")

    rc, out, err = run([], a.tier_stat, a.dir)
    lines = out.splitlines()
    head = lines[0].split() if lines else []
    row = [ln.split() for ln in lines[1:] if ln.split()[:1] == [str(a.pid)]]
    cell = f"{a.rank}/{a.world_size}" if known else "-"
    if rc != 0 or "RANK" not in head or len(row) != 1 or row[0][head.index("RANK")] != cell:
        fail(f"list: exit {rc}, RANK column not {cell}: {out!r}")

    rc, out, err = run(["--prometheus", str(a.pid)], a.tier_stat, a.dir)
    if rc != 0:
        fail(f"--prometheus: exit {rc}: {err.strip()}")
        return
    samples, _ = parse_prometheus(out)
    with_client(out)
    n = 0
    for (name, labels), _v in samples.items():
        d = dict(labels)
        if d.get("pid") != str(a.pid):
            continue
        n += 1
        has = ("rank" in d, "world_size" in d)
        if known and (d.get("rank"), d.get("world_size")) != (str(a.rank), str(a.world_size)):
            fail(f"prometheus: {name} has rank {d.get('rank')!r}, world_size "
                 f"{d.get('world_size')!r}")
        if not known and any(has):
            fail(f"prometheus: {name} has a rank label from a segment without one")
        if name == "tierstore_info" and known and \
                (d.get("local_rank"), d.get("local_world_size")) != \
                (str(a.local_rank), str(a.local_world_size)):
            fail(f"prometheus: tierstore_info local_rank {d.get('local_rank')!r}, "
                 f"local_world_size {d.get('local_world_size')!r}")
    if n == 0:
        fail(f"prometheus: no sample for pid {a.pid}")


def cmd_stale(a):
    rc, out, err = run([], a.tier_stat, a.dir)
    if rc != 0 or not re.search(rf"^{a.pid}\s.*\bstale\b", out, re.M) or "--remove-stale" not in out:
        fail(f"list: exit {rc}; the dead process's segment not shown stale: {out!r}")
    rc, out, err = run([str(a.pid)], a.tier_stat, a.dir)
    if rc != 1 or "stale" not in err or "gone" not in err:
        fail(f"report of the dead pid: exit {rc} (want 1), stderr {err!r}")
    rc, out, err = run(["--json"], a.tier_stat, a.dir)
    st = [s for s in json.loads(out).get("stores", []) if s.get("pid") == a.pid] if rc == 0 else []
    if len(st) != 1 or st[0].get("stale") is not True:
        fail(f"--json: the stale segment: {st!r}")
    if not os.path.exists(a.path):
        fail("the stale segment was removed without being asked")
    rc, out, err = run(["--remove-stale"], a.tier_stat, a.dir)
    if rc != 0 or a.path not in out:
        fail(f"--remove-stale: exit {rc}: {out!r} {err!r}")
    if os.path.exists(a.path):
        fail("--remove-stale left the segment")
    rc, out, err = run(["--remove-stale"], a.tier_stat, a.dir)
    if rc != 0 or "no stale segments" not in out:
        fail(f"--remove-stale again: exit {rc}: {out!r}")


def cmd_refuse(a):
    data = open(a.path, "rb").read()
    # another layout version: the header's version word at offset 8, one
    # past the store's
    other = int.from_bytes(data[8:12], "little") + 1
    try:
        with open(a.path, "r+b") as f:
            f.seek(8)
            f.write(other.to_bytes(4, "little"))
        rc, out, err = run([str(a.pid)], a.tier_stat, a.dir)
        if rc != 1 or f"version {other}" not in err:
            fail(f"another version: exit {rc} (want 1), stderr {err!r}")
        rc, out, err = run([], a.tier_stat, a.dir)
        if rc != 0 or "other version" not in out:
            fail(f"list with another version: exit {rc}: {out!r}")
    finally:
        with open(a.path, "r+b") as f:
            f.write(data[:256])
    rc, out, err = run([str(a.pid)], a.tier_stat, a.dir)
    if rc != 0:
        fail(f"restored segment: exit {rc}: {err!r}")
    # another user's (needs root to give the file away)
    if os.geteuid() == 0:
        try:
            os.chown(a.path, 4242, -1)
            rc, out, err = run([str(a.pid)], a.tier_stat, a.dir)
            if rc != 1 or "4242" not in err:
                fail(f"another user's segment: exit {rc} (want 1), stderr {err!r}")
        finally:
            os.chown(a.path, 0, -1)
    else:
        print("note: not root; the other-user case is covered by the statseg suite")
    # no store, bad pid
    rc, out, err = run(["2147483646"], a.tier_stat, a.dir)
    if rc != 1 or "no open store" not in err:
        fail(f"a pid without a store: exit {rc} (want 1), stderr {err!r}")
    rc, out, err = run(["12ab"], a.tier_stat, a.dir)
    if rc != 2:
        fail(f"a malformed pid: exit {rc} (want 2)")
    rc, out, err = run([str(a.pid), "-w", "0"], a.tier_stat, a.dir)
    if rc != 2:
        fail(f"-w 0: exit {rc} (want 2)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tier-stat", required=True)
    ap.add_argument("--dir", required=True)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("report")
    r.add_argument("--pid", type=int, required=True)
    r.add_argument("--expect", required=True)
    c = sub.add_parser("commit")
    c.add_argument("--pid", type=int, required=True)
    c.add_argument("--generation", type=int, required=True)
    c.add_argument("--kept", type=int, default=0)
    c.add_argument("--oldest", type=int, default=0)
    c.add_argument("--time-ns", type=int, default=0)
    k = sub.add_parser("rank")
    k.add_argument("--pid", type=int, required=True)
    for name in ("rank", "local-rank", "world-size", "local-world-size"):
        k.add_argument("--" + name, type=int, default=-1)
    for name in ("stale", "refuse"):
        s = sub.add_parser(name)
        s.add_argument("--pid", type=int, required=True)
        s.add_argument("--path", required=True)
    a = ap.parse_args()
    {"report": cmd_report, "commit": cmd_commit, "stale": cmd_stale,
     "refuse": cmd_refuse, "rank": cmd_rank}[a.cmd](a)
    if FAILS:
        print(f"{len(FAILS)} check(s) failed")
        return 1
    print(f"live_check {a.cmd}: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
