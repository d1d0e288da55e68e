//! Records which commit the binary is built from, for `tickwheel-server --version`.
//!
//! Sets `TICKWHEEL_GIT_COMMIT` to the short commit id (`git rev-parse --short HEAD`), with
//! `-dirty` when tracked files differ from that commit. Outside a git checkout (a crates.io
//! download, a source tarball) it falls back to the commit `cargo package` recorded in
//! `.cargo_vcs_info.json`, and failing that to `unknown`; the build never fails for want of
//! git.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let commit = from_git(&manifest_dir)
        .or_else(|| from_vcs_info(&manifest_dir))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=TICKWHEEL_GIT_COMMIT={commit}");
}

/// Runs git in `dir`; its trimmed stdout if it succeeded.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn from_git(dir: &Path) -> Option<String> {
    // Only if this manifest is tracked by the repository around it: a packaged copy under
    // target/package/ sits inside the checkout but is not part of it.
    git(dir, &["ls-files", "--error-unmatch", "Cargo.toml"])?;
    let commit = git(dir, &["rev-parse", "--short", "HEAD"])?;
    if commit.is_empty() {
        return None;
    }
    // Rebuild the id when HEAD moves (commit, checkout), the branch it names moves, or the
    // index changes (add, commit, stash).
    for name in ["HEAD", "index", "packed-refs"] {
        rerun_if_changed(dir, name);
    }
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        rerun_if_changed(dir, &branch);
    }
    // And when a source file changes, so that `-dirty` follows edits to the work tree.
    if let Some(top) = git(dir, &["rev-parse", "--show-toplevel"]) {
        for name in ["crates", "Cargo.toml", "Cargo.lock"] {
            let path = Path::new(&top).join(name);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    // `diff-index` compares the work tree with HEAD for tracked files (untracked files do not
    // count): the same notion of dirty as `git describe --dirty`.
    let _ = git(dir, &["update-index", "-q", "--refresh"]);
    let dirty = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["diff-index", "--quiet", "HEAD", "--"])
        .status()
        .map(|s| !s.success())
        .unwrap_or(false);
    Some(if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    })
}

fn rerun_if_changed(dir: &Path, git_path: &str) {
    if let Some(path) = git(
        dir,
        &[
            "rev-parse",
            "--path-format=absolute",
            "--git-path",
            git_path,
        ],
    ) {
        if Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}

/// The commit `cargo package` recorded: `{"git": {"sha1": "<40 hex>", "dirty": true}, ...}`.
fn from_vcs_info(dir: &Path) -> Option<String> {
    let path = dir.join(".cargo_vcs_info.json");
    println!("cargo:rerun-if-changed={}", path.display());
    let text = std::fs::read_to_string(path).ok()?;
    let after = text.split("\"sha1\"").nth(1)?;
    let sha: String = after
        .chars()
        .skip_while(|c| !c.is_ascii_hexdigit())
        .take_while(char::is_ascii_hexdigit)
        .collect();
    if sha.len() < 7 {
        return None;
    }
    let dirty = text.contains("\"dirty\": true") || text.contains("\"dirty\":true");
    let short = &sha[..7];
    Some(if dirty {
        format!("{short}-dirty")
    } else {
        short.to_owned()
    })
}
