#!/usr/bin/env python3
"""zero_dead.py - a rank that dies in the middle of a step of the partitioned
optimizer must not hang the others (docs/distributed.md, "Timeouts").

    zero_dead.py MPIRUN TEST_ZERO MODE [MPIRUN_ARGS...]

Runs TEST_ZERO on 3 ranks under MPIRUN with a hard limit of 60 s.  Rank 2
pushes its gradients of step 3 and then:
  absent: stays alive but never calls tier_optim_end.  Ranks 0 and 1 must
          each print "zero-dead: rank R: PASS: ..." (test_zero checks that
          tier_optim_end returned -ETIMEDOUT after the comm's 4 s timeout,
          at most 2 s of the comm's probe and 3 s of slack later, with a
          detail naming the collective and rank 2, and that no step was
          counted).
  kill:   SIGKILLs itself.  Either ranks 0 and 1 pass as above, or the
          launcher ends the job with a non-zero status and says that rank 2
          died (Open MPI's mpirun does, within ~2 s).  Never a hang.
  kill-noabort: kill, with the MPIRUN_ARGS telling the launcher not to end
          the job (Open MPI: --mca orte_abort_on_non_zero_status 0): ranks 0
          and 1 must pass in the library.
Each run gets a scratch directory of its own under $TIER_TEST_TMPDIR (the
killed rank cannot remove its store's files), removed afterwards.
Exits 0 (pass), 1 (fail: the output is printed).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

LIMIT = 60


def main(argv):
    mpirun, exe, mode = argv[1], argv[2], argv[3]
    cmd = [mpirun] + argv[4:] + ["-np", "3", exe, "kill" if mode == "kill-noabort" else mode]
    base = os.environ.get("TIER_TEST_TMPDIR")
    if base:
        os.makedirs(base, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="zero-dead-", dir=base)
    env = dict(os.environ, TIER_TEST_TMPDIR=scratch)
    t0 = time.monotonic()
    try:
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=LIMIT, start_new_session=True, env=env)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            print(out)
            print(f"zero_dead: FAIL: {mode}: still running after {LIMIT} s: the ranks hung")
            return 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    took = time.monotonic() - t0
    out = p.stdout
    print(out)
    passed = [r for r in (0, 1) if f"zero-dead: rank {r}: PASS" in out]
    print(f"zero_dead: {mode}: mpirun exited {p.returncode} after {took:.1f} s; "
          f"ranks whose tier_optim_end failed in time: {passed}")
    if mode in ("absent", "kill-noabort"):
        ok = passed == [0, 1]
    else:
        launcher = p.returncode != 0 and "rank 2" in out and ("signal 9" in out or "Killed" in out)
        ok = p.returncode != 0 and (passed == [0, 1] or launcher)
        print(f"zero_dead: kill: {'the library timed out' if passed == [0, 1] else ''}"
              f"{'the launcher ended the job naming rank 2' if launcher else ''}")
    print(f"zero_dead: {'PASS' if ok else 'FAIL'}: {mode}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
