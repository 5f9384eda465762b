"""python -m tierstore [--manifest PATH]: the library's version, its build
features, the GPU count and the effective manifest (PATH, else
$TIER_MANIFEST, else the embedded default) as YAML.  Exits 2 with the
library's message (FILE:LINE:COL: ...) on a manifest that is not valid, 1
when the library cannot be loaded."""
import argparse
import os
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tierstore", description=__doc__)
    ap.add_argument("--manifest", metavar="PATH",
                    help="the manifest to check and print (default: $TIER_MANIFEST, "
                         "else the embedded default)")
    args = ap.parse_args(argv)
    try:
        import tierstore
        version, features = tierstore.version(), tierstore.build_features()
        path = tierstore.library_path()
    except ImportError as e:
        print(f"python -m tierstore: {e}", file=sys.stderr)
        return 1
    ngpu, why = tierstore.gpu_count()
    print(f"tierstore {version} ({path})")
    print(f"features: {features}")
    print(f"gpus: {ngpu}" + (f" ({why})" if ngpu == 0 and why else ""))
    try:
        m = tierstore.Manifest(args.manifest)
        text = m.emit()
    except tierstore.TierError as e:
        print(e.strerror, file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    try:
        rc = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (python -m tierstore | head): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        rc = 0
    sys.exit(rc)
