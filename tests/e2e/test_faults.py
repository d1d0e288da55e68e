"""Faults through the server: the data directory's disk fills up (a small tmpfs mounted by the
test; needs root and mount, else skipped with the reason).

What must hold: writes that cannot be made durable answer INTERNAL_ERROR, never a false
INSERTED/DELETED; nothing acknowledged is lost; and once space returns the server either recovers
or says plainly, in its log (stderr), why it won't. tickwheel's store refuses every write after a
failed write or fsync (a retried fsync cannot be trusted), so it is the second: the log says a
restart is needed, and after one everything acknowledged is there and writes work again.

Not yet: serving reads in the meantime (see the comment in the test); and the last put
acknowledged before the disk filled is lost (xfail, see the end of the test).
"""

import os
import subprocess
import tempfile

import pytest

from conftest import tickwheel_process
from rawproto import Conn

BODY = 60_000  # bytes per job: a 16 MiB tmpfs fills within a few hundred puts


@pytest.fixture
def small_disk():
    mnt = tempfile.mkdtemp(prefix="tickwheel-tmpfs-")
    try:
        out = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", mnt],
                             capture_output=True, timeout=30)
    except OSError as e:
        os.rmdir(mnt)
        pytest.skip(f"cannot mount a tmpfs here: {e}")
    if out.returncode != 0:
        os.rmdir(mnt)
        pytest.skip("cannot mount a tmpfs here (needs root and mount): "
                    + out.stderr.decode(errors="replace").strip())
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=30)
        os.rmdir(mnt)


def body_of(i):
    head = b"job %08d " % i
    return head + b"x" * (BODY - len(head))


def log_text(server):
    server.log.flush()
    with open(server.log_path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def test_full_disk_refuses_writes_and_loses_nothing_until_a_restart(small_disk, workdir):
    # Room to give back later: a filler file the test deletes once the disk is full.
    filler = os.path.join(small_disk, "filler")
    with open(filler, "wb") as f:
        f.write(b"\0" * (2 << 20))
    server = tickwheel_process(os.path.join(small_disk, "data"), workdir)
    try:
        server.start()
        c = Conn(server.port, timeout=30)
        acked = {}  # id -> body
        failed = 0
        for i in range(2000):
            c.send(b"put 0 0 60 %d\r\n%s\r\n" % (BODY, body_of(i)))
            line, _ = c.reply(30)
            if line.startswith(b"INSERTED "):
                assert failed == 0, "a put was acknowledged after one failed"
                acked[int(line.split()[1])] = body_of(i)
            else:
                assert line == b"INTERNAL_ERROR", line
                failed += 1
                if failed == 3:
                    break
        assert failed == 3, "the disk never filled up"
        assert acked, "nothing fitted on the disk"

        # Writes are refused, with INTERNAL_ERROR, not a false acknowledgement.
        first = min(acked)
        assert c.cmd(f"delete {first}", 30) == (b"INTERNAL_ERROR", None)
        # Reads too, today: the engine's memory holds the changes that failed (the delete
        # above removed job `first` there, not on disk), so a read could show what is not
        # durable. Serving reads needs the engine rolled back to the durable state (reloaded
        # from the store), which is left to the commit-path redesign; until then a read
        # answers INTERNAL_ERROR, never a wrong answer.
        for cmd in (f"peek {first}", f"peek {max(acked)}", f"stats-job {first}", "stats"):
            assert c.cmd(cmd, 30) == (b"INTERNAL_ERROR", None), cmd

        # Space returns; the store stays poisoned, and the log says why and what to do.
        os.remove(filler)
        c.send(b"put 0 0 60 5\r\nsmall\r\n")
        assert c.reply(30) == (b"INTERNAL_ERROR", None)
        log = log_text(server)
        assert "is full" in log, log[-3000:]
        assert "restart the server to recover" in log, log[-3000:]
        c.close()

        # A restart recovers: writes work, and the acknowledged jobs are back.
        server.stop()
        server.start()
        c = Conn(server.port, timeout=30)
        assert c.cmd(f"delete {first}", 30) == (b"DELETED", None)
        del acked[first]
        assert c.put("after the restart") > max(acked)
        lost = []
        for jid, body in sorted(acked.items()):
            line, data = c.cmd(f"peek {jid}", 30)
            if line != b"FOUND %d %d" % (jid, BODY):
                lost.append(jid)
            else:
                assert data == body, f"job {jid}: wrong body"
        c.close()
    finally:
        server.close()
    if lost == [max(acked)]:
        # Seen on every run so far: the last put before the disk filled was acknowledged
        # but only part of it reached the journal. fjall 2.11's WriteBatch::commit discards
        # the journal write's error (`let _ = journal_writer.write_batch(..)`), and the
        # fsync that follows succeeds for the bytes that were written; recovery then drops
        # the torn batch. Fixed upstream in fjall 3 (fjall-rs/fjall#304, #308). Reported;
        # the fix belongs in tickwheel-store (upgrade, or a workaround).
        pytest.xfail(f"acknowledged job {lost[0]} lost on a full disk: fjall 2.11 drops "
                     "journal write errors (fjall-rs/fjall#304)")
    assert not lost, f"acknowledged jobs lost: {lost} of {len(acked)}"
