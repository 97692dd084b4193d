//! `tessera quantize` end to end: a checkpoint written as a GGUF (and mmproj) that `tessera`
//! then answers from, one line per file on stdout, and one-line errors. What the files hold is
//! proven in crates/tessera/tests/quantize_export.rs.

mod cli_common;

use anyhow::Result;
use cli_common::*;

fn scratch(name: &str) -> Result<std::path::PathBuf> {
    let dir = root().join("target/test-scratch").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[test]
fn a_written_pair_answers_about_an_image() -> Result<()> {
    let dir = scratch("cli_quantize_pair")?;
    let (model, mmproj) = (dir.join("m.gguf"), dir.join("mmproj-m.gguf"));
    let folder = root().join("tests/fixtures/vlm/smolvlm-tiny");
    let (m, p) = (model.to_string_lossy(), mmproj.to_string_lossy());
    let o = tessera(&["quantize", &folder.to_string_lossy(), &m, "--mmproj-out", &p, "--type", "q4_k_m"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains("m.gguf") && out.contains("Q5_0") && out.contains("mmproj-m.gguf"), "{out}");
    // The mmproj beside the model is found and used.
    let image = root().join("tests/fixtures/images/chelsea.png");
    let o = tessera(&["generate", "-m", &m, "--image", &image.to_string_lossy(), "-p", "Hi", "--max-new-tokens", "4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("mmproj-m.gguf"), "{}", stderr(&o));
    Ok(())
}

#[test]
fn bad_requests_fail_in_one_line() -> Result<()> {
    let dir = scratch("cli_quantize_refused")?;
    let out = dir.join("m.gguf").to_string_lossy().into_owned();
    let vlm = root().join("tests/fixtures/vlm/smolvlm-tiny").to_string_lossy().into_owned();
    assert_clean_failure(&tessera(&["quantize", &vlm, &out, "--type", "Q8_0"]), &["--mmproj-out", "smolvlm-tiny"]);
    assert_usage_error(&tessera(&["quantize", &vlm, &out, "--type", "Q3_K_S"]), &["Q3_K_S", "Q4_K_M"]);
    assert!(std::fs::read_dir(&dir)?.next().is_none(), "a file was written");
    Ok(())
}
