#!/bin/sh
# Installs what tierstore builds with, from Debian's packages, when missing:
# meson, ninja, liburing, libnuma, libyaml, Check, pkg-config; clang (with
# its fuzzer runtime), python3 (the timeline and live-view checks) and its
# Prometheus client (whose parser checks tier-stat --prometheus) when called with --dev.  The CUDA Toolkit is optional
# and not installed here (meson -Dcuda=auto uses nvcc when it is on PATH).
set -eu
pkgs="meson ninja-build pkg-config liburing-dev libnuma-dev libyaml-dev check"
[ "${1:-}" = "--dev" ] && pkgs="$pkgs clang libclang-rt-dev python3 python3-prometheus-client"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
# shellcheck disable=SC2086 # a list of package names
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
