"""tickwheel-server nodes serving one PostgreSQL schema at once (`--postgres-mode
active-active`, ADR 0008 phase 2), against a throw-away cluster of Debian's postgresql
(conftest.PgCluster; under CI=true a missing PostgreSQL fails, elsewhere skips).

3 nodes, 20 client connections spread over them (10 producers, 10 consumers), jobs with random
delays, kill -9 of one node in the middle and its restart:
- every acknowledged job is delivered and deleted exactly once (a delete whose reply was lost
  with the killed node counts if the job is gone);
- none is delivered before its delay (client clock; the nodes, the database and the clients
  share this machine's clock, so it is the database's clock too);
- never held by two clients at once: a job is delivered again only if its earlier holder was
  on the killed node (its lease ran out) or that holder's delete answered NOT_FOUND (its
  lease had run out first); no two deliveries both end in DELETED.

Run with both `--postgres-claim-commit` settings: `async` claims skip only their WAL flush
(what a crash of PostgreSQL itself could lose), so a node's kill -9 finds the same guarantees;
and with `--postgres-claim-ahead` (the killed node's stocked jobs come back when their leases
lapse, its clients' as well).

Scale: TICKWHEEL_PG_JOBS (default 3000) jobs.
"""

import os
import statistics
import subprocess
import threading
import time

import greenstalk
import psycopg
import pytest

from conftest import tickwheel_bin
from pgload import left_over, listening, produce, start_active_nodes, wait_drained

TTR = 3


@pytest.mark.parametrize("extra", [
    ["--postgres-claim-commit", "sync"],
    ["--postgres-claim-commit", "async"],
    ["--postgres-claim-commit", "async", "--postgres-claim-ahead", "16"],
], ids=["sync", "async", "async-claim-ahead"])
def test_three_active_nodes_kill_and_restart(workdir, pg_cluster, extra):
    url = pg_cluster.create_db()
    total = int(os.environ.get("TICKWHEEL_PG_JOBS", "3000"))
    producers, consumers = 10, 10
    nodes = start_active_nodes(url, workdir, extra=extra)

    lock = threading.Lock()
    acked = {}          # body -> (time before put was sent, delay)
    deliveries = {}     # body -> [(node index, time reserved, delete reply or None)]
    killed = {"at": None, "node": 0}
    errors = []
    stop = threading.Event()

    def node_for(k):
        """The k-th node if it is up, else the next one that is."""
        while not stop.is_set():
            for j in range(3):
                i = (k + j) % 3
                n = nodes[i]
                if n.proc is not None and n.proc.poll() is None and listening(n.port):
                    return i, n.port
            time.sleep(0.05)
        raise TimeoutError("stopped")

    def consume(c):
        client, node = None, None
        while not stop.is_set():
            entry = None
            try:
                if client is None:
                    node, port = node_for(c)
                    client = greenstalk.Client(("127.0.0.1", port), watch="jobs")
                job = client.reserve(timeout=1)
                entry = [node, time.time(), None]
                with lock:
                    deliveries.setdefault(job.body, []).append(entry)
                try:
                    client.delete(job)
                    entry[2] = "DELETED"
                except greenstalk.NotFoundError:
                    entry[2] = "NOT_FOUND"
            except greenstalk.TimedOutError:
                pass
            except TimeoutError:
                return
            except (OSError, greenstalk.Error, ConnectionError):
                client = None
                time.sleep(0.05)
            except Exception as e:  # reported below
                errors.append(e)
                return

    def port_for(p):
        return node_for(p)[1]

    threads = [threading.Thread(target=produce,
                                args=(p, total // producers, TTR, port_for, acked, lock),
                                daemon=True)
               for p in range(producers)]
    workers = [threading.Thread(target=consume, args=(c,), daemon=True)
               for c in range(consumers)]
    started = time.time()
    for t in threads + workers:
        t.start()
    while len(acked) < total // 2 and any(t.is_alive() for t in threads):
        time.sleep(0.05)
    killed["at"] = time.time()
    nodes[0].kill()
    time.sleep(1)
    nodes[0].start()    # back, serving again beside the others
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "producers finished"
    # Only puts in flight at the kill may go unacknowledged: the checks below are not vacuous.
    assert len(acked) >= total * 9 // 10, f"only {len(acked)} of {total} puts acknowledged"
    left = wait_drained(url)
    with psycopg.connect(url) as db:
        (nodes_joined,) = db.execute("SELECT count(*) FROM tickwheel.nodes").fetchone()
    assert left == 0, (f"{left} jobs never deleted: (id, state, body, acknowledged) "
                       f"{left_over(url, acked)}")
    time.sleep(1.5)     # delete replies in flight
    stop.set()
    for t in workers:
        t.join(timeout=30)
    assert not errors, errors
    assert nodes_joined == 4, "three nodes and the restarted one registered"

    # Every acknowledged job delivered; deleted exactly once (or its delete went down with the
    # killed node and the job is gone: the database is empty).
    missing = [b for b in acked if b not in deliveries]
    assert not missing, f"{len(missing)} acknowledged jobs never delivered, e.g. {missing[:5]}"
    for b, d in deliveries.items():
        done = [e for e in d if e[2] == "DELETED"]
        assert len(done) <= 1, f"{b} deleted by two holders: {d}"
        if not done:
            assert any(e[0] == 0 and e[2] is None for e in d), f"{b} never deleted: {d}"
    # Never early.
    early = [(b, d[0][1] - acked[b][0] - acked[b][1]) for b, d in deliveries.items()
             if b in acked and d[0][1] < acked[b][0] + acked[b][1]]
    assert not early, f"delivered early: {early[:5]}"
    # Never two holders at once: a job is handed out again only after its earlier holder
    # died with node 0 or lost its lease (that holder's delete answered NOT_FOUND).
    redelivered = 0
    for b, d in deliveries.items():
        for first, later in zip(d, d[1:]):
            redelivered += 1
            assert (first[0] == 0 and first[2] is None) or first[2] == "NOT_FOUND", (b, d)
            assert later[1] >= first[1], (b, d)

    # Printed, not asserted (wall-clock numbers on a shared machine): the time from the put
    # plus its delay to the first delivery is queue wait as much as lateness whenever the 10
    # consumers fall behind the 10 producers.
    late = sorted(d[0][1] - acked[b][0] - acked[b][1] for b, d in deliveries.items()
                  if b in acked)
    took = max(e[1] for d in deliveries.values() for e in d) - started
    print(f"\nactive-active: {len(acked)} acked jobs over 3 nodes in {took:.1f} s "
          f"({len(acked) / took:.0f} put+reserve+delete/s), {redelivered} re-deliveries; "
          f"put+delay to first delivery: median {statistics.median(late) * 1000:.0f} ms, "
          f"p99 {late[int(len(late) * 0.99) - 1] * 1000:.0f} ms")
    for n in nodes:
        n.close()


@pytest.mark.parametrize("flag", [
    ["--postgres-claim-commit", "async"],
    ["--postgres-claim-ahead", "4"],
], ids=["claim-commit", "claim-ahead"])
def test_claim_options_need_active_active(pg_cluster, flag):
    """A standby-mode node claims nothing in the database, so `--postgres-claim-commit async`
    or `--postgres-claim-ahead` without `--postgres-mode active-active` is refused at start-up
    rather than ignored."""
    url = pg_cluster.create_db()
    done = subprocess.run(
        [tickwheel_bin(), "-l", "127.0.0.1", "-p", "0", "--postgres", url] + flag,
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if k != "RUST_BACKTRACE"})
    assert done.returncode == 1, done
    assert f"{flag[0]}{' async' if flag[1] == 'async' else ''} needs --postgres-mode active-active" \
        in done.stderr


def test_kick_peek_and_reserve_job_across_nodes(workdir, pg_cluster):
    """greenstalk against two active-active nodes: a job buried through one node is seen by
    `peek-buried` and kicked through the other, and `reserve-job` through either node takes
    the other node's job once (Rust tests: crates/server/tests/postgres_active.rs)."""
    url = pg_cluster.create_db()
    nodes = start_active_nodes(url, workdir, count=2)
    try:
        one = greenstalk.Client(("127.0.0.1", nodes[0].port), use="x", watch="x")
        two = greenstalk.Client(("127.0.0.1", nodes[1].port), use="x", watch="x")
        a = one.put("a", priority=5)
        job = one.reserve(timeout=10)
        assert job.id == a
        one.bury(job)
        assert two.peek_buried().id == a
        assert two.kick(10) == 1
        with pytest.raises(greenstalk.NotFoundError):
            two.peek_buried()
        assert one.peek_ready().id == a
        # reserve-job through node 2 of node 1's job; node 1 cannot take it then.
        assert two.reserve_job(a).body == "a"
        with pytest.raises(greenstalk.NotFoundError):
            one.reserve_job(a)
        two.release(greenstalk.Job(a, "a"), delay=1)
        assert one.peek_delayed().id == a
        assert one.reserve(timeout=10).id == a
        one.delete(a)
        with pytest.raises(greenstalk.NotFoundError):
            two.peek(a)
        one.close()
        two.close()
    finally:
        for n in nodes:
            n.close()
