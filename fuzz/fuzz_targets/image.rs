//! Image bytes in any format the engine decodes, under a 4-megapixel limit, then resized and
//! normalised as a processor does.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(img) = tessera_vision::decode_image(data, Path::new("fuzz-image"), 4_000_000) else { return };
    let cfg: tessera_vision::PreprocessConfig = serde_json::from_value(serde_json::json!({
        "size": {"height": 32, "width": 32},
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5]
    }))
    .expect("a valid processor config");
    let _ = tessera_vision::preprocess(&img, &cfg, &candle_core::Device::Cpu);
});
