#!/usr/bin/env bash
# End-to-end tests of tickwheel-server as a process (tests/e2e, pytest):
#   test_differential.py  the same sessions against the real beanstalkd, replies compared
#   test_clients.py       greenstalk and pystalk driving tickwheel-server, with a restart
#   test_crash.py         SIGKILL under load, restart on the same data dir, check every ack
#   test_cli.py           the `tickwheel` command-line client against both servers (top under tmux)
#   test_dropin.py        beanstalkd's command lines: no -b is in memory, one server per -b DIR,
#                         unix sockets, -f/-F across restarts, --version's commit
#   test_faults.py        the data directory's disk fills up (a tmpfs; needs root and mount)
#   test_http.py          the HTTP/JSON API, /metrics (prometheus_client's parser), auth, limits,
#                         idempotency keys across a restart, schemathesis on /openapi.json
#   test_postgres.py      --postgres: a node on a throw-away PostgreSQL, SQL put in an app's
#                         transaction (psycopg), fail-over to a standby after kill -9
#   test_postgres_active.py  --postgres-mode active-active: 3 nodes serving one database,
#                         kill -9 of one and its restart, every ack delivered once, none early
# TICKWHEEL_E2E_BACKEND=postgres runs the module-wide `tickwheel` server (test_clients.py) on
# PostgreSQL instead of -b DIR (ci/test.sh does so for test_clients.py).
#   test_dashboard.py     the web dashboard in Debian's chromium (headless), driven by Playwright
# Works on a fresh Debian machine with Rust, Python 3 and apt: installs beanstalkd (as root)
# if it is missing, makes a virtualenv under the cargo target dir (ignored by git), builds
# the server in release mode and runs pytest. Extra arguments go to pytest (e.g. -k crash).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# need PACKAGE TEST...: installs the Debian PACKAGE (as root) unless `TEST...` already passes.
need() {
    local package=$1
    shift
    if ! "$@" >/dev/null 2>&1; then
        if [ "$(id -u)" -ne 0 ]; then
            echo "$package is missing and we are not root: apt-get install $package" >&2
            exit 1
        fi
        apt-get update
        DEBIAN_FRONTEND=noninteractive apt-get install -y "$package"
    fi
}

step "beanstalkd (reference server)"
need beanstalkd command -v beanstalkd
command -v beanstalkd

step "tmux (drives tickwheel top in test_cli.py)"
need tmux command -v tmux
command -v tmux

step "strace (test_dropin.py counts both servers' fsyncs)"
need strace command -v strace
command -v strace

step "postgresql (test_postgres.py starts throw-away clusters)"
bash ci/postgres.sh

step "chromium (test_dashboard.py drives it with Playwright; Playwright downloads no browser)"
need chromium test -x /usr/bin/chromium
/usr/bin/chromium --version

TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
VENV="${E2E_VENV:-$TARGET/e2e-venv}"
PYTHON="${PYTHON:-python3}"

step "virtualenv $VENV"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check pytest pytest-rerunfailures greenstalk pystalk prometheus_client schemathesis "psycopg[binary]"
# The dashboard test: Playwright's Python API only; it drives /usr/bin/chromium.
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check playwright

step "build tickwheel-server (release)"
cargo build --release -p tickwheel-server
export TICKWHEEL_BIN="${TICKWHEEL_BIN:-$TARGET/release/tickwheel-server}"
"$TICKWHEEL_BIN" -v

step "build tickwheel (the command-line client, release)"
cargo build --release -p tickwheel-cli
export TICKWHEEL_CLI_BIN="${TICKWHEEL_CLI_BIN:-$TARGET/release/tickwheel}"
"$TICKWHEEL_CLI_BIN" --version

step "pytest tests/e2e"
# No caches or bytecode in the source tree.
export PYTHONDONTWRITEBYTECODE=1
exec "$VENV/bin/python" -m pytest -p no:cacheprovider -ra tests/e2e "$@"
