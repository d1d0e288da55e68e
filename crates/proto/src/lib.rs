//! The beanstalkd protocol (1.12, `doc/protocol.txt`), sans I/O.
//!
//! - [`Decoder`] turns bytes into [`Frame`]s: commands, or the protocol error to answer
//!   (`BAD_FORMAT`, `UNKNOWN_COMMAND`, `EXPECTED_CRLF`, `JOB_TOO_BIG`). It follows
//!   beanstalkd's exact parsing rules (checked against the real server), keeps memory bounded
//!   by the maximum job size whatever a client sends, and never panics (fuzzed).
//! - [`Reply`] encodes every server answer; [`yaml_map`] and [`yaml_list`] build the YAML
//!   documents of `stats`, `stats-job`, `stats-tube` and `list-tubes*`.
//! - [`Command::encode`] writes a command as a client would, for tests and load generators.
//!
//! ```
//! use bytes::BytesMut;
//! use tickwheel_proto::{Command, Decoder, Frame, Reply};
//!
//! let mut decoder = Decoder::new(65_535);
//! let mut input = BytesMut::from(&b"use emails\r\nput 0 30 60 5\r\nhello\r\n"[..]);
//! let mut output = BytesMut::new();
//! while let Some(frame) = decoder.decode(&mut input) {
//!     let reply = match frame {
//!         Frame::Command(Command::Use(tube)) => Reply::Using(tube),
//!         Frame::Command(Command::Put { .. }) => Reply::Inserted(1),
//!         Frame::Command(_) => Reply::NotFound,
//!         Frame::Error(error) | Frame::Counted(error, _) => Reply::Error(error),
//!     };
//!     reply.encode(&mut output);
//! }
//! assert_eq!(&output[..], b"USING emails\r\nINSERTED 1\r\n");
//! ```
//!
//! See `docs/protocol.md` for the protocol as tickwheel speaks it, including where it differs
//! from beanstalkd on purpose.

#![forbid(unsafe_code)]

pub mod client;
mod command;
mod decoder;
mod reply;

pub use client::{parse_yaml_list, parse_yaml_map, ReplyDecoder, ReplyError, YamlError};
pub use command::Command;
pub use decoder::{Counted, Decoder, ErrorReply, Frame, MAX_LINE};
pub use reply::{yaml_list, yaml_map, Reply, Value};
