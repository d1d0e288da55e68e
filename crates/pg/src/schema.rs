//! The schema: versioned migrations embedded in the binary, and the schema name.

use postgres::Client;

use crate::PgError;

/// The migrations, in order; migration `n` (1-based) is `MIGRATIONS[n - 1]`. `{schema}` is
/// replaced by the quoted schema name, `{channel}` by the NOTIFY channel prefix.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_jobs.sql"),
    include_str!("migrations/0002_active_active.sql"),
    include_str!("migrations/0003_active_epoch.sql"),
    include_str!("migrations/0004_job_history.sql"),
];

/// The newest schema version this build knows. A node refuses to start against a newer one.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// A checked schema name: 1–50 characters of `a-z`, `0-9`, `_`, not starting with a digit, so
/// it is a plain PostgreSQL identifier and a NOTIFY channel prefix without quoting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaName(String);

impl SchemaName {
    /// The default, `tickwheel`.
    pub fn default_name() -> SchemaName {
        SchemaName("tickwheel".to_owned())
    }

    /// Checks `name`.
    ///
    /// # Errors
    ///
    /// [`PgError::BadSchemaName`] if `name` is not 1–50 characters of `a-z0-9_` starting with
    /// a letter or `_`.
    pub fn new(name: &str) -> Result<SchemaName, PgError> {
        let ok = (1..=50).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && !name.as_bytes()[0].is_ascii_digit();
        if ok {
            Ok(SchemaName(name.to_owned()))
        } else {
            Err(PgError::BadSchemaName(name.to_owned()))
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The NOTIFY channel on which committed SQL puts are announced (payload: the id).
    pub fn put_channel(&self) -> String {
        format!("{}_put", self.0)
    }

    /// The NOTIFY channel on which SQL deletes are announced (payload: the id).
    pub fn delete_channel(&self) -> String {
        format!("{}_delete", self.0)
    }

    /// The NOTIFY channel on which jobs that became ready for other nodes are announced
    /// (active-active: puts, releases, lease expiries, kicks; payload: comma-separated ids).
    pub fn ready_channel(&self) -> String {
        format!("{}_ready", self.0)
    }

    /// The advisory lock key of the active node of this schema (ADR 0008, phase 1).
    pub(crate) fn lock_key(&self) -> i64 {
        // FNV-1a of the name, so each schema has its own lock; the high bit set keeps clear of
        // small keys applications tend to use.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.0.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        i64::from_be_bytes((h | (1 << 63)).to_be_bytes())
    }

    /// The migration-time lock key (a different key than the active node's).
    fn migrate_key(&self) -> i64 {
        self.lock_key() ^ 1
    }

    fn render(&self, sql: &str) -> String {
        sql.replace("{schema}", &self.0)
            .replace("{channel}", &self.0)
    }
}

/// Creates the schema or migrates it to [`SCHEMA_VERSION`], in one transaction under an
/// advisory lock (nodes starting together do not race). Returns the version found before.
///
/// # Errors
///
/// [`PgError::NewerSchema`] if the database has a newer version than this build knows
/// (nothing is changed); database errors.
pub fn migrate(client: &mut Client, schema: &SchemaName) -> Result<i32, PgError> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&schema.migrate_key()])?;
    tx.batch_execute(&schema.render(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS {schema}.schema_version (
             version integer NOT NULL,
             applied timestamptz NOT NULL DEFAULT now()
         );",
    ))?;
    let found: i32 = tx
        .query_one(
            &schema.render("SELECT coalesce(max(version), 0) FROM {schema}.schema_version"),
            &[],
        )?
        .get(0);
    if found > SCHEMA_VERSION {
        return Err(PgError::NewerSchema {
            schema: schema.0.clone(),
            found,
            known: SCHEMA_VERSION,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tx.batch_execute(&schema.render(sql))?;
        let version = i as i32 + 1;
        tx.execute(
            &schema.render("INSERT INTO {schema}.schema_version (version) VALUES ($1)"),
            &[&version],
        )?;
    }
    tx.commit()?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_identifiers() {
        for good in ["tickwheel", "_x", "a1_b2"] {
            assert!(SchemaName::new(good).is_ok(), "{good}");
        }
        for bad in ["", "1a", "A", "a-b", "a b", "a;drop", &"x".repeat(51)] {
            assert!(SchemaName::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn each_schema_has_its_own_lock_keys() {
        let a = SchemaName::new("a").expect("valid");
        let b = SchemaName::new("b").expect("valid");
        assert_ne!(a.lock_key(), b.lock_key());
        assert_ne!(a.lock_key(), a.migrate_key());
    }
}
