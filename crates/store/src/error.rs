//! The one error type of the crate.

use std::path::PathBuf;
use std::sync::Arc;

/// Everything that can go wrong in a [`Store`](crate::Store).
///
/// The error is `Clone` (causes are behind [`Arc`]) because [`GroupCommit`](crate::GroupCommit)
/// hands the same failure to every caller whose batch was in the failed store commit.
///
/// After a failed write or fsync the store is *poisoned*: the kernel may have dropped dirty pages
/// and a retried fsync can report success for data that is gone (Rebello et al., "Can Applications
/// Recover from fsync Failures?", USENIX ATC '20,
/// <https://www.usenix.org/system/files/atc20-rebello.pdf>). Every later write then fails with
/// [`StoreError::Poisoned`] carrying the original cause; close and reopen the store to recover.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// An I/O operation on `path` failed.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The file or directory the operation was on.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The file system holding `path` is full; the failed commit was not acknowledged.
    #[error("the disk holding {} is full; the commit was not acknowledged", path.display())]
    DiskFull {
        /// The store directory.
        path: PathBuf,
        /// The operating system's error, when one was seen.
        #[source]
        source: Option<Arc<std::io::Error>>,
    },
    /// The write was refused *before* anything was applied: the file system holding `path`
    /// has `free` bytes, and writing `need` more would leave less than `reserve`
    /// ([`DiskOptions::min_free_bytes`](crate::DiskOptions::min_free_bytes)). Does not poison:
    /// once space is freed, writes are accepted again.
    #[error("the disk holding {} has {free} bytes free; writing {need} more would leave less than the reserve of {reserve} bytes, so the write was refused before anything of it was written", path.display())]
    LowSpace {
        /// The store directory.
        path: PathBuf,
        /// Free bytes at the last reading.
        free: u64,
        /// Bytes the refused write was estimated to take.
        need: u64,
        /// The free bytes that must remain.
        reserve: u64,
    },
    /// A previous write or fsync failed, so the store refuses writes until it is reopened.
    #[error("a previous write or fsync failed, so the store refuses further writes (close and reopen it): {cause}")]
    Poisoned {
        /// The failure that poisoned the store.
        #[source]
        cause: Arc<StoreError>,
    },
    /// Stored bytes do not decode.
    #[error("corrupt data in {} at offset {offset}: {detail}", file.display())]
    Corrupt {
        /// The file (or, inside the embedded engine, the table directory) holding the bytes.
        file: PathBuf,
        /// Byte offset of the bad data, or 0 when the engine does not expose it (see `detail`).
        offset: u64,
        /// What is wrong, naming the key when the offset is unknown.
        detail: String,
    },
    /// A value exceeds a limit of the format; nothing of the batch was applied.
    #[error("{what} is {len} bytes, more than the limit of {max} bytes")]
    TooLarge {
        /// Which value: `"tube name"` or `"job body"`.
        what: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// The directory holds a store of a format version this build cannot read.
    #[error("the store in {} has format version {found}, but this build reads only version {supported}", path.display())]
    UnsupportedVersion {
        /// The store directory.
        path: PathBuf,
        /// The version found on disk.
        found: u32,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// The embedded engine (fjall) failed without an I/O error we could classify.
    #[error("the storage engine failed on {}: {source}", path.display())]
    Engine {
        /// The store directory.
        path: PathBuf,
        /// The engine's error.
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// Another open store holds the directory's lock ([`LOCK_FILE`](crate::LOCK_FILE)): one
    /// process, and one store, per data directory.
    #[error("{} is in use by {}", path.display(), holder(*pid))]
    InUse {
        /// The store directory.
        path: PathBuf,
        /// The holder's pid, as it wrote it in the lock file (`None` if not written yet).
        pid: Option<u32>,
    },
    /// The store's database cannot be reached now (a commit is retrying on a broken
    /// connection): the write was refused before anything was changed. Does not poison:
    /// writes are accepted again once the database answers.
    #[error(
        "{what} is unreachable, so the write was refused before anything was changed: {detail}"
    )]
    Unavailable {
        /// The database.
        what: String,
        /// Why.
        detail: String,
    },
    /// A [`GroupCommit`](crate::GroupCommit) commit panicked inside the store; the commit may or
    /// may not have been applied, and the group refuses further writes.
    #[error("the store panicked during a group commit; the commit may not have been applied")]
    Closed,
}

fn holder(pid: Option<u32>) -> String {
    match pid {
        Some(pid) => format!("pid {pid}"),
        None => "another process (its pid is not written yet)".to_owned(),
    }
}

impl StoreError {
    /// For [`StoreError::Poisoned`], the failure that poisoned the store. (Its
    /// [`source()`](std::error::Error::source) is the same error, as an `Arc<StoreError>`.)
    pub fn poison_cause(&self) -> Option<&StoreError> {
        match self {
            Self::Poisoned { cause } => Some(cause),
            _ => None,
        }
    }

    /// True for errors after which the store must not accept writes ([`StoreError::Poisoned`]
    /// is returned from then on).
    #[cfg(test)]
    pub(crate) fn poisons(&self) -> bool {
        matches!(
            self,
            Self::Io { .. } | Self::DiskFull { .. } | Self::Engine { .. } | Self::Poisoned { .. }
        )
    }

    /// The error later writes get once `self` has poisoned a store.
    pub(crate) fn into_poisoned(self) -> StoreError {
        match self {
            e @ Self::Poisoned { .. } => e,
            other => Self::Poisoned {
                cause: Arc::new(other),
            },
        }
    }

    /// Wraps an I/O error, classifying "no space left on device" as [`StoreError::DiskFull`].
    pub(crate) fn io(path: impl Into<PathBuf>, err: std::io::Error) -> StoreError {
        let path = path.into();
        if is_disk_full(&err) {
            Self::DiskFull {
                path,
                source: Some(Arc::new(err)),
            }
        } else {
            Self::Io {
                path,
                source: Arc::new(err),
            }
        }
    }
}

/// ENOSPC (28) and EDQUOT (122 on Linux) both mean "no room for the bytes".
pub(crate) fn is_disk_full(err: &std::io::Error) -> bool {
    err.kind() == std::io::ErrorKind::StorageFull
        || err.kind() == std::io::ErrorKind::QuotaExceeded
        || matches!(err.raw_os_error(), Some(28 | 122))
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn enospc_is_disk_full_and_other_errors_are_io() {
        let full = StoreError::io("/data", std::io::Error::from_raw_os_error(28));
        assert!(matches!(full, StoreError::DiskFull { .. }), "{full}");
        assert!(full.to_string().contains("/data is full"), "{full}");
        let eio = StoreError::io("/data/x", std::io::Error::from_raw_os_error(5));
        assert!(matches!(eio, StoreError::Io { .. }), "{eio}");
        let src = eio.source().expect("Io has a source");
        assert_eq!(
            src.to_string(),
            std::io::Error::from_raw_os_error(5).to_string()
        );
    }

    #[test]
    fn poisoning_wraps_once_and_keeps_the_cause() {
        let cause = StoreError::io("/d", std::io::Error::from_raw_os_error(5));
        assert!(cause.poisons());
        let p = cause.clone().into_poisoned();
        assert!(matches!(p.poison_cause(), Some(StoreError::Io { .. })));
        let again = p.clone().into_poisoned();
        assert!(
            matches!(again.poison_cause(), Some(StoreError::Io { .. })),
            "not double-wrapped"
        );
        assert!(p.to_string().contains("I/O error on /d"), "{p}");
        let too_large = StoreError::TooLarge {
            what: "job body",
            len: 9,
            max: 8,
        };
        assert!(!too_large.poisons(), "a refused batch does not poison");
    }
}
