"""A raw beanstalkd protocol connection for the differential and crash suites: send bytes,
read whole replies (a line, plus the data chunk of OK/FOUND/RESERVED)."""

import socket
import time

DATA_REPLIES = (b"OK", b"FOUND", b"RESERVED")


class Timeout(Exception):
    pass


class Closed(Exception):
    pass


class Conn:
    def __init__(self, port, timeout=5.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        self.sock.close()

    def send(self, data):
        if isinstance(data, str):
            data = data.encode()
        self.sock.sendall(data)

    def _fill(self, deadline):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Timeout()
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            raise Timeout() from None
        except ConnectionResetError:
            raise Closed() from None
        if not chunk:
            raise Closed()
        self.buf += chunk

    def reply(self, timeout=5.0):
        """One reply as (line, data or None), without CRLFs; raises Timeout or Closed."""
        deadline = time.monotonic() + timeout
        while b"\r\n" not in self.buf:
            self._fill(deadline)
        line, self.buf = self.buf.split(b"\r\n", 1)
        words = line.split(b" ")
        if words[0] in DATA_REPLIES and len(words) >= 2 and words[-1].isdigit():
            size = int(words[-1])
            while len(self.buf) < size + 2:
                self._fill(deadline)
            data, self.buf = self.buf[:size], self.buf[size + 2:]
            return line, data
        return line, None

    def leftover(self, wait=0.05):
        """Whatever arrives within `wait` seconds (b"" if nothing), and whether the server
        closed the connection."""
        deadline = time.monotonic() + wait
        closed = False
        try:
            while True:
                self._fill(deadline)
        except Timeout:
            pass
        except Closed:
            closed = True
        out, self.buf = self.buf, b""
        return out, closed

    def cmd(self, line, timeout=5.0):
        """Sends one command line (CRLF added) and returns its reply."""
        self.send(line.encode() + b"\r\n" if isinstance(line, str) else line + b"\r\n")
        return self.reply(timeout)

    def put(self, body, pri=0, delay=0, ttr=60):
        if isinstance(body, str):
            body = body.encode()
        self.send(b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(body), body))
        line, _ = self.reply()
        if not line.startswith(b"INSERTED "):
            raise AssertionError(f"put: {line!r}")
        return int(line.split()[1])
