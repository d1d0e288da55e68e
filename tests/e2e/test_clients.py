"""Real beanstalkd clients (greenstalk 2.x and pystalk 0.9) driving tickwheel-server: every
command through each library's own API, delays (never early), TTR expiry, bury/kick,
pause-tube, stats, JOB_TOO_BIG, and restarts (graceful and SIGKILL) in the middle."""

import itertools
import subprocess
import threading
import time

import greenstalk
import pystalk
import pytest

_tubes = itertools.count()


def fresh_tube():
    """Tests share one server; each works in its own tube."""
    return f"t{next(_tubes)}-{time.monotonic_ns() % 10**9}"


def waited_at_least(start, seconds):
    # The server keeps milliseconds; allow for one of truncation, never more.
    return time.monotonic() - start >= seconds - 0.002


@pytest.fixture
def gs(tickwheel):
    tube = fresh_tube()
    with greenstalk.Client(("127.0.0.1", tickwheel.port), use=tube, watch=tube) as c:
        yield c


def gclient(server, tube, **kw):
    return greenstalk.Client(("127.0.0.1", server.port), use=tube, watch=tube, **kw)


# --- greenstalk ---------------------------------------------------------------------------

def test_greenstalk_put_reserve_delete(gs):
    tube = gs.using()
    assert gs.watching() == [tube]
    assert tube in gs.tubes()
    jid = gs.put("hello", priority=7, ttr=30)
    job = gs.peek(jid)
    assert (job.id, job.body) == (jid, "hello")
    assert gs.peek_ready().id == jid
    job = gs.reserve(timeout=0)
    assert (job.id, job.body) == (jid, "hello")
    stats = gs.stats_job(job)
    assert (stats["state"], stats["pri"], stats["ttr"], stats["tube"]) == \
        ("reserved", 7, 30, tube)
    gs.touch(job)
    gs.delete(job)
    with pytest.raises(greenstalk.NotFoundError):
        gs.delete(jid)
    with pytest.raises(greenstalk.NotFoundError):
        gs.peek(jid)
    with pytest.raises(greenstalk.TimedOutError):
        gs.reserve(timeout=0)


def test_greenstalk_binary_and_empty_bodies(tickwheel):
    tube = fresh_tube()
    with gclient(tickwheel, tube, encoding=None) as c:
        body = bytes(range(256)) * 4 + b"\r\n"
        jid = c.put(body)
        assert c.reserve(0).body == body
        c.delete(jid)
        jid = c.put(b"")
        assert c.reserve(0).body == b""
        c.delete(jid)


def test_greenstalk_watch_ignore(gs):
    tube = gs.using()
    other = fresh_tube()
    assert gs.watch(other) == 2
    assert sorted(gs.watching()) == sorted([tube, other])
    assert gs.ignore(tube) == 1
    with pytest.raises(greenstalk.NotIgnoredError):
        gs.ignore(other)
    gs.use(other)
    jid = gs.put("x")
    assert gs.reserve(0).id == jid
    gs.delete(jid)


def test_greenstalk_priority_order(gs):
    ids = {p: gs.put(f"p{p}", priority=p) for p in (5, 0, 2**32 - 1, 1024)}
    got = [gs.reserve(0).id for _ in ids]
    assert got == [ids[0], ids[5], ids[1024], ids[2**32 - 1]]
    for jid in got:
        gs.delete(jid)


def test_greenstalk_delay_is_never_early(gs):
    start = time.monotonic()
    jid = gs.put("later", delay=1)
    assert gs.stats_job(jid)["state"] == "delayed"
    assert gs.peek_delayed().id == jid
    with pytest.raises(greenstalk.TimedOutError):
        gs.reserve(timeout=0)
    job = gs.reserve(timeout=5)
    assert job.id == jid
    assert waited_at_least(start, 1.0)
    gs.delete(job)


def test_greenstalk_release_with_delay(gs):
    jid = gs.put("x", priority=3)
    job = gs.reserve(0)
    released = time.monotonic()
    gs.release(job, priority=9, delay=1)
    stats = gs.stats_job(jid)
    assert (stats["state"], stats["pri"], stats["delay"], stats["releases"]) == \
        ("delayed", 9, 1, 1)
    with pytest.raises(greenstalk.TimedOutError):
        gs.reserve(timeout=0)
    assert gs.reserve(timeout=5).id == jid
    assert waited_at_least(released, 1.0)
    gs.delete(jid)


def test_greenstalk_ttr_expiry_and_deadline_soon(tickwheel):
    tube = fresh_tube()
    with gclient(tickwheel, tube) as first, gclient(tickwheel, tube) as second:
        jid = first.put("slow", ttr=1)
        reserved = time.monotonic()
        job = first.reserve(0)
        with pytest.raises(greenstalk.DeadlineSoonError):
            first.reserve(timeout=0)
        again = second.reserve(timeout=5)
        assert again.id == jid
        assert waited_at_least(reserved, 1.0)
        assert second.stats_job(jid)["timeouts"] == 1
        with pytest.raises(greenstalk.NotFoundError):
            first.delete(job)
        second.delete(again)


def test_greenstalk_bury_kick(gs):
    a, b = gs.put("a"), gs.put("b")
    gs.bury(gs.reserve(0), priority=1)
    gs.bury(gs.reserve(0), priority=2)
    assert gs.peek_buried().id == a
    assert gs.stats_tube(gs.using())["current-jobs-buried"] == 2
    with pytest.raises(greenstalk.TimedOutError):
        gs.reserve(0)
    assert gs.kick(1) == 1
    assert gs.stats_job(a)["state"] == "ready"
    gs.kick_job(b)
    with pytest.raises(greenstalk.NotFoundError):
        gs.kick_job(b)
    assert gs.kick(10) == 0
    d = gs.put("d", delay=100)
    assert gs.kick(10) == 1
    for jid in (a, b, d):
        assert gs.stats_job(jid)["state"] == "ready"
        gs.delete(jid)


def test_greenstalk_reserve_job(gs):
    jid = gs.put("x", delay=100)
    job = gs.reserve_job(jid)
    assert job.id == jid
    assert gs.stats_job(jid)["state"] == "reserved"
    with pytest.raises(greenstalk.NotFoundError):
        gs.reserve_job(jid)
    gs.delete(job)


def test_greenstalk_pause_tube(gs):
    tube = gs.using()
    jid = gs.put("held")
    paused = time.monotonic()
    gs.pause_tube(tube, 1)
    assert gs.stats_tube(tube)["pause"] == 1
    with pytest.raises(greenstalk.TimedOutError):
        gs.reserve(0)
    assert gs.reserve(timeout=5).id == jid
    assert waited_at_least(paused, 1.0)
    gs.delete(jid)
    with pytest.raises(greenstalk.NotFoundError):
        gs.pause_tube(fresh_tube(), 1)


def test_greenstalk_stats(gs):
    stats = gs.stats()
    for key in ("current-jobs-ready", "cmd-put", "total-jobs", "max-job-size",
                "current-connections", "pid", "version", "uptime", "draining", "platform"):
        assert key in stats, key
    assert stats["max-job-size"] == 65535
    tube = gs.stats_tube(gs.using())
    assert tube["name"] == gs.using()
    assert tube["current-using"] >= 1
    jid = gs.put("x")
    job = gs.stats_job(jid)
    assert set(job) == {"id", "tube", "state", "pri", "age", "delay", "ttr", "time-left",
                        "file", "reserves", "timeouts", "releases", "buries", "kicks"}
    gs.delete(jid)
    with pytest.raises(greenstalk.NotFoundError):
        gs.stats_job(jid)


def test_greenstalk_with_one_io_thread(tmp_path):
    """`--io-threads 1`: the one worker serves a client blocked in `reserve` beside a producer
    on another connection (neither waits on the other); `--io-threads 0` is refused at start."""
    from conftest import tickwheel_bin, tickwheel_process

    server = tickwheel_process(str(tmp_path / "data"), str(tmp_path),
                               extra=("--io-threads", "1")).start()
    try:
        tube = fresh_tube()
        got = []

        def wait():
            with gclient(server, tube) as w:
                job = w.reserve(timeout=20)
                got.append(job.body)
                w.delete(job)

        waiter = threading.Thread(target=wait)
        waiter.start()
        with gclient(server, tube) as p:
            ids = [p.put(f"j{i}") for i in range(20)]
        waiter.join(30)
        assert not waiter.is_alive() and got == ["j0"], got
        with gclient(server, tube) as c:
            rest = []
            for _ in ids[1:]:
                job = c.reserve(timeout=5)
                rest.append(job.body)
                c.delete(job)
        assert rest == [f"j{i}" for i in range(1, 20)]
    finally:
        server.close()
    refused = subprocess.run([tickwheel_bin(), "--io-threads", "0", "-b", str(tmp_path / "d2")],
                             capture_output=True, timeout=30)
    assert refused.returncode != 0 and b"--io-threads" in refused.stderr, refused


def test_greenstalk_job_too_big(gs):
    with pytest.raises(greenstalk.JobTooBigError):
        gs.put("x" * 2**16)
    jid = gs.put("x" * 65535)
    assert len(gs.reserve(0).body) == 65535
    gs.delete(jid)


# --- pystalk ------------------------------------------------------------------------------

@pytest.fixture
def ps(tickwheel):
    tube = fresh_tube()
    c = pystalk.BeanstalkClient("127.0.0.1", tickwheel.port, auto_decode=True)
    c.use(tube)
    c.watchlist = [tube]
    yield c
    c.close()


def test_pystalk_commands(ps):
    tube = ps.current_tube
    _, jid = ps.put_job("hello", pri=4, ttr=30)
    assert tube in ps.list_tubes()
    job = ps.peek_ready()
    assert (job.job_id, job.job_data) == (jid, "hello")
    job = ps.reserve_job(timeout=0)
    assert job.job_id == jid
    stats = ps.stats_job(jid)
    assert (stats["state"], stats["pri"], stats["ttr"]) == ("reserved", 4, 30)
    ps.release_job(job, pri=5, delay=0)
    job = ps.reserve_job(timeout=0)
    ps.bury_job(job, pri=6)
    assert ps.peek_buried().job_id == jid
    assert ps.kick_jobs(5) == (b"KICKED", 1)
    job = ps.reserve_job(timeout=0)
    ps.bury_job(job)
    ps.kick_job(job)
    assert ps.stats_job(jid)["kicks"] == 2
    ps.delete_job(jid)
    with pytest.raises(pystalk.BeanstalkError) as e:
        ps.delete_job(jid)
    assert e.value.message == "NOT_FOUND"
    with pytest.raises(pystalk.BeanstalkError) as e:
        ps.reserve_job(timeout=0)
    assert e.value.message == "TIMED_OUT"
    assert ps.stats()["max-job-size"] == 65535
    assert ps.stats_tube(tube)["name"] == tube


def test_pystalk_put_job_into_and_watch(ps):
    other = fresh_tube()
    _, jid = ps.put_job_into(other, "x")
    assert ps.current_tube != other
    with pytest.raises(pystalk.BeanstalkError):
        ps.reserve_job(timeout=0)
    ps.watch(other)
    assert ps.reserve_job(timeout=0).job_id == jid
    ps.delete_job(jid)


def test_pystalk_delay_and_pause(ps):
    tube = ps.current_tube
    start = time.monotonic()
    _, jid = ps.put_job("later", delay=1)
    assert ps.peek_delayed().job_id == jid
    with pytest.raises(pystalk.BeanstalkError):
        ps.reserve_job(timeout=0)
    assert ps.reserve_job(timeout=5).job_id == jid
    assert waited_at_least(start, 1.0)
    ps.delete_job(jid)
    _, jid = ps.put_job("held")
    ps.pause_tube(tube, 100)
    with pytest.raises(pystalk.BeanstalkError):
        ps.reserve_job(timeout=0)
    ps.unpause_tube(tube)
    assert ps.reserve_job(timeout=0).job_id == jid
    ps.delete_job(jid)


def test_pystalk_job_too_big(ps):
    with pytest.raises(pystalk.BeanstalkError) as e:
        ps.put_job(b"x" * 65536)
    assert e.value.message == "JOB_TOO_BIG"
    _, jid = ps.put_job(b"y" * 10)
    ps.delete_job(jid)


# --- restarts in the middle ---------------------------------------------------------------

@pytest.mark.parametrize("how", ["graceful", "sigkill"])
def test_jobs_survive_a_restart(tickwheel, how):
    tube = fresh_tube()
    with gclient(tickwheel, tube) as c:
        ready = c.put("ready", priority=1)
        put_delayed = time.monotonic()
        delayed = c.put("delayed", priority=2, delay=2)
        buried = c.put("buried", priority=3)
        reserved = c.put("reserved", priority=4)
        gone = c.put("gone", priority=5)
        assert c.reserve_job(buried).id == buried
        c.bury(greenstalk.Job(buried, "buried"), priority=9)
        c.delete(gone)
        assert c.reserve_job(reserved).id == reserved
        if how == "graceful":
            tickwheel.restart()
        else:
            tickwheel.kill()
            tickwheel.start()
    ps = pystalk.BeanstalkClient("127.0.0.1", tickwheel.port, auto_decode=True)
    ps.use(tube)
    ps.watchlist = [tube]
    with gclient(tickwheel, tube) as c:
        expect = {ready: ("ready", 1), delayed: ("delayed", 2), buried: ("buried", 9),
                  reserved: ("ready", 4)}
        for jid, (state, pri) in expect.items():
            stats = c.stats_job(jid)
            assert (stats["state"], stats["pri"], stats["tube"]) == (state, pri, tube), jid
            assert ps.stats_job(jid)["state"] == state
        with pytest.raises(greenstalk.NotFoundError):
            c.peek(gone)
        assert c.peek_buried().id == buried
        newer = c.put("newer", priority=100)
        assert newer > gone
        # The ready ones come first, then the delayed one, never before its delay.
        assert c.reserve(0).id == ready
        assert c.reserve(0).id == reserved
        job = c.reserve(timeout=5)
        if job.id == newer:
            job = c.reserve(timeout=5)
        assert job.id == delayed
        assert waited_at_least(put_delayed, 2.0)
        for jid in (ready, reserved, delayed, newer):
            c.delete(jid)
        c.kick_job(buried)
        c.delete(buried)
    ps.close()
