"""Crash test: load threads put, reserve and delete over the network while the server is
killed with SIGKILL at random moments and restarted on the same data directory (default
durability: fsync before every acknowledgement). Afterwards:

* every acknowledged put is still there (peek, same body) unless it was deleted;
* nothing whose delete was acknowledged came back;
* no job was reserved before its delay, and no put was recovered twice (one id per body);
* ids are never reused.

Operations whose reply was lost in a crash are "unknown": they may or may not have happened.
"""

import os
import random
import threading
import time

import pytest

from conftest import tickwheel_process
from rawproto import Closed, Conn, Timeout

ROUNDS = int(os.environ.get("CRASH_ROUNDS", "8"))
WORKERS = 3
SEED = int(os.environ.get("CRASH_SEED", str(random.randrange(2**32))))


class Worker(threading.Thread):
    def __init__(self, wid, server, stop, seed):
        super().__init__(name=f"load-{wid}", daemon=True)
        self.wid, self.server, self.stop = wid, server, stop
        self.rng = random.Random(seed)
        self.sent = {}            # body -> (monotonic time before sending, delay)
        self.acked_puts = {}      # id -> body
        self.reserves = []        # (id, body, monotonic time the reply arrived)
        self.acked_deletes = set()
        self.unknown_deletes = set()
        self.errors = []
        self.conn = None
        self.seq = 0

    def connect(self):
        while not self.stop.is_set():
            try:
                self.conn = Conn(self.server.port, timeout=5)
                return True
            except OSError:
                time.sleep(0.02)
        return False

    def drop(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def run(self):
        try:
            while not self.stop.is_set():
                if self.conn is None and not self.connect():
                    return
                try:
                    if self.rng.random() < 0.6:
                        self.put()
                    else:
                        self.reserve_delete()
                except (Closed, Timeout, OSError):
                    self.drop()
        except Exception as e:  # reported by the test
            self.errors.append(repr(e))
        finally:
            self.drop()

    def put(self):
        self.seq += 1
        body = f"w{self.wid}-{self.seq}-" + "x" * self.rng.randrange(0, 200)
        delay = self.rng.choice([0, 0, 1, 2])
        self.sent[body] = (time.monotonic(), delay)
        data = body.encode()
        self.conn.send(b"put 0 %d 60 %d\r\n%s\r\n" % (delay, len(data), data))
        line, _ = self.conn.reply()
        if not line.startswith(b"INSERTED "):
            self.errors.append(f"put: {line!r}")
            return
        self.acked_puts[int(line.split()[1])] = body

    def reserve_delete(self):
        line, data = self.conn.cmd("reserve-with-timeout 0")
        now = time.monotonic()
        if line == b"TIMED_OUT":
            return
        if not line.startswith(b"RESERVED "):
            self.errors.append(f"reserve: {line!r}")
            return
        jid = int(line.split()[1])
        self.reserves.append((jid, data.decode(), now))
        self.unknown_deletes.add(jid)
        line, _ = self.conn.cmd(f"delete {jid}")
        self.unknown_deletes.discard(jid)
        if line == b"DELETED":
            self.acked_deletes.add(jid)
        else:
            self.errors.append(f"delete {jid}: {line!r}")


def test_sigkill_under_load_loses_nothing_acknowledged(workdir):
    rng = random.Random(SEED)
    server = tickwheel_process(os.path.join(workdir, "data"), workdir)
    server.start()
    stop = threading.Event()
    workers = [Worker(i, server, stop, rng.randrange(2**32)) for i in range(WORKERS)]
    try:
        for w in workers:
            w.start()
        for _ in range(ROUNDS):
            time.sleep(rng.uniform(0.3, 2.0))
            server.kill()
            # Sometimes leave it down a little, so clients see refused connections.
            time.sleep(rng.choice([0, 0, 0.1, 0.3]))
            server.start()
        time.sleep(0.5)
        stop.set()
        for w in workers:
            w.join(20)
            assert not w.is_alive(), f"{w.name} hung"
        # One more crash with no load, then check what was recovered.
        server.kill()
        server.start()
        check(server, workers)
    finally:
        stop.set()
        server.close()


def check(server, workers):
    info = f"(CRASH_SEED={SEED})"
    for w in workers:
        assert not w.errors, f"{w.name}: {w.errors[:5]} {info}"
    sent, acked_puts, reserves = {}, {}, []
    acked_deletes, unknown_deletes = set(), set()
    for w in workers:
        sent.update(w.sent)
        for jid, body in w.acked_puts.items():
            assert jid not in acked_puts, f"id {jid} acknowledged twice {info}"
            acked_puts[jid] = body
        reserves += w.reserves
        acked_deletes |= w.acked_deletes
        unknown_deletes |= w.unknown_deletes
    assert len(acked_puts) > 50, f"too little load to mean anything: {len(acked_puts)}"
    assert acked_deletes, "no deletes acknowledged"

    # No job reserved before its delay (measured from before the put was sent).
    early = []
    for jid, body, at in reserves:
        assert body in sent, f"reserved a body nobody sent: {body!r} {info}"
        t_send, delay = sent[body]
        if at - t_send < delay - 0.002:
            early.append((jid, body, delay, round(at - t_send, 3)))
    assert not early, f"reserved before the delay: {early[:5]} {info}"

    # Each put became one job: a body is only ever seen under one id.
    ids_of = {}
    for jid, body, _ in reserves:
        ids_of.setdefault(body, set()).add(jid)
    for jid, body in acked_puts.items():
        ids_of.setdefault(body, set()).add(jid)
    dup = {b: ids for b, ids in ids_of.items() if len(ids) > 1}
    assert not dup, f"a put recovered as several jobs: {list(dup.items())[:5]} {info}"

    c = Conn(server.port)
    missing, wrong, resurrected = [], [], []
    for jid, body in acked_puts.items():
        if jid in acked_deletes or jid in unknown_deletes:
            continue
        line, data = c.cmd(f"peek {jid}")
        if line == b"NOT_FOUND":
            missing.append(jid)
        elif data != body.encode():
            wrong.append((jid, line, data[:40]))
    for jid in acked_deletes:
        line, _ = c.cmd(f"peek {jid}")
        if line != b"NOT_FOUND":
            resurrected.append(jid)
    assert not missing, f"acknowledged puts lost: {missing[:10]} {info}"
    assert not wrong, f"wrong bodies: {wrong[:5]} {info}"
    assert not resurrected, f"acknowledged deletes came back: {resurrected[:10]} {info}"

    # Ids keep growing after the crashes.
    newest = c.put("after the crashes")
    assert newest > max(acked_puts), info
    c.close()
    print(f"crash test: {len(acked_puts)} puts, {len(acked_deletes)} deletes, "
          f"{len(reserves)} reserves acknowledged, {ROUNDS} kills {info}")
