#!/usr/bin/env bash
# install-packages.sh [--check] — install, when missing, the Debian packages a cluster of
# start-cluster.sh runs on and the `rados` feature links (librados-dev). Exits 0 at once when
# they are there; with --check, exits 1 when one is missing and installs nothing.
# apt-get's output goes to stdout and stderr; start-cluster.sh (CEPH_INSTALL=1) writes it to
# DIR/apt.log, .ci/run runs this in the background while its first build runs.
set -euo pipefail

PKGS="ceph-mon ceph-osd ceph-common python3-rados librados-dev"
if command -v ceph-mon >/dev/null && command -v ceph-osd >/dev/null && command -v rados >/dev/null &&
  [ -e /usr/include/rados/librados.h ]; then
  exit 0
fi
[ "${1:-}" != --check ] || exit 1
# shellcheck disable=SC2086
"$(dirname "$0")/../apt-install.sh" $PKGS
