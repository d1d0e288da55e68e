//! Where the engine lives in a data directory, and the one-time migration of a format-1
//! directory (fjall 2) into format 2 (fjall 3).
//!
//! # Layout of a data directory
//!
//! | path | format 1 (fjall 2) | format 2 (fjall 3) |
//! |------|--------------------|--------------------|
//! | `tickwheel.lock` | the directory lock | the same |
//! | `version` | fjall 2's marker (`FJL\x02`) | [`GUARD`]: text fjall 2 refuses to open |
//! | `journals/`, `partitions/` | fjall 2's files | absent |
//! | `engine/` | absent | the fjall 3 database |
//! | `engine.new/` | absent | only while `engine/` is being built |
//!
//! # Crash safety
//!
//! `engine/` appears in one `rename(2)`, after everything in it is synced: `engine.new/` is
//! built (a copy of the format-1 tables, or an empty database), synced file by file and
//! directory by directory, renamed to `engine/`, and the parent directory synced. Until that
//! rename the format-1 files are untouched by the migration (fjall 2's own journal replay
//! may truncate a torn tail, as any open of the old build would), so a crash anywhere before
//! it leaves the old directory as it was, usable by the old build, and the next open starts
//! over (removing a half-built `engine.new/`). After the rename, `engine/` is the store; the
//! finishing steps (replace fjall 2's marker by [`GUARD`], then delete `journals/` and
//! `partitions/`) are idempotent and redone by every open until they complete. The guard
//! keeps a tickwheel built on fjall 2 from mistaking a format-2 directory for an empty
//! format-1 one: fjall 2 reads `version`, does not recognise it, and refuses to open.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fjall::{Database, KeyspaceCreateOptions, PersistMode};

use super::{open_error, FORMAT_VERSION, META_VERSION, TABLES};
use crate::StoreError;

/// The fjall 3 database, inside the data directory.
pub(super) const ENGINE_DIR: &str = "engine";
/// `engine/` while it is being built.
const ENGINE_NEW_DIR: &str = "engine.new";
/// fjall 2's version marker at the root of a format-1 directory.
const MARKER: &str = "version";
/// fjall 2's directories in a format-1 directory.
const V1_DIRS: [&str; 2] = ["journals", "partitions"];
/// What `version` holds in a format-2 directory: not a fjall 2 marker (which starts `FJL`),
/// so fjall 2 fails to open the directory instead of starting an empty store in it.
pub(super) const GUARD: &[u8] = b"tickwheel data directory, format 2: the jobs are in engine/ \
(fjall 3). A tickwheel built on fjall 2 (format 1) cannot read it.\n";
/// The format-1 version number in `meta/format_version`.
const V1: u32 = 1;
/// Bytes copied per fjall 3 batch during a migration.
const CHUNK_BYTES: usize = 8 << 20;

/// Makes `dir/engine` a complete format-2 database (creating it empty, or migrating a
/// format-1 directory into it) and returns its path. Call with the directory lock held.
/// `memtable_bytes` is the memtable size of the tables a migration creates (fjall 3 keeps a
/// table's memtable size from its creation on).
///
/// # Errors
///
/// I/O errors; [`StoreError::Corrupt`] or [`StoreError::UnsupportedVersion`] for a format-1
/// directory that cannot be read (then it is left as it was).
pub(super) fn prepare(dir: &Path, memtable_bytes: u64) -> Result<PathBuf, StoreError> {
    let engine = dir.join(ENGINE_DIR);
    if !exists(&engine)? {
        let new = dir.join(ENGINE_NEW_DIR);
        if exists(&new)? {
            // A creation or migration that did not finish: start it over.
            fs::remove_dir_all(&new).map_err(|e| StoreError::io(&new, e))?;
        }
        if is_format_1(dir)? {
            copy_format_1(dir, &new, memtable_bytes)?;
        } else {
            // Opening creates the database; dropping it syncs everything.
            drop(
                Database::builder(&new)
                    .open()
                    .map_err(|e| open_error(&new, e))?,
            );
        }
        sync_tree(&new)?;
        fs::rename(&new, &engine).map_err(|e| StoreError::io(&new, e))?;
        sync_dir(dir)?;
    }
    finish(dir)?;
    Ok(engine)
}

fn exists(path: &Path) -> Result<bool, StoreError> {
    path.try_exists().map_err(|e| StoreError::io(path, e))
}

/// A format-1 directory: fjall 2's marker at the root.
fn is_format_1(dir: &Path) -> Result<bool, StoreError> {
    let marker = dir.join(MARKER);
    match fs::read(&marker) {
        Ok(bytes) => Ok(bytes.starts_with(b"FJL")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StoreError::io(&marker, e)),
    }
}

/// Replaces fjall 2's marker by [`GUARD`] and removes fjall 2's directories (each step is
/// skipped once done).
fn finish(dir: &Path) -> Result<(), StoreError> {
    let marker = dir.join(MARKER);
    let current = match fs::read(&marker) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(StoreError::io(&marker, e)),
    };
    if current.as_deref() != Some(GUARD) {
        // Written beside, synced, renamed over: `version` is always one or the other.
        let tmp = dir.join("version.new");
        let write = || -> std::io::Result<()> {
            let f = fs::File::create(&tmp)?;
            std::io::Write::write_all(&mut &f, GUARD)?;
            f.sync_all()?;
            fs::rename(&tmp, &marker)
        };
        write().map_err(|e| StoreError::io(&marker, e))?;
        sync_dir(dir)?;
    }
    let mut removed = false;
    for name in V1_DIRS {
        let path = dir.join(name);
        if exists(&path)? {
            fs::remove_dir_all(&path).map_err(|e| StoreError::io(&path, e))?;
            removed = true;
        }
    }
    if removed {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Copies every table of the format-1 store in `dir` into a new fjall 3 database in `new`.
fn copy_format_1(dir: &Path, new: &Path, memtable_bytes: u64) -> Result<(), StoreError> {
    let old = fjall2::Config::new(dir)
        .open()
        .map_err(|e| v1_error(dir, e))?;
    let db = Database::builder(new)
        .manual_journal_persist(true)
        .open()
        .map_err(|e| open_error(new, e))?;
    let engine_err = |e: fjall::Error| StoreError::Engine {
        path: new.to_path_buf(),
        source: Arc::new(e),
    };
    for name in TABLES {
        let dst = db
            .keyspace(name, || {
                KeyspaceCreateOptions::default().max_memtable_size(memtable_bytes)
            })
            .map_err(engine_err)?;
        if !old.partition_exists(name) {
            continue; // never written: an empty table
        }
        let src = old
            .open_partition(name, fjall2::PartitionCreateOptions::default())
            .map_err(|e| v1_error(dir, e))?;
        let mut batch = db.batch();
        let mut bytes = 0;
        for kv in src.iter() {
            let (k, v) = kv.map_err(|e| v1_error(dir, e))?;
            if name == "meta" && &*k == META_VERSION {
                let found = <[u8; 4]>::try_from(&*v).map(u32::from_be_bytes).ok();
                if found != Some(V1) {
                    return Err(match found {
                        Some(found) => StoreError::UnsupportedVersion {
                            path: dir.to_path_buf(),
                            found,
                            supported: FORMAT_VERSION,
                        },
                        None => StoreError::Corrupt {
                            file: dir.join("partitions/meta"),
                            offset: 0,
                            detail: format!("format_version is {} bytes, not 4", v.len()),
                        },
                    });
                }
                continue; // the new one is written below
            }
            bytes += k.len() + v.len();
            batch.insert(&dst, &*k, &*v);
            if bytes >= CHUNK_BYTES {
                batch.commit().map_err(engine_err)?;
                batch = db.batch();
                bytes = 0;
            }
        }
        if name == "meta" {
            batch.insert(&dst, META_VERSION, FORMAT_VERSION.to_be_bytes());
        }
        batch.commit().map_err(engine_err)?;
    }
    db.persist(PersistMode::SyncAll).map_err(engine_err)?;
    Ok(())
}

fn v1_error(dir: &Path, e: fjall2::Error) -> StoreError {
    match e {
        fjall2::Error::Io(io) => StoreError::io(dir, io),
        fjall2::Error::JournalRecovery(_)
        | fjall2::Error::InvalidVersion(_)
        | fjall2::Error::Decode(_)
        | fjall2::Error::Storage(_) => StoreError::Corrupt {
            file: dir.to_path_buf(),
            offset: 0,
            detail: format!("the format-1 store does not read back for migration: {e:?}"),
        },
        other => StoreError::Engine {
            path: dir.to_path_buf(),
            source: Arc::new(other),
        },
    }
}

/// Syncs every file and directory under `root` (and `root` itself).
fn sync_tree(root: &Path) -> Result<(), StoreError> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let io = |e| StoreError::io(&path, e);
        if path.is_dir() {
            for entry in fs::read_dir(&path).map_err(io)? {
                stack.push(entry.map_err(io)?.path());
            }
        }
        fs::File::open(&path)
            .and_then(|f| f.sync_all())
            .map_err(io)?;
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| StoreError::io(dir, e))
}
