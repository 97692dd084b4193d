//! The small JSON and Jinja files of real Hub checkpoints (tests/fixtures/real_configs, copied
//! with their sources in SOURCES.md; no weights): configs parse into the sizes the checkpoints
//! have, transformers' class defaults fill what the files omit, the image processors give the
//! reference's image-token counts, and the chat templates render.

mod common;

use std::path::PathBuf;

use anyhow::{Context, Result};
use tessera::config::{ConnectorConfig, ProcessorRule, PromptStyle, TextFamily, TowerSpec};
use tessera::families::{InternVlSpec, Mistral3Spec, Qwen2VlSpec};
use tessera::{load_image, ChatTemplate, ContentPart, ImageProcessor, Message, ModelConfig, DEFAULT_MAX_PIXELS};
use tessera_decoder::{Activation, NormStyle};
use tessera_vision::{FeatureLayer, TowerKind};

fn real(name: &str) -> PathBuf {
    common::fixtures().join("real_configs").join(name)
}

fn config(name: &str) -> Result<ModelConfig> {
    Ok(ModelConfig::from_config_file(&real(name).join("config.json"))?)
}

fn hf_vision(cfg: &ModelConfig) -> Result<&TowerSpec> {
    match cfg.vision_spec::<TowerSpec>() {
        Some(v) => Ok(v),
        None => anyhow::bail!("expected a Hugging Face vision config, got {:?}", cfg.vision),
    }
}

fn chelsea() -> Result<tessera::RgbImage> {
    Ok(load_image(&common::fixtures().join("images/chelsea.png"), DEFAULT_MAX_PIXELS)?)
}

fn image_question(text: &str) -> Vec<Message> {
    vec![Message::parts("user", vec![ContentPart::Image, ContentPart::Text { text: text.into() }])]
}

#[test]
fn smolvlm_256m() -> Result<()> {
    let cfg = config("smolvlm-256m-instruct")?;
    assert_eq!((cfg.family, cfg.text_family), ("idefics3", TextFamily::Llama));
    let d = &cfg.decoder;
    assert_eq!((d.hidden_size, d.num_hidden_layers, d.num_attention_heads, d.num_key_value_heads), (576, 30, 9, 3));
    assert_eq!((d.head_dim, d.intermediate_size, d.rope.theta, cfg.vocab_size), (64, 1536, 100_000.0, 49280));
    assert!(!cfg.tie_word_embeddings);
    let v = hf_vision(&cfg)?;
    assert_eq!(
        (v.feature, v.drop_class_token, &v.processor),
        (FeatureLayer::PostNorm, false, &ProcessorRule::Tiled { tokens_per_view: 64 })
    );
    assert_eq!((v.tower.kind, v.tower.hidden_size, v.tower.num_hidden_layers), (TowerKind::Siglip, 768, 12));
    assert_eq!((v.tower.image_size, v.tower.patch_size, v.tower.hidden_act), (512, 16, Activation::GeluTanh));
    assert_eq!((v.image_token_id, &v.connector), (49190, &ConnectorConfig::PixelShuffle { scale_factor: 4 }));
    // A 451×300 photo: longest edge → 2048 (2048×1362), tiles of 512 → 4×3 tiles (2048×1536)
    // plus the global view, 64 tokens each.
    let processor = ImageProcessor::load(&real("smolvlm-256m-instruct"), v, false)?;
    let img = chelsea()?;
    assert_eq!(processor.tokens_for_size(img.height, img.width), 13 * 64);
    let text = processor.placeholder_text(img.height, img.width, "<image>", None);
    assert!(text.starts_with(&format!("<fake_token_around_image><row_1_col_1>{}<fake", "<image>".repeat(64))));
    assert!(text.contains("<row_3_col_4>") && !text.contains("<row_4_"), "3 rows, 4 columns");
    assert_eq!(text.matches("<image>").count(), 13 * 64);
    let template = ChatTemplate::from_model_dir(&real("smolvlm-256m-instruct"))?.context("template")?;
    assert_eq!(
        template.render(&image_question("Describe this image."), true)?,
        "<|im_start|>User:<image>Describe this image.<end_of_utterance>\nAssistant:"
    );
    Ok(())
}

#[test]
fn granite_docling_idefics3_with_a_jinja_template() -> Result<()> {
    let cfg = config("granite-docling-258m")?;
    assert_eq!(cfg.family, "idefics3");
    let v = hf_vision(&cfg)?;
    let processor = ImageProcessor::load(&real("granite-docling-258m"), v, false)?;
    assert_eq!(processor.fixed_tokens(), None);
    let template = ChatTemplate::from_model_dir(&real("granite-docling-258m"))?.context("template")?;
    let rendered = template.render(&image_question("Convert this page to docling."), true)?;
    assert!(rendered.contains("<image>") && rendered.contains("Convert this page to docling."), "{rendered}");
    Ok(())
}

#[test]
fn llava_1_5_7b() -> Result<()> {
    let cfg = config("llava-1.5-7b-hf")?;
    assert_eq!((cfg.family, cfg.text_family, cfg.prompt), ("llava", TextFamily::Llama, PromptStyle::Chat));
    // text_config states only vocab, context and eps: the rest are LlamaConfig's defaults.
    let d = &cfg.decoder;
    assert_eq!((d.hidden_size, d.intermediate_size, d.num_hidden_layers), (4096, 11008, 32));
    assert_eq!((d.num_attention_heads, d.num_key_value_heads, d.head_dim), (32, 32, 128));
    assert_eq!((d.max_position_embeddings, d.rms_norm_eps, cfg.vocab_size), (4096, 1e-5, 32064));
    let v = hf_vision(&cfg)?;
    // CLIP ViT-L/14-336: hidden_act and layer_norm_eps from CLIPVisionConfig's defaults.
    assert_eq!((v.tower.kind, v.tower.hidden_size, v.tower.num_hidden_layers), (TowerKind::Clip, 1024, 24));
    assert_eq!((v.tower.image_size, v.tower.patch_size), (336, 14));
    assert_eq!((v.tower.hidden_act, v.tower.layer_norm_eps), (Activation::QuickGelu, 1e-5));
    // vision_feature_layer −2 of 24 layers → hidden_states[23]; the `default` strategy drops CLS.
    assert_eq!((v.feature, v.drop_class_token), (FeatureLayer::Hidden(23), true));
    assert_eq!(v.connector, ConnectorConfig::Mlp { act: Activation::Gelu, bias: true });
    assert_eq!(v.image_token_id, 32000);
    // Both folder layouts: the Hub's flat preprocessor_config.json, and a transformers-5 save.
    for dir in ["llava-1.5-7b-hf", "llava-1.5-7b-hf-v5"] {
        let processor = ImageProcessor::load(&real(dir), v, false)?;
        assert_eq!(processor.fixed_tokens(), Some(576), "{dir}: 24×24 patches, class token dropped");
        let template = ChatTemplate::from_model_dir(&real(dir))?.context("template")?;
        // The template marks the assistant turn with transformers' {% generation %} tag.
        let mut chat = image_question("What is this?");
        chat.push(Message::parts("assistant", vec![ContentPart::Text { text: "A cat.".into() }]));
        assert_eq!(template.render(&chat, false)?, "USER: <image>\nWhat is this? ASSISTANT: A cat. ");
    }
    Ok(())
}

#[test]
fn llava_interleave_qwen() -> Result<()> {
    let cfg = config("llava-interleave-qwen-7b-hf")?;
    assert_eq!((cfg.family, cfg.text_family), ("llava", TextFamily::Qwen2));
    let d = &cfg.decoder;
    assert!(d.qkv_bias, "Qwen2 has q/k/v biases");
    assert_eq!((d.hidden_size, d.intermediate_size, d.rope.theta, cfg.vocab_size), (4096, 11008, 1e6, 152000));
    let v = hf_vision(&cfg)?;
    assert_eq!((v.tower.kind, v.tower.hidden_size, v.tower.num_hidden_layers), (TowerKind::Siglip, 1152, 26));
    // vision_feature_layer −1 of 26 → the last layer's output (before post_layernorm), `full`.
    assert_eq!((v.feature, v.drop_class_token), (FeatureLayer::Hidden(26), false));
    assert_eq!(v.connector, ConnectorConfig::Mlp { act: Activation::Gelu, bias: true });
    let processor = ImageProcessor::load(&real("llava-interleave-qwen-7b-hf"), v, false)?;
    assert_eq!(processor.fixed_tokens(), Some(27 * 27));
    let template = ChatTemplate::from_model_dir(&real("llava-interleave-qwen-7b-hf"))?.context("template")?;
    let two = vec![Message::parts(
        "user",
        vec![ContentPart::Image, ContentPart::Image, ContentPart::Text { text: "Compare.".into() }],
    )];
    assert_eq!(
        template.render(&two, true)?,
        "<|im_start|>user\n<image><image>\nCompare.<|im_end|>\n<|im_start|>assistant\n"
    );
    Ok(())
}

#[test]
fn paligemma_3b() -> Result<()> {
    let cfg = config("paligemma-3b-pt-224")?;
    assert_eq!((cfg.family, cfg.text_family, cfg.prompt), ("paligemma", TextFamily::Gemma, PromptStyle::PrefixLm));
    let d = &cfg.decoder;
    assert_eq!((d.hidden_size, d.num_hidden_layers, d.num_attention_heads, d.num_key_value_heads), (2048, 18, 8, 1));
    assert_eq!((d.head_dim, d.intermediate_size, cfg.vocab_size), (256, 16384, 257216));
    assert_eq!((d.norm_style, d.hidden_act, d.position_offset), (NormStyle::OnePlusWeight, Activation::GeluTanh, 1));
    assert_eq!(cfg.embed_scale, Some(2048f64.sqrt()));
    assert!(cfg.tie_word_embeddings);
    let v = hf_vision(&cfg)?;
    // vision_config has no image_size: SiglipVisionConfig's 224 → 16×16 patches of 14.
    assert_eq!((v.tower.image_size, v.tower.patch_size, v.tower.num_hidden_layers), (224, 14, 27));
    assert_eq!(v.tower.num_patches(), 256);
    assert_eq!((v.image_token_id, &v.connector), (257152, &ConnectorConfig::Linear));
    assert_eq!(
        v.processor,
        ProcessorRule::Single { tokens: 256, stated_len: Some("image_seq_length"), pan_and_scan: false }
    );
    Ok(())
}

#[test]
fn gemma_3_4b_it() -> Result<()> {
    let cfg = config("gemma-3-4b-it")?;
    assert_eq!((cfg.family, cfg.text_family), ("gemma3", TextFamily::Gemma3));
    let d = &cfg.decoder;
    // text_config names only a few fields: Gemma3TextConfig's defaults fill the rest.
    assert_eq!((d.hidden_size, d.intermediate_size, d.num_hidden_layers), (2560, 10240, 34));
    assert_eq!((d.num_attention_heads, d.num_key_value_heads, d.head_dim), (8, 4, 256));
    assert_eq!((d.rope.theta, d.rope.scaling), (1_000_000.0, tessera_decoder::RopeScaling::Linear { factor: 8.0 }));
    let local = d.local_rope.as_ref().context("local RoPE")?;
    assert_eq!(local.rope.theta, 10_000.0);
    // Every sixth layer is global: 29 of 34 slide over 1024 tokens.
    assert_eq!(cfg.layer_windows.iter().flatten().count(), 29);
    assert!(cfg.layer_windows.iter().flatten().all(|&w| w == 1024));
    assert!(d.qk_norm && d.sandwich_norms && cfg.bidirectional_images);
    // llama.cpp's fixed attention scale for a `gemma3` GGUF (1/√head_dim) is the config's
    // query_pre_attn_scalar 256, not width / heads = 320; the 27B's (62 layers) is width /
    // heads: 5376 / 32 = 168, its config's, not its head_dim 128.
    let rules = TextFamily::Gemma3.gguf_rules();
    assert_eq!(d.query_pre_attn_scalar, Some(256.0));
    assert_eq!(rules.query_pre_attn_scalar(34, 2560, 8, 256), d.query_pre_attn_scalar);
    assert_eq!(rules.query_pre_attn_scalar(62, 5376, 32, 128), Some(168.0));
    assert_eq!((cfg.vocab_size, cfg.eos_token_ids.clone()), (262_208, vec![1, 106]));
    let v = hf_vision(&cfg)?;
    assert_eq!((v.tower.image_size, v.tower.patch_size, v.tower.num_hidden_layers), (896, 14, 27));
    assert_eq!(v.connector, ConnectorConfig::AvgPool { tokens_per_side: 16, norm: NormStyle::OnePlusWeight });
    assert_eq!(v.image_token_id, 262_144);
    let processor = ImageProcessor::load(&real("gemma-3-4b-it"), v, false)?;
    assert_eq!(processor.fixed_tokens(), Some(256));
    let template = ChatTemplate::from_model_dir(&real("gemma-3-4b-it"))?.context("template")?;
    assert_eq!(
        template.render(&image_question("Describe this image."), true)?,
        "<bos><start_of_turn>user\n<start_of_image>Describe this image.<end_of_turn>\n<start_of_turn>model\n"
    );
    Ok(())
}

#[test]
fn qwen2_5_vl_3b_instruct() -> Result<()> {
    // An older config: the text model's fields at the top level, rope_scaling {"type": "mrope"}.
    let cfg = config("qwen2.5-vl-3b-instruct")?;
    assert_eq!((cfg.family, cfg.text_family), ("qwen2_5_vl", TextFamily::Qwen25Vl));
    let d = &cfg.decoder;
    assert_eq!((d.hidden_size, d.intermediate_size, d.num_hidden_layers), (2048, 11008, 36));
    assert_eq!((d.num_attention_heads, d.num_key_value_heads, d.head_dim, d.qkv_bias), (16, 2, 128, true));
    assert_eq!((d.rope.theta, d.max_position_embeddings, cfg.vocab_size), (1_000_000.0, 128_000, 151_936));
    let mrope = d.rope.mrope.context("M-RoPE")?;
    assert_eq!((mrope.section, mrope.interleaved), ([16, 24, 24], false));
    assert!(cfg.tie_word_embeddings && cfg.layer_windows.iter().all(Option::is_none));
    let Some(v) = cfg.vision_spec::<Qwen2VlSpec>() else { anyhow::bail!("a Qwen2-VL image side") };
    let t = &v.tower;
    assert_eq!((t.depth, t.embed_dim, t.hidden_size, t.num_heads, t.patch_size), (32, 1280, 2048, 16, 14));
    let w = t.windows.as_ref().context("windows")?;
    assert_eq!((w.size, w.full_blocks.clone()), (112, vec![7, 15, 23, 31]));
    assert_eq!(v.image_token_id, 151_655);
    // 451×300: smart_resize to 448×308 → 32×22 patches → 16×11 = 176 image tokens.
    let img = chelsea()?;
    assert_eq!(tessera_vision::qwen2_vl::smart_resize(img.height, img.width, 28, 3136, 12_845_056)?, (308, 448));
    let template = ChatTemplate::from_model_dir(&real("qwen2.5-vl-3b-instruct"))?.context("template")?;
    assert_eq!(
        template.render(&image_question("Describe this image."), true)?,
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n\
         <|vision_start|><|image_pad|><|vision_end|>Describe this image.<|im_end|>\n<|im_start|>assistant\n"
    );
    Ok(())
}

#[test]
fn qwen3_vl_2b_instruct() -> Result<()> {
    let cfg = config("qwen3-vl-2b-instruct")?;
    assert_eq!(cfg.family, "qwen3_vl");
    let d = &cfg.decoder;
    assert_eq!((d.hidden_size, d.intermediate_size, d.num_hidden_layers), (2048, 6144, 28));
    assert_eq!((d.num_attention_heads, d.num_key_value_heads, d.head_dim), (16, 8, 128));
    assert!(d.qk_norm && !d.qkv_bias, "Qwen3: q/k norms, no q/k/v biases");
    assert_eq!((d.rope.theta, d.max_position_embeddings, cfg.vocab_size), (5_000_000.0, 262_144, 151_936));
    let mrope = d.rope.mrope.context("M-RoPE")?;
    assert_eq!((mrope.section, mrope.interleaved), ([24, 20, 20], true));
    assert!(cfg.tie_word_embeddings);
    let Some(v) = cfg.vision_spec::<Qwen2VlSpec>() else { anyhow::bail!("a Qwen2-VL-style image side") };
    let t = &v.tower;
    assert_eq!((t.depth, t.embed_dim, t.hidden_size, t.num_heads, t.patch_size), (24, 1024, 2048, 16, 16));
    let q = t.qwen3.as_ref().context("Qwen3-VL's learned positions and DeepStack")?;
    assert_eq!((q.num_position_embeddings, q.deepstack.clone()), (2304, vec![5, 11, 17]));
    assert_eq!(v.image_token_id, 151_655);
    // Its processor states the pixel budget as size.shortest_edge / longest_edge (65536 / 16777216)
    // with factor 16 × 2: a 451×300 photo becomes 448×288 → 28×18 patches → 14×9 = 126 tokens.
    let pre = common::read_json(&real("qwen3-vl-2b-instruct").join("preprocessor_config.json"))?;
    let (min, max) = (pre["size"]["shortest_edge"].as_u64().unwrap(), pre["size"]["longest_edge"].as_u64().unwrap());
    let img = chelsea()?;
    let (h, w) = tessera_vision::qwen2_vl::smart_resize(img.height, img.width, 32, min as usize, max as usize)?;
    assert_eq!((h, w, (h / 32) * (w / 32)), (288, 448, 126));
    // Its own template: no default system prompt (Qwen2.5-VL's had one).
    let template = ChatTemplate::from_model_dir(&real("qwen3-vl-2b-instruct"))?.context("template")?;
    assert_eq!(
        template.render(&image_question("Describe this image."), true)?,
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe this image.<|im_end|>\n\
         <|im_start|>assistant\n"
    );
    Ok(())
}

/// OpenGVLab/InternVL3-1B-hf, rebuilt as transformers' converter writes it (no copy of the Hub
/// files was found; SOURCES.md): a Qwen2.5-0.5B text model with dynamic NTK RoPE (the default
/// frequencies within its 32768 positions), InternViT-300M (24 layers, width 1024, q/k/v biases,
/// no q/k norm) over 448-px tiles, 256 tokens a tile after the 0.5 pixel shuffle.
#[test]
fn internvl3_1b_hf() -> Result<()> {
    let cfg = config("internvl3-1b-hf")?;
    assert_eq!((cfg.family, cfg.text_family), ("internvl", TextFamily::Qwen2));
    let d = &cfg.decoder;
    assert_eq!((d.hidden_size, d.intermediate_size, d.num_hidden_layers), (896, 4864, 24));
    assert_eq!((d.num_attention_heads, d.num_key_value_heads, d.head_dim, d.qkv_bias), (14, 2, 64, true));
    assert_eq!((d.rope.theta, d.max_position_embeddings, cfg.vocab_size), (1_000_000.0, 32_768, 151_674));
    assert_eq!(d.rope.scaling, tessera_decoder::RopeScaling::Default);
    assert_eq!(cfg.eos_token_ids, [151_645]);
    let Some(v) = cfg.vision_spec::<InternVlSpec>() else { anyhow::bail!("an InternVL image side") };
    let t = &v.tower;
    assert_eq!((t.hidden_size, t.intermediate_size, t.num_hidden_layers, t.num_attention_heads), (1024, 4096, 24, 16));
    assert_eq!((t.image_size, t.patch_size, t.attention_bias, t.hidden_act), (448, 14, true, Activation::Gelu));
    assert_eq!((v.scale, v.tokens_per_tile, v.image_token_id), (2, 256, 151_667));
    // A 451×300 photo: a 3×2 grid of 448-px tiles and a thumbnail, 7 × 256 = 1792 image tokens
    // (transformers' processor from the same files: 7 patches, 1792 + <img> + </img>).
    let (tiling, _) = v.processor_in(&real("internvl3-1b-hf"))?;
    let img = chelsea()?;
    assert_eq!((tiling.grid(img.height, img.width), tiling.max_patches), ((3, 2), 12));
    assert_eq!(tiling.views(img.height, img.width) * v.tokens_per_tile, 1792);
    let template = ChatTemplate::from_model_dir(&real("internvl3-1b-hf"))?.context("template")?;
    assert_eq!(
        template.render(&image_question("Describe this image."), true)?,
        "<|im_start|>user\n<IMG_CONTEXT>\nDescribe this image.<|im_end|>\n<|im_start|>assistant\n"
    );
    Ok(())
}

/// mistralai/Mistral-Small-3.1-24B-Instruct-2503 (files from copies in other projects' tests;
/// SOURCES.md): a Mistral text model whose head_dim 128 is not hidden / heads (5120 / 32), RoPE
/// base 1e9, no sliding window; Pixtral (24 layers, width 1024, SiLU, 14-px patches), a 2×2
/// merger. A 451×300 photo fits within 1540 px unscaled and rounds up to 308×476: an 11×17
/// grid, 187 [IMG] + 10 [IMG_BREAK] + [IMG_END] = 198 placeholder tokens (transformers'
/// PixtralProcessor from the same files: scripts/tiny_vlms/mistral3_real.py).
#[test]
fn mistral_small_3_1() -> Result<()> {
    let cfg = config("mistral-small-3.1-24b-instruct-2503")?;
    assert_eq!((cfg.family, cfg.text_family), ("mistral3", TextFamily::Mistral));
    let d = &cfg.decoder;
    assert_eq!((d.hidden_size, d.intermediate_size, d.num_hidden_layers), (5120, 32768, 40));
    assert_eq!((d.num_attention_heads, d.num_key_value_heads, d.head_dim, d.qkv_bias), (32, 8, 128, false));
    assert_eq!((d.rope.theta, d.max_position_embeddings, cfg.vocab_size), (1e9, 131_072, 131_072));
    assert_eq!((d.rms_norm_eps, d.hidden_act), (1e-5, Activation::Silu));
    assert!(cfg.layer_windows.iter().all(Option::is_none), "sliding_window null: global attention");
    let Some(v) = cfg.vision_spec::<Mistral3Spec>() else { anyhow::bail!("a Mistral 3 image side") };
    let t = &v.tower;
    assert_eq!((t.hidden_size, t.intermediate_size, t.num_hidden_layers, t.num_attention_heads), (1024, 4096, 24, 16));
    assert_eq!((t.patch_size, t.hidden_act, t.rope_theta, t.head_dim()), (14, Activation::Silu, 10_000.0, 64));
    assert_eq!((v.merge, v.projector_act, v.projector_bias, v.projector_eps), (2, Activation::Gelu, false, 1e-5));
    assert_eq!(v.image_token_id, 10);
    let rule = v.processor_in(&real("mistral-small-3.1-24b-instruct-2503"))?;
    assert_eq!((rule.max_size, rule.unit), ((1540, 1540), 28));
    let img = chelsea()?;
    assert_eq!(rule.resized(&img), (308, 476));
    assert_eq!(rule.grid(&img), (11, 17));
    assert_eq!((rule.grid(&img).0 * rule.grid(&img).1, rule.prompt_tokens(&img)), (187, 198));
    let template = ChatTemplate::from_model_dir(&real("mistral-small-3.1-24b-instruct-2503"))?.context("template")?;
    let mut chat = vec![Message::parts("system", vec![ContentPart::Text { text: "Be brief.".into() }])];
    chat.extend(image_question("Describe this image."));
    assert!(template
        .render(&chat, true)?
        .ends_with("[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST][IMG]Describe this image.[/INST]"));
    Ok(())
}

/// Qwen/Qwen3.5-0.8B (SOURCES.md: the config.json and the family's chat template, copied from
/// other projects' verbatim copies): 24 layers, three Gated DeltaNet layers to one gated
/// attention layer, partial rotary, (1+w) norms, Qwen3-VL's tower without DeepStack.
#[test]
fn qwen3_5_0_8b() -> Result<()> {
    let cfg = config("qwen3.5-0.8b")?;
    assert_eq!((cfg.family, cfg.text_family), ("qwen3_5", TextFamily::Qwen35));
    let d = &cfg.decoder;
    assert_eq!((d.hidden_size, d.intermediate_size, d.num_hidden_layers), (1024, 3584, 24));
    assert_eq!((d.num_attention_heads, d.num_key_value_heads, d.head_dim), (8, 2, 256));
    assert_eq!((d.rope.theta, d.max_position_embeddings, cfg.vocab_size), (10_000_000.0, 262_144, 248_320));
    assert_eq!((d.rotary_dim, d.attn_output_gate, d.norm_style), (Some(64), true, NormStyle::OnePlusWeight));
    assert!(d.qk_norm && !d.qkv_bias);
    let mrope = d.rope.mrope.context("M-RoPE")?;
    assert_eq!((mrope.section, mrope.interleaved), ([11, 11, 10], true));
    let linear = d.linear.as_ref().context("Gated DeltaNet layers")?;
    let full: Vec<usize> = (0..24).filter(|&i| !linear.layers[i]).collect();
    assert_eq!(full, [3, 7, 11, 15, 19, 23]);
    let g = &linear.delta;
    assert_eq!((g.key_heads, g.value_heads, g.key_head_dim, g.value_head_dim, g.conv_kernel), (16, 16, 128, 128, 4));
    assert_eq!((cfg.tie_word_embeddings, cfg.eos_token_ids.clone()), (true, vec![248_044]));
    let Some(v) = cfg.vision_spec::<Qwen2VlSpec>() else { anyhow::bail!("a Qwen3-VL-style image side") };
    let t = &v.tower;
    assert_eq!((t.depth, t.embed_dim, t.hidden_size, t.num_heads, t.patch_size), (12, 768, 1024, 12, 16));
    let q = t.qwen3.as_ref().context("learned positions")?;
    assert_eq!((q.num_position_embeddings, q.deepstack.len()), (2304, 0));
    assert_eq!(v.image_token_id, 248_056);
    // No 0.8B preprocessor_config.json was found (SOURCES.md): with Qwen3-VL's budget and this
    // config's 16-px patches merged 2×2, a 451×300 photo is 448×288 → 14×9 = 126 tokens, as
    // transformers counts it; the budget does not bind at this size.
    let pre = common::read_json(&real("qwen3-vl-2b-instruct").join("preprocessor_config.json"))?;
    let (min, max) = (pre["size"]["shortest_edge"].as_u64().unwrap(), pre["size"]["longest_edge"].as_u64().unwrap());
    let img = chelsea()?;
    let factor = t.patch_size * t.spatial_merge_size;
    let (h, w) = tessera_vision::qwen2_vl::smart_resize(img.height, img.width, factor, min as usize, max as usize)?;
    assert_eq!((h, w, (h / factor) * (w / factor)), (288, 448, 126));
    // The family's template: the answer opens a thinking block unless enable_thinking is false.
    let template = ChatTemplate::from_model_dir(&real("qwen3.5-0.8b"))?.context("template")?;
    assert_eq!(
        template.render(&image_question("Describe this image."), true)?,
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe this image.<|im_end|>\n\
         <|im_start|>assistant\n<think>\n"
    );
    Ok(())
}

/// google/gemma-4-E2B-it (config and processor settings reconstructed from several projects'
/// transcriptions, the chat template from one; SOURCES.md): a text model of 35 layers, width
/// 1536, 4 sliding layers (head 256, window 512) to 1 full (head 512, proportional RoPE), one
/// key/value head, the last 20 layers reusing keys and values with double-wide MLPs, per-layer
/// inputs of 256, logits capped at 30; the tower (class defaults: 16 layers, patches of 16,
/// 3×3 pooling) with width 768 and clipped linears. A 451×300 photo resizes to 960×624: 60×39
/// patches, 20×13 = 260 soft tokens (transformers' Gemma4ImageProcessorPil from the same file:
/// scripts/tiny_vlms/gemma4_real.py).
#[test]
fn gemma_4_e2b_it() -> Result<()> {
    let cfg = config("gemma-4-e2b-it")?;
    assert_eq!((cfg.family, cfg.text_family), ("gemma4", TextFamily::Gemma4));
    let d = &cfg.decoder;
    assert_eq!((d.hidden_size, d.intermediate_size, d.num_hidden_layers, d.num_attention_heads), (1536, 6144, 35, 8));
    assert_eq!(
        (cfg.vocab_size, cfg.final_logit_softcapping, cfg.embed_scale),
        (262_144, Some(30.0), Some(1536f64.sqrt()))
    );
    let v = d.variants.as_ref().context("Gemma 4's layers differ")?;
    let full: Vec<usize> = (0..35).filter(|&i| cfg.layer_windows[i].is_none()).collect();
    assert_eq!(full, [4, 9, 14, 19, 24, 29, 34]);
    assert!(cfg.layer_windows.iter().flatten().all(|&w| w == 512));
    for (i, s) in v.shapes.iter().enumerate() {
        let is_full = full.contains(&i);
        assert_eq!((s.head_dim, s.num_key_value_heads, s.k_eq_v), (if is_full { 512 } else { 256 }, 1, false));
        // Layers 15..35 reuse layer 13's (sliding) or 14's (full) keys and values.
        let source = (i >= 15).then_some(if is_full { 14 } else { 13 });
        assert_eq!((s.kv_source, s.intermediate_size), (source, if i >= 15 { 12_288 } else { 6144 }), "layer {i}");
    }
    assert_eq!((v.per_layer_input, v.value_norm, v.layer_scalar), (Some(256), true, true));
    let ple = cfg.per_layer_inputs.context("per-layer inputs")?;
    assert_eq!((ple.vocab, ple.dim, ple.pad_id), (262_144, 256, 0));
    let global = tessera_decoder::RopeScaling::Proportional { fraction: 0.25, factor: 1.0 };
    assert_eq!((d.rope.theta, d.rope.scaling), (1e6, global));
    assert_eq!(d.local_rope.as_ref().map(|l| l.rope.theta), Some(1e4));
    let Some(spec) = cfg.vision_spec::<tessera::families::Gemma4Spec>() else { anyhow::bail!("a Gemma 4 image side") };
    let t = &spec.tower;
    assert_eq!((t.hidden_size, t.num_hidden_layers, t.num_attention_heads, t.head_dim), (768, 16, 12, 64));
    assert_eq!((t.patch_size, t.pooling_kernel_size, t.use_clipped_linears, t.standardize), (16, 3, true, false));
    assert_eq!((spec.image_token_id, spec.boi_token_id, spec.eoi_token_id), (258_880, 255_999, 258_882));
    let (image, processor, origin) = (
        common::read_json(&real("gemma-4-e2b-it").join("processor_config.json"))?["image_processor"].clone(),
        serde_json::Value::Null,
        real("gemma-4-e2b-it").join("processor_config.json"),
    );
    let rule = spec.processor(&tessera::families::ProcessorSettings { image, processor, origin })?;
    let img = chelsea()?;
    assert_eq!((rule.max_soft_tokens, rule.resized(&img)?, rule.tokens(&img)?), (280, (624, 960), 260));
    let template = ChatTemplate::from_model_dir(&real("gemma-4-e2b-it"))?.context("template")?;
    assert_eq!(
        template.render(&image_question("Describe this image."), true)?,
        // No tokenizer_config.json here: `bos_token` renders empty.
        "<|turn>user\n<|image|>Describe this image.<turn|>\n<|turn>model\n"
    );
    Ok(())
}

/// openbmb/MiniCPM-V-4_6's processor settings as `MiniCpmV46Spec::processor` reads them.
fn minicpm_v_4_6_rule(spec: &tessera::families::MiniCpmV46Spec) -> Result<tessera::families::MiniCpmProcessorRule> {
    let path = real("minicpm-v-4_6").join("preprocessor_config.json");
    let settings = tessera::families::ProcessorSettings {
        image: common::read_json(&path)?,
        processor: serde_json::Value::Null,
        origin: path,
    };
    Ok(spec.processor(&settings)?)
}

/// openbmb/MiniCPM-V-4_6 (config, preprocessor and generation configs copied from another
/// project's vendored copy of the Hub files; SOURCES.md): Qwen3.5-0.8B's text model (24 layers,
/// three Gated DeltaNet layers to one gated attention layer, 1-D positions), a 27-layer
/// SigLIP-style tower of width 1152 with 14-px patches and its window merger after layer 6, 16×
/// downsampling. A 451×300 photo is one source view, upscaled to 392×560: 28×40 patches / 16 =
/// 70 image tokens behind `<image_id>0</image_id><image>` (transformers' processor from the same
/// files: scripts/tiny_vlms/minicpmv4_6_real.py).
#[test]
fn minicpm_v_4_6() -> Result<()> {
    let cfg = config("minicpm-v-4_6")?;
    assert_eq!((cfg.family, cfg.text_family), ("minicpmv4_6", TextFamily::Qwen35));
    let d = &cfg.decoder;
    assert_eq!((d.hidden_size, d.intermediate_size, d.num_hidden_layers), (1024, 3584, 24));
    assert_eq!((d.num_attention_heads, d.num_key_value_heads, d.head_dim), (8, 2, 256));
    assert_eq!((d.rope.theta, d.max_position_embeddings, cfg.vocab_size), (10_000_000.0, 262_144, 248_094));
    assert_eq!((d.rotary_dim, d.attn_output_gate, d.norm_style), (Some(64), true, NormStyle::OnePlusWeight));
    assert!(d.rope.mrope.is_none(), "MiniCPM-V 4.6 gives its text model 1-D positions");
    let linear = d.linear.as_ref().context("Gated DeltaNet layers")?;
    let full: Vec<usize> = (0..24).filter(|&i| !linear.layers[i]).collect();
    assert_eq!(full, [3, 7, 11, 15, 19, 23]);
    assert_eq!((linear.delta.key_heads, linear.delta.value_heads), (16, 16));
    assert_eq!((cfg.tie_word_embeddings, cfg.eos_token_ids.clone()), (true, vec![248_044]));
    let Some(spec) = cfg.vision_spec::<tessera::families::MiniCpmV46Spec>() else {
        anyhow::bail!("a MiniCPM image side")
    };
    let t = &spec.tower;
    assert_eq!((t.hidden_size, t.intermediate_size, t.num_hidden_layers, t.num_attention_heads), (1152, 4304, 27, 16));
    assert_eq!((t.patch_size, t.image_size, t.insert_layer_id, t.window_kernel), (14, 980, 6, (2, 2)));
    assert_eq!((spec.merge, spec.merge_kernel, spec.merger_times), (4, (2, 2), 1));
    assert_eq!((spec.image_token_id, spec.video_token_id), (248_056, Some(248_057)));
    let rule = minicpm_v_4_6_rule(spec)?;
    let img = chelsea()?;
    let layout = rule.layout(img.height, img.width);
    assert_eq!((layout.grid, layout.source, rule.tokens(img.height, img.width)), (None, (392, 560), 70));
    assert_eq!(
        rule.placeholder_text(img.height, img.width, 0, "<|image_pad|>"),
        format!("<image_id>0</image_id><image>{}</image>", "<|image_pad|>".repeat(70))
    );
    // Its own template (Qwen3.5's turns and tool format): parts joined by newlines, and the
    // answer opens an empty thinking block unless enable_thinking is set (transformers renders
    // the same string from the same file).
    let template = ChatTemplate::from_model_dir(&real("minicpm-v-4_6"))?.context("template")?;
    assert_eq!(
        template.render(&image_question("Describe this image."), true)?,
        "<|im_start|>user\n<|image_pad|>\nDescribe this image.<|im_end|>\n\
         <|im_start|>assistant\n<think>\n\n</think>\n\n"
    );
    Ok(())
}

/// The image token count and placeholder text of MiniCPM-V 4.6's processor for the test images
/// and a sweep of sizes (one view up to the 9-slice cap, 1×1 to 5000×5000, aspect ratios to
/// 100:1), against transformers' (slicing_reference.json, written by
/// scripts/tiny_vlms/minicpmv4_6_real.py; runs of N image tokens written `<|image_pad|>*N`).
#[test]
fn minicpm_v_4_6_slicing_matches_transformers() -> Result<()> {
    let cfg = config("minicpm-v-4_6")?;
    let Some(spec) = cfg.vision_spec::<tessera::families::MiniCpmV46Spec>() else {
        anyhow::bail!("a MiniCPM image side")
    };
    let rule = minicpm_v_4_6_rule(spec)?;
    let reference = common::read_json(&real("minicpm-v-4_6").join("slicing_reference.json"))?;
    let cases = reference["cases"].as_array().context("cases")?;
    assert!(cases.len() >= 40);
    let mut sliced = 0;
    for case in cases {
        let n = |k: &str| case[k].as_u64().map(|v| v as usize).context("a size");
        let (h, w) = (n("height")?, n("width")?);
        let layout = rule.layout(h, w);
        let views: Vec<Vec<usize>> = layout.views().iter().map(|&(vh, vw)| vec![vh / 14, vw / 14]).collect();
        let want: Vec<Vec<usize>> = serde_json::from_value(case["target_sizes"].clone())?;
        assert_eq!(views, want, "{w}x{h}: views in patches");
        let grid: Vec<usize> = serde_json::from_value(case["grid"].clone())?;
        assert_eq!(layout.grid.map_or(vec![0, 0], |(r, c)| vec![r, c]), grid, "{w}x{h}: grid");
        sliced += usize::from(layout.grid.is_some());
        assert_eq!(rule.tokens(h, w), n("image_tokens")?, "{w}x{h}: image tokens");
        // The reference text with its runs `<|image_pad|>*N` expanded, the image token as \u{1}.
        let text = rule.placeholder_text(h, w, 0, "\u{1}");
        let mut expanded = String::new();
        let mut rest = case["text"].as_str().context("text")?;
        while let Some(at) = rest.find("<|image_pad|>*") {
            expanded.push_str(&rest[..at]);
            rest = &rest[at + "<|image_pad|>*".len()..];
            let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            expanded.push_str(&"\u{1}".repeat(rest[..digits].parse()?));
            rest = &rest[digits..];
        }
        expanded.push_str(rest);
        assert_eq!(text, expanded, "{w}x{h}: placeholder text");
    }
    assert!(sliced >= 20, "the sweep slices most sizes ({sliced})");
    Ok(())
}
