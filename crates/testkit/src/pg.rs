//! A throw-away PostgreSQL cluster for tests: the real server from Debian's `postgresql`
//! package, never a mock.
//!
//! [`Cluster::start`] runs `initdb` into a fresh temporary directory as the `postgres` user
//! (PostgreSQL refuses to run as root; as another user it runs as that user), starts `postgres`
//! on a free loopback port with its socket in the same directory, and [`Cluster::url`] gives a
//! connection URL. Dropping the cluster stops the server (`pg_ctl stop -m immediate`) and removes
//! the directory.
//!
//! When the binaries are missing, [`Cluster::start`] returns `Ok(None)` so a developer without
//! PostgreSQL can skip the test, **except under `CI=true`**, where a missing PostgreSQL is an
//! error: CI installs it (`ci/test.sh`), so its absence there is a broken setup, not a reason to
//! pass.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where Debian puts the server binaries of each major version.
const DEBIAN_PG_ROOT: &str = "/usr/lib/postgresql";

/// A running throw-away PostgreSQL server; stopped and deleted on drop.
#[derive(Debug)]
pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    stopped: bool,
}

/// The directory holding `initdb`, `postgres` and `pg_ctl`: `$PG_BIN`, else the newest
/// `/usr/lib/postgresql/N/bin`.
pub fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(DEBIAN_PG_ROOT)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn is_root() -> bool {
    // The uid of this process, without libc: /proc/self/status "Uid:\treal\teffective...".
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// A command run as the `postgres` user when we are root (`runuser -u postgres --`).
fn as_pg_user(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Extra server settings from `$TICKWHEEL_PG_SETTINGS` (e.g. `-c
/// shared_preload_libraries=pg_stat_statements`, used by
/// `crates/bench/scripts/pg_statements.py` to see where the database's time goes), appended
/// to the `postgres` options; empty when unset.
fn extra_settings() -> String {
    std::env::var("TICKWHEEL_PG_SETTINGS")
        .map(|s| format!(" {s}"))
        .unwrap_or_default()
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn run(mut cmd: Command, what: &str) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: cannot run: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

impl Cluster {
    /// Creates and starts a cluster. `Ok(None)`: PostgreSQL is not installed and `CI` is not
    /// `true` (the caller skips, saying so).
    ///
    /// # Errors
    ///
    /// PostgreSQL is missing under `CI=true`; `initdb` or the server failed (the message has
    /// their output).
    pub fn start() -> Result<Option<Cluster>, String> {
        let Some(bin) = bin_dir() else {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                return Err(format!(
                    "PostgreSQL is not installed (no {DEBIAN_PG_ROOT}/N/bin/postgres, no \
                     $PG_BIN) and CI=true: ci/test.sh installs Debian's postgresql"
                ));
            }
            return Ok(None);
        };
        let base = std::env::temp_dir().join(format!(
            "tickwheel-pg-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        std::fs::create_dir_all(&base).map_err(|e| format!("{}: {e}", base.display()))?;
        let mut cluster = Cluster {
            bin,
            dir: base,
            port: 0,
            stopped: true,
        };
        if is_root() {
            run(
                {
                    let mut c = Command::new("chown");
                    c.arg("postgres:postgres").arg(&cluster.dir);
                    c
                },
                "chown",
            )?;
        }
        let data = cluster.dir.join("data");
        let mut initdb = as_pg_user(&cluster.bin.join("initdb"));
        initdb.arg("-D").arg(&data).args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
        ]);
        run(initdb, "initdb")?;
        // The port may be taken between free_port and the server's bind; try a few.
        let mut last = String::new();
        for _ in 0..5 {
            cluster.port = free_port().map_err(|e| format!("no free port: {e}"))?;
            let mut ctl = as_pg_user(&cluster.bin.join("pg_ctl"));
            ctl.arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(cluster.dir.join("server.log"))
                .args(["-w", "-t", "60", "-o"])
                .arg(format!(
                    "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=200{}",
                    cluster.port,
                    cluster.dir.display(),
                    extra_settings()
                ))
                .arg("start");
            match run(ctl, "pg_ctl start") {
                Ok(()) => {
                    cluster.stopped = false;
                    return Ok(Some(cluster));
                }
                Err(e) => last = format!("{e}\nserver log:\n{}", cluster.log()),
            }
        }
        Err(last)
    }

    /// A URL for the `postgres` superuser's `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Creates database `name` and returns its URL (one database per test keeps tests apart).
    ///
    /// # Errors
    ///
    /// `createdb` failed.
    pub fn create_db(&self, name: &str) -> Result<String, String> {
        let mut c = Command::new(self.bin.join("createdb"));
        c.args([
            "-h",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-U",
            "postgres",
        ])
        .arg(name);
        run(c, "createdb")?;
        Ok(format!(
            "postgres://postgres@127.0.0.1:{}/{}",
            self.port, name
        ))
    }

    /// The TCP port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// Stops the server now (`pg_ctl stop -m fast`), waiting for it; the directory stays until
    /// drop. [`Cluster::restart`] starts it again on the same port.
    ///
    /// # Errors
    ///
    /// `pg_ctl stop` failed.
    pub fn stop(&mut self) -> Result<(), String> {
        if self.stopped {
            return Ok(());
        }
        let mut ctl = as_pg_user(&self.bin.join("pg_ctl"));
        ctl.arg("-D")
            .arg(self.dir.join("data"))
            .args(["-w", "-t", "60", "-m", "fast", "stop"]);
        run(ctl, "pg_ctl stop")?;
        self.stopped = true;
        Ok(())
    }

    /// Starts a stopped server again on the same port.
    ///
    /// # Errors
    ///
    /// `pg_ctl start` failed (e.g. the port was taken meanwhile).
    pub fn restart(&mut self) -> Result<(), String> {
        let mut ctl = as_pg_user(&self.bin.join("pg_ctl"));
        ctl.arg("-D")
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.dir.join("server.log"))
            .args(["-w", "-t", "60", "-o"])
            .arg(format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=200{}",
                self.port,
                self.dir.display(),
                extra_settings()
            ))
            .arg("start");
        run(ctl, "pg_ctl start")?;
        self.stopped = false;
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if !self.stopped {
            let mut ctl = as_pg_user(&self.bin.join("pg_ctl"));
            ctl.arg("-D").arg(self.dir.join("data")).args([
                "-w",
                "-t",
                "30",
                "-m",
                "immediate",
                "stop",
            ]);
            let _ = run(ctl, "pg_ctl stop");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts a cluster for a test, or `None` (printing why) when PostgreSQL is missing outside CI.
///
/// # Panics
///
/// PostgreSQL is missing under `CI=true`, or it failed to start.
pub fn cluster_for_test() -> Option<Cluster> {
    match Cluster::start() {
        Ok(Some(c)) => Some(c),
        Ok(None) => {
            eprintln!("skipped: PostgreSQL is not installed (apt-get install postgresql)");
            None
        }
        Err(e) => panic!("cannot start a throw-away PostgreSQL: {e}"),
    }
}
