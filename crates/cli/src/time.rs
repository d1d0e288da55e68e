//! Durations (`30m`, `1h30m`, `90`) and instants (`2027-01-01T09:00Z`) given on the command
//! line, turned into the whole seconds the protocol carries. Rounding is always up, so a job is
//! never ready before the time asked for.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use jiff::Timestamp;

/// Parses a duration: a bare number of seconds (`90`), or units as `humantime` reads them
/// (`30m`, `1h30m`, `2days 4h`, `500ms`).
pub(crate) fn parse_duration(text: &str) -> Result<Duration> {
    let text = text.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(text)
        .with_context(|| format!("{text:?} is not a duration (examples: 90, 90s, 30m, 1h30m, 2d)"))
}

/// Whole seconds for the protocol, rounded up; at most `u32::MAX` (about 136 years).
pub(crate) fn seconds_up(duration: Duration) -> Result<u32> {
    let secs = duration
        .as_secs()
        .saturating_add(u64::from(duration.subsec_nanos() > 0));
    u32::try_from(secs).map_err(|_| {
        anyhow!(
            "{secs} s is too long: the protocol allows at most {} s",
            u32::MAX
        )
    })
}

/// Parses an instant in RFC 3339 / ISO 8601 with an offset: `2027-01-01T09:00Z`,
/// `2027-01-01T09:00:30+02:00`, `2027-01-01 09:00Z` (seconds are optional).
pub(crate) fn parse_instant(text: &str) -> Result<Timestamp> {
    text.trim().parse::<Timestamp>().with_context(|| {
        format!(
            "{text:?} is not a time with an offset (examples: 2027-01-01T09:00Z, \
             2027-01-01T09:00:00+02:00)"
        )
    })
}

/// The delay in whole seconds, rounded up, from `now` until `at`.
///
/// # Errors
///
/// If `at` is not after `now`, or more than `u32::MAX` seconds away.
pub(crate) fn delay_until(at: Timestamp, now: Timestamp) -> Result<u32> {
    let span = at.duration_since(now);
    if span.is_negative() || span.is_zero() {
        bail!("{at} is not in the future (now is {now})");
    }
    let duration = Duration::try_from(span).context("delay out of range")?;
    seconds_up(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let d = |s: &str| parse_duration(s).expect(s);
        assert_eq!(d("90"), Duration::from_secs(90));
        assert_eq!(d("0"), Duration::ZERO);
        assert_eq!(d("90s"), Duration::from_secs(90));
        assert_eq!(d("30m"), Duration::from_secs(1800));
        assert_eq!(d("1h30m"), Duration::from_secs(5400));
        assert_eq!(d("1h 30m"), Duration::from_secs(5400));
        assert_eq!(d("2d"), Duration::from_secs(172_800));
        assert_eq!(d("1500ms"), Duration::from_millis(1500));
        for bad in ["", "-5", "abc", "5 parsecs", "1.5.3h"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn rounding_is_up_never_early() {
        assert_eq!(seconds_up(Duration::ZERO).expect("0"), 0);
        assert_eq!(seconds_up(Duration::from_millis(1)).expect("1ms"), 1);
        assert_eq!(seconds_up(Duration::from_millis(1500)).expect("1.5s"), 2);
        assert_eq!(seconds_up(Duration::from_secs(7)).expect("7s"), 7);
        assert_eq!(
            seconds_up(Duration::from_secs(u64::from(u32::MAX))).expect("max"),
            u32::MAX
        );
        assert!(seconds_up(Duration::from_secs(u64::from(u32::MAX) + 1)).is_err());
        assert!(seconds_up(Duration::from_millis(u64::from(u32::MAX) * 1000 + 1)).is_err());
    }

    #[test]
    fn instants() {
        let now: Timestamp = "2026-12-31T23:00:00Z".parse().expect("valid");
        let at = parse_instant("2027-01-01T09:00Z").expect("without seconds");
        assert_eq!(delay_until(at, now).expect("future"), 10 * 3600);
        let at = parse_instant("2027-01-01T09:00:00+02:00").expect("with offset");
        assert_eq!(delay_until(at, now).expect("future"), 8 * 3600);
        let at = parse_instant("2026-12-31T23:00:00.2Z").expect("fraction");
        assert_eq!(delay_until(at, now).expect("rounded up"), 1);
        assert!(delay_until(now, now).is_err(), "now is not in the future");
        let past = parse_instant("2020-01-01T00:00Z").expect("valid");
        assert!(delay_until(past, now).is_err());
        let far = parse_instant("2300-01-01T00:00Z").expect("valid");
        assert!(delay_until(far, now).is_err(), "beyond u32 seconds");
        for bad in [
            "2027-01-01",
            "2027-01-01T09:00",
            "tomorrow",
            "2027-13-01T00:00Z",
        ] {
            assert!(parse_instant(bad).is_err(), "{bad:?}");
        }
    }
}
