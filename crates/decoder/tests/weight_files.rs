//! Weight files that change under a load (issue 43, point 3): a safetensors file truncated after
//! it was opened gives an error naming the file, where a memory map gave SIGBUS; a file rewritten
//! in place, replaced by a rename, or cut short is refused by `Weights::check_unchanged`, which
//! `Model::load` calls once everything is read; an untouched file passes. Copies of the shipped
//! shapes model and of a tiny GGUF fixture, in a scratch folder.

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use candle_core::{DType, Device};
use tessera_decoder::{GgufMode, Weights};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A fresh copy of `from` (relative to the repository) in a scratch folder of its own.
fn copy(from: &str, case: &str) -> Result<PathBuf> {
    let dir = root().join("target/test-scratch/weight-files").join(case);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let to = dir.join(Path::new(from).file_name().context("a file name")?);
    std::fs::copy(root().join(from), &to)?;
    Ok(to)
}

/// A tensor of a safetensors header: name, shape, and data range relative to the header's end.
type Stored = (String, Vec<usize>, u64, u64);

/// Where the data starts, and the header's tensors in file order.
fn tensors(path: &Path) -> Result<(u64, Vec<Stored>)> {
    let bytes = std::fs::read(path)?;
    let n = u64::from_le_bytes(bytes[..8].try_into()?);
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n as usize])?;
    let mut out = Vec::new();
    for (name, t) in header.as_object().context("a header object")? {
        if name == "__metadata__" {
            continue;
        }
        let shape = t["shape"].as_array().context("shape")?.iter().map(|d| d.as_u64().unwrap_or(0) as usize).collect();
        let range = t["data_offsets"].as_array().context("offsets")?;
        out.push((name.clone(), shape, range[0].as_u64().unwrap_or(0), range[1].as_u64().unwrap_or(0)));
    }
    out.sort_by_key(|t| t.2);
    Ok((8 + n, out))
}

fn message(r: Result<impl Sized, tessera_decoder::DecoderError>) -> Result<String> {
    match r {
        Ok(_) => anyhow::bail!("accepted"),
        Err(e) => Ok(e.to_string()),
    }
}

const SHAPES: &str = "models/shapes-vlm/model.safetensors";

#[test]
fn a_safetensors_file_cut_short_after_opening_is_an_error_naming_it_not_a_crash() -> Result<()> {
    let path = copy(SHAPES, "truncated")?;
    let (start, list) = tensors(&path)?;
    let weights = Weights::from_safetensors(std::slice::from_ref(&path), DType::F32, &Device::Cpu)?;
    let (first, last) = (list.first().context("tensors")?, list.last().context("tensors")?);
    // Cut in the middle of the last tensor: the first still reads, the last does not.
    std::fs::OpenOptions::new().write(true).open(&path)?.set_len(start + (last.2 + last.3) / 2)?;
    weights.get(&first.1, &first.0)?;
    let err = message(weights.get(&last.1, &last.0))?;
    ensure!(err.contains(&last.0) && err.contains("model.safetensors"), "{err}");
    ensure!(err.contains("did it shrink while loading?"), "{err}");
    let err = message(weights.check_unchanged())?;
    ensure!(err.contains("changed while the model was being loaded") && err.contains("bytes when opened"), "{err}");
    Ok(())
}

#[test]
fn a_file_rewritten_in_place_or_replaced_is_refused_and_an_untouched_one_passes() -> Result<()> {
    // Untouched: every tensor reads, and nothing is reported.
    let path = copy(SHAPES, "untouched")?;
    let (_, list) = tensors(&path)?;
    let weights = Weights::from_safetensors(std::slice::from_ref(&path), DType::F32, &Device::Cpu)?;
    for (name, shape, _, _) in &list {
        weights.get(shape, name)?;
    }
    weights.check_unchanged()?;

    // Rewritten in place, same length (after the file system's timestamp granularity, a few ms).
    let path = copy(SHAPES, "rewritten")?;
    let weights = Weights::from_safetensors(std::slice::from_ref(&path), DType::F32, &Device::Cpu)?;
    std::thread::sleep(Duration::from_millis(50));
    let mut f = std::fs::OpenOptions::new().write(true).open(&path)?;
    f.seek(SeekFrom::End(-16))?;
    f.write_all(&[0x7f; 16])?;
    drop(f);
    let err = message(weights.check_unchanged())?;
    ensure!(err.contains("model.safetensors") && err.contains("rewritten"), "{err}");

    // Replaced by a rename (as a download or a copy tool does): what was opened is still read,
    // whole, but the path names another file now.
    let path = copy(SHAPES, "replaced")?;
    let (_, list) = tensors(&path)?;
    let weights = Weights::from_safetensors(std::slice::from_ref(&path), DType::F32, &Device::Cpu)?;
    let (name, shape, _, _) = &list[0];
    let before = weights.get(shape, name)?.flatten_all()?.to_vec1::<f32>()?;
    let other = path.with_extension("new");
    std::fs::write(&other, b"another file")?;
    std::fs::rename(&other, &path)?;
    ensure!(weights.get(shape, name)?.flatten_all()?.to_vec1::<f32>()? == before);
    let err = message(weights.check_unchanged())?;
    ensure!(err.contains("replaced by another file"), "{err}");
    Ok(())
}

#[test]
fn a_gguf_file_cut_short_after_opening_is_an_error_and_refused() -> Result<()> {
    let path = copy("tests/fixtures/vlm/smolvlm-tiny-gguf/smolvlm-tiny-f32.gguf", "gguf")?;
    let weights = Weights::from_gguf(&path, GgufMode::Dequantized, DType::F32, &Device::Cpu)?;
    weights.check_unchanged()?;
    let len = std::fs::metadata(&path)?.len();
    std::fs::OpenOptions::new().write(true).open(&path)?.set_len(len - 4096)?;
    let err = message(weights.check_unchanged())?;
    ensure!(err.contains("smolvlm-tiny-f32.gguf") && err.contains(&format!("{len} bytes when opened")), "{err}");
    Ok(())
}

/// Float tensors read as f32 (widened on every thread of the pool) are Candle's widening of the
/// stored values bit for bit — f16 and bf16 (subnormals, infinities and NaN among them) and f32,
/// from safetensors and from GGUF.
#[test]
fn float_tensors_widen_to_f32_bit_for_bit_from_safetensors_and_gguf() -> Result<()> {
    use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
    use candle_core::Tensor;
    let dir = root().join("target/test-scratch/weight-files/widen");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    // 96 rows (more than one thread's share) of 40, the odd values at the front.
    let mut values: Vec<f32> =
        vec![0.0, -0.0, 1e-7, -6e-8, 65504.0, 1e6, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 3.3e38];
    values.extend((values.len()..96 * 40).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 37.0));
    let base = Tensor::from_vec(values, (96, 40), &Device::Cpu)?;
    let bits = |t: &Tensor| -> Result<Vec<u32>> {
        Ok(t.flatten_all()?.to_vec1::<f32>()?.into_iter().map(f32::to_bits).collect())
    };
    for dtype in [DType::F16, DType::BF16, DType::F32] {
        let stored = base.to_dtype(dtype)?;
        let want = bits(&stored.to_dtype(DType::F32)?)?;
        let st = dir.join(format!("{dtype:?}.safetensors"));
        candle_core::safetensors::save(&std::collections::HashMap::from([("w".to_string(), stored.clone())]), &st)?;
        let got = Weights::from_safetensors(&[st], DType::F32, &Device::Cpu)?.get(&[96, 40], "w")?;
        ensure!(bits(&got)? == want, "{dtype:?} from safetensors differs from Candle's widening");
        if dtype == DType::BF16 {
            continue; // Candle's GGUF writer takes f32 and f16 only.
        }
        let gg = dir.join(format!("{dtype:?}.gguf"));
        let q = QTensor::quantize(
            &stored.to_dtype(DType::F32)?,
            if dtype == DType::F16 { GgmlDType::F16 } else { GgmlDType::F32 },
        )?;
        gguf_file::write(&mut std::fs::File::create(&gg)?, &[], &[("token_embd.weight", &q)])?;
        let gguf = Weights::from_gguf(&gg, GgufMode::Dequantized, DType::F32, &Device::Cpu)?;
        let got = gguf.get(&[96, 40], "model.embed_tokens.weight")?;
        ensure!(bits(&got)? == want, "{dtype:?} from GGUF differs from Candle's widening");
    }
    Ok(())
}
