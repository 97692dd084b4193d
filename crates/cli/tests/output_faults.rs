//! Faults while the CLI writes its outputs (issue 43, point 3), on every output writer —
//! `embed --out x.npy`, `embed --out x.safetensors`, `explain --out DIR` (pictures and
//! attention.json) — all of which go through crates/cli/src/output.rs (a temporary file beside
//! the destination, synced, renamed over it):
//!
//! - **SIGKILL at each step of a write**, delivered deterministically by `strace`'s fault
//!   injection at a system call: at the temporary file's first `write` (it is empty), at its
//!   `fsync` (written, not synced), at the `rename` (synced, not yet in place). Each time every
//!   destination still holds its old, whole content; the next run replaces them and removes the
//!   temporary file the killed one left.
//! - **ENOSPC**, for real: the outputs go to a 12 KiB tmpfs mounted in a private user and mount
//!   namespace (`unshare -rm`, no root needed). And at `fsync` (as NFS or a thin-provisioned disk
//!   report it), injected by `strace`. Each time: exit 1, one `error:` line naming the file and
//!   "No space left on device", no truncated file and no temporary file left — every file there
//!   is the old one or a complete new one.
//!
//! Both tools must be installed (`strace`, util-linux's `unshare`); without them this test fails
//! and says so, it does not skip.

#![cfg(target_os = "linux")]

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{bail, ensure, Context, Result};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// An output writer: its arguments (`{out}` stands for the destination) and the destination's
/// name (a file, or a folder for explain).
struct Writer {
    name: &'static str,
    out: &'static str,
    args: Vec<String>,
}

fn writers() -> Vec<Writer> {
    let model = root().join("models/shapes-vlm").to_string_lossy().into_owned();
    let image = root().join("models/shapes-vlm/examples/three_shapes.png").to_string_lossy().into_owned();
    // 24 tokens × 192 floats: an 18 KiB .npy, more than the small file system below holds.
    let text = "How many shapes are there? How many circles? Which shape is at the top?";
    let embed = |out: &'static str| Writer {
        name: out,
        out,
        args: ["embed", "--model", &model, "--text", text, "--out", "{out}"].map(String::from).to_vec(),
    };
    let explain = ["explain", "--model", &model, "--image", &image, "--prompt", "Describe the image."];
    let explain = explain.iter().chain(&["--max-new-tokens", "3", "--out", "{out}"]).map(|s| s.to_string()).collect();
    vec![embed("e.npy"), embed("e.safetensors"), Writer { name: "explain", out: "explain", args: explain }]
}

impl Writer {
    fn command(&self, prefix: &[&str], dir: &Path) -> Command {
        let out = dir.join(self.out).to_string_lossy().into_owned();
        let args = self.args.iter().map(|a| a.replace("{out}", &out));
        let mut cmd = Command::new(prefix.first().copied().unwrap_or(env!("CARGO_BIN_EXE_tessera")));
        if !prefix.is_empty() {
            cmd.args(&prefix[1..]).arg(env!("CARGO_BIN_EXE_tessera"));
        }
        cmd.args(args);
        cmd
    }

    /// The files it writes into `dir` (one, or explain's folder's).
    fn files(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let out = dir.join(self.out);
        if !out.is_dir() {
            return Ok(vec![out]);
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(&out)?.map(|e| Ok(e?.path())).collect::<Result<_>>()?;
        files.sort();
        Ok(files)
    }
}

/// A fresh scratch folder.
fn scratch(name: &str) -> Result<PathBuf> {
    let dir = root().join("target/test-scratch/output-faults").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn names(dir: &Path) -> Result<Vec<String>> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir)?.map(|e| Ok(e?.file_name().to_string_lossy().into_owned())).collect::<Result<_>>()?;
    names.sort();
    Ok(names)
}

/// Whether `path` holds a whole output of its kind (by the destination's extension `ext`): a
/// .npy whose length is its header's shape, a .safetensors that loads, a PNG that decodes, JSON
/// that parses.
fn complete(path: &Path, ext: &str) -> Result<()> {
    let bytes = std::fs::read(path)?;
    let what = || path.display().to_string();
    match ext {
        "npy" => {
            ensure!(bytes.starts_with(b"\x93NUMPY\x01\x00") && bytes.len() > 10, "{} is no .npy", what());
            let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
            let header = std::str::from_utf8(&bytes[10..10 + header_len])?;
            let shape = header.split_once("'shape': (").and_then(|(_, s)| s.split_once(')')).context("shape")?.0;
            let count: usize = shape
                .split(',')
                .filter(|d| !d.trim().is_empty())
                .map(|d| d.trim().parse::<usize>())
                .product::<Result<_, _>>()?;
            ensure!(
                bytes.len() == 10 + header_len + 4 * count,
                "{}: {} bytes for shape ({shape})",
                what(),
                bytes.len()
            );
        }
        "safetensors" => {
            candle_core::safetensors::load_buffer(&bytes, &candle_core::Device::Cpu).with_context(what)?;
        }
        "png" => {
            tessera::load_image(path, u64::MAX).with_context(what)?;
        }
        "json" => {
            serde_json::from_slice::<serde_json::Value>(&bytes).with_context(what)?;
        }
        _ => bail!("no check for {}", what()),
    }
    Ok(())
}

fn extension(path: &Path) -> &str {
    path.extension().and_then(|e| e.to_str()).unwrap_or("")
}

/// Runs `writer` normally into `dir`, checks its files, and replaces each with a marker (the
/// "old" output); returns the files.
fn old_outputs(writer: &Writer, dir: &Path) -> Result<Vec<PathBuf>> {
    let o = writer.command(&[], dir).output()?;
    ensure!(o.status.success(), "{}: {}", writer.name, String::from_utf8_lossy(&o.stderr));
    let files = writer.files(dir)?;
    ensure!(!files.is_empty());
    for f in &files {
        complete(f, extension(f))?;
        std::fs::write(f, format!("old {}", f.display()))?;
    }
    Ok(files)
}

fn assert_old(files: &[PathBuf]) -> Result<()> {
    for f in files {
        let now = std::fs::read(f).with_context(|| format!("{} is gone", f.display()))?;
        ensure!(now == format!("old {}", f.display()).as_bytes(), "{} was changed", f.display());
    }
    Ok(())
}

fn tool(name: &str) -> Result<()> {
    let found = Command::new(name).arg("--version").output().is_ok_and(|o| o.status.success());
    ensure!(found, "this test needs `{name}` installed (fault injection); it is not found");
    Ok(())
}

/// One clean failure: exit 1 and one `error:` line with every word of `needles`.
fn assert_one_line_failure(o: &Output, needles: &[&str]) -> Result<()> {
    let stderr = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    ensure!(o.status.code() == Some(1), "exit {} (expected 1): {stderr}", o.status);
    ensure!(lines.len() == 1 && lines[0].starts_with("error: "), "not one error line: {stderr}");
    for n in needles {
        ensure!(lines[0].contains(n), "{:?} does not name {n:?}", lines[0]);
    }
    Ok(())
}

#[test]
fn a_kill_at_any_step_of_a_write_leaves_the_old_outputs_whole_and_the_next_run_cleans_up() -> Result<()> {
    tool("strace")?;
    let points = [
        ("write", "write:signal=SIGKILL:when=1"),
        ("fsync", "fsync:signal=SIGKILL"),
        ("rename", "rename,renameat,renameat2:signal=SIGKILL"),
    ];
    for writer in writers() {
        for (point, inject) in points {
            let what = format!("{} killed at {point}", writer.name);
            let dir = scratch(&format!("kill-{}-{point}", writer.name))?;
            let files = old_outputs(&writer, &dir)?;
            let folder = files[0].parent().context("a folder")?.to_path_buf();
            let before = names(&folder)?;
            let trace = format!("trace={}", inject.split(':').next().unwrap_or(""));
            let inject = format!("inject={inject}");
            let o = writer
                .command(&["strace", "-f", "-qq", "-o", "/dev/null", "-e", &trace, "-e", &inject], &dir)
                .output()?;
            ensure!(
                o.status.signal() == Some(9),
                "{what}: not killed ({}): {}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
            );
            // Every destination is its old self; the only new thing is the killed temporary file.
            assert_old(&files).with_context(|| what.clone())?;
            let after = names(&folder)?;
            let new: Vec<&String> = after.iter().filter(|n| !before.contains(n)).collect();
            ensure!(new.len() == 1 && new[0].starts_with('.') && new[0].ends_with(".tmp"), "{what}: left {new:?}");
            let tmp = folder.join(new[0]);
            // `.NAME.PID-N.tmp`: checked as a NAME.
            let destination = new[0].trim_start_matches('.').rsplitn(3, '.').nth(2).context("a temporary name")?;
            let destination_ext = extension(Path::new(destination));
            if point == "write" {
                ensure!(std::fs::metadata(&tmp)?.len() == 0, "{what}: the temporary file has bytes");
            } else {
                complete(&tmp, destination_ext).with_context(|| format!("{what}: the temporary file"))?;
            }
            // The next run replaces every output and removes what the killed one left.
            let o = writer.command(&[], &dir).output()?;
            ensure!(o.status.success(), "{what}, then rerun: {}", String::from_utf8_lossy(&o.stderr));
            ensure!(names(&folder)? == before, "{what}, then rerun: {:?} (was {before:?})", names(&folder)?);
            for f in writer.files(&dir)? {
                complete(&f, extension(&f)).with_context(|| format!("{what}, then rerun"))?;
            }
        }
    }
    Ok(())
}

#[test]
fn enospc_on_every_output_writer_is_one_line_exit_1_and_leaves_no_truncated_file() -> Result<()> {
    tool("strace")?;
    tool("unshare")?;
    let probe = Command::new("unshare").args(["-rm", "sh", "-c", "mount -t tmpfs -o size=4k tmpfs /mnt"]).output()?;
    ensure!(
        probe.status.success(),
        "this test mounts a small tmpfs in a user namespace (`unshare -rm`), which this machine refuses: {}",
        String::from_utf8_lossy(&probe.stderr).trim()
    );
    for writer in writers() {
        // A real full disk: a 12 KiB tmpfs that already holds an old output.
        let copy = scratch(&format!("enospc-{}", writer.name))?;
        let mnt = scratch(&format!("enospc-mount-{}", writer.name))?;
        let old = if writer.out == "explain" { "explain/attention.json" } else { writer.out };
        let cmd = writer.command(&[], &mnt);
        let tessera =
            std::iter::once(cmd.get_program()).chain(cmd.get_args()).map(|a| a.to_string_lossy().into_owned());
        let script = "mount -t tmpfs -o size=12k tmpfs \"$1\" && mkdir -p \"$(dirname \"$1/$2\")\" && printf old > \"$1/$2\" || exit 99
                      m=$1; c=$3; shift 3; \"$@\"; rc=$?; cp -a \"$m/.\" \"$c/\"; exit $rc";
        let o = Command::new("unshare")
            .args(["-rm", "sh", "-c", script, "sh"])
            .arg(&mnt)
            .arg(old)
            .arg(&copy)
            .args(tessera)
            .output()?;
        let what = format!("{} on a full tmpfs", writer.name);
        assert_one_line_failure(&o, &["writing", &mnt.to_string_lossy(), "No space left on device"])
            .context(what.clone())?;
        ensure!(std::fs::read(copy.join(old))? == b"old", "{what}: the old {old} was changed");
        let folder = copy.join(old).parent().context("a folder")?.to_path_buf();
        let mut checked = 0;
        for name in names(&folder)? {
            ensure!(!name.starts_with('.'), "{what}: {name} was left behind");
            let f = folder.join(&name);
            if f != copy.join(old) {
                complete(&f, extension(&f)).with_context(|| what.clone())?;
                checked += 1;
            }
        }
        let _ = std::fs::remove_dir_all(&mnt);
        eprintln!("{what}: the old file kept, {checked} complete new files, nothing else");

        // ENOSPC reported by fsync, after every write went through.
        let dir = scratch(&format!("enospc-fsync-{}", writer.name))?;
        let files = old_outputs(&writer, &dir)?;
        let before = names(files[0].parent().context("a folder")?)?;
        let o = writer
            .command(
                &["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=fsync", "-e", "inject=fsync:error=ENOSPC"],
                &dir,
            )
            .output()?;
        let what = format!("{} with ENOSPC at fsync", writer.name);
        let out = dir.join(writer.out).to_string_lossy().into_owned();
        assert_one_line_failure(&o, &["writing", &out, "No space left on device"]).context(what.clone())?;
        assert_old(&files).context(what.clone())?;
        ensure!(names(files[0].parent().context("a folder")?)? == before, "{what}: a temporary file was left");
    }
    Ok(())
}
