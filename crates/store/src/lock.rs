//! One process per data directory: an exclusive lock on `DIR/LOCK_FILE`, held while the store
//! is open.
//!
//! Two stores writing one directory would interleave their journals and hand out the same job
//! ids. The lock is taken before the engine opens (recovery itself writes) and refused at once
//! when another holder has it: the opener never waits and never shares. It is the operating
//! system's advisory file lock (`flock` on Linux, via [`File::try_lock`]), so it is released
//! however its holder ends, even by `SIGKILL`, and a lock file left behind by a dead process
//! does not block anyone. The file holds the holder's pid, only to name it in the error.
//!
//! The lock is per open file, not per process: a second [`DiskStore::open`](crate::DiskStore::open)
//! of a directory already open in the same process is refused too.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::Path;

use crate::StoreError;

/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = "tickwheel.lock";

/// An exclusive lock on a data directory; released when dropped.
#[derive(Debug)]
pub(crate) struct DirLock {
    /// Closing the file releases the lock.
    _file: File,
}

impl DirLock {
    /// Locks `dir` (which must exist) for this store, or says who holds it.
    ///
    /// # Errors
    ///
    /// [`StoreError::InUse`] if another open store (in this or another process) holds the lock;
    /// [`StoreError::Io`] if the lock file cannot be created, locked or written.
    pub(crate) fn acquire(dir: &Path) -> Result<DirLock, StoreError> {
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false) // the holder's pid, if someone holds it
            .open(&path)
            .map_err(|e| StoreError::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(StoreError::InUse {
                    path: dir.to_path_buf(),
                    pid: holder_pid(&mut file),
                })
            }
            Err(TryLockError::Error(e)) => return Err(StoreError::io(&path, e)),
        }
        write_pid(&mut file).map_err(|e| StoreError::io(&path, e))?;
        Ok(DirLock { _file: file })
    }
}

fn write_pid(file: &mut File) -> std::io::Result<()> {
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    writeln!(file, "{}", std::process::id())?;
    file.flush()
}

/// The pid the holder wrote, if it has written one yet (it writes right after locking).
fn holder_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.take(64).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn a_second_lock_is_refused_with_the_holders_pid_and_released_on_drop() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = DirLock::acquire(dir.path()).expect("first lock");
        match DirLock::acquire(dir.path()) {
            Err(StoreError::InUse { path, pid }) => {
                assert_eq!(path, dir.path());
                assert_eq!(pid, Some(std::process::id()));
            }
            other => panic!("expected InUse, got {other:?}"),
        }
        drop(first);
        let again = DirLock::acquire(dir.path()).expect("lock after release");
        drop(again);
    }

    #[test]
    fn a_directory_opens_as_one_store_at_a_time() {
        use crate::{DiskOptions, DiskStore};
        let dir = tempfile::tempdir().expect("temp dir");
        let store = DiskStore::open(dir.path(), DiskOptions::default()).expect("first open");
        let err = DiskStore::open(dir.path(), DiskOptions::default()).expect_err("second open");
        assert!(
            matches!(&err, StoreError::InUse { pid: Some(pid), .. } if *pid == std::process::id()),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "{} is in use by pid {}",
                dir.path().display(),
                std::process::id()
            )
        );
        drop(store);
        DiskStore::open(dir.path(), DiskOptions::default()).expect("open after the first closed");
    }

    #[test]
    fn a_stale_lock_file_does_not_block() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join(LOCK_FILE), "999999999\n").expect("write stale file");
        let _lock = DirLock::acquire(dir.path()).expect("a file without a holder is no lock");
        let text = std::fs::read_to_string(dir.path().join(LOCK_FILE)).expect("read lock file");
        assert_eq!(text, format!("{}\n", std::process::id()));
    }

    #[test]
    fn the_error_names_the_directory_and_the_pid() {
        let err = StoreError::InUse {
            path: PathBuf::from("/var/lib/tickwheel"),
            pid: Some(42),
        };
        assert_eq!(err.to_string(), "/var/lib/tickwheel is in use by pid 42");
        let err = StoreError::InUse {
            path: PathBuf::from("/x"),
            pid: None,
        };
        assert_eq!(
            err.to_string(),
            "/x is in use by another process (its pid is not written yet)"
        );
    }
}
