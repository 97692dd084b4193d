//! A GGUF file: the layout check, then (when it passes) Candle's reader, the model config and
//! the tokenizer built from the metadata. Any of them may refuse; none may panic or allocate
//! what the file cannot back.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if tessera_decoder::gguf_layout::check_gguf_header(data, data.len() as u64).is_err() {
        return;
    }
    let Ok(content) = candle_core::quantized::gguf_file::Content::read(&mut std::io::Cursor::new(data)) else {
        return;
    };
    let _ = tessera::ModelConfig::from_gguf(&content, Path::new("fuzz.gguf"));
    let _ = tessera::Tokenizer::from_gguf(&content);
});
