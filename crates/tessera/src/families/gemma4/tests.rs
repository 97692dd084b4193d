//! Gemma 4's config rules (unit tests of [`super`]).

use std::path::Path;

use candle_core::quantized::gguf_file;
use serde_json::json;

use crate::families::ModelConfig;

fn resolve(text: serde_json::Value) -> Result<ModelConfig, String> {
    let config = json!({"model_type": "gemma4", "text_config": text});
    ModelConfig::from_config_json(&config, Path::new("config.json")).map_err(|e| e.to_string())
}

#[test]
fn class_defaults_and_what_is_not_run_are_named() -> Result<(), String> {
    // No text_config: Gemma4TextConfig's defaults (30 layers, every 6th full, PLE of 256).
    let cfg = resolve(json!({}))?;
    let v = cfg.decoder.variants.as_ref().ok_or("variants")?;
    assert_eq!(
        (cfg.decoder.num_hidden_layers, v.per_layer_input, cfg.per_layer_inputs.map(|p| p.dim)),
        (30, Some(256), Some(256))
    );
    assert_eq!((v.shapes[5].head_dim, v.shapes[4].head_dim, cfg.layer_windows[0]), (512, 256, Some(512)));
    // transformers 5.23's per_layer_config in place of global_head_dim.
    let cfg = resolve(json!({"num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"],
                             "per_layer_config": {"1": {"head_dim": 64}}, "hidden_size_per_layer_input": null}))?;
    let v = cfg.decoder.variants.as_ref().ok_or("variants")?;
    assert_eq!((v.shapes[0].head_dim, v.shapes[1].head_dim, cfg.per_layer_inputs), (256, 64, None));
    let e = resolve(json!({"enable_moe_block": true})).unwrap_err();
    assert!(e.contains("enable_moe_block") && e.contains("config.json"), "{e}");
    let e = resolve(json!({"use_bidirectional_attention": "all"})).unwrap_err();
    assert!(e.contains("use_bidirectional_attention \"all\""), "{e}");
    let e = resolve(json!({"num_hidden_layers": 2, "per_layer_config": {"7": {"head_dim": 64}}})).unwrap_err();
    assert!(e.contains("per_layer_config names layer `7`"), "{e}");
    Ok(())
}

/// The pair fixture's `gemma4` text GGUF header with `edit` applied, read as tessera reads it.
fn from_edited_gguf(edit: impl FnOnce(&mut std::collections::HashMap<String, gguf_file::Value>)) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/vlm/gemma4-pair-tiny-gguf/gemma4-pair-tiny-f32.gguf");
    let mut file = std::fs::File::open(&path).expect("the fixture");
    let mut content = gguf_file::Content::read(&mut file).expect("a GGUF");
    edit(&mut content.metadata);
    match super::gguf::text_config(&content, &path) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

/// Each key the text GGUF's reader checks is refused in one line naming it and the file.
#[test]
fn bad_gemma4_text_keys_are_named() {
    use gguf_file::Value::{Array, Bool, U32};
    assert_eq!(from_edited_gguf(|_| {}), "", "the fixture as written reads");
    let widths = [128, 96, 128, 256, 256, 256].map(U32).to_vec();
    let cases = [
        ("attention.value_length", U32(3)),
        ("rope.dimension_count", U32(2)),
        ("feed_forward_length", Array(widths)),
        // The last layer sliding, then too few flags.
        ("attention.sliding_window_pattern", Array(vec![Bool(true); 6])),
        ("attention.sliding_window_pattern", Array(vec![Bool(true)])),
        ("attention.head_count_kv", Array(vec![U32(1)])),
    ];
    for (key, value) in cases {
        let key = format!("gemma4.{key}");
        let e = from_edited_gguf(|md| drop(md.insert(key.clone(), value)));
        assert!(e.contains(&key) && e.contains("gemma4-pair-tiny-f32.gguf") && !e.contains('\n'), "{key}: {e}");
    }
}
