#!/bin/sh
# Installs what tierstore builds with, from Debian's packages, when missing:
# meson, ninja, liburing, libnuma, libyaml, Check, pkg-config; clang (with
# its fuzzer runtime), python3 (the timeline and live-view checks) and its
# Prometheus client (whose parser checks tier-stat --prometheus), numpy,
# torch and pytest (the export tests), scikit-learn (its digits CSV, for
# examples/train_digits.c and its test), Open MPI (the communicator's MPI
# backend and its multi-rank tests under mpirun), stress-ng (CI loads the machine
# with it while the concurrent suites run again) and, from PyPI, safetensors
# (which Debian does not package) and the training frameworks the Python tests
# run (PyTorch Lightning, Transformers, Accelerate) when called with --dev.  The CUDA Toolkit is optional
# and not installed here (meson -Dcuda=auto uses nvcc when it is on PATH).
set -eu
pkgs="meson ninja-build pkg-config liburing-dev libnuma-dev libyaml-dev check"
[ "${1:-}" = "--dev" ] && pkgs="$pkgs clang libclang-rt-dev python3 python3-prometheus-client python3-numpy python3-torch python3-pytest python3-sklearn python3-pip openmpi-bin libopenmpi-dev stress-ng python3-yaml python3-psutil python3-packaging python3-requests"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
if [ -n "$missing" ]; then
	echo "installing:$missing"
	$SUDO apt-get update -qq
	# shellcheck disable=SC2086 # a list of package names
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
# safetensors for the system's python3 (the one with Debian's torch), in the
# user's site-packages.
if [ "${1:-}" = "--dev" ] && ! /usr/bin/python3 -c 'import safetensors' 2>/dev/null; then
	echo "installing: safetensors (pip)"
	/usr/bin/python3 -m pip install -q --user --break-system-packages safetensors
fi
# The frameworks tests/python/test_frameworks.py trains under (PyTorch
# Lightning, the Hugging Face Trainer, Accelerate), in versions that run on
# Debian's torch 1.13, for the system's python3 in the user's site-packages.
# --no-deps: their requirements would pull a torch from PyPI (Debian's
# 1.13.0a0 is a pre-release to pip); what they need besides is listed here
# (or comes from Debian above).
if [ "${1:-}" = "--dev" ] &&
	! /usr/bin/python3 -c 'import pytorch_lightning, transformers, accelerate' 2>/dev/null; then
	echo "installing: pytorch-lightning, transformers, accelerate (pip, --no-deps)"
	/usr/bin/python3 -m pip install -q --user --break-system-packages --no-deps \
		pytorch-lightning==2.2.5 lightning-utilities==0.11.9 torchmetrics==1.2.1 \
		transformers==4.39.3 tokenizers==0.15.2 huggingface-hub==0.22.2 \
		accelerate==0.29.3 safetensors regex tqdm fsspec filelock
fi
