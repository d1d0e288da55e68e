//! The active node of a schema: a session-level advisory lock (ADR 0008, phase 1).

use std::time::Duration;

use postgres::{Client, NoTls};

use crate::{PgError, PgOptions};

/// Held by the one node that serves a schema. Other nodes wait in [`ActiveLock::acquire`]
/// (standbys) and take over when the holder's database session ends: at once when its process
/// dies on a live host (the server closes the socket), after TCP keepalive when its machine is
/// lost.
///
/// The lock lives as long as its connection: a holder must check it
/// ([`ActiveLock::still_held`]) and stop serving once it is lost, or a standby could become
/// active beside it.
pub struct ActiveLock {
    /// Always `Some` until dropped (taken there to close it off any async runtime).
    client: Option<Client>,
}

impl Drop for ActiveLock {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            crate::drop_off_runtime(client);
        }
    }
}

impl std::fmt::Debug for ActiveLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActiveLock").finish_non_exhaustive()
    }
}

impl ActiveLock {
    /// Takes the schema's lock, waiting for it if another node holds it (`on_wait` is called
    /// once before waiting).
    ///
    /// # Errors
    ///
    /// The database cannot be reached or the connection broke while waiting.
    pub fn acquire(options: &PgOptions, on_wait: impl FnOnce()) -> Result<ActiveLock, PgError> {
        let mut client = Client::connect(&options.url, NoTls)?;
        let key = options.schema.lock_key();
        let got: bool = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&key])?
            .get(0);
        if !got {
            on_wait();
            client.execute("SELECT pg_advisory_lock($1)", &[&key])?;
        }
        Ok(ActiveLock {
            client: Some(client),
        })
    }

    /// Whether the lock's session is still alive (one round trip, at most `timeout`).
    pub fn still_held(&mut self, timeout: Duration) -> bool {
        self.client
            .as_mut()
            .is_some_and(|c| c.is_valid(timeout).is_ok())
    }
}
