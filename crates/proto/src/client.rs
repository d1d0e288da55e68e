//! The client side of the protocol, sans I/O: [`ReplyDecoder`] turns the bytes a server sends
//! into [`Reply`] values, and [`parse_yaml_map`] / [`parse_yaml_list`] read the YAML documents
//! of `stats*` and `list-tubes*`. Commands are written with [`Command::encode`](crate::Command::encode).
//!
//! Every reply of beanstalkd 1.12 is recognised without knowing which command it answers
//! (`BURIED` and `BURIED <id>`, `KICKED` and `KICKED <count>` differ in shape), so a client may
//! pipeline any commands and decode the replies in order. Memory stays bounded: a reply line is
//! at most [`MAX_LINE`] bytes, and a body (`RESERVED`, `FOUND`, `OK`) announcing more than the
//! decoder's maximum is refused from its header line, before any of it is buffered. No input
//! makes the decoder panic (fuzz target `client_decode`).
//!
//! An error means the byte stream can no longer be trusted: close the connection.
//!
//! # Examples
//!
//! ```
//! use bytes::{Bytes, BytesMut};
//! use tickwheel_proto::{parse_yaml_map, Reply, ReplyDecoder};
//!
//! let mut decoder = ReplyDecoder::new(1 << 20);
//! let mut buf = BytesMut::from(&b"INSERTED 7\r\nOK 23\r\n---\nid: 7\nstate: re"[..]);
//! assert_eq!(decoder.decode(&mut buf), Ok(Some(Reply::Inserted(7))));
//! assert_eq!(decoder.decode(&mut buf), Ok(None)); // the YAML is incomplete
//! buf.extend_from_slice(b"ady\n\r\n");
//! let Ok(Some(Reply::Ok(yaml))) = decoder.decode(&mut buf) else { panic!() };
//! let map = parse_yaml_map(&yaml).unwrap();
//! assert_eq!(map, [("id".to_string(), "7".to_string()), ("state".into(), "ready".into())]);
//! ```

use std::fmt;

use bytes::{Buf, BytesMut};
use tickwheel_tube::TubeName;

use crate::decoder::{ErrorReply, MAX_LINE};
use crate::reply::Reply;

/// Why the bytes from a server are not a valid reply. The stream is out of step after any of
/// these: the connection should be closed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplyError {
    /// No `\r\n` within [`MAX_LINE`] bytes.
    LineTooLong,
    /// A line that is no reply of the protocol (kept for the message, at most [`MAX_LINE`]
    /// bytes, lossily decoded).
    Unknown(String),
    /// A body longer than the decoder accepts.
    BodyTooBig {
        /// The announced length.
        len: u64,
        /// The decoder's maximum.
        max: usize,
    },
    /// A body not followed by `\r\n`.
    ExpectedCrlf,
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplyError::LineTooLong => {
                write!(f, "the server sent a line longer than {MAX_LINE} bytes")
            }
            ReplyError::Unknown(line) => write!(f, "the server sent an unknown reply {line:?}"),
            ReplyError::BodyTooBig { len, max } => write!(
                f,
                "the server announced a {len}-byte body, more than the {max} bytes accepted"
            ),
            ReplyError::ExpectedCrlf => f.write_str("a reply body was not followed by CRLF"),
        }
    }
}

impl std::error::Error for ReplyError {}

#[derive(Clone, Copy, Debug)]
enum BodyKind {
    Reserved(u64),
    Found(u64),
    Ok,
}

#[derive(Clone, Copy, Debug)]
enum State {
    Line,
    /// The header line of a reply with a body has been read; `len` bytes and CRLF follow.
    Body {
        kind: BodyKind,
        len: usize,
    },
}

/// Decodes server replies from a byte buffer, sans I/O.
///
/// Feed it what the socket gave and call [`decode`](ReplyDecoder::decode) until it returns
/// `Ok(None)` (more bytes needed). Bytes are consumed from the front of the buffer.
///
/// # Examples
///
/// ```
/// use bytes::{Bytes, BytesMut};
/// use tickwheel_proto::{Reply, ReplyDecoder, ReplyError};
///
/// let mut decoder = ReplyDecoder::new(100);
/// let mut buf = BytesMut::from(&b"FOUND 3 2\r\nhi\r\nNOT_FOUND\r\nFOUND 4 1000\r\n"[..]);
/// assert_eq!(decoder.decode(&mut buf), Ok(Some(Reply::Found(3, Bytes::from("hi")))));
/// assert_eq!(decoder.decode(&mut buf), Ok(Some(Reply::NotFound)));
/// assert_eq!(decoder.decode(&mut buf), Err(ReplyError::BodyTooBig { len: 1000, max: 100 }));
/// ```
#[derive(Debug)]
pub struct ReplyDecoder {
    max_body: usize,
    state: State,
}

impl ReplyDecoder {
    /// A decoder accepting bodies (`RESERVED`, `FOUND`, `OK`) of up to `max_body` bytes.
    #[must_use]
    pub fn new(max_body: usize) -> ReplyDecoder {
        ReplyDecoder {
            max_body,
            state: State::Line,
        }
    }

    /// The largest body this decoder accepts.
    #[must_use]
    pub fn max_body(&self) -> usize {
        self.max_body
    }

    /// The next reply, `Ok(None)` if `buf` does not hold a whole one yet.
    ///
    /// While waiting for more bytes, `buf` never needs to hold more than [`MAX_LINE`] bytes of
    /// a line, or a body of at most `max_body` bytes and its CRLF.
    ///
    /// # Errors
    ///
    /// A [`ReplyError`] if the bytes are not a reply; the offending line or body has been
    /// consumed and the decoder is back at the start of a line, but the stream is not to be
    /// trusted any more.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Reply>, ReplyError> {
        loop {
            match self.state {
                State::Line => {
                    let window = &buf[..buf.len().min(MAX_LINE)];
                    let Some(end) = find_crlf(window) else {
                        if buf.len() >= MAX_LINE {
                            buf.advance(MAX_LINE - 1); // keep a possible '\r' of a CRLF
                            return Err(ReplyError::LineTooLong);
                        }
                        return Ok(None);
                    };
                    let line = buf.split_to(end + 2);
                    match parse_reply_line(&line[..end]) {
                        Ok(Parsed::Reply(reply)) => return Ok(Some(reply)),
                        Ok(Parsed::Body(kind, len)) => {
                            let len = match usize::try_from(len) {
                                Ok(n) if n <= self.max_body => n,
                                _ => {
                                    return Err(ReplyError::BodyTooBig {
                                        len,
                                        max: self.max_body,
                                    })
                                }
                            };
                            self.state = State::Body { kind, len };
                        }
                        Err(()) => {
                            return Err(ReplyError::Unknown(
                                String::from_utf8_lossy(&line[..end]).into_owned(),
                            ))
                        }
                    }
                }
                State::Body { kind, len } => {
                    let need = len.saturating_add(2);
                    if buf.len() < need {
                        return Ok(None);
                    }
                    let body = buf.split_to(len).freeze();
                    let crlf = buf.split_to(2);
                    self.state = State::Line;
                    if &crlf[..] != b"\r\n" {
                        return Err(ReplyError::ExpectedCrlf);
                    }
                    return Ok(Some(match kind {
                        BodyKind::Reserved(id) => Reply::Reserved(id, body),
                        BodyKind::Found(id) => Reply::Found(id, body),
                        BodyKind::Ok => Reply::Ok(body),
                    }));
                }
            }
        }
    }

    /// How many more bytes the reply being decoded needs at least (1 while reading a line).
    /// A client may read that much before calling [`decode`](ReplyDecoder::decode) again.
    #[must_use]
    pub fn wants(&self, buffered: usize) -> usize {
        match self.state {
            State::Line => 1,
            State::Body { len, .. } => len.saturating_add(2).saturating_sub(buffered).max(1),
        }
    }
}

enum Parsed {
    Reply(Reply),
    Body(BodyKind, u64),
}

fn parse_reply_line(line: &[u8]) -> Result<Parsed, ()> {
    let fixed = match line {
        b"DEADLINE_SOON" => Some(Reply::DeadlineSoon),
        b"TIMED_OUT" => Some(Reply::TimedOut),
        b"DELETED" => Some(Reply::Deleted),
        b"RELEASED" => Some(Reply::Released),
        b"BURIED" => Some(Reply::Buried),
        b"TOUCHED" => Some(Reply::Touched),
        b"NOT_IGNORED" => Some(Reply::NotIgnored),
        b"KICKED" => Some(Reply::KickedJob),
        b"PAUSED" => Some(Reply::Paused),
        b"NOT_FOUND" => Some(Reply::NotFound),
        b"DRAINING" => Some(Reply::Draining),
        b"OUT_OF_MEMORY" => Some(Reply::OutOfMemory),
        b"INTERNAL_ERROR" => Some(Reply::InternalError),
        b"BAD_FORMAT" => Some(Reply::Error(ErrorReply::BadFormat)),
        b"UNKNOWN_COMMAND" => Some(Reply::Error(ErrorReply::UnknownCommand)),
        b"EXPECTED_CRLF" => Some(Reply::Error(ErrorReply::ExpectedCrlf)),
        b"JOB_TOO_BIG" => Some(Reply::Error(ErrorReply::JobTooBig)),
        _ => None,
    };
    if let Some(reply) = fixed {
        return Ok(Parsed::Reply(reply));
    }
    let mut words = line.split(|&b| b == b' ');
    let verb = words.next().ok_or(())?;
    let args: Vec<&[u8]> = words.collect();
    let parsed = match (verb, args.as_slice()) {
        (b"INSERTED", [id]) => Parsed::Reply(Reply::Inserted(number(id)?)),
        (b"BURIED", [id]) => Parsed::Reply(Reply::BuriedId(number(id)?)),
        (b"KICKED", [n]) => Parsed::Reply(Reply::Kicked(number(n)?)),
        (b"WATCHING", [n]) => Parsed::Reply(Reply::Watching(
            usize::try_from(number(n)?).map_err(|_| ())?,
        )),
        (b"USING", [tube]) => {
            let name = std::str::from_utf8(tube).map_err(|_| ())?;
            Parsed::Reply(Reply::Using(TubeName::new(name).map_err(|_| ())?))
        }
        (b"RESERVED", [id, len]) => Parsed::Body(BodyKind::Reserved(number(id)?), number(len)?),
        (b"FOUND", [id, len]) => Parsed::Body(BodyKind::Found(number(id)?), number(len)?),
        (b"OK", [len]) => Parsed::Body(BodyKind::Ok, number(len)?),
        _ => return Err(()),
    };
    Ok(parsed)
}

/// A decimal as servers print it: digits only, no sign, fits in a `u64`.
fn number(digits: &[u8]) -> Result<u64, ()> {
    if digits.is_empty() {
        return Err(());
    }
    digits.iter().try_fold(0u64, |acc, &b| {
        if !b.is_ascii_digit() {
            return Err(());
        }
        acc.checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or(())
    })
}

fn find_crlf(bytes: &[u8]) -> Option<usize> {
    bytes.windows(2).position(|w| w == b"\r\n")
}

/// A YAML document of a `stats*` or `list-tubes*` reply that is not in the shape beanstalkd
/// prints.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct YamlError {
    /// The 1-based line number (the `---` line is line 1), 0 for the document as a whole.
    pub line: usize,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bad YAML from the server, line {}: {}",
            self.line, self.reason
        )
    }
}

impl std::error::Error for YamlError {}

fn yaml_lines(doc: &[u8]) -> Result<impl Iterator<Item = (usize, &str)>, YamlError> {
    let text = std::str::from_utf8(doc).map_err(|_| YamlError {
        line: 0,
        reason: "not UTF-8",
    })?;
    let Some(rest) = text.strip_prefix("---\n") else {
        return Err(YamlError {
            line: 1,
            reason: "does not start with \"---\"",
        });
    };
    if !rest.is_empty() && !rest.ends_with('\n') {
        return Err(YamlError {
            line: 0,
            reason: "the last line does not end in a newline",
        });
    }
    Ok(rest.lines().enumerate().map(|(i, l)| (i + 2, l)))
}

/// Reads the flat `key: value` dictionary of `stats`, `stats-tube` and `stats-job`, in the
/// server's order. Double-quoted values (`version: "1.12"`) are returned without their quotes.
///
/// # Errors
///
/// [`YamlError`] if the document is not UTF-8, lacks the `---` line, or has a line that is
/// not `key: value`.
///
/// # Examples
///
/// ```
/// use tickwheel_proto::{parse_yaml_map, yaml_map, Value};
/// let doc = yaml_map(&[("pid", Value::Int(4)), ("version", Value::Quoted("1.12".into()))]);
/// let map = parse_yaml_map(&doc).unwrap();
/// assert_eq!(map[1], ("version".to_string(), "1.12".to_string()));
/// ```
pub fn parse_yaml_map(doc: &[u8]) -> Result<Vec<(String, String)>, YamlError> {
    yaml_lines(doc)?
        .map(|(line, text)| {
            let Some((key, value)) = text.split_once(':') else {
                return Err(YamlError {
                    line,
                    reason: "not a \"key: value\" line",
                });
            };
            if key.is_empty() || key.starts_with(' ') {
                return Err(YamlError {
                    line,
                    reason: "empty or indented key",
                });
            }
            let value = value.strip_prefix(' ').unwrap_or(value);
            let value = match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
                Some(inner) => inner,
                None => value,
            };
            Ok((key.to_owned(), value.to_owned()))
        })
        .collect()
}

/// Reads the `- item` list of `list-tubes` and `list-tubes-watched`.
///
/// # Errors
///
/// [`YamlError`] if the document is not UTF-8, lacks the `---` line, or has a line that is
/// not `- item`.
///
/// # Examples
///
/// ```
/// use tickwheel_proto::{parse_yaml_list, yaml_list};
/// assert_eq!(parse_yaml_list(&yaml_list(["default", "mail"])).unwrap(), ["default", "mail"]);
/// ```
pub fn parse_yaml_list(doc: &[u8]) -> Result<Vec<String>, YamlError> {
    yaml_lines(doc)?
        .map(|(line, text)| {
            text.strip_prefix("- ").map(str::to_owned).ok_or(YamlError {
                line,
                reason: "not a \"- item\" line",
            })
        })
        .collect()
}

/// The fuzz target `client_decode`'s body, a plain function so tests replay its seeds.
///
/// The first byte picks a maximum body size (0..=255), the second a split point; the rest is
/// fed in two pieces. Checks: no panic, the same replies and error whether the input arrives
/// whole or split, and the buffer left waiting never exceeds a line or the announced body.
/// YAML parsers are run on every `OK` body.
///
/// # Errors
///
/// A report of the broken property.
#[doc(hidden)]
pub fn fuzz_check(data: &[u8]) -> Result<(), String> {
    let (max_body, cut, input) = match data {
        [m, c, rest @ ..] => (usize::from(*m), usize::from(*c), rest),
        _ => return Ok(()),
    };
    let cut = cut.min(input.len());
    let run = |pieces: &[&[u8]]| -> Result<(Vec<Reply>, Option<ReplyError>), String> {
        let mut decoder = ReplyDecoder::new(max_body);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for piece in pieces {
            buf.extend_from_slice(piece);
            loop {
                match decoder.decode(&mut buf) {
                    Ok(Some(reply)) => {
                        if let Reply::Ok(yaml) = &reply {
                            let _ = parse_yaml_map(yaml);
                            let _ = parse_yaml_list(yaml);
                        }
                        out.push(reply);
                    }
                    Ok(None) => {
                        let bound = match decoder.state {
                            State::Line => MAX_LINE,
                            State::Body { len, .. } => len + 2,
                        };
                        if buf.len() >= bound.max(MAX_LINE) {
                            return Err(format!(
                                "{} bytes buffered waiting for more, bound {bound}",
                                buf.len()
                            ));
                        }
                        break;
                    }
                    Err(e) => return Ok((out, Some(e))),
                }
            }
        }
        Ok((out, None))
    };
    let whole = run(&[input])?;
    let split = run(&[&input[..cut], &input[cut..]])?;
    if whole != split {
        return Err(format!(
            "whole input gave {whole:?}, split at {cut} gave {split:?}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::{yaml_list, yaml_map, Value};
    use bytes::Bytes;
    use proptest::prelude::*;

    fn decode_all(max: usize, input: &[u8]) -> Result<Vec<Reply>, ReplyError> {
        let mut decoder = ReplyDecoder::new(max);
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(reply) = decoder.decode(&mut buf)? {
            out.push(reply);
        }
        Ok(out)
    }

    // Replies in the shapes beanstalkd 1.12 sends (protocol.txt).
    #[test]
    fn decodes_beanstalkd_replies() {
        let input = b"INSERTED 1\r\nUSING mail\r\nRESERVED 1 5\r\nhello\r\nBURIED\r\n\
            BURIED 9\r\nKICKED 3\r\nKICKED\r\nWATCHING 2\r\nOK 14\r\n---\n- default\n\r\n\
            NOT_FOUND\r\nBAD_FORMAT\r\nFOUND 2 0\r\n\r\n";
        let got = decode_all(100, input).expect("valid replies");
        assert_eq!(
            got,
            [
                Reply::Inserted(1),
                Reply::Using(TubeName::new("mail").expect("valid")),
                Reply::Reserved(1, Bytes::from("hello")),
                Reply::Buried,
                Reply::BuriedId(9),
                Reply::Kicked(3),
                Reply::KickedJob,
                Reply::Watching(2),
                Reply::Ok(Bytes::from("---\n- default\n")),
                Reply::NotFound,
                Reply::Error(ErrorReply::BadFormat),
                Reply::Found(2, Bytes::new()),
            ]
        );
    }

    #[test]
    fn rejects_what_no_server_sends() {
        for bad in [
            &b"INSERTED\r\n"[..],
            b"INSERTED -1\r\n",
            b"INSERTED 1 2\r\n",
            b"INSERTED  1\r\n",
            b"INSERTED 18446744073709551616\r\n",
            b"USING -x\r\n",
            b"OK\r\n",
            b"FOUND 1\r\n",
            b"inserted 1\r\n",
            b"\r\n",
            b"\xff\r\n",
        ] {
            assert!(
                matches!(decode_all(10, bad), Err(ReplyError::Unknown(_))),
                "{bad:?}"
            );
        }
        assert_eq!(
            decode_all(10, b"FOUND 1 3\r\nabcXY"),
            Err(ReplyError::ExpectedCrlf)
        );
        assert_eq!(
            decode_all(10, b"OK 11\r\n"),
            Err(ReplyError::BodyTooBig { len: 11, max: 10 })
        );
        assert_eq!(
            decode_all(10, &[b'A'; MAX_LINE]),
            Err(ReplyError::LineTooLong)
        );
    }

    #[test]
    fn body_is_awaited_without_limit_below_max() {
        let mut decoder = ReplyDecoder::new(1000);
        let mut buf = BytesMut::from(&b"OK 500\r\n"[..]);
        assert_eq!(decoder.decode(&mut buf), Ok(None));
        assert_eq!(decoder.wants(buf.len()), 502);
        buf.extend_from_slice(&[b'x'; 500]);
        assert_eq!(decoder.decode(&mut buf), Ok(None));
        buf.extend_from_slice(b"\r\n");
        assert!(matches!(decoder.decode(&mut buf), Ok(Some(Reply::Ok(b))) if b.len() == 500));
    }

    #[test]
    fn yaml_errors_are_values() {
        assert!(parse_yaml_map(b"id: 1\n").is_err());
        assert!(parse_yaml_map(b"---\nid 1\n").is_err());
        assert!(parse_yaml_map(b"---\nid: 1").is_err());
        assert!(parse_yaml_list(b"---\ndefault\n").is_err());
        assert!(parse_yaml_list(b"---\n- \xff\n").is_err());
        assert_eq!(parse_yaml_list(b"---\n"), Ok(vec![]));
        assert_eq!(
            parse_yaml_map(b"---\nos: #1 SMP: x\nhostname: \n"),
            Ok(vec![
                ("os".into(), "#1 SMP: x".into()),
                ("hostname".into(), String::new())
            ])
        );
    }

    #[test]
    fn fuzz_seeds_pass() {
        let seeds =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/client_decode");
        let mut count = 0;
        for entry in std::fs::read_dir(&seeds).expect("the seed directory exists") {
            let data = std::fs::read(entry.expect("entry").path()).expect("readable seed");
            fuzz_check(&data).expect("seed passes");
            count += 1;
        }
        assert!(count > 0, "no seeds in {}", seeds.display());
    }

    fn tube() -> impl Strategy<Value = TubeName> {
        "[A-Za-z0-9_][A-Za-z0-9_()$;./+-]{0,30}"
            .prop_map(|s| TubeName::new(&s).expect("the pattern is a valid tube name"))
    }

    fn body() -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from)
    }

    fn reply() -> impl Strategy<Value = Reply> {
        prop_oneof![
            any::<u64>().prop_map(Reply::Inserted),
            any::<u64>().prop_map(Reply::BuriedId),
            tube().prop_map(Reply::Using),
            (any::<u64>(), body()).prop_map(|(id, b)| Reply::Reserved(id, b)),
            (any::<u64>(), body()).prop_map(|(id, b)| Reply::Found(id, b)),
            body().prop_map(Reply::Ok),
            any::<usize>().prop_map(Reply::Watching),
            any::<u64>().prop_map(Reply::Kicked),
            prop_oneof![
                Just(Reply::DeadlineSoon),
                Just(Reply::TimedOut),
                Just(Reply::Deleted),
                Just(Reply::Released),
                Just(Reply::Buried),
                Just(Reply::Touched),
                Just(Reply::NotIgnored),
                Just(Reply::KickedJob),
                Just(Reply::Paused),
                Just(Reply::NotFound),
                Just(Reply::Draining),
                Just(Reply::OutOfMemory),
                Just(Reply::InternalError),
                Just(Reply::Error(ErrorReply::BadFormat)),
                Just(Reply::Error(ErrorReply::UnknownCommand)),
                Just(Reply::Error(ErrorReply::ExpectedCrlf)),
                Just(Reply::Error(ErrorReply::JobTooBig)),
            ],
        ]
    }

    fn yaml_value() -> impl Strategy<Value = (Value, String)> {
        prop_oneof![
            any::<u64>().prop_map(|n| (Value::Int(n), n.to_string())),
            (0u32..1_000_000, 0u32..1_000_000).prop_map(|(s, us)| {
                let x = f64::from(s) + f64::from(us) / 1e6;
                (Value::Seconds(x), format!("{x:.6}"))
            }),
            "[a-z0-9#.()_ -]{0,20}[a-z0-9]".prop_map(|w| (Value::Word(w.clone()), w)),
            "[a-zA-Z0-9. :]{0,20}".prop_map(|q| (Value::Quoted(q.clone()), q)),
        ]
    }

    proptest! {
        /// Whatever the server-side encoder writes, the client decoder reads back the same
        /// replies, however the bytes are split.
        #[test]
        fn decode_inverts_the_server_encoder(
            replies in proptest::collection::vec(reply(), 0..20),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut wire = BytesMut::new();
            for r in &replies {
                r.encode(&mut wire);
            }
            let cut = cut.index(wire.len() + 1);
            let mut decoder = ReplyDecoder::new(64);
            let mut buf = BytesMut::from(&wire[..cut]);
            let mut got = Vec::new();
            while let Some(r) = decoder.decode(&mut buf).map_err(|e| TestCaseError::fail(e.to_string()))? {
                got.push(r);
            }
            buf.extend_from_slice(&wire[cut..]);
            while let Some(r) = decoder.decode(&mut buf).map_err(|e| TestCaseError::fail(e.to_string()))? {
                got.push(r);
            }
            prop_assert!(buf.is_empty(), "left over: {:?}", buf);
            prop_assert_eq!(got, replies, "decoded replies differ from the encoded ones");
        }

        /// `parse_yaml_map` reads back what the server's `yaml_map` writes.
        #[test]
        fn yaml_map_round_trips(
            entries in proptest::collection::vec(("[a-z][a-z-]{0,15}", yaml_value()), 0..20),
        ) {
            let values: Vec<(&str, Value)> =
                entries.iter().map(|(k, (v, _))| (k.as_str(), v.clone())).collect();
            let parsed = parse_yaml_map(&yaml_map(&values))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let expected: Vec<(String, String)> =
                entries.iter().map(|(k, (_, s))| (k.clone(), s.clone())).collect();
            prop_assert_eq!(parsed, expected, "YAML map did not round-trip");
        }

        /// `parse_yaml_list` reads back what the server's `yaml_list` writes.
        #[test]
        fn yaml_list_round_trips(names in proptest::collection::vec(tube(), 0..20)) {
            let doc = yaml_list(names.iter().map(TubeName::as_str));
            let parsed = parse_yaml_list(&doc).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let expected: Vec<String> = names.iter().map(|t| t.to_string()).collect();
            prop_assert_eq!(parsed, expected, "YAML list did not round-trip");
        }

        /// Arbitrary bytes: no panic, split-independent, bounded (the fuzz target's checks).
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..400)) {
            prop_assert!(fuzz_check(&data).is_ok(), "{:?}", fuzz_check(&data));
        }
    }
}
