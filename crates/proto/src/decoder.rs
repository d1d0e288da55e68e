//! [`Decoder`]: bytes in, commands out, with bounded memory whatever the input.

use bytes::{Buf, BytesMut};

use crate::command::{parse_line, Command, Line, LineError, PutHeader};

/// The longest command line, `\r\n` included (beanstalkd's limit).
pub const MAX_LINE: usize = 224;

/// What the decoder produced: a command, or an error to reply with (the connection goes on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A well-formed command.
    Command(Command),
    /// A malformed request; reply with [`ErrorReply::as_bytes`] and carry on.
    Error(ErrorReply),
    /// A request refused after beanstalkd counted it in `stats`: reply as for
    /// [`Frame::Error`], and count it as [`Counted`] says.
    Counted(ErrorReply, Counted),
}

/// What a refused request counts as, in beanstalkd (it counts a command once its line parsed,
/// before the checks that refuse it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// A `put` whose job is refused: too big ([`ErrorReply::JobTooBig`]), garbage after its
    /// length ([`ErrorReply::BadFormat`]), or a body not followed by CRLF
    /// ([`ErrorReply::ExpectedCrlf`]: `body_came`, which also makes the client a producer and
    /// uses up a job id). Counts in `cmd-put`.
    Put {
        /// The body was read (and not followed by CRLF).
        body_came: bool,
    },
    /// A `pause-tube` whose name is too long or starts with `-` ([`ErrorReply::BadFormat`]).
    /// Counts in `cmd-pause-tube`.
    PauseTube,
}

/// The protocol errors a request can earn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorReply {
    /// `BAD_FORMAT`: a malformed line (too long, bad number, bad tube name, wrong arguments).
    BadFormat,
    /// `UNKNOWN_COMMAND`.
    UnknownCommand,
    /// `EXPECTED_CRLF`: a job body not followed by `\r\n`.
    ExpectedCrlf,
    /// `JOB_TOO_BIG`: a body over the maximum job size (its bytes are skipped, never stored).
    JobTooBig,
}

impl ErrorReply {
    /// The reply line.
    #[must_use]
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            ErrorReply::BadFormat => b"BAD_FORMAT\r\n",
            ErrorReply::UnknownCommand => b"UNKNOWN_COMMAND\r\n",
            ErrorReply::ExpectedCrlf => b"EXPECTED_CRLF\r\n",
            ErrorReply::JobTooBig => b"JOB_TOO_BIG\r\n",
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum State {
    /// Reading a command line.
    Line,
    /// Reading a `put` body of `len` bytes and its `\r\n`.
    Body(PutHeader),
    /// Skipping `left` bytes of a body that is too big, then replying `JOB_TOO_BIG`.
    SkipBody { left: u64 },
    /// Skipping the rest of an over-long line, up to and including its `\r\n`.
    SkipLine,
}

/// Decodes the beanstalkd protocol from a byte buffer, sans I/O.
///
/// Feed it whatever the socket gave ([`BytesMut`] is consumed from the front) and call
/// [`decode`](Decoder::decode) until it returns `None` (more bytes needed). Memory stays
/// bounded by the maximum job size: an over-long line is skipped as it arrives, a body over
/// the limit is skipped without being stored, and no input makes it panic (fuzzed).
///
/// # Examples
///
/// ```
/// use bytes::BytesMut;
/// use tickwheel_proto::{Command, Decoder, ErrorReply, Frame};
///
/// let mut decoder = Decoder::new(65_535);
/// let mut buf = BytesMut::from(&b"put 0 0 60 5\r\nhel"[..]);
/// assert_eq!(decoder.decode(&mut buf), None); // the body is incomplete
/// buf.extend_from_slice(b"lo\r\nbogus\r\n");
/// assert!(matches!(decoder.decode(&mut buf), Some(Frame::Command(Command::Put { .. }))));
/// assert_eq!(decoder.decode(&mut buf), Some(Frame::Error(ErrorReply::UnknownCommand)));
/// assert_eq!(decoder.decode(&mut buf), None);
/// ```
#[derive(Debug)]
pub struct Decoder {
    max_job_size: u64,
    state: State,
}

impl Decoder {
    /// A decoder accepting job bodies of up to `max_job_size` bytes.
    #[must_use]
    pub fn new(max_job_size: usize) -> Decoder {
        Decoder {
            max_job_size: max_job_size as u64,
            state: State::Line,
        }
    }

    /// The next frame, or `None` if `buf` does not hold a whole one yet. Consumes the bytes
    /// it decodes (and bytes it skips).
    pub fn decode(&mut self, buf: &mut BytesMut) -> Option<Frame> {
        loop {
            match self.state {
                State::Line => {
                    let window = &buf[..buf.len().min(MAX_LINE)];
                    let Some(end) = find_crlf(window) else {
                        if buf.len() >= MAX_LINE {
                            self.state = State::SkipLine;
                            return Some(Frame::Error(ErrorReply::BadFormat));
                        }
                        return None;
                    };
                    let line = buf.split_to(end + 2);
                    match parse_line(&line[..end]) {
                        Ok(Line::Command(command)) => return Some(Frame::Command(command)),
                        Ok(Line::Put(header)) if header.len > self.max_job_size => {
                            self.state = State::SkipBody {
                                left: header.len.saturating_add(2),
                            };
                        }
                        Ok(Line::Put(header)) if header.trailing => {
                            return Some(Frame::Counted(
                                ErrorReply::BadFormat,
                                Counted::Put { body_came: false },
                            ))
                        }
                        Ok(Line::Put(header)) => self.state = State::Body(header),
                        Err(LineError::BadFormat) => {
                            return Some(Frame::Error(ErrorReply::BadFormat))
                        }
                        Err(LineError::BadPauseTubeName) => {
                            return Some(Frame::Counted(ErrorReply::BadFormat, Counted::PauseTube))
                        }
                        Err(LineError::UnknownCommand) => {
                            return Some(Frame::Error(ErrorReply::UnknownCommand))
                        }
                    }
                }
                State::Body(header) => {
                    // `len` is at most the maximum job size here, so this fits in memory.
                    let len = header.len as usize;
                    if buf.len() < len + 2 {
                        buf.reserve(len + 2 - buf.len());
                        return None;
                    }
                    let body = buf.split_to(len).freeze();
                    let crlf = buf.split_to(2);
                    self.state = State::Line;
                    if &crlf[..] != b"\r\n" {
                        return Some(Frame::Counted(
                            ErrorReply::ExpectedCrlf,
                            Counted::Put { body_came: true },
                        ));
                    }
                    return Some(Frame::Command(Command::Put {
                        priority: header.priority,
                        delay: header.delay,
                        ttr: header.ttr,
                        body,
                    }));
                }
                State::SkipBody { left } => {
                    let skip = left.min(buf.len() as u64);
                    buf.advance(skip as usize);
                    if skip < left {
                        self.state = State::SkipBody { left: left - skip };
                        return None;
                    }
                    self.state = State::Line;
                    return Some(Frame::Counted(
                        ErrorReply::JobTooBig,
                        Counted::Put { body_came: false },
                    ));
                }
                State::SkipLine => match find_crlf(buf) {
                    Some(end) => {
                        buf.advance(end + 2);
                        self.state = State::Line;
                    }
                    None => {
                        // Keep a trailing '\r': its '\n' may be in the next read.
                        let keep = usize::from(buf.last() == Some(&b'\r'));
                        let drop = buf.len() - keep;
                        buf.advance(drop);
                        return None;
                    }
                },
            }
        }
    }
}

fn find_crlf(bytes: &[u8]) -> Option<usize> {
    bytes.windows(2).position(|w| w == b"\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(decoder: &mut Decoder, input: &[u8]) -> Vec<Frame> {
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(frame) = decoder.decode(&mut buf) {
            out.push(frame);
        }
        out
    }

    fn errors(input: &[u8]) -> Vec<ErrorReply> {
        frames(&mut Decoder::new(65_535), input)
            .into_iter()
            .map(|f| match f {
                Frame::Error(e) | Frame::Counted(e, _) => e,
                Frame::Command(c) => panic!("unexpected {c:?}"),
            })
            .collect()
    }

    // Each expectation was observed on beanstalkd 1.12.
    #[test]
    fn a_bad_put_line_leaves_its_body_to_be_read_as_a_command() {
        assert_eq!(
            errors(b"put 0 0 10 5 \r\nhello\r\n"),
            [ErrorReply::BadFormat, ErrorReply::UnknownCommand]
        );
    }

    #[test]
    fn a_too_big_put_is_answered_before_garbage_after_its_length() {
        let mut input = b"put 0 0 1 70000x\r\n".to_vec();
        input.extend(vec![b'y'; 70_000]);
        input.extend(b"\r\nput 0 0 1 5x\r\nhello\r\n");
        assert_eq!(
            errors(&input),
            [
                ErrorReply::JobTooBig,
                ErrorReply::BadFormat,
                ErrorReply::UnknownCommand
            ]
        );
    }

    #[test]
    fn a_nul_byte_makes_any_line_bad_format() {
        for line in [
            &b"quit\0x\r\n"[..],
            b"\0\r\n",
            b"peek\x001\r\n",
            b"stats\0\r\n",
        ] {
            assert_eq!(errors(line), [ErrorReply::BadFormat], "{line:?}");
        }
        // A put line with one is a bad put: its body is read as the next command.
        assert_eq!(
            errors(b"put 0 0 1 1\0\r\nx\r\n"),
            [ErrorReply::BadFormat, ErrorReply::UnknownCommand]
        );
    }

    #[test]
    fn body_without_crlf() {
        assert_eq!(
            errors(b"put 0 0 10 5\r\nhelloXY"),
            [ErrorReply::ExpectedCrlf]
        );
        // The two bytes after the body are consumed either way, as beanstalkd does.
        assert_eq!(errors(b"put 0 0 10 0\r\nX\r\n"), [ErrorReply::ExpectedCrlf]);
    }

    #[test]
    fn too_big_bodies_are_skipped_not_stored() {
        let mut decoder = Decoder::new(10);
        let mut buf = BytesMut::from(&b"put 0 0 10 1000000\r\n"[..]);
        assert_eq!(decoder.decode(&mut buf), None);
        for _ in 0..100 {
            buf.extend_from_slice(&[b'a'; 10_000]);
            assert_eq!(decoder.decode(&mut buf), None);
            assert!(buf.is_empty(), "skipped bytes must not pile up");
        }
        buf.extend_from_slice(b"\r\nuse x\r\n");
        assert_eq!(
            decoder.decode(&mut buf),
            Some(Frame::Counted(
                ErrorReply::JobTooBig,
                Counted::Put { body_came: false }
            ))
        );
        assert!(matches!(
            decoder.decode(&mut buf),
            Some(Frame::Command(Command::Use(_)))
        ));
    }

    #[test]
    fn over_long_lines_are_skipped_to_their_end() {
        let mut input = vec![b'x'; 230];
        input.extend_from_slice(b"\r\nuse a\r\n");
        let got = frames(&mut Decoder::new(100), &input);
        assert_eq!(got[0], Frame::Error(ErrorReply::BadFormat));
        assert!(matches!(got[1], Frame::Command(Command::Use(_))));
        assert_eq!(got.len(), 2);
        // A 224-byte line (with its CRLF) is still fine; a 225-byte one is not.
        let ok = format!("delete {}\r\n", "0".repeat(215));
        assert_eq!(ok.len(), 224);
        assert_eq!(
            frames(&mut Decoder::new(1), ok.as_bytes()),
            [Frame::Command(Command::Delete(0))]
        );
        let long = format!("delete {}\r\n", "0".repeat(216));
        assert_eq!(
            frames(&mut Decoder::new(1), long.as_bytes()),
            [Frame::Error(ErrorReply::BadFormat)]
        );
    }

    #[test]
    fn split_anywhere_decodes_the_same() {
        let input = b"put 1 2 3 4\r\nbody\r\nuse tube\r\nreserve-with-timeout 5\r\nstats\r\n";
        let whole = frames(&mut Decoder::new(100), input);
        assert_eq!(whole.len(), 4);
        for cut in 0..input.len() {
            let mut decoder = Decoder::new(100);
            let mut buf = BytesMut::from(&input[..cut]);
            let mut got = Vec::new();
            while let Some(f) = decoder.decode(&mut buf) {
                got.push(f);
            }
            buf.extend_from_slice(&input[cut..]);
            while let Some(f) = decoder.decode(&mut buf) {
                got.push(f);
            }
            assert_eq!(got, whole, "cut at {cut}");
        }
    }
}
