#!/usr/bin/env python3
"""Cross-node reserve latency of active-active tickwheel-server nodes, measured.

Two nodes (`--postgres-mode active-active`) on one fresh database of a throw-away PostgreSQL
cluster (Debian's postgresql, same machine, loopback). Node A only takes puts; every reserve
goes through node B, so every job B hands out is another node's (claim on demand). Two cases,
alternating, `--rounds` times each:

- `late reserver`: a job is put through A while nobody waits anywhere; after a pause
  (`--pause`, random up to that, so B has heard of the job and deferred it) a client of B sends
  `reserve-with-timeout`: the time from sending it to the `RESERVED` reply;
- `waiting reserver`: a client of B waits in `reserve` first; a job is put through A: the time
  from A's `INSERTED` to B's `RESERVED` (includes the affinity time, 25 ms, that B leaves
  the job to its owner).

Usage, from the repository root, with the e2e virtualenv (`bash ci/e2e.sh --co -q` builds it):
    target/e2e-venv/bin/python crates/bench/scripts/pg_cross_node.py [--rounds 40] \\
        [--bin target/release/tickwheel-server --bin /tmp/base-server]
Several --bin are run in turn on the same cluster (each on a fresh database), `--repeat`
times, alternating.
"""
import argparse
import os
import random
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
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def one_run(cluster, binary, args, logs):
    os.environ["TICKWHEEL_BIN"] = binary
    url = cluster.create_db()
    nodes = start_active_nodes(url, logs, count=2)
    rng = random.Random(7)
    late, waiting = [], []
    try:
        a = greenstalk.Client(("127.0.0.1", nodes[0].port), use="x")
        b = greenstalk.Client(("127.0.0.1", nodes[1].port), watch="x")
        for _ in range(args.rounds):
            # Late reserver.
            a.put("late")
            time.sleep(rng.uniform(0.1, args.pause))
            sent = time.perf_counter()
            job = b.reserve(timeout=10)
            late.append(time.perf_counter() - sent)
            b.delete(job)
            # Waiting reserver.
            got = {}

            def reserve():
                job = b.reserve(timeout=10)
                got["at"] = time.perf_counter()
                got["job"] = job
            t = threading.Thread(target=reserve)
            t.start()
            time.sleep(0.1)
            a.put("waiting")
            put_at = time.perf_counter()
            t.join()
            waiting.append(got["at"] - put_at)
            b.delete(got["job"])
        a.close()
        b.close()
    finally:
        for n in nodes:
            n.stop()
    return late, waiting


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--pause", type=float, default=0.6, help="longest pause after a put, s")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--bin", action="append", default=None)
    args = ap.parse_args()
    bins = args.bin or [os.environ.get("TICKWHEEL_BIN", "target/release/tickwheel-server")]
    bin_dir = pg_bin_dir()
    if bin_dir is None:
        sys.exit("PostgreSQL is not installed (apt-get install postgresql)")
    cluster = PgCluster(bin_dir)
    try:
        with tempfile.TemporaryDirectory(prefix="tw-cross-") as logs:
            for r in range(args.repeat):
                for binary in bins:
                    late, waiting = one_run(cluster, os.path.abspath(binary), args, logs)
                    print(f"{binary} run {r}: late reserver ({len(late)}) median "
                          f"{statistics.median(late) * 1000:.1f} / p90 {pct(late, .9) * 1000:.1f}"
                          f" / max {max(late) * 1000:.1f} ms; waiting reserver ({len(waiting)})"
                          f" median {statistics.median(waiting) * 1000:.1f} / p90 "
                          f"{pct(waiting, .9) * 1000:.1f} / max {max(waiting) * 1000:.1f} ms",
                          flush=True)
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
