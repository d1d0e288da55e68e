"""Load shared by the multi-node PostgreSQL tests (test_postgres.py, test_postgres_active.py):
producers that put jobs with random delays through whichever node serves, and the wait for
the database to hold no job."""

import random
import socket
import time

import greenstalk
import psycopg

from conftest import tickwheel_pg_process


def listening(port):
    """Whether something accepts connections on 127.0.0.1:`port`."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def start_active_nodes(url, log_dir, count=3, extra=()):
    """Starts `count` tickwheel-server nodes in active-active mode on database `url` (with
    the `extra` flags); returns them once every one accepts connections."""
    nodes = [tickwheel_pg_process(url, log_dir, ["--postgres-mode", "active-active", *extra],
                                  name=f"node{i}") for i in range(count)]
    for n in nodes:
        n.start()
    assert all(listening(n.port) for n in nodes), "every node serves"
    return nodes


def produce(p, per, ttr, port_for, acked, lock):
    """Producer `p`: puts `per` jobs (bodies `p{p}-{i}`, delays of 0-3 s) to tube "jobs" on the
    node `port_for(p)` names, reconnecting when it fails. Records each acknowledged body in
    `acked` as (time before the put was sent, delay). A put that fails is not acknowledged:
    the next job gets a new body."""
    rng = random.Random(p)
    client, i = None, 0
    while i < per:
        try:
            if client is None:
                client = greenstalk.Client(("127.0.0.1", port_for(p)), use="jobs")
            body = f"p{p}-{i}"
            delay = rng.choice([0, 0, 1, 2, 3])
            sent = time.time()
            client.put(body, delay=delay, ttr=ttr)
            with lock:
                acked[body] = (sent, delay)
            i += 1
        except (OSError, greenstalk.Error, ConnectionError):
            client = None
            i += 1
            time.sleep(0.05)


def wait_drained(url, timeout=180):
    """Waits until the database's tickwheel.jobs is empty; returns how many rows are left."""
    with psycopg.connect(url) as db:
        deadline = time.time() + timeout
        while True:
            (left,) = db.execute("SELECT count(*) FROM tickwheel.jobs").fetchone()
            if left == 0 or time.time() >= deadline:
                return left
            time.sleep(0.2)


def left_over(url, acked, limit=10):
    """The jobs still in the database (at most `limit`), each as (id, state, body, whether
    its put was acknowledged): what a failed drain reports."""
    with psycopg.connect(url) as db:
        rows = db.execute("SELECT id, state, body FROM tickwheel.jobs ORDER BY id LIMIT %s",
                          (limit,)).fetchall()
    return [(i, st, bytes(b).decode(errors="replace"), bytes(b).decode(errors="replace") in acked)
            for i, st, b in rows]
