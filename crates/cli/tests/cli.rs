//! The `tessera` binary end to end: output, JSON, errors and exit codes, Hub cache resolution.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::Result;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("run tessera")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A failure with one clear message, on one line, and no panic.
fn assert_clean_failure(o: &Output, needles: &[&str]) {
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
fn assert_usage_error(o: &Output, needles: &[&str]) {
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

fn smollm2() -> String {
    let p = root().join("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(p.exists(), "{} is missing: run scripts/fetch_smollm2.sh", p.display());
    p.to_string_lossy().into_owned()
}

fn shapes(file: &str) -> String {
    root().join("models/shapes-vlm").join(file).to_string_lossy().into_owned()
}

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

fn vlm(name: &str) -> String {
    root().join("tests/fixtures/vlm").join(name).to_string_lossy().into_owned()
}

fn photo(name: &str) -> String {
    root().join("tests/fixtures/images").join(name).to_string_lossy().into_owned()
}

#[test]
fn vision_language_checkpoints_answer_and_describe_themselves() -> Result<()> {
    // Each family, from its folder, with its own template and processor: --image files go before
    // the prompt in one user message.
    for (name, tokens) in [
        ("smolvlm-tiny", 80),
        ("llava-tiny", 25),
        ("llava-interleave-tiny", 16),
        ("paligemma-tiny", 64),
        ("paligemma2-tiny", 64),
        ("gemma3-tiny", 16),
        ("qwen2-vl-tiny", 54),
        ("qwen2.5-vl-tiny", 54),
        ("qwen3-vl-tiny", 54),
    ] {
        let o = tessera(&[
            "generate",
            "--model",
            &vlm(name),
            "--image",
            &photo("chelsea.png"),
            "--prompt",
            "Describe this image.",
            "--max-new-tokens",
            "4",
            "--ignore-eos",
            "--json",
        ]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim())?;
        assert_eq!(v["image_tokens"], tokens, "{name}");
        assert_eq!(v["generated_tokens"].as_array().map(Vec::len), Some(4), "{name}");
        // The placeholder families' ids hold the image positions: the prompt is counted once.
        let ids = v["prompt_tokens"].as_array().map(|a| a.len() as u64);
        assert_eq!(v["prompt_positions"].as_u64(), ids, "{name}");
    }
    // Two images where the family takes several.
    let o = tessera(&[
        "generate",
        "--model",
        &vlm("llava-interleave-tiny"),
        "--image",
        &photo("chelsea.png"),
        "--image",
        &photo("astronaut.png"),
        "--prompt",
        "What differs?",
        "--max-new-tokens",
        "2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim())?;
    assert_eq!(v["image_tokens"], 32);
    let o = tessera(&["info", "--model", &vlm("smolvlm-tiny")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let info = stdout(&o);
    assert!(info.contains("idefics3") && info.contains("Siglip tower") && info.contains("pixel shuffle"), "{info}");
    assert!(info.contains("16 image tokens per 32×32 view"), "{info}");
    let o = tessera(&["info", "--model", &vlm("gemma3-tiny")]);
    let info = stdout(&o);
    assert!(info.contains("gemma3 (gemma3_text decoder)") && info.contains("2×2 average pooling to 4×4"), "{info}");
    assert!(info.contains("local rope:     theta 10000") && info.contains("8 tokens in 5 of 6 layers"), "{info}");
    // Gemma 3's image tokens are a 4×4 grid of pooled patches: explain draws on it.
    let out = std::env::temp_dir().join(format!("tessera-explain-gemma3-{}", std::process::id()));
    let o = tessera(&[
        "explain",
        "--model",
        &vlm("gemma3-tiny"),
        "--image",
        &photo("chelsea.png"),
        "--prompt",
        "What is this?",
        "--max-new-tokens",
        "2",
        "--out",
        out.to_str().unwrap_or_default(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.join("token_00.png").exists() && out.join("attention.json").exists());
    Ok(())
}

/// `--messages`: a multi-turn chat with an image in an earlier turn, written as a user writes
/// it (`path`, and OpenAI's `image_url` with a base64 `data:` URL), gives transformers' prompt
/// ids and greedy ids (tests/fixtures/vlm/chats.json).
#[test]
fn messages_file_runs_a_whole_conversation() -> Result<()> {
    use base64::Engine as _;
    let text = std::fs::read_to_string(root().join("tests/fixtures/vlm/chats.json"))?;
    let reference: serde_json::Value = serde_json::from_str(&text)?;
    let dir = root().join("target/test-scratch/messages");
    std::fs::create_dir_all(&dir)?;
    for (name, chat) in [("smolvlm-tiny", 0), ("llava-interleave-tiny", 1)] {
        let want = &reference["models"][name][chat];
        let mut messages = want["messages"].clone();
        let mut n = 0;
        for m in messages.as_array_mut().into_iter().flatten() {
            for part in m["content"].as_array_mut().into_iter().flatten() {
                for key in ["image", "url", "path"] {
                    if let Some(rel) = part.get(key).and_then(|v| v.as_str()).map(str::to_string) {
                        // The first image as an OpenAI data: URL, the others as absolute paths.
                        *part = if n == 0 {
                            let data =
                                base64::engine::general_purpose::STANDARD.encode(std::fs::read(root().join(&rel))?);
                            serde_json::json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{data}")}})
                        } else {
                            serde_json::json!({"type": "image", key: root().join(&rel).to_string_lossy()})
                        };
                        n += 1;
                    }
                }
            }
        }
        let file = dir.join(format!("{name}.json"));
        std::fs::write(&file, serde_json::to_string(&messages)?)?;
        let o = tessera(&[
            "generate",
            "--model",
            &vlm(name),
            "--messages",
            &file.to_string_lossy(),
            "--max-new-tokens",
            "16",
            "--ignore-eos",
            "--temperature",
            "0",
            "--json",
        ]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim())?;
        assert_eq!(v["prompt_tokens"], want["input_ids"], "{name}: prompt ids");
        assert_eq!(v["generated_tokens"], want["greedy_ids"], "{name}: greedy ids");
    }
    // Bad conversations: one line naming the file and what is wrong.
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"[{"role": "user", "content": [{"type": "image"}]}]"#)?;
    let o = tessera(&["generate", "--model", &vlm("smolvlm-tiny"), "--messages", &bad.to_string_lossy()]);
    assert_clean_failure(&o, &["bad.json", "message 0, part 0", "path or URL"]);
    std::fs::write(&bad, r#"[{"role": "user", "content": [{"type": "image", "url": "https://x.org/a.png"}]}]"#)?;
    let o = tessera(&["generate", "--model", &vlm("smolvlm-tiny"), "--messages", &bad.to_string_lossy()]);
    assert_clean_failure(&o, &["https://x.org/a.png", "not downloaded"]);
    let o =
        tessera(&["generate", "--model", &vlm("smolvlm-tiny"), "--messages", &bad.to_string_lossy(), "--prompt", "x"]);
    assert!(!o.status.success() && stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
    Ok(())
}

#[test]
fn vision_language_bad_input_fails_cleanly() {
    // An image over the per-image token budget.
    let o = tessera(&[
        "generate",
        "--model",
        &vlm("smolvlm-tiny"),
        "--image",
        &photo("chelsea.png"),
        "--prompt",
        "Hi",
        "--max-image-tokens",
        "64",
    ]);
    assert_clean_failure(&o, &["chelsea.png", "80 image tokens", "budget of 64"]);
    // A raw prompt whose placeholders do not match the images.
    let o = tessera(&[
        "generate",
        "--model",
        &vlm("llava-tiny"),
        "--image",
        &photo("chelsea.png"),
        "--raw",
        "--prompt",
        "no placeholder",
    ]);
    assert_clean_failure(&o, &["0 `<image>` placeholder", "1 image"]);
}

/// Every file the CLI writes goes through one writer (crates/cli/src/output.rs): a symbolic link
/// is written through — the link stays a link and its target gets the content — for `.npy` and
/// `.safetensors` alike (the .safetensors writer used to replace the link with a file); a failed
/// write (a full disk: /dev/full) is one line naming the path, and leaves no temporary file.
#[cfg(unix)]
#[test]
fn output_files_are_written_through_links_and_fail_in_one_line() -> Result<()> {
    use std::os::unix::fs::symlink;
    let m = root().join("tests/fixtures/tiny/llama-gqa").to_string_lossy().into_owned();
    let dir = root().join("target/test-scratch/output-links");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    for ext in ["npy", "safetensors"] {
        let (target, link) = (dir.join(format!("real.{ext}")), dir.join(format!("link.{ext}")));
        std::fs::write(&target, b"old")?;
        symlink(format!("real.{ext}"), &link)?;
        let o = tessera(&["embed", "--model", &m, "--text", "hi", "--pool", "mean", "--out", link.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(std::fs::symlink_metadata(&link)?.file_type().is_symlink(), "--out {ext}: the link was replaced");
        let bytes = std::fs::read(&target)?;
        if ext == "npy" {
            assert_eq!(&bytes[..6], b"\x93NUMPY");
            assert_eq!(bytes.len(), 128 + 64 * 4);
        } else {
            let tensors = candle_core::safetensors::load(&target, &candle_core::Device::Cpu)?;
            assert_eq!(tensors["embeddings"].dims(), [1, 64]);
        }
    }
    if Path::new("/dev/full").exists() {
        let full = dir.join("full.npy");
        symlink("/dev/full", &full)?;
        let o = tessera(&["embed", "--model", &m, "--text", "hi", "--out", full.to_str().unwrap()]);
        assert_clean_failure(&o, &["writing", "full.npy", "/dev/full", "No space left on device"]);
    }
    let o = tessera(&["embed", "--model", &m, "--text", "hi", "--out", dir.join("none/e.npy").to_str().unwrap()]);
    assert_clean_failure(&o, &["writing", "none/e.npy", "No such file or directory"]);
    let mut left: Vec<String> =
        std::fs::read_dir(&dir)?.map(|e| Ok(e?.file_name().to_string_lossy().into_owned())).collect::<Result<_>>()?;
    left.sort();
    let expected = ["full.npy", "link.npy", "link.safetensors", "real.npy", "real.safetensors"];
    assert_eq!(
        left,
        expected.iter().filter(|n| **n != "full.npy" || Path::new("/dev/full").exists()).copied().collect::<Vec<_>>()
    );
    Ok(())
}
