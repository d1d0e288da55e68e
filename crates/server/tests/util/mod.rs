//! The protocol client shared by the server's integration tests: one connection, one
//! request at a time, replies checked strictly (CRLF, expected words).
#![allow(dead_code, reason = "each test binary uses part of the client")]

use std::net::SocketAddr;

use tickwheel_server::{Config, Listener, Server};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A running server on a loopback port and what it takes to stop it.
pub(crate) struct Running {
    pub(crate) addr: SocketAddr,
    pub(crate) handle: tickwheel_server::Handle,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Running {
    /// Opens a server with `config` and serves it on `127.0.0.1:0`.
    pub(crate) async fn open(config: &Config) -> Running {
        let server = Server::open(config).unwrap();
        let handle = server.handle();
        let listener = Listener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let task = tokio::spawn(server.run(listener, stop.clone()));
        Running {
            addr,
            handle,
            stop,
            task,
        }
    }

    pub(crate) async fn client(&self) -> Client {
        Client::connect(self.addr).await
    }

    /// Graceful shutdown: returns once everything acknowledged is durable.
    pub(crate) async fn shutdown(self) {
        self.stop.cancel();
        self.task.await.unwrap();
    }
}

/// One connection speaking the protocol line by line.
pub(crate) struct Client {
    stream: BufReader<TcpStream>,
}

impl Client {
    pub(crate) async fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            stream: BufReader::new(stream),
        }
    }

    pub(crate) async fn send(&mut self, bytes: &[u8]) {
        self.stream.get_mut().write_all(bytes).await.unwrap();
    }

    /// Sends `command` + CRLF without reading a reply.
    pub(crate) async fn send_line(&mut self, command: &str) {
        self.send(format!("{command}\r\n").as_bytes()).await;
    }

    /// One reply line, without its CRLF.
    pub(crate) async fn line(&mut self) -> String {
        let mut line = Vec::new();
        self.stream.read_until(b'\n', &mut line).await.unwrap();
        assert!(
            line.ends_with(b"\r\n"),
            "reply not CRLF-terminated: {line:?}"
        );
        line.truncate(line.len() - 2);
        String::from_utf8(line).unwrap()
    }

    /// Waits for the server to close the connection, with nothing more to read.
    pub(crate) async fn closed(&mut self) {
        let mut rest = Vec::new();
        self.stream.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "bytes before the close: {rest:?}");
    }

    /// Sends `command` + CRLF and returns the reply line.
    pub(crate) async fn cmd(&mut self, command: &str) -> String {
        self.send(format!("{command}\r\n").as_bytes()).await;
        self.line().await
    }

    /// Reads a `<bytes>`-long body and its CRLF.
    pub(crate) async fn body(&mut self, len: usize) -> Vec<u8> {
        let mut body = vec![0; len + 2];
        self.stream.read_exact(&mut body).await.unwrap();
        assert_eq!(&body[len..], b"\r\n");
        body.truncate(len);
        body
    }

    /// Puts `body` and returns its id.
    pub(crate) async fn put(&mut self, pri: u32, delay: u32, ttr: u32, body: &str) -> u64 {
        self.send(format!("put {pri} {delay} {ttr} {}\r\n{body}\r\n", body.len()).as_bytes())
            .await;
        let reply = self.line().await;
        reply
            .strip_prefix("INSERTED ")
            .unwrap_or_else(|| panic!("put: {reply}"))
            .parse()
            .unwrap()
    }

    /// Sends a command answered by `<WORD> <id> <bytes>` + body (RESERVED, FOUND), or by a
    /// single line; returns the line and the body.
    pub(crate) async fn job_cmd(&mut self, command: &str) -> (String, Option<Vec<u8>>) {
        let line = self.cmd(command).await;
        let words: Vec<&str> = line.split(' ').collect();
        if (words[0] == "RESERVED" || words[0] == "FOUND") && words.len() == 3 {
            let len = words[2].parse().unwrap();
            let body = self.body(len).await;
            (line, Some(body))
        } else {
            (line, None)
        }
    }

    /// Reserves with a timeout and returns `(id, body)`, panicking on anything else.
    pub(crate) async fn reserve(&mut self, timeout: u32) -> (u64, String) {
        let (line, body) = self
            .job_cmd(&format!("reserve-with-timeout {timeout}"))
            .await;
        let id = line
            .strip_prefix("RESERVED ")
            .unwrap_or_else(|| panic!("reserve: {line}"))
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        (id, String::from_utf8(body.unwrap()).unwrap())
    }

    /// An `OK <bytes>` YAML reply, as `key: value` pairs in order.
    pub(crate) async fn yaml(&mut self, command: &str) -> Vec<(String, String)> {
        self.send_line(command).await;
        self.yaml_reply(command).await
    }

    /// [`yaml`](Self::yaml) for a `command` sent already.
    pub(crate) async fn yaml_reply(&mut self, command: &str) -> Vec<(String, String)> {
        let line = self.line().await;
        let len = line
            .strip_prefix("OK ")
            .unwrap_or_else(|| panic!("{command}: {line}"))
            .parse()
            .unwrap();
        let body = String::from_utf8(self.body(len).await).unwrap();
        let mut lines = body.lines();
        assert_eq!(lines.next(), Some("---"), "{command}: {body}");
        lines
            .map(|l| {
                let (k, v) = l.split_once(": ").or_else(|| l.split_once(' ')).unwrap();
                (k.to_string(), v.to_string())
            })
            .collect()
    }

    /// One field of `stats-job <id>`.
    pub(crate) async fn job_field(&mut self, id: u64, key: &str) -> String {
        let stats = self.yaml(&format!("stats-job {id}")).await;
        stats
            .into_iter()
            .find(|(k, _)| k == key)
            .unwrap_or_else(|| panic!("stats-job has no {key}"))
            .1
    }

    /// Reads a reply that must be `RESERVED <id> <bytes>` and its body; returns the id.
    pub(crate) async fn reserved(&mut self) -> u64 {
        let line = self.line().await;
        let mut words = line
            .strip_prefix("RESERVED ")
            .unwrap_or_else(|| panic!("expected RESERVED, got {line}"))
            .split(' ');
        let id = words.next().unwrap().parse().unwrap();
        let len = words.next().unwrap().parse().unwrap();
        self.body(len).await;
        id
    }

    /// One field of a YAML reply.
    pub(crate) async fn field(&mut self, command: &str, key: &str) -> String {
        self.yaml(command)
            .await
            .into_iter()
            .find(|(k, _)| k == key)
            .unwrap_or_else(|| panic!("{command} has no {key}"))
            .1
    }

    /// Returns once `waiting` clients are blocked in `reserve` (polling `stats` over the
    /// socket: each round trip lets the server run; nothing sleeps).
    pub(crate) async fn until_waiting(&mut self, waiting: usize) {
        while self.field("stats", "current-waiting").await != waiting.to_string() {
            tokio::task::yield_now().await;
        }
    }
}
