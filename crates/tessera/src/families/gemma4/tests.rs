//! Gemma 4's config rules (unit tests of [`super`]).

use std::path::Path;

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
