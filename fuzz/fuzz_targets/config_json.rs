//! `config.json` and `preprocessor_config.json`: the same bytes read as a model config (every
//! family's resolution and `DecoderConfig::validate`) and as an image processor config (its
//! validation, then a small image through it).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    let _ = tessera::ModelConfig::from_config_json(&json, Path::new("config.json"));
    let Ok(cfg) = serde_json::from_value::<tessera_vision::PreprocessConfig>(json) else { return };
    if cfg.validate().is_ok() {
        let img = tessera_vision::RgbImage::new(7, 5, vec![128; 7 * 5 * 3]);
        let _ = tessera_vision::preprocess(&img, &cfg, &candle_core::Device::Cpu);
    }
});
