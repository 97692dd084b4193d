//! Every file the CLI writes (`embed --out`, `explain --out`'s pictures and attention.json) goes
//! through [`write_file`], which gives them one behaviour:
//!
//! - **Never a truncated file.** The bytes go to a temporary file in the destination's folder,
//!   are synced to disk, and the temporary file is renamed over the destination (rename is
//!   atomic within a file system): a crash, a full disk (ENOSPC) or any failed write leaves the
//!   old file, or none, and removes the temporary file.
//! - **A symbolic link is written through**, as shells' `>` and most tools do: the link's target
//!   (followed to the end of the chain, created if it does not exist yet) gets the content and
//!   the link stays a link.
//! - **A destination that is not a regular file** (a device such as `/dev/stdout` or
//!   `/dev/null`, a FIFO) cannot be replaced by renaming: it is opened and written in place. A
//!   folder is refused.
//! - A replaced file keeps its permissions.
//! - **What a killed writer left is cleaned up by the next one.** A process killed between
//!   creating its temporary file and renaming it (SIGKILL, a power cut) leaves the destination
//!   whole but a `.NAME.PID-N.tmp` beside it; the next write of `NAME` removes those whose process
//!   is gone (Linux: no `/proc/PID`; a reused PID keeps its file, which is never read).
//!
//! Errors name the path given (and the link's target where it differs) and say what failed, on
//! one line.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// Symbolic links followed before giving up (Linux's own limit, ELOOP).
const MAX_LINKS: usize = 40;

/// Writes `bytes` to `path` as the module documentation says.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    write_with(path, |w| w.write_all(bytes))
}

/// Writes what `fill` writes to `path` as the module documentation says; `fill` failing is a
/// failed write like any other (no temporary file is left, the destination is untouched).
pub fn write_with(path: &Path, fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
    let target = resolve_links(path)?;
    let what = if target == path {
        format!("writing {}", path.display())
    } else {
        format!("writing {} (the link's target {})", path.display(), target.display())
    };
    match std::fs::metadata(&target) {
        Ok(m) if m.is_dir() => bail!("{what}: it is a folder"),
        // A device or FIFO: written in place, as `>` would.
        Ok(m) if !m.is_file() => {
            let mut f = std::fs::OpenOptions::new().write(true).open(&target).with_context(|| what.clone())?;
            fill(&mut f).and_then(|_| f.flush()).with_context(|| what.clone())?;
            Ok(())
        }
        Ok(m) => replace(&target, Some(m.permissions()), fill).with_context(|| what),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => replace(&target, None, fill).with_context(|| what),
        Err(e) => Err(e).with_context(|| what),
    }
}

/// `path` with its symbolic links followed to a path that is not one (which may not exist).
/// Only the last component is followed: the folders on the way are the kernel's to resolve.
fn resolve_links(path: &Path) -> Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&p).with_context(|| format!("reading the link {}", p.display()))?;
                // Linux's magic links (/proc/self/fd/1 → `pipe:[123]`) name no path: the kernel
                // opens them, so the chain stops at the link itself.
                if to.is_relative() && std::fs::symlink_metadata(p.with_file_name(&to)).is_err() && p.exists() {
                    return Ok(p);
                }
                p = match p.parent() {
                    Some(dir) if to.is_relative() => dir.join(to),
                    _ => to,
                };
            }
            _ => return Ok(p),
        }
    }
    bail!("writing {}: more than {MAX_LINKS} symbolic links in a chain", path.display())
}

/// Writes a temporary file beside `target`, syncs it and renames it over `target`; on any
/// failure the temporary file is removed.
fn replace(
    target: &Path,
    permissions: Option<std::fs::Permissions>,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    remove_stale_temporaries(dir, &name);
    let (tmp, mut file) = create_temporary(dir, &name)?;
    let written = (|| -> std::io::Result<()> {
        let mut w = std::io::BufWriter::new(&mut file);
        fill(&mut w)?;
        w.flush()?;
        drop(w);
        if let Some(p) = permissions {
            file.set_permissions(p)?;
        }
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, target)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    // The rename itself reaches the disk with the folder's entry (best effort: not every file
    // system lets a folder be opened and synced).
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The process id in `file`, when it is a temporary file of [`create_temporary`] for `name`.
fn temporary_pid(file: &str, name: &str) -> Option<u32> {
    let rest = file.strip_prefix('.')?.strip_prefix(name)?.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (pid, n) = rest.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(pid) && digits(n)).then(|| pid.parse().ok()).flatten()
}

/// Removes the temporary files for `name` in `dir` that a process which no longer runs left
/// (best effort: a file that cannot be removed stays). Only where a process's liveness can be
/// read without a system call wrapper: Linux's `/proc`.
fn remove_stale_temporaries(dir: &Path, name: &str) {
    if !cfg!(target_os = "linux") || !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(pid) = temporary_pid(&file.to_string_lossy(), name) else { continue };
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        if is_file && pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// A new file `.NAME.PID-N.tmp` in `dir` (never an existing one).
fn create_temporary(dir: &Path, name: &str) -> std::io::Result<(PathBuf, std::fs::File)> {
    let mut n = 0u32;
    loop {
        let tmp = dir.join(format!(".{name}.{}-{n}.tmp", std::process::id()));
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    /// A fresh, empty folder for one test.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tessera-cli-output-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch folder");
        dir
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_new_file_and_a_replaced_one_get_the_bytes_and_keep_permissions() -> Result<()> {
        let dir = scratch("plain");
        let path = dir.join("e.npy");
        write_file(&path, b"first")?;
        assert_eq!(std::fs::read(&path)?, b"first");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640))?;
        write_file(&path, b"second, longer")?;
        assert_eq!(std::fs::read(&path)?, b"second, longer");
        assert_eq!(std::fs::metadata(&path)?.permissions().mode() & 0o777, 0o640);
        assert_eq!(entries(&dir), ["e.npy"], "a temporary file was left");
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    #[test]
    fn a_symbolic_link_stays_a_link_and_its_target_gets_the_content() -> Result<()> {
        let dir = scratch("links");
        std::fs::create_dir(dir.join("data"))?;
        let target = dir.join("data/real.safetensors");
        std::fs::write(&target, b"old")?;
        // A relative link, and a link to that link.
        symlink("data/real.safetensors", dir.join("x.safetensors"))?;
        symlink(dir.join("x.safetensors"), dir.join("y.safetensors"))?;
        write_file(&dir.join("y.safetensors"), b"new content")?;
        for link in ["x.safetensors", "y.safetensors"] {
            assert!(std::fs::symlink_metadata(dir.join(link))?.file_type().is_symlink(), "{link} is no longer a link");
        }
        assert_eq!(std::fs::read(&target)?, b"new content");
        assert_eq!(entries(&dir.join("data")), ["real.safetensors"]);
        // A dangling link: its target is created.
        symlink("data/later.npy", dir.join("later.npy"))?;
        write_file(&dir.join("later.npy"), b"made")?;
        assert!(std::fs::symlink_metadata(dir.join("later.npy"))?.file_type().is_symlink());
        assert_eq!(std::fs::read(dir.join("data/later.npy"))?, b"made");
        // A loop of links is an error, not a hang.
        symlink("loop-b", dir.join("loop-a"))?;
        symlink("loop-a", dir.join("loop-b"))?;
        let err = format!("{:#}", write_file(&dir.join("loop-a"), b"x").expect_err("a loop was written"));
        assert!(err.contains("loop-a") && err.contains("symbolic links"), "{err}");
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    #[test]
    fn a_failed_write_leaves_no_temporary_file_and_the_old_content() -> Result<()> {
        let dir = scratch("failing");
        let path = dir.join("attention.json");
        std::fs::write(&path, b"the old, complete file")?;
        // Half the bytes written, then the disk is full.
        let err = write_with(&path, |w| {
            w.write_all(b"{\"half\": ")?;
            Err(std::io::Error::from_raw_os_error(28))
        })
        .expect_err("the failure was lost");
        let msg = format!("{err:#}");
        assert!(msg.contains("writing") && msg.contains("attention.json"), "{msg}");
        assert!(msg.contains("No space left on device"), "{msg}");
        assert_eq!(std::fs::read(&path)?, b"the old, complete file");
        assert_eq!(entries(&dir), ["attention.json"], "a temporary file was left");
        // A new file that fails is not created at all.
        let fresh = dir.join("new.npy");
        assert!(write_with(&fresh, |_| Err(std::io::Error::other("boom"))).is_err());
        assert!(!fresh.exists());
        assert_eq!(entries(&dir), ["attention.json"]);
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    #[test]
    fn temporary_files_left_by_a_dead_process_are_removed_by_the_next_write() -> Result<()> {
        let dir = scratch("stale");
        let path = dir.join("e.npy");
        std::fs::write(&path, b"old")?;
        // A PID above Linux's maximum (2^22) never runs; ours does; other names are not ours.
        let dead = dir.join(".e.npy.4194305-0.tmp");
        let alive = dir.join(format!(".e.npy.{}-7.tmp", std::process::id()));
        let others = [".f.npy.4194305-0.tmp", ".e.npy.4194305-0.tmp.bak", ".e.npy.x-0.tmp", "e.npy.4194305-0.tmp"];
        for p in [&dead, &alive].into_iter().cloned().chain(others.iter().map(|o| dir.join(o))) {
            std::fs::write(p, b"half")?;
        }
        write_file(&path, b"new")?;
        assert_eq!(std::fs::read(&path)?, b"new");
        let mut want: Vec<String> = others.iter().map(|o| o.to_string()).collect();
        want.extend(["e.npy".to_string(), alive.file_name().unwrap().to_string_lossy().into_owned()]);
        want.sort();
        if cfg!(target_os = "linux") {
            assert_eq!(entries(&dir), want);
        }
        assert_eq!(temporary_pid(".e.npy.12-3.tmp", "e.npy"), Some(12));
        assert_eq!(temporary_pid(".e.npy.12-.tmp", "e.npy"), None);
        assert_eq!(temporary_pid(".e.npy.-3.tmp", "e.npy"), None);
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    #[test]
    fn a_missing_folder_a_folder_and_a_full_device_fail_naming_the_path() -> Result<()> {
        let dir = scratch("errors");
        let err = format!("{:#}", write_file(&dir.join("no/such/e.npy"), b"x").expect_err("written"));
        assert!(err.starts_with("writing ") && err.contains("no/such/e.npy"), "{err}");
        assert!(!dir.join("no").exists());
        let err = format!("{:#}", write_file(&dir, b"x").expect_err("a folder was replaced"));
        assert!(err.contains("is a folder"), "{err}");
        // /dev/full fails every write with ENOSPC: a device is written in place, not replaced,
        // and a link to it is followed to it.
        if Path::new("/dev/full").exists() {
            symlink("/dev/full", dir.join("full.npy"))?;
            let err = format!("{:#}", write_file(&dir.join("full.npy"), &[0u8; 1 << 16]).expect_err("written"));
            assert!(err.contains("full.npy") && err.contains("/dev/full"), "{err}");
            assert!(err.contains("No space left on device"), "{err}");
            assert_eq!(entries(&dir), ["full.npy"]);
            assert!(std::fs::symlink_metadata(dir.join("full.npy"))?.file_type().is_symlink());
        }
        // /dev/null takes anything.
        write_file(Path::new("/dev/null"), b"discarded")?;
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
