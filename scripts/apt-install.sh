#!/usr/bin/env bash
# apt-install.sh PACKAGE... — install Debian packages with apt-get, trying the package lists
# already on the machine first and refreshing them (`apt-get update`) only when that fails.
# Used by .ci/run and scripts/ceph/install-packages.sh. DPkg::Lock::Timeout: another apt-get
# running on the machine must not fail us.
set -euo pipefail

apt() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"; }
apt install -y -qq --no-install-recommends "$@" || { apt update -qq && apt install -y -qq --no-install-recommends "$@"; }
