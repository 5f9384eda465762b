#!/usr/bin/env python3
"""trace_check.py - checks a TIER_TRACE timeline (Chrome trace event JSON).

    trace_check.py FILE [--shards N] [--steps K] [--stages a,b,...]

Checks that:
  - the file is JSON with a list "traceEvents";
  - every complete ("X") event has name, ph, ts, dur, pid and tid, with
    dur >= 0;
  - on every (pid, tid), the X events sorted by ts are properly nested: each
    next span starts after the previous one ends or lies entirely inside a
    span still open (what the viewers need to draw a track);
  - with --shards N: every shard 0..N-1 has at least one span;
  - with --steps K: there are exactly K "step" spans;
  - with --stages a,b: each named stage appears at least once;
  - every update_cpu/update_gpu span lies within the "step" span of its
    args.step (1 us tolerance).  An update whose step has no step span is an
    error unless the file says spans were dropped (otherData.dropped_spans).

Prints one summary line and exits 0, or prints what is wrong (naming the
offending event) and exits 1.  Python 3 standard library only.
"""
import argparse
import json
import sys

TOL_US = 1.0      # slack for the update-within-step check
EPS_US = 1e-6     # float slack for the nesting check (ts has 3 decimals)
UPDATES = ("update_cpu", "update_gpu")
REQUIRED = ("name", "ph", "ts", "dur", "pid", "tid")


class Bad(Exception):
    pass


def describe(i, ev):
    """The event as an error message names it: index, name, tid, ts."""
    name = ev.get("name", "?") if isinstance(ev, dict) else "?"
    tid = ev.get("tid", "?") if isinstance(ev, dict) else "?"
    ts = ev.get("ts", "?") if isinstance(ev, dict) else "?"
    return "event #%d (%s, tid %s, ts %s)" % (i, name, tid, ts)


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def load(path):
    try:
        with open(path, "r", encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise Bad("cannot read: %s" % e.strerror)
    except (ValueError, UnicodeDecodeError) as e:
        raise Bad("not valid JSON: %s" % e)
    if isinstance(doc, list):          # the bare-array form is also Chrome's
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise Bad('"traceEvents" is not a list')
    return doc


def complete_events(events):
    """The X events as (index, event), checked field by field."""
    out = []
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            raise Bad("event #%d is not an object" % i)
        if ev.get("ph") != "X":
            continue
        for k in REQUIRED:
            if k not in ev:
                raise Bad('%s: no "%s"' % (describe(i, ev), k))
        if not isinstance(ev["name"], str):
            raise Bad('%s: "name" is not a string' % describe(i, ev))
        for k in ("ts", "dur"):
            if not is_num(ev[k]):
                raise Bad('%s: "%s" is not a number' % (describe(i, ev), k))
        if ev["dur"] < 0:
            raise Bad("%s: negative dur %s" % (describe(i, ev), ev["dur"]))
        out.append((i, ev))
    return out


def check_nesting(xs):
    """Per (pid, tid): sorted by ts (longer first on ties), spans nest."""
    tracks = {}
    for i, ev in xs:
        tracks.setdefault((ev["pid"], ev["tid"]), []).append((i, ev))
    for (pid, tid), evs in tracks.items():
        evs.sort(key=lambda p: (p[1]["ts"], -p[1]["dur"], p[0]))
        stack = []          # (end, index, event) of the spans still open
        for i, ev in evs:
            begin = ev["ts"]
            end = begin + ev["dur"]
            while stack and stack[-1][0] <= begin + EPS_US:
                stack.pop()
            if stack and end > stack[-1][0] + EPS_US:
                oi, oev = stack[-1][1], stack[-1][2]
                raise Bad("%s overlaps %s on pid %s tid %s without nesting in it "
                          "(it ends at %.3f, after %.3f)"
                          % (describe(i, ev), describe(oi, oev), pid, tid, end,
                             stack[-1][0]))
            stack.append((end, i, ev))
    return len(tracks)


def args_of(i, ev, key):
    args = ev.get("args")
    if not isinstance(args, dict) or key not in args:
        raise Bad('%s: no args.%s' % (describe(i, ev), key))
    return args[key]


def main(argv=None):
    ap = argparse.ArgumentParser(description="Check a tierstore TIER_TRACE timeline.")
    ap.add_argument("file")
    ap.add_argument("--shards", type=int, help="every shard 0..N-1 has a span")
    ap.add_argument("--steps", type=int, help='exactly K "step" spans')
    ap.add_argument("--stages", help="comma-separated stages that must each appear")
    opt = ap.parse_args(argv)

    try:
        doc = load(opt.file)
        events = doc["traceEvents"]
        xs = complete_events(events)
        ntracks = check_nesting(xs)
        other = doc.get("otherData") if isinstance(doc.get("otherData"), dict) else {}
        dropped = other.get("dropped_spans", 0)
        dropped = dropped if is_num(dropped) else 0

        steps = {}
        shards = set()
        stages = {}
        for i, ev in xs:
            stages[ev["name"]] = stages.get(ev["name"], 0) + 1
            if ev["name"] == "step":
                s = args_of(i, ev, "step")
                if s in steps:
                    raise Bad("%s: a second step span for step %s (the first is %s)"
                              % (describe(i, ev), s, describe(*steps[s])))
                steps[s] = (i, ev)
            else:
                args = ev.get("args")
                if isinstance(args, dict) and "shard" in args:
                    shards.add(args["shard"])

        for i, ev in xs:
            if ev["name"] not in UPDATES:
                continue
            s = args_of(i, ev, "step")
            if s not in steps:
                if dropped:
                    continue
                raise Bad("%s: step %s has no step span" % (describe(i, ev), s))
            si, sev = steps[s]
            if (ev["ts"] < sev["ts"] - TOL_US or
                    ev["ts"] + ev["dur"] > sev["ts"] + sev["dur"] + TOL_US):
                raise Bad("%s: [%.3f, %.3f] is not within step %s's span [%.3f, %.3f] (%s)"
                          % (describe(i, ev), ev["ts"], ev["ts"] + ev["dur"], s,
                             sev["ts"], sev["ts"] + sev["dur"], describe(si, sev)))

        if opt.shards is not None:
            missing = [k for k in range(opt.shards) if k not in shards]
            if missing:
                raise Bad("no span for shard%s %s (of %d)"
                          % ("s" if len(missing) > 1 else "",
                             ", ".join(str(k) for k in missing[:10]) +
                             (", ..." if len(missing) > 10 else ""), opt.shards))
        if opt.steps is not None and len(steps) != opt.steps:
            raise Bad("%d step spans, expected %d" % (len(steps), opt.steps))
        if opt.stages:
            for st in (s.strip() for s in opt.stages.split(",")):
                if st and st not in stages:
                    raise Bad('no "%s" span' % st)
    except Bad as e:
        print("trace_check: %s: %s" % (opt.file, e))
        return 1

    print("trace_check: %s: ok: %d events, %d spans on %d tracks, %d steps, %d shards, "
          "%d stages, %s dropped"
          % (opt.file, len(events), len(xs), ntracks, len(steps), len(shards),
             len(stages), dropped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
