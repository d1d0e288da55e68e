//! The HTTP API on a [`ManualClock`]: millisecond delays and absolute due times are never
//! early, checked at the exact instants around the due time, with no real waiting. Talks raw
//! HTTP/1.1 over `127.0.0.1` (one request per connection).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::{json, Value};
use tickwheel_server::{Clock, Config, HttpOptions, HttpServer, Listener, ManualClock, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// 2023-11-14 22:13:20 UTC, a whole second, in ms.
const START_MS: u64 = 1_700_000_000_000;

async fn call(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let text = String::from_utf8(response).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let value = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(body).unwrap()
    };
    (status, value)
}

struct Running {
    http: std::net::SocketAddr,
    clock: ManualClock,
    stop: CancellationToken,
}

impl Running {
    async fn start(offset_us: u64) -> Running {
        let clock = ManualClock::starting_at(
            UNIX_EPOCH + Duration::from_millis(START_MS) + Duration::from_micros(offset_us),
        );
        let config = Config {
            clock: Arc::new(clock.clone()),
            ..Config::default()
        };
        let stop = CancellationToken::new();
        let http = HttpServer::bind("127.0.0.1:0", HttpOptions::default())
            .await
            .unwrap();
        let addr = http.local_addr().unwrap();
        let server = Server::open(&config).unwrap();
        server.attach_http(&http.handle());
        tokio::spawn(http.run(stop.clone()));
        let listener = Listener::bind("127.0.0.1:0").await.unwrap();
        tokio::spawn(server.run(listener, stop.clone()));
        Running {
            http: addr,
            clock,
            stop,
        }
    }

    /// Moves the clock to `START_MS + ms` (plus `us` microseconds).
    fn at(&self, ms: u64, us: u64) {
        let target = UNIX_EPOCH + Duration::from_millis(START_MS + ms) + Duration::from_micros(us);
        let now = self.clock.system_time();
        assert!(target >= now, "time runs forward");
        self.clock.advance(target.duration_since(now).unwrap());
    }

    async fn state(&self, id: u64) -> String {
        let (status, job) = call(self.http, "GET", &format!("/api/v1/jobs/{id}"), None).await;
        assert_eq!(status, 200, "{job}");
        job["state"].as_str().unwrap().to_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_millisecond_delay_put_mid_millisecond_is_due_one_ms_later() {
    // Put at 0.4 ms past a whole ms: 1500 ms later is 1500.4 ms, so the job is due in the
    // engine's millisecond 1501, not 1500.
    let s = Running::start(400).await;
    let (status, put) = call(
        s.http,
        "POST",
        "/api/v1/jobs",
        Some(json!({"tube": "t", "body": "x", "delay_ms": 1500})),
    )
    .await;
    assert_eq!(
        (status, put["created"].clone()),
        (201, json!(true)),
        "{put}"
    );
    let id = put["id"].as_u64().unwrap();
    let (_, job) = call(s.http, "GET", &format!("/api/v1/jobs/{id}"), None).await;
    assert_eq!(job["due_at_ms"], json!(START_MS + 1501));
    s.at(1500, 999);
    assert_eq!(s.state(id).await, "delayed");
    s.at(1501, 0);
    assert_eq!(s.state(id).await, "ready");
    s.stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absolute_due_time_is_ready_at_that_millisecond_and_not_before() {
    let s = Running::start(0).await;
    let due = START_MS + 3_000;
    let (status, put) = call(
        s.http,
        "POST",
        "/api/v1/jobs",
        Some(json!({"body": "x", "due_at_ms": due})),
    )
    .await;
    assert_eq!(status, 201, "{put}");
    let id = put["id"].as_u64().unwrap();
    s.at(2_999, 999);
    assert_eq!(s.state(id).await, "delayed");
    s.at(3_000, 0);
    assert_eq!(s.state(id).await, "ready");
    // A due time in the past: ready at once.
    let (_, put) = call(
        s.http,
        "POST",
        "/api/v1/jobs",
        Some(json!({"body": "y", "due_at_ms": START_MS})),
    )
    .await;
    assert_eq!(s.state(put["id"].as_u64().unwrap()).await, "ready");
    // The lateness histogram saw the delayed job become ready in its millisecond.
    let (_, stats) = call(s.http, "GET", "/api/v1/stats", None).await;
    assert_eq!(stats["lateness_ms"]["count"], json!(1));
    assert_eq!(stats["lateness_ms"]["max"], json!(0.0));
    s.stop.cancel();
}
