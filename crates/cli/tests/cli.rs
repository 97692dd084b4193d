//! The `tessera` binary end to end: output, JSON, errors and exit codes, Hub cache resolution.

mod cli_common;

use std::path::Path;
use std::process::Command;

use anyhow::Result;
use cli_common::*;

#[test]
fn default_model_answers_about_an_image_and_reports_timings() -> Result<()> {
    let image = shapes("examples/three_shapes.png");
    let o = tessera(&["generate", "--image", &image, "--prompt", "How many shapes are there?", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim())?;
    assert_eq!(v["image_tokens"], 64);
    // The native model's image tokens go before the text ids.
    let ids = v["prompt_tokens"].as_array().map(|a| a.len() as u64 + 64);
    assert_eq!(v["prompt_positions"].as_u64(), ids);
    assert_eq!(v["finish_reason"], "eos");
    let answer = v["text"].as_str().unwrap_or("").trim().to_string();
    assert!(answer.parse::<u32>().is_ok(), "a count, got {answer:?}");
    let o = tessera(&["generate", "--image", &image, "--prompt", "Describe the image."]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stdout(&o).trim().is_empty());
    let err = stderr(&o);
    assert!(err.contains("tok/s") && err.contains("load"), "{err}");
    // One image only, and files that are not images are refused.
    assert_clean_failure(
        &tessera(&["generate", "--image", &image, "--image", &image, "--prompt", "x"]),
        &["at most 1"],
    );
    assert_clean_failure(
        &tessera(&["generate", "--image", &shapes("config.json"), "--prompt", "x"]),
        &["config.json", "not an image"],
    );
    assert_clean_failure(&tessera(&["generate", "--image", "/no/such.png", "--prompt", "x"]), &["/no/such.png"]);
    assert_clean_failure(
        &tessera(&["generate", "--image", &image, "--max-image-pixels", "100", "--prompt", "x"]),
        &["64×64", "limit of 100 pixels", "--max-image-pixels"],
    );
    Ok(())
}

/// `tessera-bench --image` times the work `tessera generate` does for the same image and question:
/// the same positions and the same first token, a cold run and the best of --reps.
#[test]
fn bench_image_mode_runs_what_generate_runs() -> Result<()> {
    let image = shapes("examples/three_shapes.png");
    let question = "How many shapes are there?";
    let o = tessera(&["generate", "--image", &image, "--prompt", question, "--max-new-tokens", "1", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let generate: serde_json::Value = serde_json::from_str(stdout(&o).trim())?;
    let o = Command::new(env!("CARGO_BIN_EXE_tessera-bench"))
        .args(["--model", &shapes(""), "--image", &image, "--image-prompt", question, "--reps", "2", "--json"])
        .output()?;
    assert!(o.status.success(), "{}", stderr(&o));
    let bench: serde_json::Value = serde_json::from_str(stdout(&o).trim())?;
    assert_eq!(bench["image_tokens"], 64);
    assert_eq!(bench["prompt_positions"], generate["prompt_positions"]);
    assert_eq!(bench["first_token"], generate["generated_tokens"]);
    assert_eq!(bench["reps"], 2);
    for key in ["first_token_s", "cold_first_token_s"] {
        let s = bench[key].as_f64().unwrap_or(-1.0);
        assert!(s > 0.0 && s < 60.0, "{key}: {s}");
    }
    Ok(())
}

#[test]
fn explain_draws_one_picture_per_answer_token_from_the_captured_attention() -> Result<()> {
    let image_path = shapes("examples/three_shapes.png");
    let out = root().join("target/test-scratch/explain");
    let _ = std::fs::remove_dir_all(&out);
    let o = tessera(&[
        "explain",
        "--image",
        &image_path,
        "--prompt",
        "Describe the image.",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("| # | token | on image |"));
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("attention.json"))?)?;
    let tokens = json["tokens"].as_array().expect("tokens");
    assert!(!tokens.is_empty());
    let model = tessera::Model::load(&shapes(""), &tessera::LoadOptions::default())?;
    let (view, rows, cols) = model.model_view(&tessera::load_image(std::path::Path::new(&image_path), u64::MAX)?)?;
    for t in tokens {
        let weights: Vec<f32> =
            t["image_attention"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
        assert_eq!(weights.len(), rows * cols);
        let picture = tessera::load_image(std::path::Path::new(t["picture"].as_str().unwrap()), u64::MAX)?;
        // The picture is the captured weights drawn over the model's view…
        assert_eq!(picture, tessera::render_heatmap(&view, &weights, rows, cols, 4)?);
        // …so the most attended patch keeps its pixels and the least attended is dimmed.
        let argmax = (0..weights.len()).max_by(|&a, &b| weights[a].total_cmp(&weights[b])).unwrap();
        let (r, c) = (argmax / cols, argmax % cols);
        let (px, py) = (c * 8 + 4, r * 8 + 4);
        assert_eq!(picture.pixel(px * 4, py * 4), view.pixel(px, py));
    }
    Ok(())
}

#[test]
fn json_output_with_logprobs() -> Result<()> {
    let m = smollm2();
    let o = tessera(&[
        "generate",
        "--model",
        &m,
        "--dtype",
        "f32",
        "--raw",
        "--prompt",
        "The capital of France is",
        "--max-new-tokens",
        "4",
        "--json",
        "--logprobs",
        "3",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim())?;
    assert_eq!(v["prompt_tokens"].as_array().map(|a| a.len()), Some(5));
    assert_eq!(v["generated_tokens"].as_array().map(|a| a.len()), Some(4));
    assert!(v["text"].as_str().unwrap_or("").starts_with(" Paris"));
    assert_eq!(v["finish_reason"], "length");
    assert!(v["timings"]["load_s"].as_f64().is_some());
    let lp = v["logprobs"].as_array().expect("logprobs");
    assert_eq!(lp.len(), 4);
    assert_eq!(lp[0].as_array().map(|a| a.len()), Some(3));
    // Greedy: the chosen token is the most likely one.
    assert_eq!(lp[0][0]["id"], v["generated_tokens"][0]);
    Ok(())
}

#[test]
fn chat_template_is_applied_by_default_and_eos_stops() -> Result<()> {
    let m = smollm2();
    let o =
        tessera(&["generate", "--model", &m, "--dtype", "f32", "--prompt", "What is the capital of France?", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim())?;
    assert_eq!(v["text"], "The capital of France is Paris.");
    assert_eq!(v["finish_reason"], "eos");
    Ok(())
}

#[test]
fn stop_strings_end_generation() -> Result<()> {
    let m = smollm2();
    let o = tessera(&[
        "generate",
        "--model",
        &m,
        "--dtype",
        "f32",
        "--raw",
        "--prompt",
        "The capital of France is",
        "--stop",
        ".",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim())?;
    assert_eq!(v["text"], " Paris");
    assert_eq!(v["finish_reason"], "stop_string");
    Ok(())
}

#[test]
fn info_describes_the_model() {
    let m = smollm2();
    let o = tessera(&["info", "--model", &m]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for needle in ["llama", "30 layers", "9 heads / 3 KV heads (GQA)", "Q4_1", "tokenizer.chat_template"] {
        assert!(out.contains(needle), "info lacks {needle:?}:\n{out}");
    }
}

#[test]
fn bad_requests_fail_cleanly() {
    let m = smollm2();
    assert_clean_failure(
        &tessera(&["generate", "--model", "/no/such/model.gguf", "--prompt", "x"]),
        &["/no/such/model.gguf"],
    );
    assert_clean_failure(
        &tessera(&["generate", "--model", &m, "--image", "cat.png", "--prompt", "x"]),
        &["takes no images"],
    );
    assert_clean_failure(
        &tessera(&["generate", "--model", &m, "--device", "cuda", "--prompt", "x"]),
        &["cuda", "not available"],
    );
    assert_usage_error(&tessera(&["generate", "--model", &m, "--dtype", "f8", "--prompt", "x"]), &["--dtype", "f8"]);
    assert_usage_error(
        &tessera(&["generate", "--model", &m, "--kv-cache-dtype", "f8", "--prompt", "x"]),
        &["--kv-cache-dtype", "f8"],
    );
    assert_clean_failure(
        &tessera(&["generate", "--model", &m, "--kv-cache-dtype", "bf16", "--prompt", "x"]),
        &["bf16 KV cache", "--kv-cache-dtype", "f16 under f32"],
    );
    assert_usage_error(
        &tessera(&["generate", "--model", &m, "--temperature=-1", "--prompt", "x"]),
        &["--temperature", "-1"],
    );
    assert_clean_failure(
        &tessera(&["generate", "--model", &m, "--threads", "100000", "--prompt", "x"]),
        &["--threads 100000"],
    );
    // Flag values the parser refuses: one message naming the value, usage exit code 2.
    for (args, needle) in [
        (&["generate", "--model", &m, "--device", "cpu:1", "--prompt", "x"][..], "no device number"),
        (&["explain", "--image", "x.png", "--prompt", "x", "--scale", "18446744073709551615"][..], "--scale"),
        (&["explain", "--image", "x.png", "--prompt", "x", "--scale", "0"][..], "--scale"),
    ] {
        let o = tessera(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.starts_with("error: ") && err.contains(needle) && !err.contains("panicked"), "{err}");
    }
    let tiny = root().join("tests/fixtures/tiny/llama-gqa");
    let long = "word ".repeat(400);
    assert_clean_failure(
        &tessera(&["generate", "--model", tiny.to_str().unwrap(), "--raw", "--prompt", &long]),
        &["context"],
    );
}

/// Errors stay one line with backtraces on (issue 37): Candle attaches a backtrace to its errors
/// under `RUST_BACKTRACE` and prints every frame after the message (on a CUDA build without a
/// GPU, `--device cuda` printed 14 `<unknown>` frames after its error).
#[test]
fn errors_are_one_line_with_backtraces_on() {
    let m = smollm2();
    let cases: [(&[&str], &[&str]); 4] = [
        (&["generate", "--model", "/no/such/model.gguf", "--prompt", "x"], &["/no/such/model.gguf"]),
        (&["generate", "--model", &m, "--device", "cuda", "--prompt", "x"], &["device `cuda:0` is not available"]),
        // A Candle error that reaches the CLI directly (writing the tensor), not through the library.
        (
            &["embed", "--model", &m, "--text", "hi", "--pool", "mean", "--out", "/no/such/folder/e.safetensors"],
            &["writing /no/such/folder/e.safetensors"],
        ),
        (&["eval", "--model", &m, "--questions", "/no/such/questions.jsonl"], &["reading /no/such/questions.jsonl"]),
    ];
    for (args, needles) in cases {
        let o = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(args)
            .env("RUST_BACKTRACE", "1")
            .env("RUST_LIB_BACKTRACE", "1")
            .output()
            .expect("run tessera");
        assert_clean_failure(&o, needles);
    }
}

/// FIFOs where files are expected (an image, a chat file, a model) are refused before they
/// are opened: the command ends with one line instead of blocking for ever.
#[cfg(unix)]
#[test]
fn fifos_given_as_files_are_refused_not_waited_on() -> Result<()> {
    let dir = root().join("target/test-scratch/cli-fifos");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let fifo = |name: &str| -> Result<String> {
        let path = dir.join(name);
        anyhow::ensure!(Command::new("mkfifo").arg(&path).status()?.success(), "mkfifo {name}");
        Ok(path.to_string_lossy().into_owned())
    };
    let (image, chat, gguf) = (fifo("photo.png")?, fifo("chat.json")?, fifo("model.gguf")?);
    let o = tessera(&["generate", "--image", &image, "--prompt", "How many shapes?"]);
    assert_clean_failure(&o, &["photo.png", "not a regular file"]);
    assert_clean_failure(&tessera(&["generate", "--messages", &chat]), &["chat.json", "not a regular file"]);
    assert_clean_failure(&tessera(&["info", "--model", &gguf]), &["model.gguf", "not a regular file"]);
    Ok(())
}

/// Lays out a Hugging Face cache (`HF_HOME/hub/models--org--name/{refs,snapshots}`) holding the tiny model.
fn fake_hub_cache(home: &Path) -> Result<()> {
    let repo = home.join("hub/models--tessera--tiny-llama");
    let snapshot = repo.join("snapshots/0123456789abcdef");
    std::fs::create_dir_all(&snapshot)?;
    std::fs::create_dir_all(repo.join("refs"))?;
    std::fs::write(repo.join("refs/main"), "0123456789abcdef")?;
    for entry in std::fs::read_dir(root().join("tests/fixtures/tiny/llama-gqa"))? {
        let entry = entry?;
        std::fs::copy(entry.path(), snapshot.join(entry.file_name()))?;
    }
    Ok(())
}

#[test]
fn hub_ids_resolve_from_the_cache_when_offline() -> Result<()> {
    let home = root().join("target/test-scratch/hf-home");
    let _ = std::fs::remove_dir_all(&home);
    fake_hub_cache(&home)?;
    let run = |model: &str| {
        Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["generate", "--model", model, "--raw", "--prompt", "The capital", "--max-new-tokens", "3", "--json"])
            .env("HF_HOME", &home)
            .env("HF_HUB_OFFLINE", "1")
            .output()
            .expect("run tessera")
    };
    let o = run("tessera/tiny-llama");
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim())?;
    assert_eq!(v["generated_tokens"].as_array().map(|a| a.len()), Some(3));
    let o = run("tessera/not-cached");
    assert_clean_failure(&o, &["tessera/not-cached", "HF_HUB_OFFLINE", "cache"]);
    Ok(())
}

#[test]
fn analogy_king_man_woman_gives_queen() -> Result<()> {
    let m = smollm2();
    let o = tessera(&["analogy", "--model", &m, "king", "man", "woman", "--top", "3", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim())?;
    assert_eq!(v[0]["token"], " queen", "{v}");
    assert_clean_failure(
        &tessera(&["analogy", "--model", &m, "king", "man", "zqxjzqxj"]),
        &["zqxjzqxj", "single token"],
    );
    assert_clean_failure(&tessera(&["analogy", "--model", &m, "king", " ", "woman"]), &["\" \"", "empty"]);
    Ok(())
}

#[test]
fn embed_writes_json_npy_and_safetensors() -> Result<()> {
    let m = smollm2();
    let o = tessera(&["embed", "--model", &m, "--text", "river bank", "--pool", "mean", "--normalize"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim())?;
    assert_eq!(v["shape"], serde_json::json!([1, 576]));
    let norm: f64 = v["vectors"][0].as_array().unwrap().iter().map(|x| x.as_f64().unwrap().powi(2)).sum();
    assert!((norm - 1.0).abs() < 1e-4);
    let dir = root().join("target/test-scratch/embed-out");
    std::fs::create_dir_all(&dir)?;
    let npy = dir.join("e.npy");
    let o = tessera(&["embed", "--model", &m, "--text", "river bank", "--layer", "3", "--out", npy.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(&npy)?;
    assert_eq!(&bytes[..6], b"\x93NUMPY");
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + header_len])?;
    assert!(header.contains("'shape': (2, 576)"), "{header}");
    assert_eq!((10 + header_len) % 64, 0);
    assert_eq!(bytes.len(), 10 + header_len + 2 * 576 * 4);
    let st = dir.join("e.safetensors");
    let o = tessera(&["embed", "--model", &m, "--text", "river bank", "--out", st.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::metadata(&st)?.len() > 2 * 576 * 4);
    assert_clean_failure(
        &tessera(&["embed", "--model", &m, "--text", "x", "--layer", "99"]),
        &["layer 99", "out of range"],
    );
    assert_clean_failure(&tessera(&["embed", "--model", &m, "--text", "x", "--pool", "max"]), &["--pool"]);
    assert_clean_failure(&tessera(&["embed", "--model", &m, "--text", ""]), &["empty"]);
    Ok(())
}
