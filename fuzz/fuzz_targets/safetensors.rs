//! A safetensors file: the header check, then (when it passes) Candle reading every tensor.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if tessera_decoder::weights::check_safetensors_header(data, data.len() as u64).is_err() {
        return;
    }
    let _ = candle_core::safetensors::load_buffer(data, &candle_core::Device::Cpu);
});
