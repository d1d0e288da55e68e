#!/usr/bin/env python3
"""Fail-over of an active-active PostgreSQL cluster of tickwheel-server nodes, measured.

Three nodes (`--postgres-mode active-active`) on one fresh database of a throw-away
PostgreSQL cluster (Debian's postgresql, same machine, loopback). Producers put delayed jobs
through all three nodes at a steady rate; consumers reserve and delete through all three.
In the middle, node 0 is killed with SIGKILL and not restarted. Reported:

- fail-over time: from the kill to the delivery (by a surviving node) of the first job that
  was put through the killed node and became due after the kill;
- lateness (delivery - due) of the jobs due after the kill, split into those put through the
  killed node and the rest; the issue's target is within 2 s of the due time, never early;
- early deliveries: a delivery before (time the put was sent + delay) is certainly early;
- jobs delivered twice (held by a consumer of the killed node at the kill: they return to
  ready when their TTR lapses, as beanstalkd does when a connection drops).

Usage, from the repository root, with the e2e virtualenv (`bash ci/e2e.sh --co -q` builds it):
    target/e2e-venv/bin/python crates/bench/scripts/pg_failover.py [--rate 200] [--runs 3]
The server binary is target/release/tickwheel-server (or $TICKWHEEL_BIN).
"""
import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tests", "e2e"))

import greenstalk  # noqa: E402
from conftest import PgCluster, pg_bin_dir  # noqa: E402
from pgload import start_active_nodes  # noqa: E402


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def one_run(cluster, args, logs):
    url = cluster.create_db()
    nodes = start_active_nodes(url, logs)
    lock = threading.Lock()
    acked = {}        # body -> (sent, delay, node)
    delivered = {}    # body -> [(time, node)]
    killed = {"at": None}
    stop = threading.Event()

    def live(k):
        for j in range(3):
            i = (k + j) % 3
            n = nodes[i]
            if n.proc is not None and n.proc.poll() is None:
                return i, n.port
        raise RuntimeError("no node left")

    def consume(c):
        client, node = None, None
        while not stop.is_set():
            try:
                if client is None:
                    node, port = live(c)
                    client = greenstalk.Client(("127.0.0.1", port), watch="jobs")
                job = client.reserve(timeout=1)
                now = time.time()
                with lock:
                    delivered.setdefault(job.body, []).append((now, node))
                client.delete(job)
            except greenstalk.TimedOutError:
                pass
            except (OSError, greenstalk.Error, ConnectionError):
                client = None
                time.sleep(0.02)

    def produce(p, producers):
        client, node, i = None, None, 0
        period = producers / args.rate
        start = time.time()
        while True:
            at = start + i * period
            if at - start >= args.put_seconds:
                return
            time.sleep(max(0.0, at - time.time()))
            try:
                if client is None:
                    node, port = live(p)
                    client = greenstalk.Client(("127.0.0.1", port), use="jobs")
                body = f"p{p}-{i}"
                sent = time.time()
                client.put(body, delay=args.delay, ttr=args.ttr)
                with lock:
                    acked[body] = (sent, args.delay, node)
            except (OSError, greenstalk.Error, ConnectionError):
                client = None
            i += 1

    producers = 6
    workers = [threading.Thread(target=consume, args=(c,), daemon=True) for c in range(6)]
    puts = [threading.Thread(target=produce, args=(p, producers), daemon=True)
            for p in range(producers)]
    started = time.time()
    for t in workers + puts:
        t.start()
    time.sleep(max(0.0, started + args.kill_after - time.time()))
    nodes[0].kill()
    killed["at"] = time.time()
    for t in puts:
        t.join()
    # Everything put is due by now + delay; wait for it plus a margin for TTR re-deliveries.
    deadline = time.time() + args.delay + args.ttr + 10
    while time.time() < deadline:
        with lock:
            if all(b in delivered for b in acked):
                break
        time.sleep(0.1)
    stop.set()
    for t in workers:
        t.join(timeout=5)
    for n in nodes[1:]:
        n.stop()

    kill = killed["at"]
    missing = [b for b in acked if b not in delivered]
    early, late_killed, late_other, first = 0, [], [], None
    for body, (sent, delay, node) in acked.items():
        if body not in delivered:
            continue
        due = sent + delay   # the server's due time is at or after this
        got = delivered[body][0][0]
        if got < due:
            early += 1
        if due <= kill:
            continue
        (late_killed if node == 0 else late_other).append(got - due)
        if node == 0 and (first is None or due < first[0]):
            first = (due, got)
    return {
        "puts": len(acked),
        "missing": len(missing),
        "early": early,
        "killed_node_due_after": len(late_killed),
        "failover_s": None if first is None else first[1] - kill,
        "late_killed": late_killed,
        "late_other": late_other,
        "redelivered": sum(1 for d in delivered.values() if len(d) > 1),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=200.0, help="puts per second, all producers")
    ap.add_argument("--put-seconds", type=float, default=8.0)
    ap.add_argument("--kill-after", type=float, default=5.0, help="seconds after the first put")
    ap.add_argument("--delay", type=int, default=3, help="delay of every job, whole seconds")
    ap.add_argument("--ttr", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    bin_dir = pg_bin_dir()
    if bin_dir is None:
        sys.exit("PostgreSQL is not installed (apt-get install postgresql)")
    cluster = PgCluster(bin_dir)
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="tw-failover-") as logs:
            for r in range(args.runs):
                res = one_run(cluster, args, logs)
                results.append(res)
                lk, lo = res["late_killed"], res["late_other"]
                fo = res["failover_s"]
                print(f"run {r}: puts {res['puts']}, missing {res['missing']}, early "
                      f"{res['early']}, fail-over {'-' if fo is None else f'{fo * 1000:.0f} ms'}; "
                      f"lateness of jobs due after the kill, put via the killed node "
                      f"({len(lk)}): p50 {pct(lk, .5) * 1000:.0f} / p99 {pct(lk, .99) * 1000:.0f} / "
                      f"max {max(lk, default=float('nan')) * 1000:.0f} ms; via the others "
                      f"({len(lo)}): p50 {pct(lo, .5) * 1000:.0f} / p99 {pct(lo, .99) * 1000:.0f} / "
                      f"max {max(lo, default=float('nan')) * 1000:.0f} ms; delivered twice "
                      f"{res['redelivered']}", flush=True)
    finally:
        cluster.close()
    fos = [r["failover_s"] for r in results if r["failover_s"] is not None]
    maxes = [max(r["late_killed"] + r["late_other"], default=0.0) for r in results]
    print(f"median fail-over {statistics.median(fos) * 1000:.0f} ms; median of the runs' max "
          f"lateness after the kill {statistics.median(maxes) * 1000:.0f} ms; early "
          f"{sum(r['early'] for r in results)}; missing {sum(r['missing'] for r in results)}")


if __name__ == "__main__":
    main()
