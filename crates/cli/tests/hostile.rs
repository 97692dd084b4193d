//! The hostile-input corpus through the real binary: scripts/hostile_corpus.py writes corrupted
//! and hostile model files, configs, processors, tokenizers, templates, images, prompts and CLI
//! values (derived from the shipped model, a tiny checkpoint and the test GGUF; nothing big is
//! committed) and a manifest of what each must give. Each case runs under a 60 s timeout and a
//! 6 GiB address-space limit and must, for bad input, exit with status 1 and print one line on
//! stderr, `error: …`, naming what was wrong (the manifest's words), with no panic; valid but
//! odd inputs (a 1×1 image, a 16-bit PNG, a BMP, …) must answer, with the manifest's words (if
//! any) on stdout.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

const TIMEOUT: Duration = Duration::from_secs(60);
const CLAP_HINT: &str = "For more information, try '--help'.";
/// The address-space limit, in KiB (`ulimit -v`).
const ADDRESS_SPACE_KIB: u64 = 6 * 1024 * 1024;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

struct Case {
    name: String,
    class: String,
    args: Vec<String>,
    expect_ok: bool,
    words: Vec<String>,
}

fn manifest(dir: &Path) -> Result<Vec<Case>> {
    let text = std::fs::read_to_string(dir.join("manifest.json")).context("manifest.json")?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    let strings = |x: &serde_json::Value| -> Result<Vec<String>> {
        x.as_array().context("a list")?.iter().map(|s| Ok(s.as_str().context("a string")?.to_string())).collect()
    };
    v.as_array()
        .context("manifest: a list")?
        .iter()
        .map(|c| {
            let name = c["name"].as_str().context("name")?.to_string();
            let case_dir = dir.join(&name);
            let args = strings(&c["args"])?
                .into_iter()
                .map(|a| a.replace("{case}", &case_dir.to_string_lossy()).replace("{repo}", &root().to_string_lossy()))
                .collect();
            Ok(Case {
                class: c["class"].as_str().context("class")?.to_string(),
                expect_ok: match c["expect"].as_str() {
                    Some("ok") => true,
                    Some("error") => false,
                    other => bail!("{name}: expect {other:?}"),
                },
                words: strings(&c["words"])?,
                name,
                args,
            })
        })
        .collect()
}

/// Runs one case; `Err` says how it failed.
fn check(case: &Case) -> Result<()> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_tessera"))
        .args(&case.args)
        .current_dir(root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // Drain both pipes while waiting, so a chatty child cannot block on a full pipe.
    let mut out = child.stdout.take().context("stdout")?;
    let mut err = child.stderr.take().context("stderr")?;
    let out_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!("did not finish within {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = String::from_utf8_lossy(&out_reader.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned();
    if stderr.contains("panicked") {
        bail!("panic: {stderr}");
    }
    // The words must come from the output, not from the case's folder name in a path.
    let case_dir = root().join("target/test-scratch/hostile").join(&case.name);
    let missing = |text: &str| -> Vec<&String> {
        let lower = text.replace(&*case_dir.to_string_lossy(), "{case}").to_lowercase();
        case.words.iter().filter(|w| !lower.contains(&w.to_lowercase())).collect()
    };
    if case.expect_ok {
        if !status.success() {
            bail!("valid input refused ({status}): {stderr}");
        }
        let missing = missing(&stdout);
        if !missing.is_empty() {
            bail!("stdout lacks {missing:?}: {stdout}");
        }
        return Ok(());
    }
    let mut lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    // A flag's value refused by the argument parser (clap): its usage-error status 2 and its
    // pointer to --help after the one line.
    let clap_usage = status.code() == Some(2) && lines.len() == 2 && lines[1] == CLAP_HINT;
    if clap_usage {
        lines.pop();
    } else if status.code() != Some(1) {
        bail!("exit {status} (expected 1): {stderr}");
    }
    if lines.len() != 1 || !lines[0].starts_with("error: ") {
        bail!("not one `error:` line: {stderr}");
    }
    let missing = missing(lines[0]);
    if !missing.is_empty() {
        bail!("the message lacks {missing:?}: {}", lines[0]);
    }
    Ok(())
}

#[test]
fn every_hostile_input_is_refused_with_one_line_naming_it() -> Result<()> {
    let dir = root().join("target/test-scratch/hostile");
    let _ = std::fs::remove_dir_all(&dir);
    let status = Command::new("python3")
        .arg(root().join("scripts/hostile_corpus.py"))
        .arg("generate")
        .arg(&dir)
        .status()
        .context("python3 scripts/hostile_corpus.py")?;
    assert!(status.success(), "generating the corpus failed");
    let cases = manifest(&dir)?;
    assert!(cases.len() >= 100, "{} cases", cases.len());
    // Two workers: each case is a process of its own.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                if let Err(e) = check(case) {
                    failures
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(format!("{}/{}: {e:#}", case.class, case.name));
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut classes: Vec<&str> = cases.iter().map(|c| c.class.as_str()).collect();
    classes.sort();
    classes.dedup();
    for class in &classes {
        let n = cases.iter().filter(|c| c.class == *class).count();
        let failed = failures.iter().filter(|f| f.starts_with(&format!("{class}/"))).count();
        eprintln!("{class}: {} of {n} cases pass", n - failed);
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
    Ok(())
}
