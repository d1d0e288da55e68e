//! The beanstalkd tube name, in one place: the job engine (`tickwheel-queue`) keeps jobs by
//! tube and the protocol codec (`tickwheel-proto`) parses tube names off the wire, and both
//! must apply the same rule. This crate holds only that rule, so the codec does not depend on
//! the engine to learn it.
//!
//! ```
//! use tickwheel_tube::{TubeName, MAX_TUBE_NAME};
//!
//! let tube = TubeName::new("emails.high-priority").unwrap();
//! assert_eq!(tube.as_str(), "emails.high-priority");
//! assert!(TubeName::new(&"x".repeat(MAX_TUBE_NAME + 1)).is_err());
//! ```

use core::fmt;
use std::sync::Arc;

/// A tube name: 1 to 200 bytes of `A-Z a-z 0-9 - + / ; . $ _ ( )`, not starting with `-`
/// (beanstalkd's rule).
///
/// Shared, not copied: a clone (one per job put, per stored record planned, per reply that
/// names the tube) is a reference count, and the records made from one `TubeName` (the job
/// engine keeps one per tube) share one copy of it.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TubeName(Arc<str>);

/// The longest tube name, in bytes.
pub const MAX_TUBE_NAME: usize = 200;

/// Whether `b` may appear in a tube name (beanstalkd's `NAME_CHARS`: ASCII letters and digits
/// and `-+/;.$_()`).
///
/// ```
/// use tickwheel_tube::is_name_byte;
/// assert!(is_name_byte(b'$') && !is_name_byte(b' '));
/// ```
#[must_use]
pub fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'+' | b'/' | b';' | b'.' | b'$' | b'_' | b'(' | b')'
        )
}

impl TubeName {
    /// Checks `name` against beanstalkd's rule.
    ///
    /// # Errors
    ///
    /// [`BadTubeName`] if it is empty, longer than 200 bytes, starts with `-` or has a byte
    /// outside the allowed set.
    ///
    /// # Examples
    ///
    /// ```
    /// use tickwheel_tube::TubeName;
    /// assert!(TubeName::new("emails.high-priority").is_ok());
    /// assert!(TubeName::new("-no").is_err());
    /// assert!(TubeName::new("with space").is_err());
    /// ```
    pub fn new(name: &str) -> Result<TubeName, BadTubeName> {
        if name.is_empty()
            || name.len() > MAX_TUBE_NAME
            || name.starts_with('-')
            || !name.bytes().all(is_name_byte)
        {
            return Err(BadTubeName);
        }
        Ok(TubeName(Arc::from(name)))
    }

    /// The name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The tube every client uses and watches when it connects.
    #[must_use]
    pub fn default_tube() -> TubeName {
        TubeName(Arc::from("default"))
    }
}

impl fmt::Debug for TubeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for TubeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A tube name broke beanstalkd's naming rule (`BAD_FORMAT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadTubeName;

impl fmt::Display for BadTubeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a tube name is 1 to 200 bytes of A-Z a-z 0-9 - + / ; . $ _ ( ), not starting with '-'",
        )
    }
}

impl std::error::Error for BadTubeName {}
