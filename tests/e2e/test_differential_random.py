"""Random differential sessions: a long, seeded stream of commands over several connections,
sent in lockstep to the real beanstalkd (1.12, `-b`) and to tickwheel-server, each reply
compared as soon as both have answered (after the normalisation of test_differential.py:
process identity, clocks within 1 s, binlog bookkeeping, `stats-job`'s `file`).

The scripted scenarios in test_differential.py each isolate one rule; this test looks for
differences nobody thought to script: the order of ids across tubes and states, counters after
long histories, priorities and kicks mixed with pauses, and, in the sessions with restarts,
what beanstalkd's binlog brings back against what tickwheel's store does.

The next command is drawn from beanstalkd's answers so far (which jobs each connection holds,
which ids exist), so most `delete`, `release`, `bury` and `touch` commands act on a job held
by the connection; the rest hit other connections' jobs and unknown ids.

Nothing in a session depends on timing: delays and pauses are 0 or an hour, TTRs at least
100 s, and a closed connection is followed by a short pause (both servers notice a hang-up
asynchronously). A blocking `reserve` (or `reserve-with-timeout 3600`) leaves its connection
waiting, at most two at a time; after each command the waiting connections' replies, if any,
are compared, and a command that may wake one (a put, a release, a kick, an unpause, a
hang-up) waits a little for them. Which waiter gets a job, and when, is then compared too. A zero-delay `release` is left out of the sessions
with restarts: tickwheel writes it and beanstalkd does not (an intentional difference,
docs/protocol.md), so after a restart such a job differs by design.
"""

import os
import random
import time
from collections import Counter

import pytest

import test_differential as diff
from conftest import beanstalkd_process, tickwheel_process
from rawproto import Closed, Conn, Timeout

TUBES = ["default", "a", "b-1", "c_2"]
CONNS = 3


# Where an id beanstalkd gave out is sent to tickwheel when tickwheel has no job for it: far
# above any id tickwheel gives out in a session, so it names no job there either.
ABSENT = 10 ** 15


class Lockstep:
    """Both servers, one connection each per client number; every command goes to both.

    Job ids: tickwheel hands out ids in blocks that a restart never reuses, beanstalkd goes on
    from its largest id (a documented difference, docs/protocol.md). So each server gets the
    command with its own id for the job, and tickwheel's replies are compared with its ids
    mapped back to beanstalkd's (both start at 1 and count alike until the first restart)."""

    def __init__(self, ref, ours):
        self.servers = (ref, ours)
        self.conns = [{}, {}]
        self.log = []  # (conn, command, beanstalkd's reply, tickwheel's reply)
        self.seen = Counter()
        self.to_ours = {}
        self.to_ref = {}
        self.restarted = False
        self.waiting = {}  # connection -> the blocking reserve it sent, not answered yet

    def _conn(self, k, c):
        if c not in self.conns[k]:
            self.conns[k][c] = Conn(self.servers[k].port)
        return self.conns[k][c]

    def _ours(self, job):
        return None if job is None else self.to_ours.get(job, ABSENT + job)

    def _back(self, reply, ref):
        """tickwheel's `reply` with its job ids as beanstalkd's."""
        line, data = reply
        if not isinstance(line, bytes):
            return reply
        words = line.split(b" ")
        if words[0] == b"INSERTED" and len(words) == 2 and isinstance(ref[0], bytes) \
                and ref[0].startswith(b"INSERTED "):
            mine, theirs = int(words[1]), int(ref[0].split(b" ")[1])
            self.to_ours[theirs], self.to_ref[mine] = mine, theirs
            words[1] = b"%d" % theirs
        elif words[0] in (b"RESERVED", b"FOUND") and len(words) == 3:
            words[1] = b"%d" % self.to_ref.get(int(words[1]), -1)
        elif words[0] == b"OK" and data and data.startswith(b"---\nid: "):
            head, rest = data[len(b"---\nid: "):].split(b"\n", 1)
            data = b"---\nid: %d\n" % self.to_ref.get(int(head), -1) + rest
            words[1] = b"%d" % len(data)
        return b" ".join(words), data

    def send(self, c, text, job=None, body=None):
        """Sends command `text` (with `{job}` standing for job `job`, as beanstalkd numbers
        it, and `body` after the line if given) on connection `c` of both servers; returns
        beanstalkd's reply (line, data) after checking that tickwheel's is the same."""
        got = []
        for k in (0, 1):
            line = text.format(job=job if k == 0 else self._ours(job)).encode() + b"\r\n"
            data = line if body is None else line + body + b"\r\n"
            conn = self._conn(k, c)
            try:
                conn.send(data)
                got.append(conn.reply(4.0))
            except Timeout:
                got.append(("<no reply>", None))
            except (Closed, BrokenPipeError, ConnectionResetError):
                got.append(("<closed>", None))
        got[1] = self._back(got[1], got[0])
        if self.restarted and text == "list-tubes":
            # After a restart beanstalkd lists tubes in the order its binlog replay made them
            # (deleted jobs' records included); tickwheel's store has no such history: the
            # same tubes, in another order (docs/protocol.md).
            got = [(line, _sorted_yaml_list(data)) for line, data in got]
        shown = text.format(job=job).encode() + (b" +body" if body is not None else b"")
        self.check(c, shown, [[r] for r in got])
        return got[0]

    def check(self, c, sent, got):
        """Logs one exchange (`got`: each server's list of replies), fails the test if the
        normalised replies differ, and counts beanstalkd's reply words."""
        ref, ours = (diff.mask(diff.normalise([(0, c, r)]), {"file"}) for r in got)
        self.log.append((c, sent, got[0], got[1]))
        if not diff.same(ref, ours):
            lines = [f"conn {c} sent {d[:120]!r}\n   beanstalkd: {r!r:.400}\n"
                     f"   tickwheel:  {o!r:.400}" for c, d, r, o in self.log[-int(os.environ.get("RANDOM_DIFF_SHOW", "20")):]]
            pytest.fail(f"step {len(self.log) - 1}: replies differ (last 20 steps, the "
                        "difference last):\n" + "\n".join(lines) + "\nthe difference:\n"
                        + diff.describe([("send", c, sent, 1)], ref, ours))
        for line, _ in got[0]:
            if isinstance(line, bytes):
                self.seen[line.split(b" ")[0]] += 1

    def wait(self, c, text):
        """Sends `text`, a reserve that may block, on connection `c` of both servers and
        leaves its reply to `settle_waiters`."""
        for k in (0, 1):
            self._conn(k, c).send(text.encode() + b"\r\n")
        self.waiting[c] = text
        self.log.append((c, text.encode() + b" (waits)", None, None))

    def settle_waiters(self, wait):
        """Compares what the waiting connections were answered, if anything: each gets up to
        `wait` seconds for either server's reply, then as long as a reply takes (4 s) from
        the other. Returns beanstalkd's replies as (connection, line)."""
        answered = []
        for c, text in list(self.waiting.items()):
            got = [None, None]
            for k in (0, 1):
                try:
                    got[k] = self._conn(k, c).reply(wait)
                except Timeout:
                    pass
            if got == [None, None]:
                continue
            for k in (0, 1):
                if got[k] is None:
                    try:
                        got[k] = self._conn(k, c).reply(4.0)
                    except Timeout:
                        got[k] = ("<no reply>", None)
            got[1] = self._back(got[1], got[0])
            self.check(c, b"(answer to a waiting " + text.encode() + b")", [[r] for r in got])
            del self.waiting[c]
            answered.append((c, got[0][0]))
        return answered

    def close(self, c):
        self.waiting.pop(c, None)
        for conns in self.conns:
            conn = conns.pop(c, None)
            if conn is not None:
                conn.close()
        time.sleep(0.05)

    def restart(self):
        for conns in self.conns:
            for conn in conns.values():
                conn.close()
            conns.clear()
        self.waiting.clear()
        for server in self.servers:
            server.restart()
        self.restarted = True
        self.log.append((None, b"<restart>", None, None))


def _sorted_yaml_list(data):
    if not data or not data.startswith(b"---\n"):
        return data
    return b"---\n" + b"".join(sorted(ln + b"\n" for ln in data[4:].split(b"\n") if ln))


def play(run, seed, steps, restarts):
    rnd = random.Random(seed)
    held = {c: [] for c in range(CONNS)}  # ids each connection holds, by beanstalkd
    top = 0  # the largest id beanstalkd gave out

    def any_job():
        return rnd.randint(1, top + 1) if rnd.random() < 0.95 else rnd.randint(1, 10 ** 6)

    def own_job(c):
        return rnd.choice(held[c]) if held[c] and rnd.random() < 0.8 else any_job()

    def done(job):
        for ids in held.values():
            if job in ids:
                ids.remove(job)

    def send(c, text, job=None):
        reply = run.send(c, text, job)
        settle(WAKES.get(text.split(" ")[0], 0.002))
        probe()
        return reply

    def probe():
        # RANDOM_DIFF_PROBE=1: every tube's stats compared after each command (on a fourth
        # connection), to find the command where a difference begins.
        if os.environ.get("RANDOM_DIFF_PROBE"):
            for tube in TUBES:
                run.send(CONNS + 1, "stats-tube " + tube)

    def settle(wait):
        # A waiting reserve is answered when a job it may take becomes ready (a put, a
        # release, a kick, an unpause, a hang-up of a holder): those commands wait a little for
        # its reply, the others only look.
        for w, line in run.settle_waiters(wait):
            if line.startswith(b"RESERVED"):
                held[w].append(int(line.split()[1]))

    def apart():
        # Deadlines: tickwheel's clock counts milliseconds, beanstalkd's nanoseconds, so two
        # delays given within one millisecond tie in tickwheel (then the lower id is first)
        # and not in beanstalkd. A session keeps such commands a little apart.
        time.sleep(0.002)

    for n in range(steps):
        c = rnd.randrange(CONNS)
        op = rnd.random()
        if c in run.waiting:
            # A waiting connection can only hang up; the command goes to another one.
            if rnd.random() < 0.1:
                run.close(c)
                held[c].clear()
                settle(WAKES["hang-up"])
                continue
            c = next(w for w in range(CONNS) if w not in run.waiting)
        if restarts and n and n % (steps // (restarts + 1)) == 0:
            run.restart()
            for ids in held.values():
                ids.clear()
        elif op < 0.20:
            body = rnd.randbytes(rnd.choice([0, 1, 5, 40, 300]))
            pri = rnd.choice([0, 1, 1023, 1024, 1025, 2 ** 31, 2 ** 32 - 1, rnd.randint(0, 5000)])
            delay = rnd.choice([0, 0, 0, 3600])
            ttr = rnd.randint(100, 1000)
            line, _ = run.send(c, f"put {pri} {delay} {ttr} {len(body)}", body=body)
            settle(WAKES["put"])
            probe()
            if delay:
                apart()
            if line.startswith(b"INSERTED"):
                top = max(top, int(line.split()[1]))
        elif op < 0.27:
            send(c, f"use {rnd.choice(TUBES)}")
        elif op < 0.33:
            send(c, f"watch {rnd.choice(TUBES)}")
        elif op < 0.37:
            send(c, f"ignore {rnd.choice(TUBES)}")
        elif op < 0.435 and len(run.waiting) < CONNS - 1:
            # Blocks until a job it watches is ready; answered later (settle).
            run.wait(c, rnd.choice(["reserve", "reserve-with-timeout 3600"]))
            settle(WAKES["reserve"])
        elif op < 0.47:
            line, _ = send(c, "reserve-with-timeout 0")
            if line.startswith(b"RESERVED"):
                held[c].append(int(line.split()[1]))
        elif op < 0.51:
            line, _ = send(c, "reserve-job {job}", any_job())
            if line.startswith(b"RESERVED"):
                held[c].append(int(line.split()[1]))
        elif op < 0.57:
            job = own_job(c)
            if send(c, "delete {job}", job)[0] == b"DELETED":
                done(job)
        elif op < 0.64:
            job = own_job(c)
            delay = 3600 if restarts else rnd.choice([0, 0, 3600])
            if send(c, f"release {{job}} {rnd.randint(0, 2000)} {delay}", job)[0] == b"RELEASED":
                done(job)
            if delay:
                apart()
        elif op < 0.70:
            job = own_job(c)
            if send(c, f"bury {{job}} {rnd.randint(0, 2000)}", job)[0] == b"BURIED":
                done(job)
        elif op < 0.72:
            send(c, "touch {job}", own_job(c))
        elif op < 0.75:
            send(c, f"kick {rnd.choice([1, 2, 5, 100])}")
        elif op < 0.78:
            send(c, "kick-job {job}", any_job())
        elif op < 0.81:
            send(c, "peek {job}", any_job())
        elif op < 0.85:
            send(c, rnd.choice(["peek-ready", "peek-delayed", "peek-buried"]))
        elif op < 0.89:
            send(c, "stats-job {job}", any_job())
        elif op < 0.92:
            send(c, f"stats-tube {rnd.choice(TUBES)}")
        elif op < 0.95:
            send(c, rnd.choice(["list-tubes", "list-tube-used", "list-tubes-watched"]))
        elif op < 0.97:
            send(c, "stats")
        elif op < 0.98:
            # Mostly an unpause (0): a tube paused for an hour stays out of the session.
            send(c, f"pause-tube {rnd.choice(TUBES)} {rnd.choice([0, 0, 3600])}")
        else:
            # A hang-up: the connection's reserved jobs return to ready.
            send(c, "list-tube-used")
            run.close(c)
            held[c].clear()
            settle(WAKES["hang-up"])
    send(next(w for w in range(CONNS) if w not in run.waiting), "stats")


# How long a command waits for the replies of waiting reserves it may have woken (seconds);
# other commands only look (WAKES.get(verb, 0.002)).
WAKES = {"put": 0.05, "release": 0.05, "kick": 0.05, "kick-job": 0.05, "pause-tube": 0.05,
         "hang-up": 0.1, "reserve": 0.05}


# (seed, steps, restarts): odd seeds without restarts, even ones with three. More seeds for
# a longer hunt: RANDOM_DIFF_SEEDS=1-200 bash ci/e2e.sh -k random
_first, _, _last = os.environ.get("RANDOM_DIFF_SEEDS", "1-6").partition("-")
SESSIONS = [(seed, 1500, 3 if seed % 2 == 0 else 0)
            for seed in range(int(_first), int(_last or _first) + 1)]

# Seeds that show a known difference not yet matched (docs/protocol.md, "Random sessions"):
# strict xfails, so that a fix shows up as an unexpected pass. Seeds 1-40 were run; seed 40
# shows it as a count (`kick 1` takes another buried job, an urgent one in beanstalkd).
_BURIED_ORDER = "after restarts, buried jobs are kicked in another order (docs/protocol.md)"
KNOWN_DIFFERENCES = {seed: _BURIED_ORDER for seed in (4, 8, 30, 40)}


def _session_param(seed, steps, restarts):
    marks = ([pytest.mark.xfail(strict=True, reason=KNOWN_DIFFERENCES[seed])]
             if seed in KNOWN_DIFFERENCES else [])
    return pytest.param(seed, steps, restarts, marks=marks, id=f"seed{seed}-restarts{restarts}")


@pytest.mark.parametrize("seed,steps,restarts", [_session_param(*s) for s in SESSIONS])
def test_random_sessions_answer_as_beanstalkd(workdir, seed, steps, restarts):
    ours = tickwheel_process(os.path.join(workdir, "data"), workdir, ["-z", str(diff.MAX_JOB)])
    check_random_session(workdir, ours, seed, steps, restarts)


def check_random_session(workdir, ours, seed, steps, restarts):
    """Plays session `seed` on a fresh beanstalkd (`-b`) and on `ours` (not started yet)."""
    binlog = os.path.join(workdir, "binlog")
    os.makedirs(binlog)
    ref = beanstalkd_process(workdir, ["-z", str(diff.MAX_JOB), "-b", binlog])
    try:
        ref.start()
        ours.start()
        run = Lockstep(ref, ours)
        play(run, seed, steps, restarts)
        assert ours.proc.poll() is None, "tickwheel-server died"
    finally:
        ref.close()
        ours.close()
    # The session meant something: jobs were handed out, buried, kicked, released and found.
    for word in (b"RESERVED", b"BURIED", b"KICKED", b"FOUND", b"DELETED", b"RELEASED"):
        assert run.seen[word] >= 10, (word, run.seen)


# --- random command lines ---------------------------------------------------------------------
#
# Near-valid command lines: every command, with numbers and tube names at and past their
# limits, odd spacing, garbage suffixes, wrong case, bodies longer than declared. Each line is
# followed by a sentinel (`list-tube-used`), and replies are read up to the sentinel's, so a
# line that gets two replies (a bad put whose body is read as a command) or none is compared
# whole. Numbers that would start a clock (a delay, TTR or pause of a few seconds, a blocking
# reserve) are left out, as above.

NUMS = ["0", "1", "5", "00001", "1024", "4294967295", "4294967296", "18446744073709551615",
        "18446744073709551616", "-1", "+1", "-0", "0x1", "1.5", "1abc", "abc", ""]
LONG = ["0", "000", "3600", "4294967296", "-1", "+1", "0x1", "1.5", "abc", ""]  # no short clock
TTRS = ["100", "3600", "00100", "4294967295", "4294967296", "-1", "+1", "1.5", "abc", ""]
WAITS = ["0", "00", "-0", "+0", "abc", "0abc"]  # reserve-with-timeout that never waits
NAMES = ["default", "a", "b", "9", "t" * 200, "t" * 201, "-a", "a-", "a$b", "a(b)", "a/b;c.d+e_f",
         "a*b", "a\tb", "é", "A", ""]
SEPS = [" "] * 12 + ["  ", " \t", "\t"]
SIMPLE = ["peek-ready", "peek-delayed", "peek-buried", "stats", "list-tubes", "list-tube-used",
          "list-tubes-watched", "reserve "]
WORDS = ["put", "reserve", "reserve-with-timeout", "reserve-job", "delete", "release", "bury",
         "touch", "kick", "kick-job", "peek", "peek-ready", "stats-job", "stats-tube", "use",
         "watch", "ignore", "pause-tube", "list-tubes", "foo", "PUT", "Use", "reserve-jobx",
         "statsx", "peekx", "kicks", ""]


def random_line(rnd, top):
    """One command line (without CRLF) and the bytes to send after it."""
    ids = [str(rnd.randint(1, top + 1)), rnd.choice(NUMS)]
    pick = rnd.random()
    after = b""
    if pick < 0.25:
        pri = rnd.choice(NUMS) if rnd.random() < 0.3 else str(rnd.randint(0, 5000))
        delay = rnd.choice(LONG) if rnd.random() < 0.3 else rnd.choice(["0", "3600"])
        ttr = rnd.choice(TTRS) if rnd.random() < 0.3 else "100"
        size = rnd.choice([0, 1, 5, 40])
        declared = rnd.choice([str(size)] * 6 + ["0" + str(size), "-1", "+1", "abc", "",
                                                 str(max(size - 1, 0)), "65536", "65535",
                                                 "65536x", f"{size}x", "4294967296"])
        args = [pri, delay, ttr, declared]
        if rnd.random() < 0.1:
            args = args[:rnd.randrange(4)] + ([rnd.choice(NUMS)] if rnd.random() < 0.5 else [])
        # No lone CR: in a line read as a command (a bad put's body, or what follows a body
        # longer than declared) beanstalkd waits for more input (an allowed difference,
        # scenario lone-cr-in-a-command-line).
        body = rnd.randbytes(size).replace(b"\r", b"R")
        if declared.startswith("6553"):
            body = b"x" * int(declared.rstrip("x"))  # at and past the limit
        after = body + b"\r\n"
        words = ["put", *args]
    elif pick < 0.33:
        words = [rnd.choice(["use", "watch", "ignore", "stats-tube"]), rnd.choice(NAMES)]
    elif pick < 0.38:
        words = [rnd.choice(["pause-tube", "pause-tube", "pause-tubea"]), rnd.choice(NAMES),
                 rnd.choice(LONG)]
    elif pick < 0.48:
        words = ["reserve-with-timeout", rnd.choice(WAITS)]
    elif pick < 0.62:
        cmd = rnd.choice(["reserve-job", "delete", "touch", "kick-job", "peek", "stats-job"])
        words = [cmd, rnd.choice(ids)]
    elif pick < 0.70:
        words = ["release", rnd.choice(ids), rnd.choice(NUMS), rnd.choice(LONG)]
    elif pick < 0.76:
        words = ["bury", rnd.choice(ids), rnd.choice(NUMS)]
    elif pick < 0.80:
        words = ["kick", rnd.choice(NUMS + ["4294967297", "0x1 5", "\t2", "1 2"])]
    elif pick < 0.90:
        words = [rnd.choice(SIMPLE)]
    else:
        words = [rnd.choice(WORDS)] + [rnd.choice(NUMS + NAMES)
                                       for _ in range(rnd.randrange(3))]
    if rnd.random() < 0.15 and len(words) > 1:
        words = words[:-1] if rnd.random() < 0.5 else words + [rnd.choice(NUMS)]
    line = words[0] + "".join(rnd.choice(SEPS) + w for w in words[1:])
    if rnd.random() < 0.05:
        line = rnd.choice([" ", ""]) + line + rnd.choice([" ", "x", ""])
    if line.strip() == "reserve":
        line = "reserve "  # a bare reserve may wait forever
    if line.startswith("reserve-with-timeout") and line.split(" ")[-1] not in WAITS:
        line = "reserve-with-timeout 0"
    if len(line) > 220:
        # A line whose CRLF reaches beanstalkd's 224-byte buffer end trips a beanstalkd bug
        # (scenario crlf-straddling-the-line-buffer, an allowed difference).
        line = line[:200]
    return line.encode(), after


def send_lines(run, c, data):
    """Sends `data` and the sentinel on connection `c` of both servers; compares every reply
    up to the sentinel's (the last one)."""
    sentinel = b"list-tube-used\r\n"
    got = []
    for k in (0, 1):
        conn = run._conn(k, c)
        replies = []
        try:
            conn.send(data + sentinel)
            while True:
                replies.append(conn.reply(4.0))
                if replies[-1][0].startswith(b"USING") and not conn.buf:
                    try:
                        conn._fill(time.monotonic() + 0.02)
                    except Timeout:
                        break
        except Timeout:
            replies.append(("<no reply>", None))
        except (Closed, BrokenPipeError, ConnectionResetError):
            replies.append(("<closed>", None))
            run.conns[k].pop(c).close()
        got.append(replies)
    run.check(c, data, got)
    return got[0]


_lines_first, _, _lines_last = os.environ.get("RANDOM_LINES_SEEDS", "1-2").partition("-")
LINE_SEEDS = list(range(int(_lines_first), int(_lines_last or _lines_first) + 1))


@pytest.mark.parametrize("seed", LINE_SEEDS)
def test_random_command_lines_answer_as_beanstalkd(workdir, seed):
    rnd = random.Random(seed)
    ref = beanstalkd_process(workdir, ["-z", str(diff.MAX_JOB)])
    ours = tickwheel_process(os.path.join(workdir, "data"), workdir, ["-z", str(diff.MAX_JOB)])
    top = 0
    try:
        ref.start()
        ours.start()
        run = Lockstep(ref, ours)
        for _ in range(600):
            line, after = random_line(rnd, top)
            c = rnd.randrange(CONNS)
            for reply, _ in send_lines(run, c, line + b"\r\n" + after):
                if isinstance(reply, bytes) and reply.startswith(b"INSERTED "):
                    top = max(top, int(reply.split(b" ")[1]))
        assert ours.proc.poll() is None, "tickwheel-server died"
    finally:
        ref.close()
        ours.close()
    for word in (b"BAD_FORMAT", b"UNKNOWN_COMMAND", b"INSERTED", b"NOT_FOUND", b"RESERVED"):
        assert run.seen[word] >= 3, (word, run.seen)
    assert run.seen[b"EXPECTED_CRLF"] + run.seen[b"JOB_TOO_BIG"] >= 1, run.seen
