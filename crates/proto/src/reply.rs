//! Replies: every server answer of the protocol, and the YAML of `stats*` and `list-tubes*`.

use std::fmt::Write as _;

use bytes::{BufMut, Bytes, BytesMut};
use tickwheel_tube::TubeName;

use crate::decoder::ErrorReply;

/// A server reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `INSERTED <id>`.
    Inserted(u64),
    /// `BURIED <id>` (a put that could not be queued).
    BuriedId(u64),
    /// `USING <tube>`.
    Using(TubeName),
    /// `RESERVED <id> <bytes>` and the body.
    Reserved(u64, Bytes),
    /// `FOUND <id> <bytes>` and the body.
    Found(u64, Bytes),
    /// `DEADLINE_SOON`.
    DeadlineSoon,
    /// `TIMED_OUT`.
    TimedOut,
    /// `DELETED`.
    Deleted,
    /// `RELEASED`.
    Released,
    /// `BURIED`.
    Buried,
    /// `TOUCHED`.
    Touched,
    /// `WATCHING <count>`.
    Watching(usize),
    /// `NOT_IGNORED`.
    NotIgnored,
    /// `KICKED <count>` (the `kick` reply).
    Kicked(u64),
    /// `KICKED` (the `kick-job` reply).
    KickedJob,
    /// `PAUSED`.
    Paused,
    /// `NOT_FOUND`.
    NotFound,
    /// `OK <bytes>` and a YAML document.
    Ok(Bytes),
    /// `DRAINING`.
    Draining,
    /// `OUT_OF_MEMORY`.
    OutOfMemory,
    /// `INTERNAL_ERROR`: also the answer when the store can no longer make writes durable.
    InternalError,
    /// A protocol error.
    Error(ErrorReply),
}

impl Reply {
    /// Appends the reply as sent on the wire.
    ///
    /// # Examples
    ///
    /// ```
    /// use bytes::{Bytes, BytesMut};
    /// use tickwheel_proto::Reply;
    ///
    /// let mut out = BytesMut::new();
    /// Reply::Reserved(7, Bytes::from("job")).encode(&mut out);
    /// Reply::NotFound.encode(&mut out);
    /// assert_eq!(&out[..], b"RESERVED 7 3\r\njob\r\nNOT_FOUND\r\n");
    /// ```
    pub fn encode(&self, out: &mut BytesMut) {
        let fixed: &[u8] = match self {
            Reply::DeadlineSoon => b"DEADLINE_SOON\r\n",
            Reply::TimedOut => b"TIMED_OUT\r\n",
            Reply::Deleted => b"DELETED\r\n",
            Reply::Released => b"RELEASED\r\n",
            Reply::Buried => b"BURIED\r\n",
            Reply::Touched => b"TOUCHED\r\n",
            Reply::NotIgnored => b"NOT_IGNORED\r\n",
            Reply::KickedJob => b"KICKED\r\n",
            Reply::Paused => b"PAUSED\r\n",
            Reply::NotFound => b"NOT_FOUND\r\n",
            Reply::Draining => b"DRAINING\r\n",
            Reply::OutOfMemory => b"OUT_OF_MEMORY\r\n",
            Reply::InternalError => b"INTERNAL_ERROR\r\n",
            Reply::Error(e) => e.as_bytes(),
            Reply::Inserted(id) => return line(out, format_args!("INSERTED {id}")),
            Reply::BuriedId(id) => return line(out, format_args!("BURIED {id}")),
            Reply::Using(tube) => return line(out, format_args!("USING {tube}")),
            Reply::Watching(n) => return line(out, format_args!("WATCHING {n}")),
            Reply::Kicked(n) => return line(out, format_args!("KICKED {n}")),
            Reply::Reserved(id, body) => {
                return chunk(out, format_args!("RESERVED {id} {}", body.len()), body)
            }
            Reply::Found(id, body) => {
                return chunk(out, format_args!("FOUND {id} {}", body.len()), body)
            }
            Reply::Ok(yaml) => return chunk(out, format_args!("OK {}", yaml.len()), yaml),
        };
        out.put_slice(fixed);
    }
}

fn line(out: &mut BytesMut, text: std::fmt::Arguments<'_>) {
    let mut s = String::with_capacity(32);
    let _ = s.write_fmt(text); // writing to a String cannot fail
    out.put_slice(s.as_bytes());
    out.put_slice(b"\r\n");
}

fn chunk(out: &mut BytesMut, head: std::fmt::Arguments<'_>, data: &[u8]) {
    line(out, head);
    out.put_slice(data);
    out.put_slice(b"\r\n");
}

/// A YAML scalar as beanstalkd prints it.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// An integer.
    Int(u64),
    /// A decimal with microseconds (`rusage-utime: 0.003811`).
    Seconds(f64),
    /// A bare word (`state: ready`, `draining: false`).
    Word(String),
    /// A double-quoted string (`version: "1.12"`).
    Quoted(String),
}

/// The YAML dictionary of a `stats*` reply, in the given key order.
///
/// # Examples
///
/// ```
/// use tickwheel_proto::{yaml_map, Value};
/// let yaml = yaml_map(&[("id", Value::Int(1)), ("state", Value::Word("ready".into()))]);
/// assert_eq!(&yaml[..], b"---\nid: 1\nstate: ready\n");
/// ```
#[must_use]
pub fn yaml_map(entries: &[(&str, Value)]) -> Bytes {
    let mut s = String::from("---\n");
    for (key, value) in entries {
        let _ = match value {
            Value::Int(n) => writeln!(s, "{key}: {n}"),
            Value::Seconds(x) => writeln!(s, "{key}: {x:.6}"),
            Value::Word(w) => writeln!(s, "{key}: {w}"),
            Value::Quoted(q) => writeln!(s, "{key}: \"{q}\""),
        };
    }
    Bytes::from(s)
}

/// The YAML list of a `list-tubes*` reply.
///
/// # Examples
///
/// ```
/// use tickwheel_proto::yaml_list;
/// assert_eq!(&yaml_list(["default", "mail"])[..], b"---\n- default\n- mail\n");
/// ```
#[must_use]
pub fn yaml_list<'a>(items: impl IntoIterator<Item = &'a str>) -> Bytes {
    let mut s = String::from("---\n");
    for item in items {
        let _ = writeln!(s, "- {item}");
    }
    Bytes::from(s)
}
