//! The `tessera` binary end to end on vision-language checkpoints: answers, `info`, `--messages`
//! chats, their bad input; and the one output writer (links written through, failures in one line).

mod cli_common;

use std::path::Path;

use anyhow::Result;
use cli_common::*;

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
        ("internvl-tiny", 28),
        ("mistral3-tiny", 48),
        ("qwen3.5-tiny", 54),
        ("gemma4-tiny", 60),
        ("minicpm-v4.6-tiny", 40),
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
    let o = tessera(&["info", "--model", &vlm("internvl-tiny")]);
    let info = stdout(&o);
    assert!(info.contains("internvl (qwen2 decoder)") && info.contains("InternViT tower"), "{info}");
    assert!(info.contains("4 image tokens per tile") && info.contains("at most 28 image tokens an image"), "{info}");
    assert!(info.contains("no video inputs"), "{info}");
    let o = tessera(&["info", "--model", &vlm("mistral3-tiny")]);
    let info = stdout(&o);
    assert!(info.contains("mistral3 (mistral decoder)") && info.contains("Pixtral tower"), "{info}");
    assert!(info.contains("[IMG_BREAK]") && info.contains("at most 64 image tokens an image"), "{info}");
    let o = tessera(&["info", "--model", &vlm("qwen3.5-tiny")]);
    let info = stdout(&o);
    assert!(info.contains("qwen3_5 (qwen3_5_text decoder)") && info.contains("within 256..=4096 pixels"), "{info}");
    assert!(info.contains("3 of 4 Gated DeltaNet") && info.contains("the first 8 of 32 dims"), "{info}");
    assert!(info.contains("sigmoid output gate") && info.contains("prefixes reused only whole"), "{info}");
    assert!(info.contains("no video inputs"), "{info}");
    let o = tessera(&["info", "--model", &vlm("gemma4-tiny")]);
    let info = stdout(&o);
    assert!(info.contains("gemma4 (gemma4_text decoder)") && info.contains("Gemma 4 tower"), "{info}");
    assert!(info.contains("at most 70 soft tokens") && info.contains("no audio or video inputs"), "{info}");
    let o = tessera(&["info", "--model", &vlm("minicpm-v4.6-tiny")]);
    let info = stdout(&o);
    assert!(info.contains("minicpmv4_6 (qwen3_5_text decoder)") && info.contains("MiniCPM-V 4.6 tower"), "{info}");
    assert!(info.contains("about 9 image tokens per view, at most about 45 per image"), "{info}");
    assert!(info.contains("3 of 4 Gated DeltaNet") && info.contains("no video inputs"), "{info}");
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
        let v = greedy_messages(name, &file, name)?;
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

/// `tessera generate --messages FILE --json` on the tiny checkpoint `name`, 16 greedy tokens past
/// EOS: its JSON output (`what` names the case in a failure).
fn greedy_messages(name: &str, file: &std::path::Path, what: &str) -> Result<serde_json::Value> {
    let file = file.to_string_lossy();
    let o = tessera(&[
        "generate",
        "--model",
        &vlm(name),
        "--messages",
        &file,
        "--max-new-tokens",
        "16",
        "--ignore-eos",
        "--temperature",
        "0",
        "--json",
    ]);
    assert!(o.status.success(), "{what}: {}", stderr(&o));
    Ok(serde_json::from_str(stdout(&o).trim())?)
}

/// Issue 41's families through `tessera generate --messages`, every case of their transformers
/// references (tests/fixtures/vlm/<name>/reference.json: the 451×300 photo, two images, the image
/// in an earlier turn, text only; Mistral 3's with its system turn): the prompt ids and 16 greedy
/// ids are transformers'. A video or audio part, which these families' transformers processors
/// take, is refused in one line naming the part.
#[test]
fn issue_41_families_answer_every_reference_case_through_messages() -> Result<()> {
    let dir = root().join("target/test-scratch/messages-issue-41");
    std::fs::create_dir_all(&dir)?;
    let mut checked = 0;
    for name in ["gemma4-tiny", "qwen3.5-tiny", "internvl-tiny", "mistral3-tiny", "minicpm-v4.6-tiny"] {
        let text = std::fs::read_to_string(root().join("tests/fixtures/vlm").join(name).join("reference.json"))?;
        let reference: serde_json::Value = serde_json::from_str(&text)?;
        for case in reference["cases"].as_array().into_iter().flatten() {
            let what = format!("{name}/{}", case["name"]);
            // The case's image parts, in order, given the case's images as paths.
            let mut images = case["images"].as_array().into_iter().flatten().filter_map(|p| p.as_str());
            let mut messages = case["messages"].clone();
            for m in messages.as_array_mut().into_iter().flatten() {
                for part in m["content"].as_array_mut().into_iter().flatten() {
                    if part["type"] == "image" {
                        let rel =
                            images.next().ok_or_else(|| anyhow::anyhow!("{what}: more image parts than images"))?;
                        part["path"] = root().join(rel).to_string_lossy().into_owned().into();
                    }
                }
            }
            assert!(images.next().is_none(), "{what}: more images than image parts");
            let file = dir.join(format!("{name}-{}.json", case["name"].as_str().unwrap_or("case")));
            std::fs::write(&file, serde_json::to_string(&messages)?)?;
            let v = greedy_messages(name, &file, &what)?;
            assert_eq!(v["prompt_tokens"], case["input_ids"], "{what}: prompt ids");
            assert_eq!(v["image_tokens"], case["num_image_tokens"], "{what}: image tokens");
            assert_eq!(v["generated_tokens"], case["greedy_ids"], "{what}: greedy ids");
            checked += 1;
        }
    }
    assert_eq!(checked, 20);
    for (name, kind) in [("qwen3.5-tiny", "video"), ("gemma4-tiny", "audio"), ("minicpm-v4.6-tiny", "video")] {
        let file = dir.join(format!("{name}-{kind}.json"));
        let part = serde_json::json!({"type": kind, kind: root().join("tests/fixtures/images/chelsea.png")});
        let messages =
            serde_json::json!([{"role": "user", "content": [part, {"type": "text", "text": "What is this?"}]}]);
        std::fs::write(&file, serde_json::to_string(&messages)?)?;
        let o = tessera(&["generate", "--model", &vlm(name), "--messages", &file.to_string_lossy()]);
        assert_clean_failure(
            &o,
            &[&format!("a `{kind}` part: tessera takes text and images only"), "message 0, part 0"],
        );
    }
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
