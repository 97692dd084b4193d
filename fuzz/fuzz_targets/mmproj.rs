//! An `mmproj` GGUF beside a real text model: the first byte picks one of the tiny pairs the
//! tests ship (its text GGUF), the rest is the mmproj file, loaded as `--mmproj` loads it (its
//! `clip.*` metadata, the projector's family, the pair's checks, the tower's and projector's
//! tensors). It may be refused; it may not panic or allocate what the file cannot back. A
//! file that loads is then asked for one image's features.
#![no_main]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use libfuzzer_sys::fuzz_target;

/// The text halves of the tiny pairs (`tests/fixtures/vlm/<folder>/<folder minus -gguf>-f32.gguf`).
const PAIRS: [&str; 7] = [
    "smolvlm-tiny",
    "llava-tiny",
    "llava-interleave-tiny",
    "qwen2-vl-tiny",
    "qwen2.5-vl-tiny",
    "qwen3-vl-tiny",
    "gemma3-tiny",
];

static NEXT: AtomicU64 = AtomicU64::new(0);

fuzz_target!(|data: &[u8]| {
    let Some((&pick, file)) = data.split_first() else { return };
    let name = PAIRS[pick as usize % PAIRS.len()];
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/vlm");
    let model = root.join(format!("{name}-gguf/{name}-f32.gguf"));
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mmproj = std::env::temp_dir().join(format!("tessera-fuzz-mmproj-{}-{n}.gguf", std::process::id()));
    if std::fs::write(&mmproj, file).is_err() {
        return;
    }
    let opts = tessera::LoadOptions { mmproj: Some(mmproj.clone()), ..Default::default() };
    let loaded = tessera::Model::load(&model.to_string_lossy(), &opts);
    let _ = std::fs::remove_file(&mmproj);
    let Ok(model) = loaded else { return };
    let pixels = (0..40 * 30 * 3).map(|i| (i * 7 % 251) as u8).collect();
    let _ = model.analysis().image_embeddings(&tessera::RgbImage::new(40, 30, pixels));
});
