//! Commands: parsing a command line (beanstalkd's exact rules) and encoding one (for clients
//! and tests).

use bytes::{BufMut, Bytes, BytesMut};
use tickwheel_tube::TubeName;

/// A client command. `Put` carries its body; everything else is one line.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(
    missing_docs,
    reason = "fields are the protocol's arguments of the same name"
)]
pub enum Command {
    /// `put <pri> <delay> <ttr> <bytes>` and the body. Delay and TTR are in seconds.
    Put {
        priority: u32,
        delay: u32,
        ttr: u32,
        body: Bytes,
    },
    Use(TubeName),
    Reserve,
    /// `reserve-with-timeout <seconds>`; a negative timeout (`None`) waits forever, as in
    /// beanstalkd.
    ReserveWithTimeout(Option<u32>),
    ReserveJob(u64),
    Delete(u64),
    Release {
        id: u64,
        priority: u32,
        delay: u32,
    },
    Bury {
        id: u64,
        priority: u32,
    },
    Touch(u64),
    Watch(TubeName),
    Ignore(TubeName),
    Peek(u64),
    PeekReady,
    PeekDelayed,
    PeekBuried,
    Kick(u64),
    KickJob(u64),
    StatsJob(u64),
    StatsTube(TubeName),
    Stats,
    ListTubes,
    ListTubeUsed,
    ListTubesWatched,
    PauseTube(TubeName, u32),
    Quit,
}

/// Why a line is not a command: the reply beanstalkd sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LineError {
    BadFormat,
    UnknownCommand,
    /// `BAD_FORMAT` for a `pause-tube` whose name beanstalkd reads but refuses (too long, or
    /// starting with `-`): it counts the command first.
    BadPauseTubeName,
}

/// The `put` line, before its body arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PutHeader {
    pub(crate) priority: u32,
    pub(crate) delay: u32,
    pub(crate) ttr: u32,
    pub(crate) len: u64,
    /// Something follows the length: `BAD_FORMAT`, but only once the length is known to be
    /// within the maximum job size (beanstalkd answers `JOB_TOO_BIG` first).
    pub(crate) trailing: bool,
}

/// What a command line is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    Put(PutHeader),
    Command(Command),
}

/// Verbs in the order beanstalkd tries them: the first whose text starts the line wins. Verbs
/// with arguments end in a space; a verb without arguments must be the whole line, or the
/// line is `BAD_FORMAT` (so `reserve-with-timeout` without an argument is a bad `reserve`).
const VERBS: &[(&str, Verb)] = &[
    ("put ", Verb::Put),
    ("peek-ready", Verb::PeekReady),
    ("peek-delayed", Verb::PeekDelayed),
    ("peek-buried", Verb::PeekBuried),
    ("peek ", Verb::Peek),
    ("reserve-with-timeout ", Verb::ReserveWithTimeout),
    ("reserve-job ", Verb::ReserveJob),
    ("reserve", Verb::Reserve),
    ("delete ", Verb::Delete),
    ("release ", Verb::Release),
    ("bury ", Verb::Bury),
    ("kick-job ", Verb::KickJob),
    ("kick ", Verb::Kick),
    ("touch ", Verb::Touch),
    ("stats-job ", Verb::StatsJob),
    ("stats-tube ", Verb::StatsTube),
    ("stats", Verb::Stats),
    ("use ", Verb::Use),
    ("watch ", Verb::Watch),
    ("ignore ", Verb::Ignore),
    ("list-tubes-watched", Verb::ListTubesWatched),
    ("list-tube-used", Verb::ListTubeUsed),
    ("list-tubes", Verb::ListTubes),
    ("quit", Verb::Quit),
    // No space: beanstalkd reads the name from right after the verb (`pause-tubefoo 5` pauses
    // `foo`), skipping spaces first.
    ("pause-tube", Verb::PauseTube),
];

#[derive(Clone, Copy, Debug)]
enum Verb {
    Put,
    PeekReady,
    PeekDelayed,
    PeekBuried,
    Peek,
    ReserveWithTimeout,
    ReserveJob,
    Reserve,
    Delete,
    Release,
    Bury,
    KickJob,
    Kick,
    Touch,
    StatsJob,
    StatsTube,
    Stats,
    Use,
    Watch,
    Ignore,
    ListTubesWatched,
    ListTubeUsed,
    ListTubes,
    Quit,
    PauseTube,
}

/// Parses one command line (without its `\r\n`).
pub(crate) fn parse_line(line: &[u8]) -> Result<Line, LineError> {
    // beanstalkd checks a line for NUL bytes before it looks at the command (a `quit` or a
    // `put` line with one is `BAD_FORMAT` too; the put's body is then read as a command).
    if line.contains(&0) {
        return Err(LineError::BadFormat);
    }
    let Some(&(verb_text, verb)) = VERBS
        .iter()
        .find(|(text, _)| line.starts_with(text.as_bytes()))
    else {
        return Err(LineError::UnknownCommand);
    };
    if let Verb::Quit = verb {
        // beanstalkd closes the connection on any line starting with "quit".
        return Ok(Line::Command(Command::Quit));
    }
    let mut args = Args(&line[verb_text.len()..]);
    let command = match verb {
        Verb::Put => {
            let priority = args.u32()?;
            let delay = args.u32()?;
            let ttr = args.u32()?;
            let len = u64::from(args.last_u32()?);
            return Ok(Line::Put(PutHeader {
                priority,
                delay,
                ttr,
                len,
                trailing: !args.0.is_empty(),
            }));
        }
        Verb::PeekReady => Command::PeekReady,
        Verb::PeekDelayed => Command::PeekDelayed,
        Verb::PeekBuried => Command::PeekBuried,
        Verb::Reserve => Command::Reserve,
        Verb::Stats => Command::Stats,
        Verb::ListTubesWatched => Command::ListTubesWatched,
        Verb::ListTubeUsed => Command::ListTubeUsed,
        Verb::ListTubes => Command::ListTubes,
        Verb::Quit => Command::Quit,
        Verb::Peek => Command::Peek(args.u64()?),
        Verb::ReserveWithTimeout => Command::ReserveWithTimeout(args.timeout()?),
        Verb::ReserveJob => Command::ReserveJob(args.u64()?),
        Verb::Delete => Command::Delete(args.u64()?),
        Verb::Release => Command::Release {
            id: args.u64()?,
            priority: args.u32()?,
            delay: args.u32()?,
        },
        Verb::Bury => Command::Bury {
            id: args.u64()?,
            priority: args.u32()?,
        },
        Verb::KickJob => Command::KickJob(args.u64()?),
        Verb::Kick => Command::Kick(u64::from(args.kick_bound()?)),
        Verb::Touch => Command::Touch(args.u64()?),
        Verb::StatsJob => Command::StatsJob(args.u64()?),
        Verb::StatsTube => Command::StatsTube(args.tube()?),
        Verb::Use => Command::Use(args.tube()?),
        Verb::Watch => Command::Watch(args.tube()?),
        Verb::Ignore => Command::Ignore(args.tube()?),
        Verb::PauseTube => {
            let name = args.pause_name()?;
            let delay = args.u32()?;
            args.end()?;
            // The name's checks come after the delay's, as in beanstalkd.
            let name = std::str::from_utf8(name).map_err(|_| LineError::BadFormat)?;
            let tube = TubeName::new(name).map_err(|_| LineError::BadPauseTubeName)?;
            Command::PauseTube(tube, delay)
        }
    };
    args.end()?;
    Ok(Line::Command(command))
}

/// The arguments after a verb.
struct Args<'a>(&'a [u8]);

/// The value of a run of ASCII digits; `None` if there are none or it exceeds `u64`.
fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |value, &b| {
        value.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

impl<'a> Args<'a> {
    /// An unsigned decimal: optional leading spaces, then at least one digit, then a space
    /// or the end of the line.
    fn u64(&mut self) -> Result<u64, LineError> {
        let value = self.number()?;
        self.separator()?;
        Ok(value)
    }

    /// Optional leading spaces, then at least one digit; what follows is not looked at.
    fn number(&mut self) -> Result<u64, LineError> {
        let rest = self.skip_spaces();
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let value = decimal(&rest[..digits]).ok_or(LineError::BadFormat)?;
        self.0 = &rest[digits..];
        Ok(value)
    }

    fn u32(&mut self) -> Result<u32, LineError> {
        u32::try_from(self.u64()?).map_err(|_| LineError::BadFormat)
    }

    /// `put`'s length, read as beanstalkd reads it: a number as for [`u32`](Self::u32), but
    /// what follows is left for the caller to judge.
    fn last_u32(&mut self) -> Result<u32, LineError> {
        u32::try_from(self.number()?).map_err(|_| LineError::BadFormat)
    }

    /// `reserve-with-timeout`'s argument, read as beanstalkd reads it: C's `strtol` (leading
    /// white space, a sign, digits, the rest of the line ignored; no digits read as 0; out of
    /// `long`'s range `BAD_FORMAT`), kept in an `int` (so its low 32 bits); a negative result
    /// means no timeout.
    fn timeout(&mut self) -> Result<Option<u32>, LineError> {
        let (negative, magnitude) = self.c_number()?;
        let value = match magnitude {
            None => 0,
            Some(m) if negative && m <= 1 << 63 => (m as i64).wrapping_neg(),
            Some(m) if !negative && m < 1 << 63 => m as i64,
            Some(_) => return Err(LineError::BadFormat), // ERANGE
        };
        // The low 32 bits, as the assignment to an `int` keeps them.
        let timeout = value as i32;
        Ok(u32::try_from(timeout).ok())
    }

    /// `kick`'s bound, read as beanstalkd reads it: C's `strtoul` (leading white space, a sign,
    /// digits, the rest of the line ignored; a negative number wraps around; no digits or out
    /// of range `BAD_FORMAT`), kept in an `unsigned int` (so its low 32 bits: `kick 4294967296`
    /// kicks nothing).
    fn kick_bound(&mut self) -> Result<u32, LineError> {
        let (negative, magnitude) = self.c_number()?;
        let magnitude = magnitude.ok_or(LineError::BadFormat)?;
        let value = if negative {
            magnitude.wrapping_neg()
        } else {
            magnitude
        };
        Ok(value as u32)
    }

    /// The rest of the line as C's `strtol`/`strtoul` read it in base 10: leading white space
    /// (as `isspace`), an optional sign, then digits up to the first non-digit; everything
    /// after is ignored. The sign, and the digits' value (`None` without digits).
    ///
    /// # Errors
    ///
    /// `BAD_FORMAT` if the digits do not fit in 64 bits (`ERANGE`).
    fn c_number(&mut self) -> Result<(bool, Option<u64>), LineError> {
        let rest = self.0;
        let blank = rest
            .iter()
            .take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))
            .count();
        let rest = &rest[blank..];
        let (negative, unsigned) = match rest.first() {
            Some(b'-') => (true, &rest[1..]),
            Some(b'+') => (false, &rest[1..]),
            _ => (false, rest),
        };
        let digits = unsigned.iter().take_while(|b| b.is_ascii_digit()).count();
        self.0 = &[];
        if digits == 0 {
            return Ok((negative, None));
        }
        let value = decimal(&unsigned[..digits]).ok_or(LineError::BadFormat)?;
        Ok((negative, Some(value)))
    }

    /// `pause-tube`'s name, read as beanstalkd reads it: spaces skipped, then the longest run
    /// of the characters a name may hold (at least one). Its length and first character are
    /// not checked here.
    fn pause_name(&mut self) -> Result<&'a [u8], LineError> {
        let rest = self.skip_spaces();
        let len = rest
            .iter()
            .take_while(|&&b| tickwheel_tube::is_name_byte(b))
            .count();
        if len == 0 {
            return Err(LineError::BadFormat);
        }
        self.0 = &rest[len..];
        Ok(&rest[..len])
    }

    /// A tube name: up to the next space or the end of the line.
    fn tube(&mut self) -> Result<TubeName, LineError> {
        let len = self
            .0
            .iter()
            .position(|&b| b == b' ')
            .unwrap_or(self.0.len());
        let name = std::str::from_utf8(&self.0[..len]).map_err(|_| LineError::BadFormat)?;
        let tube = TubeName::new(name).map_err(|_| LineError::BadFormat)?;
        self.0 = &self.0[len..];
        self.separator()?;
        Ok(tube)
    }

    fn skip_spaces(&self) -> &'a [u8] {
        let spaces = self.0.iter().take_while(|&&b| b == b' ').count();
        &self.0[spaces..]
    }

    /// After an argument: the end of the line, or one space before the next argument.
    fn separator(&mut self) -> Result<(), LineError> {
        match self.0.split_first() {
            None => Ok(()),
            Some((b' ', rest)) if !rest.is_empty() => {
                self.0 = rest;
                Ok(())
            }
            Some(_) => Err(LineError::BadFormat),
        }
    }

    fn end(&self) -> Result<(), LineError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(LineError::BadFormat)
        }
    }
}

impl Command {
    /// Appends the command as a client sends it (line, and for `put` the body).
    ///
    /// # Examples
    ///
    /// ```
    /// use bytes::{Bytes, BytesMut};
    /// use tickwheel_proto::Command;
    ///
    /// let mut out = BytesMut::new();
    /// Command::Put { priority: 1, delay: 0, ttr: 60, body: Bytes::from("hi") }.encode(&mut out);
    /// assert_eq!(&out[..], b"put 1 0 60 2\r\nhi\r\n");
    /// ```
    pub fn encode(&self, out: &mut BytesMut) {
        use std::fmt::Write as _;
        let mut line = String::new();
        // Writing to a String cannot fail.
        let _ = match self {
            Command::Put {
                priority,
                delay,
                ttr,
                body,
            } => {
                write!(line, "put {priority} {delay} {ttr} {}", body.len())
            }
            Command::Use(t) => write!(line, "use {t}"),
            Command::Reserve => write!(line, "reserve"),
            Command::ReserveWithTimeout(Some(s)) => write!(line, "reserve-with-timeout {s}"),
            Command::ReserveWithTimeout(None) => write!(line, "reserve-with-timeout -1"),
            Command::ReserveJob(id) => write!(line, "reserve-job {id}"),
            Command::Delete(id) => write!(line, "delete {id}"),
            Command::Release {
                id,
                priority,
                delay,
            } => write!(line, "release {id} {priority} {delay}"),
            Command::Bury { id, priority } => write!(line, "bury {id} {priority}"),
            Command::Touch(id) => write!(line, "touch {id}"),
            Command::Watch(t) => write!(line, "watch {t}"),
            Command::Ignore(t) => write!(line, "ignore {t}"),
            Command::Peek(id) => write!(line, "peek {id}"),
            Command::PeekReady => write!(line, "peek-ready"),
            Command::PeekDelayed => write!(line, "peek-delayed"),
            Command::PeekBuried => write!(line, "peek-buried"),
            Command::Kick(n) => write!(line, "kick {n}"),
            Command::KickJob(id) => write!(line, "kick-job {id}"),
            Command::StatsJob(id) => write!(line, "stats-job {id}"),
            Command::StatsTube(t) => write!(line, "stats-tube {t}"),
            Command::Stats => write!(line, "stats"),
            Command::ListTubes => write!(line, "list-tubes"),
            Command::ListTubeUsed => write!(line, "list-tube-used"),
            Command::ListTubesWatched => write!(line, "list-tubes-watched"),
            Command::PauseTube(t, d) => write!(line, "pause-tube {t} {d}"),
            Command::Quit => write!(line, "quit"),
        };
        out.put_slice(line.as_bytes());
        out.put_slice(b"\r\n");
        if let Command::Put { body, .. } = self {
            out.put_slice(body);
            out.put_slice(b"\r\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Line, LineError> {
        parse_line(line.as_bytes())
    }

    fn cmd(line: &str) -> Command {
        match parse(line) {
            Ok(Line::Command(c)) => c,
            other => panic!("{line:?} gave {other:?}"),
        }
    }

    // Each expectation below was observed on beanstalkd 1.12 (Debian package).
    #[test]
    fn matches_beanstalkd_line_rules() {
        use LineError::{BadFormat, UnknownCommand};
        assert_eq!(
            parse("put 0 0 10 5"),
            Ok(Line::Put(PutHeader {
                priority: 0,
                delay: 0,
                ttr: 10,
                len: 5,
                trailing: false,
            }))
        );
        assert!(
            parse("put  0 0 10 5").is_ok(),
            "extra spaces before a number are fine"
        );
        assert!(parse("put 0  0 10 5").is_ok());
        for bad in [
            "put 0 0 10 +5",
            "put 0 0 10 -5",
            "put 0 0 10",
            "put 4294967296 0 10 5",
            "use a b",
            "use a ",
            "use ",
            "use -a",
            "reserve-with-timeout",
            "reserve ",
            "stats ",
            "pause-tube default",
            "delete 18446744073709551616",
            "delete abc",
            "delete 1 2",
        ] {
            assert_eq!(parse(bad), Err(BadFormat), "{bad:?}");
        }
        for unknown in ["PUT 0 0 10 5", "kick", "use", "", "hello"] {
            assert_eq!(parse(unknown), Err(UnknownCommand), "{unknown:?}");
        }
        assert_eq!(cmd("delete 01"), Command::Delete(1));
        assert_eq!(
            cmd("delete 18446744073709551615"),
            Command::Delete(u64::MAX)
        );
        assert_eq!(
            cmd("reserve-with-timeout -1"),
            Command::ReserveWithTimeout(None)
        );
        assert_eq!(
            cmd("reserve-with-timeout 0"),
            Command::ReserveWithTimeout(Some(0))
        );
        // Each observed on beanstalkd 1.12: strtol/strtoul, kept in 32 bits.
        for (line, timeout) in [
            ("reserve-with-timeout \t5", Some(5)),
            ("reserve-with-timeout 5 x", Some(5)),
            ("reserve-with-timeout abc", Some(0)),
            ("reserve-with-timeout 4294967296", Some(0)),
            ("reserve-with-timeout 4294967295", None),
            ("reserve-with-timeout 2147483648", None),
            ("reserve-with-timeout 2147483647", Some(2_147_483_647)),
            ("reserve-with-timeout 9223372036854775807", None),
            ("reserve-with-timeout -9223372036854775808", Some(0)),
        ] {
            assert_eq!(cmd(line), Command::ReserveWithTimeout(timeout), "{line:?}");
        }
        assert_eq!(
            parse("reserve-with-timeout 9223372036854775808"),
            Err(BadFormat)
        );
        let paused =
            |name: &str, delay| Command::PauseTube(TubeName::new(name).expect("valid"), delay);
        assert_eq!(cmd("pause-tubefoo 5"), paused("foo", 5));
        assert_eq!(cmd("pause-tube   foo  5"), paused("foo", 5));
        for bad in [
            "pause-tube",
            "pause-tube ",
            "pause-tube foo",
            "pause-tube\tfoo 5",
            "pause-tube a*b 5",
            "pause-tube foo 5 ",
        ] {
            assert_eq!(parse(bad), Err(BadFormat), "{bad:?}");
        }
        let long = format!("pause-tube {} 5", "a".repeat(201));
        for counted in ["pause-tube -a 5", long.as_str()] {
            assert_eq!(
                parse(counted),
                Err(LineError::BadPauseTubeName),
                "{counted:?}"
            );
        }
        for (line, bound) in [
            ("kick 5", 5),
            ("kick \t5", 5),
            ("kick +5", 5),
            ("kick 0x1", 0),
            ("kick 5 6", 5),
            ("kick 4294967296", 0),
            ("kick 4294967297", 1),
            ("kick -1", u64::from(u32::MAX)),
            ("kick 18446744073709551615", u64::from(u32::MAX)),
        ] {
            assert_eq!(cmd(line), Command::Kick(bound), "{line:?}");
        }
        for bad in ["kick x", "kick  ", "kick -", "kick 18446744073709551616"] {
            assert_eq!(parse(bad), Err(BadFormat), "{bad:?}");
        }
        // put: a length beyond 32 bits is BAD_FORMAT; garbage after a length is judged
        // after the size (the decoder answers JOB_TOO_BIG first).
        assert_eq!(parse("put 0 0 1 4294967296"), Err(BadFormat));
        for trailing in ["put 0 0 10 5 ", "put 0 0 10 5 6"] {
            assert!(
                matches!(
                    parse(trailing),
                    Ok(Line::Put(PutHeader { trailing: true, .. }))
                ),
                "{trailing:?}"
            );
        }
        assert!(matches!(
            parse("put 0 0 1 70000x"),
            Ok(Line::Put(PutHeader {
                len: 70_000,
                trailing: true,
                ..
            }))
        ));
        let long = "a".repeat(200);
        assert_eq!(
            cmd(&format!("use {long}")),
            Command::Use(TubeName::new(&long).expect("valid"))
        );
        assert_eq!(parse(&format!("use {long}a")), Err(BadFormat));
    }
}
