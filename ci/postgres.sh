#!/usr/bin/env bash
# Installs Debian's postgresql (server binaries under /usr/lib/postgresql/N/bin) when missing.
# Tests never use the packaged cluster: they initdb their own throw-away ones (as the postgres
# user, on a free loopback port), so the package's service is left stopped.
set -euo pipefail
if ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    ls -d /usr/lib/postgresql/*/bin
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "postgresql is missing and we are not root: apt-get install postgresql" >&2
    exit 1
fi
apt-get update
# policy-rc.d 101: do not start the packaged cluster's service during the install.
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql
ls -d /usr/lib/postgresql/*/bin
