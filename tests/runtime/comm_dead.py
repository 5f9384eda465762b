#!/usr/bin/env python3
"""comm_dead.py - a rank that is gone must not hang the others
(docs/distributed.md, "Dead ranks").

    comm_dead.py MPIRUN TEST_COMM MODE [MPIRUN_ARGS...]

Runs TEST_COMM MODE on 3 ranks under MPIRUN with a hard limit of 60 s and
judges what happened:
  absent: rank 2 stays alive but never calls the collective.  Ranks 0 and
          1 must each print "comm-dead: rank R: ETIMEDOUT after T s" (the
          comm's 2 s timeout; test_comm checks T, that the message names
          rank 2 as the one that did not answer, and the -EPIPE after).
  kill:   rank 2 SIGKILLs itself before the collective.  Either ranks 0 and
          1 time out as above (10 s timeout), or the launcher ends the job
          and says that rank 2 died (Open MPI's mpirun does, within ~1 s).
          Never a hang.
  kill-noabort: kill, with the MPIRUN_ARGS telling the launcher not to
          end the job (Open MPI: --mca orte_abort_on_non_zero_status 0):
          ranks 0 and 1 must time out in the library.
Exits 0 (pass), 1 (fail: the output is printed).
"""
import subprocess
import sys
import time

LIMIT = 60


def main(argv):
    mpirun, exe, mode = argv[1], argv[2], argv[3]
    cmd = [mpirun] + argv[4:] + ["-np", "3", exe, "kill" if mode == "kill-noabort" else mode]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=LIMIT, start_new_session=True)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        print(out)
        print(f"comm_dead: FAIL: {mode}: still running after {LIMIT} s: the ranks hung")
        return 1
    took = time.monotonic() - t0
    out = p.stdout
    print(out)
    timed_out = [r for r in (0, 1) if f"comm-dead: rank {r}: ETIMEDOUT" in out]
    print(f"comm_dead: {mode}: mpirun exited {p.returncode} after {took:.1f} s; "
          f"ranks that reported the timeout: {timed_out}")
    if mode in ("absent", "kill-noabort"):
        ok = timed_out == [0, 1] and all(f"comm-dead: rank {r}: after: -32" in out for r in (0, 1))
    else:
        launcher = p.returncode != 0 and "rank 2" in out and ("signal 9" in out or "Killed" in out)
        ok = timed_out == [0, 1] or launcher
        print(f"comm_dead: kill: {'the library timed out' if timed_out == [0, 1] else ''}"
              f"{'the launcher ended the job naming rank 2' if launcher else ''}")
    print(f"comm_dead: {'PASS' if ok else 'FAIL'}: {mode}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
