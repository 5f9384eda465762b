#!/usr/bin/env python3
"""trace-overlap.py - how much of each optimizer step had the GPU lane's
stages busy at once, from a TIER_TRACE timeline (docs/trace.md).

    trace-overlap.py TRACE.json [--json]

For every "step" span, the union of each stage's spans inside it (a stage
is busy while at least one of its spans is open) and the fractions of the
step's time when:

  h2d        the host-to-device fills were busy
  d2h        the device-to-host write-backs were busy
  update     the GPU lane had a shard's update in flight (update_gpu)
  all3       all three at once: both copy directions and the update
  h2d+d2h    both copy directions at once
  staging    the GPU lane's thread copied a pageable gradient into its
             pinned staging or a staged output into the trainer's buffer
             (0 with device or pinned buffers); staging_GBps is the bytes of
             the step's staging spans over that busy time (null without any)
  link_in    the link's host-to-device direction had a copy in flight: a
             fill (h2d) or a host gradient coming into the GPU lane's slot
             (grad_in); in_GBps is the bytes of both over that busy time
  link_out   the same the other way: a write-back (d2h) or a host output
             leaving the slot (out_d2h); out_GBps likewise

and, per copy, the GPU lane's own: grad_in_GBps (the host gradients' bytes
over the sum of their spans' times), out_d2h_GBps (the host outputs'),
kernel_us (the median kernel span); null where the step has none.

What the spans measure: a fill or write-back from its queueing to its
completion callback; an update_gpu span from the moment the GPU lane
queued the shard's work (gradient in, kernel, copy out) to the moment its
slot ended (its event waited for), so "update" is when the lane had work
on the device, an upper bound of the kernel's own busy time; a staging
span is one such copy, on the lane's thread and the optimizer's threads,
from its start to its end; grad_in, kernel_gpu and out_d2h spans are the
slot's stream from one of its timing events to the next (on a GPU the
device's clock, laid on the host's from the moment the work was queued), so
a copy's span includes any wait behind other copies on the same engine.

Prints a line per step and the median over the steps after the first
(the warm-up), or with --json one object.  Exits 1 with a message when the
file has no step span.  Python 3 standard library only.
"""
import argparse
import json
import sys

STAGES = ("h2d", "d2h", "update_gpu", "staging", "grad_in", "out_d2h")


def union(spans):
    """Disjoint intervals covering @spans (list of (begin, end))."""
    out = []
    for b, e in sorted(spans):
        if out and b <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([b, e])
    return out


def intersect(a, b):
    """The intersection of two sorted disjoint interval lists."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append([lo, hi])
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def length(iv):
    return sum(e - b for b, e in iv)


def clip(iv, b, e):
    return [[max(x, b), min(y, e)] for x, y in iv if y > b and x < e]


def step_overlaps(events):
    """[(step, duration_us, {name: fraction})] for each step span."""
    steps = sorted((ev["args"].get("step", k), ev["ts"], ev["ts"] + ev["dur"])
                   for k, ev in enumerate(events)
                   if ev.get("ph") == "X" and ev.get("name") == "step")
    spans = {s: [(ev["ts"], ev["dur"], ev.get("args", {}).get("bytes", 0)) for ev in events
                 if ev.get("ph") == "X" and ev.get("name") == s]
             for s in STAGES + ("kernel_gpu",)}
    busy = {s: union([(ts, ts + dur) for ts, dur, n in spans[s]]) for s in STAGES}

    def nbytes(names, b, e):
        return sum(n for s in names for ts, dur, n in spans[s] if b <= ts < e)

    def per_copy(name, b, e):
        sel = [(dur, n) for ts, dur, n in spans[name] if b <= ts < e]
        t = sum(dur for dur, n in sel)
        return sum(n for dur, n in sel) / t * 1e-3 if t > 0 else None

    out = []
    for step, b, e in steps:
        d = e - b
        if d <= 0:
            continue
        h, w, u, g, gi, go = (clip(busy[s], b, e) for s in STAGES)
        both = intersect(h, w)
        lin, lout = union(h + gi), union(w + go)
        fr = {"h2d": length(h) / d, "d2h": length(w) / d, "update": length(u) / d,
              "h2d+d2h": length(both) / d, "all3": length(intersect(both, u)) / d,
              "staging": length(g) / d, "link_in": length(lin) / d, "link_out": length(lout) / d}
        fr["staging_GBps"] = (nbytes(("staging",), b, e) / length(g) * 1e-3
                              if length(g) > 0 else None)
        fr["in_GBps"] = (nbytes(("h2d", "grad_in"), b, e) / length(lin) * 1e-3
                         if length(lin) > 0 else None)
        fr["out_GBps"] = (nbytes(("d2h", "out_d2h"), b, e) / length(lout) * 1e-3
                          if length(lout) > 0 else None)
        fr["grad_in_GBps"] = per_copy("grad_in", b, e)
        fr["out_d2h_GBps"] = per_copy("out_d2h", b, e)
        k = [dur for ts, dur, n in spans["kernel_gpu"] if b <= ts < e]
        fr["kernel_us"] = median(k) if k else None
        out.append((step, d, fr))
    return out


def median(v):
    v = sorted(v)
    n = len(v)
    return 0.0 if not n else v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    try:
        with open(a.trace, encoding="utf-8") as f:
            doc = json.load(f)
        events = doc["traceEvents"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print("trace-overlap.py: %s: not a TIER_TRACE timeline: %s" % (a.trace, e),
              file=sys.stderr)
        return 1
    rows = step_overlaps(events)
    if not rows:
        print("trace-overlap.py: %s: no step span" % a.trace, file=sys.stderr)
        return 1
    counted = rows[1:] if len(rows) > 1 else rows
    keys = ("h2d", "d2h", "update", "h2d+d2h", "all3", "staging", "link_in", "link_out")
    med = {k: median([r[2][k] for r in counted]) for k in keys}
    for k in ("staging_GBps", "in_GBps", "out_GBps", "grad_in_GBps", "out_d2h_GBps",
              "kernel_us"):
        v = [r[2][k] for r in counted if r[2][k] is not None]
        med[k] = median(v) if v else None
    if a.json:
        print(json.dumps({"steps": [dict(step=s, dur_us=d, **fr) for s, d, fr in rows],
                          "median": med, "counted_from": counted[0][0]}))
        return 0
    print("%6s %12s %7s %7s %7s %8s %7s %8s" % ("step", "dur_us", "h2d", "d2h", "update",
                                                 "h2d+d2h", "all3", "staging"))
    for s, d, fr in rows:
        print("%6s %12.1f %7.3f %7.3f %7.3f %8.3f %7.3f %8.3f" %
              (s, d, fr["h2d"], fr["d2h"], fr["update"], fr["h2d+d2h"], fr["all3"],
               fr["staging"]))
    print("median over steps from %s: both copy directions and the GPU lane's update busy"
          " %.3f of the step (h2d %.3f, d2h %.3f, update %.3f, both copies %.3f,"
          " staging %.3f%s)" %
          (counted[0][0], med["all3"], med["h2d"], med["d2h"], med["update"], med["h2d+d2h"],
           med["staging"], "" if med["staging_GBps"] is None
           else " at %.1f GB/s" % med["staging_GBps"]))

    def rate(k):
        return "-" if med[k] is None else "%.1f GB/s" % med[k]
    print("the link: in %.3f of the step at %s, out %.3f at %s; a host gradient in %s,"
          " an output out %s; kernel %s" %
          (med["link_in"], rate("in_GBps"), med["link_out"], rate("out_GBps"),
           rate("grad_in_GBps"), rate("out_d2h_GBps"),
           "-" if med["kernel_us"] is None else "%.0f us" % med["kernel_us"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
