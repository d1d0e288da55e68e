//! A blocking connection to a beanstalkd-protocol server: commands are encoded with
//! [`Command::encode`], replies decoded with [`ReplyDecoder`] (both sans-I/O, in
//! `tickwheel-proto`); this file only moves bytes. Commands may be pipelined: [`send`]
//! buffers, [`recv`] flushes and reads the next reply in order.
//!
//! [`send`]: Connection::send
//! [`recv`]: Connection::recv

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use bytes::BytesMut;
use tickwheel_proto::{parse_yaml_list, parse_yaml_map, Command, Reply, ReplyDecoder};
use tickwheel_queue::TubeName;

/// The largest reply body accepted: beanstalkd's `-z` maximum job size is far below this,
/// and `stats`/`list-tubes` documents are small. Bounds memory against a hostile server.
const MAX_REPLY_BODY: usize = 1 << 30;

/// A `key: value` YAML dictionary from `stats*`, in the server's order.
pub(crate) type Yaml = Vec<(String, String)>;

/// Looks up `key` in a stats dictionary.
pub(crate) fn field<'a>(map: &'a Yaml, key: &str) -> Option<&'a str> {
    map.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Looks up a numeric `key`; absent or non-numeric is an error naming the key.
pub(crate) fn number(map: &Yaml, key: &str) -> Result<u64> {
    let value = field(map, key).ok_or_else(|| anyhow!("the server's stats lack {key:?}"))?;
    value
        .parse()
        .with_context(|| format!("the server's {key:?} is not a number: {value:?}"))
}

/// A tube name, checked by beanstalkd's rule.
pub(crate) fn tube_name(name: &str) -> Result<TubeName> {
    TubeName::new(name).map_err(|_| {
        anyhow!(
            "{name:?} is not a valid tube name (1-200 bytes of A-Z a-z 0-9 - + / ; . $ _ ( ), \
             not starting with '-')"
        )
    })
}

/// One connection to a server.
pub(crate) struct Connection {
    addr: String,
    stream: TcpStream,
    read_buf: BytesMut,
    write_buf: BytesMut,
    decoder: ReplyDecoder,
    /// Replies owed for commands sent.
    pending: usize,
    /// Scratch space for socket reads.
    chunk: Box<[u8]>,
}

impl Connection {
    /// Connects to `addr` (`HOST:PORT`), with `timeout` for connecting and for each read and
    /// write.
    pub(crate) fn open(addr: &str, timeout: Duration) -> Result<Connection> {
        let addrs: Vec<_> = addr
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve {addr:?} (expected HOST:PORT)"))?
            .collect();
        let mut last = None;
        for sock in &addrs {
            match TcpStream::connect_timeout(sock, timeout) {
                Ok(stream) => {
                    stream.set_read_timeout(Some(timeout))?;
                    stream.set_write_timeout(Some(timeout))?;
                    stream.set_nodelay(true)?;
                    return Ok(Connection {
                        addr: addr.to_owned(),
                        stream,
                        read_buf: BytesMut::with_capacity(64 * 1024),
                        write_buf: BytesMut::new(),
                        decoder: ReplyDecoder::new(MAX_REPLY_BODY),
                        pending: 0,
                        chunk: vec![0; 64 * 1024].into_boxed_slice(),
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        match last {
            Some(e) => Err(e).with_context(|| format!("cannot connect to {addr}")),
            None => bail!("{addr:?} resolves to no address"),
        }
    }

    /// The address this connection was opened with.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// Queues a command; it is written by the next [`flush`](Self::flush) or
    /// [`recv`](Self::recv).
    pub(crate) fn send(&mut self, command: &Command) {
        command.encode(&mut self.write_buf);
        self.pending += 1;
    }

    /// Writes every queued command.
    pub(crate) fn flush(&mut self) -> Result<()> {
        if !self.write_buf.is_empty() {
            self.stream
                .write_all(&self.write_buf)
                .with_context(|| format!("writing to {}", self.addr))?;
            self.write_buf.clear();
        }
        Ok(())
    }

    /// The reply to the oldest command sent and not yet answered.
    pub(crate) fn recv(&mut self) -> Result<Reply> {
        if self.pending == 0 {
            bail!("internal error: reading a reply to no command");
        }
        self.flush()?;
        loop {
            if let Some(reply) = self
                .decoder
                .decode(&mut self.read_buf)
                .with_context(|| format!("from {}", self.addr))?
            {
                self.pending -= 1;
                return Ok(reply);
            }
            let n = self
                .stream
                .read(&mut self.chunk)
                .with_context(|| format!("reading from {}", self.addr))?;
            if n == 0 {
                bail!("{} closed the connection", self.addr);
            }
            self.read_buf.extend_from_slice(&self.chunk[..n]);
        }
    }

    /// Sends one command and reads its reply.
    pub(crate) fn call(&mut self, command: &Command) -> Result<Reply> {
        self.send(command);
        self.recv()
    }

    /// `use <tube>`.
    pub(crate) fn use_tube(&mut self, tube: &TubeName) -> Result<()> {
        match self.call(&Command::Use(tube.clone()))? {
            Reply::Using(_) => Ok(()),
            other => Err(unexpected("use", &other)),
        }
    }

    /// A `stats*` command answered with a YAML dictionary, or `None` for `NOT_FOUND`.
    pub(crate) fn stats_of(&mut self, command: &Command) -> Result<Option<Yaml>> {
        match self.call(command)? {
            Reply::Ok(yaml) => Ok(Some(parse_yaml_map(&yaml)?)),
            Reply::NotFound => Ok(None),
            other => Err(unexpected("stats", &other)),
        }
    }

    /// `stats`.
    pub(crate) fn stats(&mut self) -> Result<Yaml> {
        self.stats_of(&Command::Stats)?
            .ok_or_else(|| anyhow!("{} answered stats with NOT_FOUND", self.addr))
    }

    /// `list-tubes`.
    pub(crate) fn list_tubes(&mut self) -> Result<Vec<String>> {
        match self.call(&Command::ListTubes)? {
            Reply::Ok(yaml) => Ok(parse_yaml_list(&yaml)?),
            other => Err(unexpected("list-tubes", &other)),
        }
    }
}

/// An error for a reply that does not answer `what` as expected.
pub(crate) fn unexpected(what: &str, reply: &Reply) -> anyhow::Error {
    anyhow!("unexpected reply to {what}: {}", describe(reply))
}

/// A reply as the server wrote its first line.
pub(crate) fn describe(reply: &Reply) -> String {
    let mut out = BytesMut::new();
    reply.encode(&mut out);
    let text = String::from_utf8_lossy(&out[..out.len().min(256)]);
    text.lines().next().unwrap_or_default().to_owned()
}
