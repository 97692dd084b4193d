//! What the `tessera` binary's end-to-end tests share (`cli.rs`, `cli_vlm.rs`): running it,
//! its output, the one-line failure checks, the models they use.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("run tessera")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A failure with one clear message, on one line, and no panic.
pub fn assert_clean_failure(o: &Output, needles: &[&str]) {
    let err = stderr(o);
    assert!(!o.status.success(), "expected failure, got success; stderr: {err}");
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    assert!(err.starts_with("error: "), "{err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}: {err}");
    }
}

/// A flag's value refused by the argument parser: clap's usage error (status 2), one line
/// naming the flag, then its pointer to `--help`.
pub fn assert_usage_error(o: &Output, needles: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].starts_with("error: invalid value"), "{err}");
    assert_eq!(lines[1], "For more information, try '--help'.");
    for n in needles {
        assert!(lines[0].contains(n), "stderr lacks {n:?}: {err}");
    }
}

pub fn smollm2() -> String {
    let p = root().join("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(p.exists(), "{} is missing: run scripts/fetch_smollm2.sh", p.display());
    p.to_string_lossy().into_owned()
}

pub fn shapes(file: &str) -> String {
    root().join("models/shapes-vlm").join(file).to_string_lossy().into_owned()
}
