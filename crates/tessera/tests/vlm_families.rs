//! Vision-language parity tests of one family's rule each (PaliGemma 2's soft-capping and
//! sliding window, Gemma 3's bidirectional image attention and pan-and-scan, Qwen2-VL's grid
//! positions, Qwen2.5-VL's windows, Qwen3-VL's DeepStack, Qwen3.5's linear layers) and
//! prefilling in blocks on every family, against transformers' references (scripts/make_tiny_vlms.py); the shared cases are
//! in `vlm_common`.

mod common;
mod vlm_common;

use anyhow::{ensure, Context, Result};
use candle_core::Tensor;
use common::max_abs_diff;
use serde_json::Value;
use tessera::{load_image, GenerateParams, LoadOptions, Message, Model, DEFAULT_MAX_PIXELS};
use vlm_common::*;

/// PaliGemma 2's Gemma 2 rules each matter: with attention soft-capping or the sliding window
/// removed from the config, transformers' greedy ids change (scripts/make_tiny_vlms.py records
/// them as "ablations"), and tessera with the same edit follows it to the same ids — so the
/// rules are implemented, not merely harmless. The logits move by several units without the cap.
#[test]
fn paligemma2_soft_capping_and_sliding_window_each_change_the_answer() -> Result<()> {
    let (cases, _) = cases("paligemma2-tiny")?;
    let mut changed = 0;
    let all_global = Value::from(vec!["full_attention"; 4]);
    for (ablation, field, value) in
        [("no_attn_softcap", "attn_logit_softcapping", Value::Null), ("no_sliding_window", "layer_types", all_global)]
    {
        let dir = scratch_copy("paligemma2-tiny", ablation)?;
        let config_path = dir.join("config.json");
        let mut config = common::read_json(&config_path)?;
        ensure!(config["text_config"].get(field).is_some(), "the fixture's text_config states {field}");
        config["text_config"][field] = value;
        std::fs::write(&config_path, serde_json::to_string_pretty(&config)?)?;
        let (model, ablated) =
            (load("paligemma2-tiny")?, Model::load(dir.to_str().context("utf-8")?, &common::load_options()?)?);
        for case in &cases {
            let what = format!("{ablation}/{}", case.name);
            let expected = common::ids(&case.json["ablations"][ablation]);
            let params = GenerateParams { max_new_tokens: expected.len(), ignore_eos: true, ..Default::default() };
            let prompt = ablated.prompt(common::ids(&case.json["input_ids"]), &case.images)?;
            let out = ablated.generate(&prompt, &params, &mut |_| {})?;
            assert_eq!(out.generated_tokens, expected, "{what}: tessera without the rule = transformers without it");
            changed += usize::from(expected != common::ids(&case.json["greedy_ids"]));
            if ablation == "no_attn_softcap" {
                let last = |m: &Model| -> Result<Tensor> {
                    let embeds = m.prompt_embeddings(&prompt)?;
                    Ok(m.logits(&m.forward_embeds(&embeds, &[], &mut m.new_cache(), &mut Default::default())?)?)
                };
                let d = max_abs_diff(&last(&model)?, &last(&ablated)?, "logits")?;
                assert!(d > 0.1, "{what}: removing the soft-cap moves the prompt logits by only {d}");
            }
        }
    }
    assert!(changed >= 2, "each rule changes some case's greedy ids ({changed} changed)");
    Ok(())
}

/// Gemma 3's images attend to themselves both ways (each image its own block, within the
/// sliding window; the next image does not see into the previous one's block from before).
/// Without the blocks transformers' prompt logits move by 0.34 (one image) and 0.29 (two
/// images) — scripts/make_tiny_vlms.py stores them as `<case>.logits_causal_images` — and
/// tessera's forward without the blocks gives those same logits, so the rule is what moves them
/// (by over a thousand times the 1e-4 the logits match within).
#[test]
fn gemma3_images_attend_both_ways_within_each_image() -> Result<()> {
    let model = load("gemma3-tiny")?;
    let (cases, tensors) = cases("gemma3-tiny")?;
    let mut checked = 0;
    for case in cases.iter().filter(|c| !c.images.is_empty()) {
        let what = format!("gemma3-tiny/{}", case.name);
        let prompt = model.prompt(common::ids(&case.json["input_ids"]), &case.images)?;
        assert_eq!(prompt.image_runs().len(), case.images.len(), "{what}: one block per image");
        let embeds = model.prompt_embeddings(&prompt)?;
        let last = |runs: &[std::ops::Range<usize>]| -> Result<Tensor> {
            let hidden = model.forward_embeds(&embeds, runs, &mut model.new_cache(), &mut Default::default())?;
            let logits = model.logits(&hidden)?;
            let n = 8;
            Ok(logits.narrow(0, logits.dim(0)? - n, n)?)
        };
        let causal = reference_tensor(&tensors, &case.name, "logits_causal_images").context("ablated logits")?;
        let d = max_abs_diff(&last(&[])?, causal, "causal logits")?;
        assert!(d < 1e-4, "{what}: tessera without blocks vs transformers without token_type_ids: {d}");
        let moved = max_abs_diff(&last(&prompt.image_runs())?, causal, "block logits")?;
        assert!(moved > 0.1, "{what}: the blocks move the logits by only {moved}");
        checked += 1;
    }
    assert_eq!(checked, 2);
    Ok(())
}

/// Gemma 4 with `use_bidirectional_attention: "vision"`: each image's tokens see each other both
/// ways in the sliding-window layers and causally in the full ones (transformers'
/// `create_masks_for_vision_model`). The rule matters: without `mm_token_type_ids` transformers'
/// prompt logits move by 2.8–3.7 (`<case>.logits_causal_images`), which tessera's logits, within
/// 1e-4 of the reference with the rule, are far from. (The tiny checkpoint cannot tell the full
/// layers' causal part from both ways: the last image token sees its image either way, and no
/// later full layer reads the earlier ones — the last full layer reuses layer 2's keys — so that
/// part is checked on the mask plan.)
#[test]
fn gemma4_images_attend_both_ways_in_sliding_layers_only() -> Result<()> {
    use tessera_decoder::AttentionMask;
    let model = load("gemma4-tiny")?;
    let (cases, tensors) = cases("gemma4-tiny")?;
    let mut checked = 0;
    for case in cases.iter().filter(|c| !c.images.is_empty()) {
        let what = format!("gemma4-tiny/{}", case.name);
        let prompt = model.prompt(common::ids(&case.json["input_ids"]), &case.images)?;
        let runs = prompt.image_runs();
        assert_eq!(runs.len(), case.images.len(), "{what}: one block per image");
        let plan = model.mask_plan(0, prompt.len(), &runs)?;
        for (i, window) in model.config().layer_windows.iter().enumerate() {
            match (window, plan.layer(i)?) {
                (Some(8), AttentionMask::CausalBlocks { window: Some(8), blocks }) => {
                    assert_eq!(blocks.of(runs[0].start), Some(&runs[0]), "{what}: layer {i}")
                }
                (None, AttentionMask::Causal) => {}
                (w, m) => panic!("{what}: layer {i} (window {w:?}) has the mask {m:?}"),
            }
        }
        let hidden =
            model.forward(&prompt, .., &mut model.new_cache(), &mut Default::default(), &mut Default::default())?;
        let logits = model.logits(&hidden)?;
        let causal = reference_tensor(&tensors, &case.name, "logits_causal_images").context("ablated logits")?;
        let n = causal.dim(0)?;
        let moved = max_abs_diff(&logits.narrow(0, logits.dim(0)? - n, n)?, causal, "causal logits")?;
        assert!(moved > 0.1, "{what}: transformers without the rule is only {moved} away");
        checked += 1;
    }
    assert_eq!(checked, 3);
    Ok(())
}

/// Gemma 4's decode steps batched: each row's per-layer inputs, value norms and shared keys and
/// values over its own cache give, bit for bit, the logits the sequence gets alone (to rounding
/// on Candle's generic ops, as `batching.rs` explains).
#[test]
fn gemma4_batched_decode_rows_match_each_sequence_alone() -> Result<()> {
    let model = load("gemma4-tiny")?;
    let (cases, _) = cases("gemma4-tiny")?;
    let mut caches = Vec::new();
    for case in cases.iter().take(2) {
        let prompt = model.prompt(common::ids(&case.json["input_ids"]), &case.images)?;
        let mut cache = model.new_cache();
        model.prefill(&prompt, &mut cache, &mut Default::default(), &mut Default::default())?;
        caches.push(cache);
    }
    let mut alone: Vec<_> = caches.iter().map(|c| c.copy_prefix(c.len())).collect::<tessera_decoder::Result<_>>()?;
    let next = [7u32, 42];
    let rows = model.decode_rows(&next, &mut caches)?;
    for (i, cache) in alone.iter_mut().enumerate() {
        let one = model.forward_last(&next[i..=i], cache)?;
        let d = max_abs_diff(&rows.get(i)?, &one, "batched row")?;
        // Bit for bit on tessera's kernels; Candle's generic matmul blocks two rows differently
        // from one (`TESSERA_KERNELS=off`, scripts/test_generic.sh): rounding only there.
        let tol = if tessera_decoder::kernels_run_on(model.device()) { 0.0 } else { 1e-4 };
        assert!(d <= tol, "row {i}: the batched step differs from the sequence alone by {d} (allowed {tol})");
    }
    Ok(())
}

/// Gemma 3's pan-and-scan (`--pan-and-scan`): a 451×300 photo is seen whole and as two crops of
/// 226×300, each expanded as the processor writes it ("Here is the original image … and here are
/// some crops …"); a square one is not split. Prompt ids, pixel values of all four views,
/// features, logits and 16 greedy ids match transformers (its image processor with
/// `do_pan_and_scan` and its processor's own `replace_image_token`, see make_tiny_vlms.py).
#[test]
fn gemma3_pan_and_scan_matches_transformers() -> Result<()> {
    let dir = vlm_dir("gemma3-tiny");
    let opts = LoadOptions { pan_and_scan: true, ..common::load_options()? };
    let model = Model::load(dir.to_str().context("utf-8")?, &opts)?;
    let (cases, tensors) = pan_and_scan_cases("gemma3-tiny")?;
    ensure!(cases.len() == 1, "one pan-and-scan case");
    for case in &cases {
        let what = format!("gemma3-tiny/{}", case.name);
        let prompt = model.encode_prompt(&user_text(case)?, None, false, &case.images)?;
        assert_eq!(prompt.ids(), common::ids(&case.json["input_ids"]), "{what}: prompt ids");
        assert_eq!(prompt.image_runs().len(), 4, "{what}: chelsea whole + 2 crops, astronaut whole");
        let pixels = case.images.iter().map(|i| model.pixel_values(i)).collect::<tessera::Result<Vec<_>>>()?;
        let reference = |k: &str| reference_tensor(&tensors, &case.name, k).with_context(|| format!("{what}: {k}"));
        let d = max_abs_diff(&Tensor::cat(&pixels, 0)?, reference("pixel_values")?, "pixel values")?;
        assert!(d < 1e-5, "{what}: pixel values differ by {d}");
        let tokens =
            case.images.iter().map(|i| model.analysis().image_embeddings(i)).collect::<tessera::Result<Vec<_>>>()?;
        let d = max_abs_diff(&Tensor::cat(&tokens, 0)?, reference("image_features")?, "image features")?;
        assert!(d < 1e-4, "{what}: image features differ by {d}");
        let hidden =
            model.forward(&prompt, .., &mut model.new_cache(), &mut Default::default(), &mut Default::default())?;
        let logits = model.logits(&hidden)?;
        let expected = reference("logits")?;
        let n = expected.dim(0)?;
        let d = max_abs_diff(&logits.narrow(0, logits.dim(0)? - n, n)?, expected, "logits")?;
        assert!(d < 1e-4, "{what}: logits differ by {d}");
        let greedy = common::ids(&case.json["greedy_ids"]);
        let params = GenerateParams { max_new_tokens: greedy.len(), ignore_eos: true, ..Default::default() };
        assert_eq!(model.generate(&prompt, &params, &mut |_| {})?.generated_tokens, greedy, "{what}: greedy ids");
    }
    // Off by default, and refused for a family without it.
    assert_eq!(load("gemma3-tiny")?.image_tokens(&cases[0].images[0])?, 16);
    assert_eq!(model.image_tokens(&cases[0].images[0])?, 48);
    let err = Model::load(vlm_dir("llava-tiny").to_str().context("utf-8")?, &opts).err().map(|e| e.to_string());
    assert!(err.as_deref().unwrap_or("").contains("pan-and-scan"), "{err:?}");
    Ok(())
}

/// Qwen2-VL's M-RoPE: an image's tokens take (start, start + row, start + column) positions and
/// the text after it continues at start + max(rows, columns) (a 6×9 grid: 54 tokens, 9
/// positions). Given plain consecutive positions instead, the prompt's last logits move by
/// several units; the 16 greedy ids of `logits_and_16_greedy_ids_match_transformers` decode
/// past the images from the cache's position delta.
#[test]
fn qwen2_vl_images_take_grid_positions() -> Result<()> {
    let model = load("qwen2-vl-tiny")?;
    let (cases, tensors) = cases("qwen2-vl-tiny")?;
    let case = cases.iter().find(|c| c.name == "two_images").context("two_images")?;
    let prompt = model.prompt(common::ids(&case.json["input_ids"]), &case.images)?;
    let (positions, delta) = model.prompt_positions(&prompt, &model.new_cache())?;
    let p: Vec<Vec<u32>> = positions.to_vec2()?;
    let first = prompt.image_positions()[0];
    let t0 = p[0][first];
    // The first image: 6 rows × 9 columns of merged tokens, all at one temporal position.
    assert_eq!((p[0][first + 53], p[1][first + 53], p[2][first + 53]), (t0, t0 + 5, t0 + 8));
    assert_eq!((p[1][first + 9], p[2][first + 9]), (t0 + 1, t0));
    // Text after it resumes at start + 9 (`<|vision_end|>`), two images of 54 tokens each
    // advance 9 positions each: the next token's position is 2 × (54 − 9) behind the length.
    assert_eq!(p[0][first + 54], t0 + 9);
    assert_eq!(delta, -90);
    let embeds = model.prompt_embeddings(&prompt)?;
    let consecutive = model.forward_embeds(&embeds, &[], &mut model.new_cache(), &mut Default::default())?;
    let logits = model.logits(&consecutive)?;
    let expected = reference_tensor(&tensors, &case.name, "logits").context("logits")?;
    let n = expected.dim(0)?;
    let moved = max_abs_diff(&logits.narrow(0, logits.dim(0)? - n, n)?, expected, "logits")?;
    assert!(moved > 1.0, "consecutive positions move the logits by only {moved}");
    Ok(())
}

/// Qwen2.5-VL's windows: blocks 0 and 2 attend within windows of 2×2 merged tokens (a 6×9 grid
/// makes 3×5 windows, the last row and column partial), blocks 1 and 3 over the whole image,
/// and the merger's output returns to raster order. The features match transformers (see
/// `pixels_tower_features_and_image_tokens_match`); with every block attending globally
/// (`fullatt_block_indexes` [0, 1, 2, 3]) the image tokens move far beyond that tolerance.
#[test]
fn qwen2_5_vl_windows_shape_the_image_tokens() -> Result<()> {
    let (cases, tensors) = cases("qwen2.5-vl-tiny")?;
    let case = cases.iter().find(|c| c.name == "chelsea").context("chelsea")?;
    let dir = scratch_copy("qwen2.5-vl-tiny", "all-global")?;
    let config_path = dir.join("config.json");
    let mut config = common::read_json(&config_path)?;
    config["vision_config"]["fullatt_block_indexes"] = serde_json::json!([0, 1, 2, 3]);
    std::fs::write(&config_path, serde_json::to_string_pretty(&config)?)?;
    let global = Model::load(dir.to_str().context("utf-8")?, &common::load_options()?)?;
    let want = reference_tensor(&tensors, &case.name, "image_features").context("image features")?;
    let windowed =
        max_abs_diff(&load("qwen2.5-vl-tiny")?.analysis().image_embeddings(&case.images[0])?, want, "windowed")?;
    let all_global = max_abs_diff(&global.analysis().image_embeddings(&case.images[0])?, want, "global")?;
    assert!(windowed < 1e-4 && all_global > 0.1, "windowed {windowed}, all global {all_global}");
    Ok(())
}

/// Qwen3-VL's DeepStack: the outputs of vision blocks 0 and 1, through mergers of their own,
/// join the text model's hidden states at the image positions after layers 0 and 1. Its
/// learned position table (4×4) is resampled to each grid, and M-RoPE interleaves the streams.
/// The logits match transformers (`logits_and_16_greedy_ids_match_transformers`); the same
/// forward without the DeepStack additions moves them well beyond the tolerance.
#[test]
fn qwen3_vl_deepstack_features_join_the_first_layers() -> Result<()> {
    let model = load("qwen3-vl-tiny")?;
    let (cases, tensors) = cases("qwen3-vl-tiny")?;
    let case = cases.iter().find(|c| c.name == "chelsea").context("chelsea")?;
    let prompt = model.prompt(common::ids(&case.json["input_ids"]), &case.images)?;
    let embeds = model.prompt_embeddings(&prompt)?;
    let additions = model.encode_image(&case.images[0])?.layer_additions().len();
    assert_eq!(additions, 2, "two DeepStack levels");
    let mut cache = model.new_cache();
    let (positions, _) = model.prompt_positions(&prompt, &cache)?;
    let masks = model.mask_plan(0, prompt.len(), &prompt.image_runs())?;
    let hidden = model.decoder().forward_traced(&embeds, &mut cache, &masks, &positions, &mut Default::default())?;
    let logits = model.logits(&hidden)?;
    let expected = reference_tensor(&tensors, &case.name, "logits").context("logits")?;
    let n = expected.dim(0)?;
    let without = max_abs_diff(&logits.narrow(0, logits.dim(0)? - n, n)?, expected, "logits")?;
    assert!(without > 0.1, "without DeepStack the logits move by only {without}");
    Ok(())
}

/// Generation prefills a prompt in blocks ([`Model::prefill_blocks`]); on every family that
/// takes chats, a two-turn prompt whose block boundary falls inside the image (moved to the image's start
/// where the image attends both ways, Gemma 3) gives the last position's logits, and the next
/// decode step's, that one forward over the whole prompt gives (within f32 reordering).
#[test]
fn prompts_prefilled_in_blocks_match_one_forward_on_every_family() -> Result<()> {
    use tessera::{ContentPart, PromptStyle};
    let image = load_image(&common::fixtures().join("images/chelsea.png"), DEFAULT_MAX_PIXELS)?;
    let mut straddled = Vec::new();
    for name in FAMILIES {
        let model = load(name)?;
        if model.config().prompt == PromptStyle::PrefixLm {
            continue; // no chat template; one block by design (the whole prefix attends both ways)
        }
        let block = model.prefill_block();
        // Words before the image (in its message, or in a turn before it where the template puts
        // a message's images first) until a block boundary would fall inside the image.
        let prompt_with = |n: usize, earlier_turn: bool| -> Option<tessera::Prompt> {
            let words = ContentPart::Text { text: "word ".repeat(n) };
            let ask = ContentPart::Text { text: "Describe it.".into() };
            let chat = match earlier_turn {
                false => vec![Message::parts("user", vec![words, ContentPart::Image, ask])],
                true => vec![
                    Message::parts("user", vec![words]),
                    Message::text("assistant", "Fine."),
                    Message::parts("user", vec![ContentPart::Image, ask]),
                ],
            };
            model.encode_chat(&chat, std::slice::from_ref(&image)).ok()
        };
        let inside = |ends: &[usize], r: &std::ops::Range<usize>| ends.iter().any(|&e| r.start < e && e < r.end);
        let found = [false, true].into_iter().flat_map(|t| (0..block + 44).map(move |n| (n, t))).find_map(|(n, t)| {
            let prompt = prompt_with(n, t)?;
            let ends = model.prefill_blocks(&prompt);
            let runs = prompt.image_runs();
            let hit = match model.config().bidirectional_images {
                false => runs.iter().any(|r| inside(&ends, r)),
                // A block that would have ended inside an image ends at the image's start.
                true => ends
                    .windows(2)
                    .any(|w| runs.iter().any(|r| w[1] == r.start && (r.start + 1..r.end).contains(&(w[0] + block)))),
            };
            hit.then_some((prompt, ends))
        });
        // Where the template puts a short image right after a turn's end, no boundary falls in
        // it: then a long chat whose image lies in a later block.
        if found.is_some() {
            straddled.push(*name);
        }
        let (prompt, ends) = match found {
            Some(f) => f,
            None => {
                let p = prompt_with(block + 44, true).with_context(|| format!("{name}: a two-turn chat"))?;
                let ends = model.prefill_blocks(&p);
                (p, ends)
            }
        };
        ensure!(ends.len() >= 2 && ends.last() == Some(&prompt.len()), "{name}: blocks {ends:?}");
        let split = prompt.image_runs().iter().any(|r| inside(&ends, r));
        ensure!(!(split && model.config().bidirectional_images), "{name}: blocks {ends:?} cut an image");
        let mut whole = model.new_cache();
        let one = model.last_logits(&model.forward(
            &prompt,
            ..,
            &mut whole,
            &mut Default::default(),
            &mut Default::default(),
        )?)?;
        let mut blocked = model.new_cache();
        let hidden = model.prefill(&prompt, &mut blocked, &mut Default::default(), &mut Default::default())?;
        let diff = max_abs_diff(&model.last_logits(&hidden)?, &one, name)?;
        ensure!(diff < 1e-4, "{name}: blocked prefill moves the last logits by {diff}");
        ensure!(blocked.position_delta() == whole.position_delta(), "{name}: the next RoPE position differs");
        let next = model.forward_last(&[7], &mut blocked)?;
        let diff = max_abs_diff(&next, &model.forward_last(&[7], &mut whole)?, name)?;
        ensure!(diff < 1e-4, "{name}: the step after a blocked prefill moves the logits by {diff}");
    }
    // M-RoPE's grid positions and DeepStack's additions sliced inside an image; Gemma 3's
    // bidirectional image kept whole.
    for name in ["smolvlm-tiny", "qwen2-vl-tiny", "qwen2.5-vl-tiny", "qwen3-vl-tiny", "gemma3-tiny"] {
        ensure!(straddled.contains(&name), "{name}: no block boundary met an image ({straddled:?} did)");
    }
    Ok(())
}

/// Qwen3.5's hybrid text model: three Gated DeltaNet layers to one gated attention layer; the
/// prompt leaves a recurrent state in each linear layer's slot of the cache (counted in its bytes)
/// and keys in the attention layer's. Every case (a 451×300 photo, two images, the image in an
/// earlier turn, text only) matches transformers' last logits within 1e-4 and its image tokens
/// within 1e-4 (`logits_and_16_greedy_ids_match_transformers` and
/// `pixels_tower_features_and_image_tokens_match` check the greedy ids and pixels too).
#[test]
fn qwen3_5_linear_layers_carry_the_prompt_as_transformers_does() -> Result<()> {
    let model = load("qwen3.5-tiny")?;
    let linear = model.decoder().config().linear.clone().context("Gated DeltaNet layers")?;
    assert_eq!(linear.layers, [true, true, true, false]);
    let (cases, tensors) = cases("qwen3.5-tiny")?;
    assert_eq!(cases.len(), 4);
    for case in &cases {
        let prompt = model.prompt(common::ids(&case.json["input_ids"]), &case.images)?;
        let mut cache = model.new_cache();
        let hidden = model.forward(&prompt, .., &mut cache, &mut Default::default(), &mut Default::default())?;
        ensure!(cache.is_recurrent() && cache.len() == prompt.len(), "{}: the cache after the prompt", case.name);
        let logits = model.logits(&hidden)?;
        let expected = reference_tensor(&tensors, &case.name, "logits").context("logits")?;
        let n = expected.dim(0)?;
        let d = max_abs_diff(&logits.narrow(0, logits.dim(0)? - n, n)?, expected, "logits")?;
        let (mut features, mut at) = (0f32, 0);
        for image in &case.images {
            let want = reference_tensor(&tensors, &case.name, "image_features").context("image features")?;
            let got = model.analysis().image_embeddings(image)?;
            let n = got.dim(0)?;
            features = features.max(max_abs_diff(&got, &want.narrow(0, at, n)?, "image features")?);
            at += n;
        }
        eprintln!(
            "qwen3.5-tiny/{}: {} ids, last logits within {d:e}, image tokens within {features:e}",
            case.name,
            prompt.len()
        );
        ensure!(d < 1e-4 && features < 1e-4, "{}: logits {d}, image tokens {features}", case.name);
    }
    Ok(())
}
