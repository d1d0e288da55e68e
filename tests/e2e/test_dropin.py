"""tickwheel-server as a drop-in beanstalkd: the same command line means the same thing.

* Without -b, jobs live in memory: a client library's CI that starts a server per test with
  beanstalkd's flags (`-l 127.0.0.1 -p PORT`, or `-l unix:PATH`) sees a fresh, empty server
  every time, even started twice in a row in one working directory; the log says so.
* One process per data directory: a second server on the same -b DIR exits at once, non-zero,
  with "DIR is in use by pid N"; the first keeps serving.
* Unix sockets, with and without -b, through a raw connection and through greenstalk.
* -f MS and -F: accepted, and what was acknowledged survives a graceful restart and a SIGKILL
  (both modes promise to survive a crash of the process, not a power cut). Given together,
  the later one wins, as in beanstalkd: both servers' fsyncs counted under strace.
* A flag given twice: its last value stands in both servers.
* -u USER: both servers bind first (a port below 1024 works when started as root), then become
  USER, then open -b DIR, whose files belong to USER; an unknown user exits with beanstalkd's
  status. We take USER's own supplementary groups where beanstalkd keeps root's.
* Socket activation (systemd's LISTEN_FDS/LISTEN_PID): both servers serve on the passed TCP or
  Unix socket and ignore -l/-p.
* Exit statuses as beanstalkd's: 5 for a bad command line, 111 for a socket that cannot be
  listened on, 10 for a data directory that cannot be taken (another server holds it, it is a
  file, its lock file cannot be created), 0 for -h.
* -z: the same max-job-size for the same flag, 1 GiB at most (larger values are lowered, with
  the same warning).
* -z, -s and -f read as beanstalkd reads them (a sign, leading blanks, negative numbers wrap);
  -s shown as binlog-max-size; the removed -c and -n accepted with beanstalkd's warning; -p
  resolved by getaddrinfo (a service name, a number past 65535 wrapped), -l and -p failures
  exit 111.
* A data directory beanstalkd wrote (-b DIR with its binlog): its jobs are taken over, as a
  restarted beanstalkd would recover them, and its binlog is moved aside; neither server
  starts on a directory the other is running on (status 10).
* --version names the commit the binary was built from.
"""

import grp
import os
import pwd
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import greenstalk
import pytest

from conftest import (REPO, ServerProcess, beanstalkd_bin, beanstalkd_process, free_port,
                      tickwheel_bin, tickwheel_process)
from rawproto import Conn


def beanstalkd_flags(port):
    return [tickwheel_bin(), "-l", "127.0.0.1", "-p", str(port)]


def log_text(server):
    server.log.flush()
    with open(server.log_path, "rb") as f:
        return f.read().decode("utf-8", "replace")


@pytest.fixture
def cwd(workdir):
    """Runs the test in an empty working directory (where a default data dir would appear)."""
    here = os.getcwd()
    os.chdir(workdir)
    try:
        yield workdir
    finally:
        os.chdir(here)


class UnixConn(Conn):
    """rawproto.Conn over a unix socket."""

    def __init__(self, path, timeout=5.0):  # pylint: disable=super-init-not-called
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""


class UnixServer:
    """A tickwheel-server on `-l unix:PATH`."""

    def __init__(self, path, log_dir, extra=()):
        self.path = path
        self.argv = [tickwheel_bin(), "-l", "unix:" + path, *extra]
        self.log_path = os.path.join(log_dir, "tickwheel-unix.log")
        self.log = open(self.log_path, "ab")
        self.proc = None

    def start(self, timeout=10.0):
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited with {self.proc.returncode}; see {self.log_path}")
            try:
                UnixConn(self.path).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"did not listen on {self.path}")
                time.sleep(0.02)

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        code = self.proc.wait(10)
        self.proc = None
        return code

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


# --- no -b: in memory, fresh every time -----------------------------------------------------

def test_beanstalkd_flags_twice_in_a_row_give_an_empty_server(cwd):
    for run in range(2):
        server = ServerProcess(beanstalkd_flags, f"plain-{run}", cwd)
        try:
            server.start()
            c = Conn(server.port)
            # Empty: nothing to reserve or peek, no tube but default, ids start at 1.
            assert c.cmd("reserve-with-timeout 0") == (b"TIMED_OUT", None), f"run {run}"
            assert c.cmd("peek 1") == (b"NOT_FOUND", None), f"run {run}"
            line, data = c.cmd("list-tubes")
            assert data == b"---\n- default\n", f"run {run}"
            c.cmd("use leftovers")
            assert c.put("from run %d" % run, delay=0) == 1, f"run {run}"
            assert c.put("delayed from run %d" % run, delay=100) == 2, f"run {run}"
            c.close()
            assert server.stop() == 0
            log = log_text(server)
            assert "in memory only" in log and "-b DIR" in log, log
        finally:
            server.close()
    # Nothing was written to the working directory (beanstalkd without -b writes nothing).
    assert sorted(n for n in os.listdir(cwd) if not n.endswith(".log")) == []


def test_unix_socket_twice_in_a_row_gives_an_empty_server(cwd):
    path = os.path.join(cwd, "x.sock")
    for run in range(2):
        server = UnixServer(path, cwd)
        try:
            server.start()
            c = UnixConn(path)
            assert c.cmd("reserve-with-timeout 0") == (b"TIMED_OUT", None), f"run {run}"
            assert c.put("job of run %d" % run) == 1, f"run {run}"
            c.close()
            assert server.stop() == 0
        finally:
            server.close()
    # Only the socket file (left behind, as beanstalkd leaves it; replaced at the next start).
    assert sorted(n for n in os.listdir(cwd) if not n.endswith(".log")) == ["x.sock"]


def test_in_memory_and_b_together_are_refused(workdir):
    out = subprocess.run([tickwheel_bin(), "--in-memory", "-b", os.path.join(workdir, "d")],
                         capture_output=True, timeout=10)
    assert out.returncode != 0
    assert b"--in-memory" in out.stderr and b"-b" in out.stderr, out.stderr


# --- one process per data directory ---------------------------------------------------------

def test_a_second_server_on_the_same_directory_exits_at_once(workdir):
    data = os.path.join(workdir, "data")
    first = tickwheel_process(data, workdir)
    try:
        first.start()
        c = Conn(first.port)
        jid = c.put("kept")
        second = subprocess.run(
            [tickwheel_bin(), "-l", "127.0.0.1", "-p", str(free_port()), "-b", data],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=30,
        )
        assert second.returncode == 10, second  # beanstalkd's status for a locked dir
        stderr = second.stderr.decode("utf-8", "replace")
        assert f"{data} is in use by pid {first.proc.pid}" in stderr, stderr
        # The first is unaffected.
        assert c.cmd(f"peek {jid}") == (b"FOUND %d 4" % jid, b"kept")
        assert c.put("more") > jid
        c.close()
        # Once it stops, the directory is free (the lock file stays; it blocks nobody).
        assert first.stop() == 0
        assert os.path.exists(os.path.join(data, "tickwheel.lock"))
        first.start()
        c = Conn(first.port)
        assert c.cmd(f"peek {jid}") == (b"FOUND %d 4" % jid, b"kept")
        c.close()
    finally:
        first.close()


def test_a_lock_left_by_a_killed_server_does_not_block(workdir):
    data = os.path.join(workdir, "data")
    server = tickwheel_process(data, workdir)
    try:
        server.start()
        c = Conn(server.port)
        jid = c.put("acked before the kill")
        c.close()
        server.kill()
        server.start()
        c = Conn(server.port)
        assert c.cmd(f"peek {jid}")[1] == b"acked before the kill"
        c.close()
    finally:
        server.close()


# --- unix sockets with a data directory, through a real client ------------------------------

def test_unix_socket_with_data_dir_and_greenstalk(workdir):
    path = os.path.join(workdir, "tw.sock")
    server = UnixServer(path, workdir, ["-b", os.path.join(workdir, "data")])
    try:
        server.start()
        with greenstalk.Client(path, use="u", watch="u") as c:
            kept = c.put("over a unix socket", ttr=30)
            gone = c.put("deleted")
            job = c.reserve(timeout=0)
            assert (job.id, job.body) == (kept, "over a unix socket")
            assert c.stats_job(job)["time-left"] == 29
            c.release(job)
            c.delete(gone)
        assert server.stop() == 0
        server.start()  # binds again over the stale socket file
        with greenstalk.Client(path, use="u", watch="u") as c:
            assert c.reserve(timeout=0).id == kept
            with pytest.raises(greenstalk.NotFoundError):
                c.peek(gone)
    finally:
        server.close()


# --- -f MS and -F ---------------------------------------------------------------------------

@pytest.mark.parametrize("flags", [["-f", "50"], ["-f0"], ["-F"]], ids=" ".join)
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_fsync_modes_keep_what_they_acknowledged_across_a_restart(workdir, flags, how):
    server = tickwheel_process(os.path.join(workdir, "data"), workdir, flags)
    try:
        server.start()
        c = Conn(server.port)
        ids = [c.put(f"job {i}", delay=(100 if i % 3 == 0 else 0)) for i in range(50)]
        deleted = ids[1::5]
        for jid in deleted:
            assert c.cmd(f"delete {jid}") == (b"DELETED", None)
        c.close()
        if how == "SIGTERM":
            assert server.stop() == 0
        else:
            server.kill()  # a crash of the process: the bytes are in the page cache
        server.start()
        c = Conn(server.port)
        for i, jid in enumerate(ids):
            line, body = c.cmd(f"peek {jid}")
            if jid in deleted:
                assert line == b"NOT_FOUND", f"deleted job {jid} came back"
            else:
                assert body == f"job {i}".encode(), f"job {jid}: {line!r}"
        assert c.put("after") > ids[-1]
        c.close()
    finally:
        server.close()


def syncs_during_puts(binary, flags, workdir, puts=20):
    """Starts `binary` with `-b DIR` and `flags` under strace and counts the fsync and
    fdatasync calls its puts cause (one connection, one put at a time)."""
    data = tempfile.mkdtemp(dir=workdir)
    trace = os.path.join(data, "trace")
    os.makedirs(os.path.join(data, "jobs"))  # beanstalkd does not create its -b directory
    port = free_port()
    proc = subprocess.Popen(
        ["strace", "-f", "-qq", "-e", "trace=fsync,fdatasync", "-o", trace, binary,
         "-l", "127.0.0.1", "-p", str(port), "-b", os.path.join(data, "jobs"), *flags],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True)  # strace and the server in one group, killed together
    try:
        wait_accepting(proc, port)
        c = Conn(port)
        c.put("warm-up")  # start-up's own syncs, then one put, before counting
        time.sleep(0.2)
        with open(trace, encoding="utf-8") as f:
            before = f.read().count("sync(")
        for i in range(puts):
            c.put(f"job {i}")
        time.sleep(0.2)  # an -f interval's sync, if one is due
        with open(trace, encoding="utf-8") as f:
            during = f.read().count("sync(") - before
        c.close()
        return during
    finally:
        # Killing strace alone would leave the server running, detached.
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize("flags", [
    "-f 0", "-F", "-F -f 0", "-f 0 -F", "-f 60000 -F -f 0", "-F -f 0 -F", "-Ff0", "-f0 -F -F",
])
def test_the_later_of_f_and_big_f_decides_as_in_beanstalkd(workdir, flags):
    """beanstalkd's -f and -F set one switch, so the later flag wins: `-F -f 0` syncs every
    write, `-f 0 -F` none. Counted under strace in both servers."""
    puts = 20
    seen = {name: syncs_during_puts(binary, flags.split(), workdir, puts)
            for name, binary in (("tickwheel", tickwheel_bin()),
                                 ("beanstalkd", beanstalkd_bin()))}
    every_put = flags.split()[-1] != "-F"
    for name, count in seen.items():
        assert (count >= puts) if every_put else (count == 0), (name, seen)


def test_a_flag_given_twice_means_its_last_value_as_in_beanstalkd(workdir):
    """beanstalkd reads its flags in order, and a repeated flag's last value stands: a unit
    that appends `-p` or `-l` to packaged defaults works. tickwheel once refused the repeat."""
    for name, binary in (("tickwheel", tickwheel_bin()), ("beanstalkd", beanstalkd_bin())):
        port = free_port()
        proc = subprocess.Popen(
            [binary, "-l", "127.0.0.2", "-p", "1", "-z", "10", "-z", "20", "-s", "5",
             "-l", "127.0.0.1", "-p", str(port), "-s", "7000"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_accepting(proc, port)
            assert stats_lines(port, ("max-job-size", "binlog-max-size")) == [
                "max-job-size: 20", "binlog-max-size: 7000"], name
        finally:
            proc.kill()
            proc.wait()


def test_fsync_flags_are_reported_in_the_log(workdir):
    expect = {("-f", "50"): "Periodic", ("-F",): "None", (): "Sync"}
    for flags, word in expect.items():
        server = tickwheel_process(os.path.join(workdir, "data"), workdir, list(flags))
        try:
            server.start()
            assert server.stop() == 0
            lines = [ln for ln in log_text(server).splitlines() if "listening" in ln]
            assert lines and f"durability={word}" in lines[-1], lines
        finally:
            server.close()


# --- -u USER -------------------------------------------------------------------------------

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


def proc_ids(pid):
    """Uid, Gid (real, effective, saved, fs) and Groups of a process."""
    ids = {}
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("Uid", "Gid", "Groups"):
                ids[key] = [int(v) for v in value.split()]
    return ids


def free_low_port():
    for port in range(1023, 600, -1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip("no free port below 1024 on 127.0.0.1")


def wait_accepting(proc, port, timeout=15.0):
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"exited with {proc.returncode}: {proc.stderr.read()!r}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@root_only
def test_u_binds_a_low_port_then_becomes_the_user_like_beanstalkd(workdir):
    nobody = pwd.getpwnam("nobody")
    os.chmod(workdir, 0o755)
    seen = {}
    for name, binary in (("tickwheel", tickwheel_bin()), ("beanstalkd", beanstalkd_bin())):
        data = os.path.join(workdir, name)
        os.mkdir(data)
        os.chown(data, nobody.pw_uid, nobody.pw_gid)
        port = free_low_port()
        proc = subprocess.Popen(
            [binary, "-u", "nobody", "-l", "127.0.0.1", "-p", str(port), "-b", data],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_accepting(proc, port)
            c = Conn(port)
            jid = c.put("kept by nobody")
            assert c.cmd(f"peek {jid}") == (b"FOUND %d 14" % jid, b"kept by nobody"), name
            c.close()
            seen[name] = proc_ids(proc.pid)
            files = [os.path.join(d, f) for d, _, fs in os.walk(data) for f in fs]
            assert files, name
            owners = {(os.stat(f).st_uid, os.stat(f).st_gid) for f in files}
            assert owners == {(nobody.pw_uid, nobody.pw_gid)}, (name, owners)
        finally:
            proc.kill()
            proc.wait()
            proc.stderr.close()
    for name, ids in seen.items():
        assert ids["Uid"] == [nobody.pw_uid] * 4, (name, ids)
        assert ids["Gid"] == [nobody.pw_gid] * 4, (name, ids)
    # The one deliberate difference: USER's own groups, not root's.
    assert sorted(seen["tickwheel"]["Groups"]) == sorted(
        set(os.getgrouplist("nobody", nobody.pw_gid))), seen
    assert 0 not in seen["tickwheel"]["Groups"] or "nobody" in grp.getgrgid(0).gr_mem, seen


def test_u_with_an_unknown_user_exits_as_beanstalkd_does(workdir):
    codes = {}
    for name, binary in (("tickwheel", tickwheel_bin()), ("beanstalkd", beanstalkd_bin())):
        out = subprocess.run(
            [binary, "-u", "no-such-user-tw", "-l", "127.0.0.1", "-p", str(free_port())],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        codes[name] = out.returncode
        assert b"no-such-user-tw" in out.stderr, (name, out.stderr)
    assert codes["tickwheel"] == codes["beanstalkd"] == 33, codes


# --- socket activation (LISTEN_FDS) ---------------------------------------------------------

def activated(binary, sock, extra):
    """Starts `binary` as systemd would: `sock` as fd 3, LISTEN_FDS=1 and LISTEN_PID naming
    the process itself (a small launcher that execs the server keeps its pid)."""
    launcher = ("import os, sys; os.dup2(int(sys.argv[1]), 3); "
                "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1'); "
                "os.execv(sys.argv[2], sys.argv[2:])")
    fd = sock.fileno()
    return subprocess.Popen([sys.executable, "-c", launcher, str(fd), binary, *extra],
                            pass_fds=(fd,), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_socket_activation_serves_on_the_passed_socket_like_beanstalkd(workdir, family):
    # -l/-p name a port somebody else holds: binding it would fail, so serving proves the
    # passed socket was used instead.
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = str(squatter.getsockname()[1])
    answers = {}
    try:
        for name, binary in (("tickwheel", tickwheel_bin()), ("beanstalkd", beanstalkd_bin())):
            if family == "tcp":
                sock = socket.socket()
                sock.bind(("127.0.0.1", 0))
                where = sock.getsockname()
            else:
                where = os.path.join(workdir, f"{name}.sock")
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.bind(where)
            sock.listen()
            proc = activated(binary, sock, ["-l", "127.0.0.1", "-p", taken])
            sock.close()  # the server holds its own copy
            try:
                conn = (Conn(where[1]) if family == "tcp" else UnixConn(where))
                jid = conn.put("activated")
                answers[name] = (jid, conn.cmd(f"peek {jid}"), conn.cmd("list-tubes"))
                conn.close()
                assert proc.poll() is None, proc.stderr.read()
            finally:
                proc.kill()
                proc.wait()
                proc.stderr.close()
    finally:
        squatter.close()
    assert answers["tickwheel"] == answers["beanstalkd"], answers
    assert answers["tickwheel"][1] == (b"FOUND 1 9", b"activated"), answers


# --- exit statuses -------------------------------------------------------------------------

def test_start_up_failures_exit_with_beanstalkds_statuses(workdir):
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = str(squatter.getsockname()[1])
    missing = os.path.join(workdir, "no", "such", "dir", "s.sock")
    cases = {
        "port in use": ["-l", "127.0.0.1", "-p", taken],
        "unix socket in a missing directory": ["-l", "unix:" + missing],
        "unknown flag": ["-x"],
        "flag without its value": ["-b"],
        "not a number": ["-z", "lots"],
        "a size with a unit": ["-s", "1k"],
        "a flag's value missing, the next flag taken for it": ["-z", "-b"],
        "a port that is no number and no service": ["-l", "127.0.0.1", "-p", "abc"],
        "a negative port": ["-l", "127.0.0.1", "-p", "-1"],
        "a host that does not resolve": ["-l", "-x", "-p", "0"],
        "help": ["-h"],
    }
    try:
        for what, args in cases.items():
            codes = {}
            for name, binary in (("tickwheel", tickwheel_bin()), ("beanstalkd", beanstalkd_bin())):
                out = subprocess.run([binary, *args], stdin=subprocess.DEVNULL,
                                     capture_output=True, timeout=30)
                codes[name] = out.returncode
            assert codes["tickwheel"] == codes["beanstalkd"], (what, codes)
    finally:
        squatter.close()


def second_server_status(first_bin, second_bin, data):
    """Starts `first_bin -b data`, then `second_bin -b data` while the first serves; returns
    the second's exit status."""
    port = free_port()
    first = subprocess.Popen([first_bin, "-l", "127.0.0.1", "-p", str(port), "-b", data],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    try:
        wait_accepting(first, port)
        second = subprocess.run(
            [second_bin, "-l", "127.0.0.1", "-p", str(free_port()), "-b", data],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        return second.returncode
    finally:
        first.kill()
        first.wait()
        first.stderr.close()


def test_a_data_directory_in_use_exits_10_like_beanstalkd(workdir):
    codes = {}
    for name, binary in (("tickwheel", tickwheel_bin()), ("beanstalkd", beanstalkd_bin())):
        data = os.path.join(workdir, name)
        os.mkdir(data)
        codes[name] = second_server_status(binary, binary, data)
    assert codes == {"tickwheel": 10, "beanstalkd": 10}, codes


def test_a_data_directory_that_cannot_be_taken_exits_10_like_beanstalkd(workdir):
    afile = os.path.join(workdir, "a-file")
    with open(afile, "w", encoding="utf-8"):
        pass
    cases = {"-b names a file": ["-b", afile],
             "-b below a file": ["-b", os.path.join(afile, "sub")]}
    if os.geteuid() == 0:
        # Root's directory, which nobody may not write: the lock file cannot be created.
        rootdir = os.path.join(workdir, "root-owned")
        os.mkdir(rootdir, 0o755)
        os.chmod(workdir, 0o755)
        cases["-u nobody on root's directory"] = ["-u", "nobody", "-b", rootdir]
    for what, args in cases.items():
        codes = {}
        for name, binary in (("tickwheel", tickwheel_bin()), ("beanstalkd", beanstalkd_bin())):
            out = subprocess.run([binary, "-l", "127.0.0.1", "-p", str(free_port()), *args],
                                 stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
            codes[name] = out.returncode
        assert codes == {"tickwheel": 10, "beanstalkd": 10}, (what, codes)


# --- -z -------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", ["0", "100", "1073741824", "2000000000"])
def test_z_gives_the_same_max_job_size(workdir, size):
    seen = {}
    for name, make in (("tickwheel", lambda: ServerProcess(
            lambda port: [tickwheel_bin(), "-l", "127.0.0.1", "-p", str(port), "-z", size],
            f"tw-z{size}", workdir)), ("beanstalkd", lambda: beanstalkd_process(
                workdir, ["-z", size]))):
        server = make()
        try:
            server.start()
            c = Conn(server.port)
            _, body = c.cmd("stats")
            c.close()
            line = [ln for ln in body.decode().splitlines() if ln.startswith("max-job-size:")]
            seen[name] = line
            server.stop()
            log = log_text(server)
            seen[name + " warns"] = "maximum job size was set to 1073741824" in log
        finally:
            server.close()
    assert seen["tickwheel"] == seen["beanstalkd"], seen
    assert seen["tickwheel warns"] == seen["beanstalkd warns"] == (size == "2000000000"), seen


# --- numbers and removed flags read as beanstalkd reads them ----------------------------------

def stats_lines(port, keys):
    c = Conn(port)
    _, body = c.cmd("stats")
    c.close()
    return [ln for ln in body.decode().splitlines() if ln.split(":")[0] in keys]


@pytest.mark.parametrize("args", [
    [], ["-s", "5000"], ["-s", "-1"], ["-s", " 7"], ["-s", "+9"], ["-s", "5000000000"],
    ["-z", "-1"], ["-f", "-5"], ["-c"], ["-n"],
], ids=lambda a: " ".join(a) or "defaults")
def test_sizes_and_removed_flags_mean_what_they_mean_to_beanstalkd(workdir, args):
    """beanstalkd reads -z/-s/-f with sscanf("%zu"): a sign and leading blanks are taken, a
    negative number wraps around (-z -1 is "as large as allowed", lowered to 1 GiB with a
    warning); -s is shown as binlog-max-size (a C int); -c and -n were removed and are
    accepted with a warning. Both servers start and report the same."""
    seen = {}
    for name, make in (("tickwheel", lambda: ServerProcess(
            lambda port: [tickwheel_bin(), "-l", "127.0.0.1", "-p", str(port), *args],
            "tw-sizes", workdir)), ("beanstalkd", lambda: beanstalkd_process(workdir, args))):
        server = make()
        try:
            server.start()
            seen[name] = stats_lines(server.port, ("max-job-size", "binlog-max-size"))
            server.stop()
            log = log_text(server)
            seen[name + " warns"] = [w for w in ("maximum job size was set to 1073741824",
                                                 "flag was removed. binlog is always compacted")
                                     if w in log]
        finally:
            server.close()
    assert seen["tickwheel"] == seen["beanstalkd"], seen
    assert seen["tickwheel warns"] == seen["beanstalkd warns"], seen


def test_a_port_number_past_65535_is_taken_as_the_c_library_takes_it(workdir):
    """-p goes through getaddrinfo as in beanstalkd: glibc takes 65536 + P as port P."""
    for name, binary in (("tickwheel", tickwheel_bin()), ("beanstalkd", beanstalkd_bin())):
        server = ServerProcess(
            lambda port, binary=binary: [binary, "-l", "127.0.0.1", "-p", str(port + 65536)],
            f"{name}-wrapped-port", workdir)
        try:
            server.start()  # waits until 127.0.0.1:port accepts: the wrapped port
            c = Conn(server.port)
            assert c.put("x") > 0, name
            c.close()
        finally:
            server.close()


# --- a data directory beanstalkd wrote ------------------------------------------------------

def job_view(port, ids):
    """What a client sees of each job: the stats-job fields a restart keeps (the delay given
    and the counters among them), and the body."""
    c = Conn(port)
    out = {}
    for i in ids:
        line, body = c.cmd(f"stats-job {i}")
        if not line.startswith(b"OK"):
            out[i] = line.decode().strip()
            continue
        fields = dict(ln.split(": ", 1) for ln in body.decode().splitlines()[1:] if ": " in ln)
        _, peeked = c.cmd(f"peek {i}")
        out[i] = {k: fields[k] for k in ("tube", "state", "pri", "ttr", "delay", "reserves",
                                         "timeouts", "releases", "buries", "kicks")}
        out[i]["body"] = peeked
        out[i]["delayed-long"] = fields["state"] == "delayed" and int(fields["time-left"]) > 3000
    c.close()
    return out


def oracle_view(workdir, data, ids):
    """What beanstalkd itself recovers from `data`: its job_view of `ids` after a restart on a
    copy (the copy leaves `data` as it was for tickwheel)."""
    copy = os.path.join(workdir, "oracle")
    shutil.copytree(data, copy)
    oracle = beanstalkd_process(workdir, ["-b", copy])
    try:
        oracle.start()
        return job_view(oracle.port, ids)
    finally:
        oracle.close()


def test_a_data_directory_beanstalkd_wrote_is_taken_over_with_its_jobs(workdir):
    """The swap: beanstalkd ran with -b DIR (jobs ready, delayed, buried, reserved, released,
    deleted, in two tubes), died (kill -9); tickwheel-server starts with the same -b DIR and
    serves every job beanstalkd acknowledged, as beanstalkd itself would after a restart (the
    oracle: beanstalkd restarted on a copy of DIR). The binlog is moved aside, so a beanstalkd
    started on DIR later does not bring back jobs tickwheel deleted."""
    data = os.path.join(workdir, "data")
    os.mkdir(data)
    bs = beanstalkd_process(workdir, ["-b", data])
    try:
        bs.start()
        c = Conn(bs.port)
        ids = [c.put("ready", pri=5), c.put("delayed", delay=3600), c.put("to delete")]
        c.cmd("use other")
        ids += [c.put(b"binary\x00\xff\r\nbody", pri=9, ttr=30), c.put("buried", pri=3)]
        c.cmd("watch other")
        assert c.cmd(f"delete {ids[2]}")[0] == b"DELETED"
        reserved = []
        for _ in range(3):  # takes 5 (pri 3), then 1 (pri 5), then 4 (pri 9)
            line, _ = c.cmd("reserve-with-timeout 0")
            reserved.append(int(line.split()[1]))
        assert reserved == [ids[4], ids[0], ids[3]], reserved
        assert c.cmd(f"bury {ids[4]} 3")[0] == b"BURIED"
        assert c.cmd(f"release {ids[3]} 8 2000")[0] == b"RELEASED"  # delayed again
        # ids[0] stays reserved: both servers bring it back ready.
        c.close()
        bs.kill()
    finally:
        bs.close()
    ask = ids + [max(ids) + 1]
    want = oracle_view(workdir, data, ask)
    tw = tickwheel_process(data, workdir)
    try:
        tw.start()
        got = job_view(tw.port, ask)
        c = Conn(tw.port)
        new_id = c.put("after the swap")
        assert c.cmd(f"delete {ids[0]}")[0] == b"DELETED"
        c.close()
        tw.stop()
        log = log_text(tw)
    finally:
        tw.close()
    assert got == want, (got, want)
    assert want[ids[0]]["state"] == "ready" and want[ids[2]] == "NOT_FOUND", want
    assert new_id > max(ids), (new_id, ids)  # ids are not reused
    assert "took over the jobs of beanstalkd's binlog" in log and "jobs=4" in log, log
    assert not [f for f in os.listdir(data) if f.startswith("binlog.")]
    assert os.listdir(os.path.join(data, "beanstalkd-binlog-imported"))
    # Back to beanstalkd on DIR: the moved binlog is not replayed (ids[0], deleted through
    # tickwheel, does not come back).
    again = beanstalkd_process(workdir, ["-b", data])
    try:
        again.start()
        assert job_view(again.port, [ids[0]]) == {ids[0]: "NOT_FOUND"}
    finally:
        again.close()


@pytest.mark.parametrize("seed", [1, 2])
def test_a_long_beanstalkd_history_in_many_binlog_files_is_taken_over_exactly(workdir, seed):
    """3000 random commands (puts with delays far enough not to come due during the test,
    bodies of every byte, deletes, reserves,
    releases, buries, kicks, in four tubes) against beanstalkd with 20 kB binlog files, so
    that its history spans ~30 files with rotations and compaction moves; killed. Every id
    must read in tickwheel exactly as in beanstalkd restarted on a copy (the oracle)."""
    rnd = random.Random(seed)
    data = os.path.join(workdir, "data")
    os.mkdir(data)
    bs = beanstalkd_process(workdir, ["-b", data, "-s", "20000"])
    ids = []
    try:
        bs.start()
        c = Conn(bs.port)
        tubes = ["default", "a", "b-1", "c_2"]
        for n in range(3000):
            op = rnd.random()
            if op < 0.55 or not ids:
                c.cmd(f"use {rnd.choice(tubes)}")
                ids.append(c.put(rnd.randbytes(rnd.randint(0, 300)),
                                 pri=rnd.randint(0, 2**32 - 1),
                                 delay=rnd.choice([0, 0, 3600]), ttr=rnd.randint(1, 500)))
            elif op < 0.75:
                c.cmd(f"delete {rnd.choice(ids)}")
            else:
                c.cmd(f"watch {rnd.choice(tubes)}")
                line, _ = c.cmd("reserve-with-timeout 0")
                if line.startswith(b"RESERVED"):
                    job, r = int(line.split()[1]), rnd.random()
                    if r < 0.3:
                        c.cmd(f"bury {job} {rnd.randint(0, 100)}")
                    elif r < 0.6:
                        c.cmd(f"release {job} {rnd.randint(0, 100)} {rnd.choice([0, 100])}")
                    elif r < 0.8:
                        c.cmd(f"delete {job}")
                    # else it stays reserved: ready again after the restart
            if n % 500 == 0:
                c.cmd("kick 50")
        c.close()
        bs.kill()
    finally:
        bs.close()
    assert len([f for f in os.listdir(data) if f.startswith("binlog.")]) > 10
    ask = list(range(1, max(ids) + 2))
    want = oracle_view(workdir, data, ask)
    tw = tickwheel_process(data, workdir)
    try:
        tw.start()
        got = job_view(tw.port, ask)
    finally:
        tw.close()
    assert sum(isinstance(v, dict) for v in want.values()) > 500, "too few live jobs to mean much"
    diff = {i: (want[i], got[i]) for i in ask if want[i] != got[i]}
    assert not diff, list(diff.items())[:5]


def test_beanstalkd_and_tickwheel_never_share_a_data_directory(workdir):
    """Each refuses a directory the other is running on, with beanstalkd's status 10."""
    for first_bin, second_bin in ((beanstalkd_bin(), tickwheel_bin()),
                                  (tickwheel_bin(), beanstalkd_bin())):
        data = tempfile.mkdtemp(dir=workdir)
        assert second_server_status(first_bin, second_bin, data) == 10, second_bin


def test_a_damaged_binlog_stops_the_start_and_stays(workdir):
    """A binlog.N that does not read as beanstalkd's: no start without its jobs, no silent
    loss; the error names the file, and the file stays where it was."""
    data = os.path.join(workdir, "data")
    os.mkdir(data)
    with open(os.path.join(data, "binlog.3"), "wb") as f:
        f.write(b"\x07\x00\x00\x00" + b"\xff" * 100)
    out = subprocess.run([tickwheel_bin(), "-l", "127.0.0.1", "-p", str(free_port()), "-b", data],
                         stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert out.returncode != 0, out
    assert b"binlog.3" in out.stderr, out.stderr
    assert os.path.exists(os.path.join(data, "binlog.3"))


# --- --version -----------------------------------------------------------------------------

def test_version_names_the_commit():
    for flag in ("-v", "--version"):
        out = subprocess.run([tickwheel_bin(), flag], capture_output=True, timeout=10)
        assert out.returncode == 0
        text = out.stdout.decode()
        m = re.fullmatch(r"tickwheel-server (\S+) \(commit (\S+)\)\n", text)
        assert m, text
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True,
                              timeout=10, check=True).stdout.decode().strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no git here to compare the commit with")
    commit = m.group(2).removesuffix("-dirty")
    # The binary may be older than HEAD if it was not rebuilt; ci/e2e.sh always rebuilds.
    assert head.startswith(commit), f"built from {commit}, HEAD is {head}"


def binlog_records_after_a_session(port):
    """Runs puts, a release, a bury, a kick, a touch, a delete and reserves; returns `stats`'
    binlog-records-written."""
    c = Conn(port)
    first = c.put("a")
    c.put("b", delay=100)
    c.put("c")
    line, _ = c.cmd("reserve-with-timeout 0")
    assert line.startswith(b"RESERVED"), line
    assert c.cmd(f"release {first} 0 0")[0] == b"RELEASED"
    line, _ = c.cmd("reserve-with-timeout 0")
    assert c.cmd(f"touch {first}")[0] == b"TOUCHED"
    assert c.cmd(f"bury {first} 0")[0] == b"BURIED"
    assert c.cmd("kick 5")[0] == b"KICKED 1"
    assert c.cmd(f"delete {first}")[0] == b"DELETED"
    line, body = c.cmd("stats")
    c.close()
    fields = dict(ln.split(": ", 1) for ln in body.decode().splitlines()[1:] if ": " in ln)
    return int(fields["binlog-records-written"])


def test_binlog_records_written_counts_each_job_write_as_beanstalkd_does(workdir):
    """`stats`' binlog-records-written: one per job write (put, release, bury, kick, delete;
    a reserve or touch writes nothing), as beanstalkd's binlog counts its records (monitoring
    exports it); 0 without -b in both. The one difference: a release with delay 0 is written
    by tickwheel (its new priority was acknowledged) and not by beanstalkd (docs/protocol.md,
    Intentional)."""
    counts = {}
    for name, server in [
        ("beanstalkd -b", beanstalkd_process(workdir, ["-b", os.path.join(workdir, "bs")])),
        ("tickwheel -b", tickwheel_process(os.path.join(workdir, "tw"), workdir)),
        ("beanstalkd", beanstalkd_process(workdir)),
        ("tickwheel", ServerProcess(beanstalkd_flags, "tickwheel-memory", workdir)),
    ]:
        try:
            if name == "beanstalkd -b":
                os.mkdir(os.path.join(workdir, "bs"))
            server.start()
            counts[name] = binlog_records_after_a_session(server.port)
        finally:
            server.close()
    assert counts["beanstalkd -b"] == 6, counts  # 3 puts, bury, kick, delete
    assert counts["tickwheel -b"] == counts["beanstalkd -b"] + 1, counts  # and the release
    assert counts["beanstalkd"] == counts["tickwheel"] == 0, counts
