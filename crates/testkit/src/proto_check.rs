//! Checks of the beanstalkd decoder on arbitrary input, shared by the fuzz target and the
//! seed replay test.

use bytes::BytesMut;
use tickwheel_proto::{Command, Decoder, Frame, MAX_LINE};

/// The maximum job size the checks use (small, so bodies are exercised).
const MAX_JOB: usize = 300;

/// Decodes `data` whole, then split at a point taken from the data, and checks: no panic,
/// the same frames both ways, bounded buffering, and that every decoded command encodes back
/// to bytes that decode to the same command.
///
/// # Errors
///
/// A description of the first violation.
pub fn check_decoder(data: &[u8]) -> Result<(), String> {
    let whole = decode_all(&[data])?;
    let cut = data
        .first()
        .map_or(0, |&b| usize::from(b) * data.len() / 256);
    let split = decode_all(&[&data[..cut], &data[cut..]])?;
    if whole != split {
        return Err(format!(
            "split at {cut} changed the frames:\n{whole:?}\n{split:?}"
        ));
    }
    for frame in &whole {
        if let Frame::Command(command) = frame {
            let mut bytes = BytesMut::new();
            command.encode(&mut bytes);
            let again = decode_all(&[&bytes])?;
            if again.as_slice() != [Frame::Command(command.clone())]
                && !reserve_timeout_alias(command, &again)
            {
                return Err(format!(
                    "{command:?} encodes to {bytes:?}, which decodes to {again:?}"
                ));
            }
        }
    }
    Ok(())
}

/// `reserve-with-timeout -N` decodes to `ReserveWithTimeout(None)`, which encodes as `-1`.
fn reserve_timeout_alias(command: &Command, again: &[Frame]) -> bool {
    matches!(command, Command::ReserveWithTimeout(None))
        && again == [Frame::Command(Command::ReserveWithTimeout(None))]
}

fn decode_all(chunks: &[&[u8]]) -> Result<Vec<Frame>, String> {
    let mut decoder = Decoder::new(MAX_JOB);
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for chunk in chunks {
        // Feed in small pieces, as a socket would.
        for piece in chunk.chunks(97) {
            buf.extend_from_slice(piece);
            while let Some(frame) = decoder.decode(&mut buf) {
                frames.push(frame);
            }
            // What stays buffered is at most one line or one body (plus the piece just fed).
            let bound = MAX_LINE.max(MAX_JOB + 2) + piece.len();
            if buf.len() > bound {
                return Err(format!(
                    "decoder buffers {} bytes (bound {bound})",
                    buf.len()
                ));
            }
        }
    }
    Ok(frames)
}
