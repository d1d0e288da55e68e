"""Fixtures for the end-to-end suites: start `tickwheel-server` (and the real `beanstalkd`
for the differential suite) as processes on free loopback ports, and stop them afterwards.

Environment:
  TICKWHEEL_BIN  the server binary (default: $CARGO_TARGET_DIR or target/, release build)
  BEANSTALKD_BIN the reference beanstalkd (default: `beanstalkd` on PATH)
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tickwheel_bin():
    explicit = os.environ.get("TICKWHEEL_BIN")
    if explicit:
        return explicit
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    return os.path.join(target, "release", "tickwheel-server")


def beanstalkd_bin():
    return os.environ.get("BEANSTALKD_BIN") or shutil.which("beanstalkd") or "beanstalkd"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A server process on 127.0.0.1:port that can be stopped, killed and restarted (on the
    same port and, for tickwheel, the same data directory)."""

    def __init__(self, argv_for_port, name, log_dir):
        self.argv_for_port = argv_for_port
        self.name = name
        self.port = None
        self.proc = None
        self.started_at = None
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.log = open(self.log_path, "ab")

    def start(self, port=None, timeout=10.0):
        self.spawn(port)
        self.wait_for_port(timeout)
        return self

    def spawn(self, port=None):
        """Starts the process without waiting for it to listen (a standby node)."""
        assert self.proc is None, "already running"
        self.port = port or self.port or free_port()
        self.started_at = time.monotonic()  # just before the process starts (for `uptime`)
        self.proc = subprocess.Popen(
            self.argv_for_port(self.port),
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
        )
        return self

    def wait_for_port(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode}; see {self.log_path}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as probe:
                    self._quit_probe(probe)
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} did not listen on {self.port}")
                time.sleep(0.02)

    @staticmethod
    def _quit_probe(probe):
        """Ends the readiness probe with `quit` and waits for the server's EOF. Both servers
        release a connection (its `current-connections`, its tube's `current-using`) before
        they close its socket, so once the EOF is here the probe is gone from every count a
        test reads next. A probe that only connected and closed could still be in the
        server's backlog, or half torn down, when the test's first command was answered."""
        try:
            probe.settimeout(5)
            probe.sendall(b"quit\r\n")
            while probe.recv(4096):
                pass
        except OSError:
            pass  # it listens, which is what the probe is for; the rest is best effort

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        """Stops the process (SIGTERM: graceful) and waits for it to exit."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
            raise RuntimeError(f"{self.name} ignored signal {sig} for {timeout}s")
        finally:
            self.proc = None
        return code

    def kill(self):
        return self.stop(signal.SIGKILL)

    def restart(self):
        self.stop()
        return self.start()

    def close(self):
        try:
            if self.proc is not None:
                self.kill()
        finally:
            self.log.close()


def tickwheel_process(data_dir, log_dir, extra=()):
    binary = tickwheel_bin()
    if not os.path.exists(binary):
        pytest.fail(f"{binary} not found: build it (cargo build --release -p tickwheel-server) "
                    "or set TICKWHEEL_BIN")
    return ServerProcess(
        lambda port: [binary, "-l", "127.0.0.1", "-p", str(port), "-b", data_dir, *extra],
        "tickwheel",
        log_dir,
    )


def beanstalkd_process(log_dir, extra=()):
    binary = beanstalkd_bin()
    if shutil.which(binary) is None and not os.path.exists(binary):
        pytest.fail("beanstalkd not found: apt-get install beanstalkd or set BEANSTALKD_BIN")
    return ServerProcess(
        lambda port: [binary, "-l", "127.0.0.1", "-p", str(port), *extra],
        "beanstalkd",
        log_dir,
    )


@pytest.fixture
def workdir():
    path = tempfile.mkdtemp(prefix="tickwheel-e2e-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def module_dir():
    path = tempfile.mkdtemp(prefix="tickwheel-e2e-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def tickwheel(module_dir, request):
    """A tickwheel-server for the whole module, on a free port with its own data dir; with
    TICKWHEEL_E2E_BACKEND=postgres, on a fresh database of a throw-away PostgreSQL instead
    (`TICKWHEEL_E2E_BACKEND=postgres bash ci/e2e.sh -k test_clients`)."""
    if os.environ.get("TICKWHEEL_E2E_BACKEND") == "postgres":
        url = request.getfixturevalue("pg_cluster").create_db()
        server = tickwheel_pg_process(url, module_dir)
    else:
        server = tickwheel_process(os.path.join(module_dir, "data"), module_dir)
    server.start()
    yield server
    server.close()


# --- PostgreSQL (test_postgres.py) ----------------------------------------------------------

def pg_bin_dir():
    """Debian's server binaries: $PG_BIN, else the newest /usr/lib/postgresql/N/bin."""
    explicit = os.environ.get("PG_BIN")
    if explicit:
        return explicit
    root = "/usr/lib/postgresql"
    versions = []
    if os.path.isdir(root):
        for v in os.listdir(root):
            if v.isdigit() and os.path.exists(os.path.join(root, v, "bin", "postgres")):
                versions.append(int(v))
    return os.path.join(root, str(max(versions)), "bin") if versions else None


class PgCluster:
    """A throw-away PostgreSQL cluster: initdb into a temp dir as the `postgres` user (the
    server refuses to run as root), a free loopback port, its socket in the same dir. Extra
    server settings from $TICKWHEEL_PG_SETTINGS (as for the Rust tests' clusters), e.g.
    `-c commit_delay=50000 -c commit_siblings=0`: every commit waits 50 ms before its WAL
    flush (a slow disk), which widens the fail-over test's race between a killed node's last
    commit and the standby's first read."""

    def __init__(self, bin_dir):
        self.bin = bin_dir
        self.dir = tempfile.mkdtemp(prefix="tickwheel-pg-")
        self.data = os.path.join(self.dir, "data")
        self.port = free_port()
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run("initdb", "-D", self.data, "-U", "postgres", "-A", "trust", "--no-sync",
                  "-E", "UTF8")
        self.start()
        self._dbs = 0

    def _run(self, tool, *args):
        subprocess.run([*self.as_user, os.path.join(self.bin, tool), *args], check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

    def start(self):
        self._run("pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "server.log"), "-w",
                  "-t", "60", "-o",
                  f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
                  "-c max_connections=300 " + os.environ.get("TICKWHEEL_PG_SETTINGS", ""),
                  "start")

    def stop(self, mode="fast"):
        self._run("pg_ctl", "-D", self.data, "-w", "-t", "60", "-m", mode, "stop")

    def url(self, db="postgres"):
        return f"postgres://postgres@127.0.0.1:{self.port}/{db}"

    def create_db(self):
        """A fresh database (one per test keeps ids and counters apart); returns its URL."""
        self._dbs += 1
        name = f"t{self._dbs}"
        subprocess.run([os.path.join(self.bin, "createdb"), "-h", "127.0.0.1", "-p",
                        str(self.port), "-U", "postgres", name], check=True)
        return self.url(name)

    def close(self):
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_cluster():
    bin_dir = pg_bin_dir()
    if bin_dir is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL is not installed and CI=true: ci/e2e.sh installs it")
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    cluster = PgCluster(bin_dir)
    yield cluster
    cluster.close()


def tickwheel_pg_process(url, log_dir, extra=(), name="tickwheel"):
    binary = tickwheel_bin()
    if not os.path.exists(binary):
        pytest.fail(f"{binary} not found: build it (cargo build --release -p tickwheel-server) "
                    "or set TICKWHEEL_BIN")
    return ServerProcess(
        lambda port: [binary, "-l", "127.0.0.1", "-p", str(port), "--postgres", url, *extra],
        name,
        log_dir,
    )
