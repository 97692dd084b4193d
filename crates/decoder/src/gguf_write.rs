//! Writes GGUF files (version 3, little-endian, 32-byte alignment): metadata key/values, tensor
//! infos and the tensors' data, each start aligned, as ggml's `gguf.cpp` and gguf-py's
//! `GGUFWriter` lay them out (llama.cpp 0c1e57098 as vendored by llama-cpp-python 0.3.36;
//! format: `docs/gguf.md` of ggml). One writer for every file tessera writes (a text model, an
//! `mmproj`).
//!
//! The file is written to a temporary file beside the target and renamed over it once
//! complete and synced: an error, a full disk or a kill never leaves a half-written file
//! under the target's name. Tensor data is asked for one tensor at a time, in file order, so a
//! model is never held whole in memory.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use tessera_kernels::QType;

use crate::error::{DecoderError, Result};

/// The alignment of the data section and of every tensor in it (GGUF's default).
pub const ALIGNMENT: usize = 32;

/// A metadata value, of the GGUF value types tessera writes.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    Strs(Vec<String>),
    I32s(Vec<i32>),
    F32s(Vec<f32>),
    Bools(Vec<bool>),
}

/// A tensor's storage type: f32, f16, or one of the kernels' block types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorType {
    F32,
    F16,
    Quant(QType),
}

impl TensorType {
    /// ggml's `ggml_type` number.
    pub fn ggml_id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Quant(q) => match q {
                QType::Q4_0 => 2,
                QType::Q4_1 => 3,
                QType::Q5_0 => 6,
                QType::Q5_1 => 7,
                QType::Q8_0 => 8,
                QType::Q4K => 12,
                QType::Q5K => 13,
                QType::Q6K => 14,
            },
        }
    }

    /// ggml's name (`F32`, `Q4_K`).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Quant(q) => q.name(),
        }
    }

    /// Bytes of a tensor of `dims` (row-major) in this type; `None` when its rows are not
    /// whole blocks.
    pub fn byte_len(self, dims: &[usize]) -> Option<usize> {
        let n: usize = dims.iter().product();
        let cols = dims.last().copied().unwrap_or(1);
        match self {
            Self::F32 => Some(n * 4),
            Self::F16 => Some(n * 2),
            Self::Quant(q) => cols.is_multiple_of(q.block_elems()).then(|| n / q.block_elems() * q.block_bytes()),
        }
    }
}

/// One tensor of a file: its name, its dimensions in row-major order (as Hugging Face and
/// Candle state them; GGUF stores them innermost first, which the writer does) and its type.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorEntry {
    pub name: String,
    pub dims: Vec<usize>,
    pub ty: TensorType,
}

/// A GGUF file being assembled: metadata in insertion order, then tensors.
#[derive(Debug, Clone, Default)]
pub struct GgufFile {
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<TensorEntry>,
}

impl GgufFile {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` (replacing its value in place if it is already set).
    pub fn set(&mut self, key: impl Into<String>, value: MetaValue) {
        let key = key.into();
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key, value)),
        }
    }

    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.metadata
    }

    /// Adds a tensor; its data is asked for when the file is written.
    pub fn add_tensor(&mut self, entry: TensorEntry) {
        self.tensors.push(entry);
    }

    pub fn tensors(&self) -> &[TensorEntry] {
        &self.tensors
    }

    /// Orders the tensors as llama.cpp's loader lists them, and so as llama-quantize writes
    /// them (`weight_name_comparer` in `llama-model-loader.h`): tensors outside `blk.N.` first,
    /// then by block number, each group by name.
    pub fn sort_tensors_as_llama_cpp(&mut self) {
        self.tensors.sort_by(|a, b| llama_cpp_order(&a.name).cmp(&llama_cpp_order(&b.name)));
    }

    /// Writes the file to `path` (through a temporary file beside it, renamed when complete).
    /// `data(i, entry)` gives tensor `i`'s bytes, in file order; a length other than the
    /// type's is an error. Returns the file's size in bytes.
    pub fn write(&self, path: &Path, data: &mut dyn FnMut(usize, &TensorEntry) -> Result<Vec<u8>>) -> Result<u64> {
        let err = |reason: String| DecoderError::WeightFile { path: path.to_path_buf(), reason };
        let mut offsets = Vec::with_capacity(self.tensors.len());
        let mut offset = 0usize;
        for (i, t) in self.tensors.iter().enumerate() {
            if self.tensors[..i].iter().any(|o| o.name == t.name) {
                return Err(err(format!("tensor `{}` twice", t.name)));
            }
            let len = t.ty.byte_len(&t.dims).ok_or_else(|| {
                err(format!("tensor `{}` {:?}: rows are not whole {} blocks", t.name, t.dims, t.ty.name()))
            })?;
            offsets.push(offset);
            offset += len.next_multiple_of(ALIGNMENT);
        }
        let mut header = Vec::new();
        header.extend_from_slice(b"GGUF");
        header.extend_from_slice(&3u32.to_le_bytes());
        header.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        header.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_str(&mut header, key);
            put_value(&mut header, value);
        }
        for (t, off) in self.tensors.iter().zip(&offsets) {
            put_str(&mut header, &t.name);
            header.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in t.dims.iter().rev() {
                header.extend_from_slice(&(*d as u64).to_le_bytes());
            }
            header.extend_from_slice(&t.ty.ggml_id().to_le_bytes());
            header.extend_from_slice(&(*off as u64).to_le_bytes());
        }
        header.resize(header.len().next_multiple_of(ALIGNMENT), 0);

        let tmp = TempFile::create(path)?;
        let mut out = BufWriter::with_capacity(1 << 20, &tmp.file);
        let io = |e: std::io::Error| err(e.to_string());
        out.write_all(&header).map_err(io)?;
        for (i, t) in self.tensors.iter().enumerate() {
            let bytes = data(i, t)?;
            let want = t.ty.byte_len(&t.dims).unwrap_or(0);
            if bytes.len() != want {
                return Err(err(format!(
                    "tensor `{}` has {} bytes of data, its type takes {want}",
                    t.name,
                    bytes.len()
                )));
            }
            out.write_all(&bytes).map_err(io)?;
            out.write_all(&[0u8; ALIGNMENT][..want.next_multiple_of(ALIGNMENT) - want]).map_err(io)?;
        }
        out.flush().map_err(io)?;
        drop(out);
        tmp.commit()
    }
}

/// A shape as ggml keeps it (`ggml_n_dims`): dimensions past a tensor's last one other than 1
/// are implicit, so llama-quantize writes a `(1, 1, d)` class embedding as `(d)`. Outermost
/// first, as tessera's shapes are; at least one dimension stays (a scalar is `(1)`).
pub fn ggml_dims(dims: &[usize]) -> &[usize] {
    if dims.is_empty() {
        return &[1];
    }
    let ones = dims.iter().take_while(|&&n| n == 1).count();
    &dims[ones.min(dims.len().saturating_sub(1))..]
}

/// The sort key of llama.cpp's tensor order ([`GgufFile::sort_tensors_as_llama_cpp`]): the
/// block number (-1 outside `blk.N.`), then the name.
pub fn llama_cpp_order(name: &str) -> (i64, &str) {
    let layer = name.strip_prefix("blk.").and_then(|rest| rest.split('.').next()).and_then(|n| n.parse().ok());
    (layer.unwrap_or(-1), name)
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// GGUF's value type numbers: UINT32 4, INT32 5, FLOAT32 6, BOOL 7, STRING 8, ARRAY 9.
fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    let array = |out: &mut Vec<u8>, ty: u32, n: usize| {
        out.extend_from_slice(&9u32.to_le_bytes());
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(&(n as u64).to_le_bytes());
    };
    match v {
        MetaValue::U32(x) => {
            out.extend_from_slice(&4u32.to_le_bytes());
            out.extend_from_slice(&x.to_le_bytes());
        }
        MetaValue::I32(x) => {
            out.extend_from_slice(&5u32.to_le_bytes());
            out.extend_from_slice(&x.to_le_bytes());
        }
        MetaValue::F32(x) => {
            out.extend_from_slice(&6u32.to_le_bytes());
            out.extend_from_slice(&x.to_le_bytes());
        }
        MetaValue::Bool(x) => {
            out.extend_from_slice(&7u32.to_le_bytes());
            out.push(u8::from(*x));
        }
        MetaValue::Str(s) => {
            out.extend_from_slice(&8u32.to_le_bytes());
            put_str(out, s);
        }
        MetaValue::Strs(items) => {
            array(out, 8, items.len());
            items.iter().for_each(|s| put_str(out, s));
        }
        MetaValue::I32s(items) => {
            array(out, 5, items.len());
            items.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
        }
        MetaValue::F32s(items) => {
            array(out, 6, items.len());
            items.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
        }
        MetaValue::Bools(items) => {
            array(out, 7, items.len());
            items.iter().for_each(|x| out.push(u8::from(*x)));
        }
    }
}

/// A file being written beside `target` under a hidden temporary name; removed when dropped
/// before [`commit`](Self::commit), which syncs it and renames it to the target.
struct TempFile {
    file: File,
    tmp: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl TempFile {
    fn create(target: &Path) -> Result<Self> {
        let name = target
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| DecoderError::WeightFile { path: target.to_path_buf(), reason: "not a file name".into() })?;
        let tmp = target.with_file_name(format!(".{name}.{}.partial", std::process::id()));
        let file = File::create(&tmp).map_err(|e| DecoderError::WeightFile {
            path: target.to_path_buf(),
            reason: format!("cannot create {}: {e}", tmp.display()),
        })?;
        Ok(Self { file, tmp, target: target.to_path_buf(), committed: false })
    }

    fn commit(mut self) -> Result<u64> {
        let err = |e: std::io::Error| DecoderError::WeightFile { path: self.target.clone(), reason: e.to_string() };
        self.file.sync_all().map_err(err)?;
        let len = self.file.metadata().map_err(err)?.len();
        std::fs::rename(&self.tmp, &self.target).map_err(err)?;
        self.committed = true;
        Ok(len)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// A tensor's f32 values `x` (row-major, `dims`) stored as `ty`: little-endian f32, f16 rounded
/// to nearest (ggml's `ggml_fp32_to_fp16_row`), or the blocks llama-quantize writes (ggml's
/// reference quantizers, [`tessera_kernels::quantize`]) on the kernels' threads.
pub fn encode(ty: TensorType, x: &[f32], dims: &[usize]) -> std::result::Result<Vec<u8>, String> {
    let n: usize = dims.iter().product();
    if x.len() != n {
        return Err(format!("{} values for a {dims:?} tensor", x.len()));
    }
    match ty {
        TensorType::F32 => Ok(x.iter().flat_map(|v| v.to_le_bytes()).collect()),
        TensorType::F16 => {
            let mut h = vec![half::f16::ZERO; n];
            tessera_kernels::ops::f32_to_f16(x, &mut h).map_err(|e| e.to_string())?;
            Ok(h.iter().flat_map(|v| v.to_le_bytes()).collect())
        }
        TensorType::Quant(q) => {
            let cols = dims.last().copied().unwrap_or(1);
            let pool = tessera_kernels::ThreadPool::global();
            tessera_kernels::quantize::quantize_rows(pool, q, x, n / cols.max(1), cols).map_err(|e| e.to_string())
        }
    }
}

/// The row order llama.cpp's converter stores Llama's q/k projections in, for its interleaved
/// RoPE (`LlamaModel.permute` in `conversion/llama.py`): row `h·d + 2i + j` of the result is row
/// `h·d + j·d/2 + i` of `x`, a `(rows, cols)` row-major matrix of `heads` heads of `d` rows.
/// `x` unchanged when the heads do not divide the rows into even halves.
pub fn permute_for_interleaved_rope(x: &[f32], rows: usize, cols: usize, heads: usize) -> Vec<f32> {
    if heads == 0 || !rows.is_multiple_of(heads) || !(rows / heads).is_multiple_of(2) || x.len() != rows * cols {
        return x.to_vec();
    }
    let d = rows / heads;
    let mut out = vec![0f32; x.len()];
    for r in 0..rows {
        let (h, i, j) = (r / d, (r % d) / 2, r % 2);
        let from = h * d + j * d / 2 + i;
        out[r * cols..(r + 1) * cols].copy_from_slice(&x[from * cols..(from + 1) * cols]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("tessera-gguf-write-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap_or(());
        d
    }

    #[test]
    fn ggml_dims_drops_outer_ones_but_keeps_one_dimension() {
        assert_eq!(ggml_dims(&[1, 1, 8]), &[8]);
        assert_eq!(ggml_dims(&[4, 1, 8]), &[4, 1, 8]);
        assert_eq!(ggml_dims(&[1, 1]), &[1]);
        assert_eq!(ggml_dims(&[]), &[1]);
    }

    /// A file of every value type and two tensors reads back through Candle's reader and
    /// passes tessera's layout check (aligned, packed, no gaps).
    #[test]
    fn a_written_file_reads_back() -> Result<()> {
        let mut f = GgufFile::new();
        f.set("general.architecture", MetaValue::Str("llama".into()));
        f.set("a.u32", MetaValue::U32(7));
        f.set("a.i32", MetaValue::I32(-3));
        f.set("a.f32", MetaValue::F32(0.5));
        f.set("a.bool", MetaValue::Bool(true));
        f.set("a.strs", MetaValue::Strs(vec!["x".into(), "yz".into()]));
        f.set("a.i32s", MetaValue::I32s(vec![1, -2]));
        f.set("a.f32s", MetaValue::F32s(vec![0.25]));
        f.set("a.bools", MetaValue::Bools(vec![true, false]));
        f.set("a.u32", MetaValue::U32(8));
        f.add_tensor(TensorEntry { name: "w".into(), dims: vec![2, 32], ty: TensorType::Quant(QType::Q8_0) });
        f.add_tensor(TensorEntry { name: "b".into(), dims: vec![3], ty: TensorType::F32 });
        let path = dir().join("one.gguf");
        let q = vec![0u8; 68];
        let b: Vec<u8> = [1f32, 2., 3.].iter().flat_map(|x| x.to_le_bytes()).collect();
        f.write(&path, &mut |i, _| Ok(if i == 0 { q.clone() } else { b.clone() }))?;
        crate::gguf_layout::check_gguf_layout(&path)?;
        let content = crate::weights::read_gguf(&path)?;
        assert_eq!(content.metadata.len(), 9, "a key set twice is written once");
        assert_eq!(content.metadata["a.u32"].to_u32().ok(), Some(8));
        assert_eq!(content.metadata["a.i32"].to_i32().ok(), Some(-3));
        assert_eq!(content.metadata["a.strs"].to_vec().map(|v| v.len()).ok(), Some(2));
        let bools = content.metadata["a.bools"].to_vec().map(|v| v.iter().map(|b| b.to_bool().ok()).collect());
        assert_eq!(bools.ok(), Some(vec![Some(true), Some(false)]));
        assert_eq!(content.tensor_infos["w"].shape.dims(), [2, 32]);
        assert_eq!(content.tensor_infos["b"].offset, 96, "68 bytes padded to 32");
        std::fs::remove_file(&path).ok();
        Ok(())
    }

    /// A failing tensor leaves neither the target nor the temporary file behind, and an
    /// existing target untouched.
    #[test]
    fn a_failed_write_leaves_no_file() -> Result<()> {
        let path = dir().join("failed.gguf");
        std::fs::write(&path, b"old").map_err(|e| DecoderError::Config(e.to_string()))?;
        let mut f = GgufFile::new();
        f.add_tensor(TensorEntry { name: "b".into(), dims: vec![3], ty: TensorType::F32 });
        let e = f.write(&path, &mut |_, _| Err(DecoderError::Config("disk full".into())));
        assert!(e.is_err());
        assert_eq!(std::fs::read(&path).ok().as_deref(), Some(&b"old"[..]));
        let e = f.write(&path, &mut |_, _| Ok(vec![0u8; 5])).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("`b` has 5 bytes") && e.contains("failed.gguf"), "{e}");
        let partial = |e: &std::fs::DirEntry| e.file_name().to_string_lossy().contains("failed.gguf.");
        let left = std::fs::read_dir(dir()).map(|d| d.flatten().filter(partial).count()).unwrap_or(usize::MAX);
        assert_eq!(left, 0, "temporary files left behind");
        std::fs::remove_file(&path).ok();
        Ok(())
    }

    #[test]
    fn tensors_sort_as_llama_cpps_loader() {
        let mut f = GgufFile::new();
        for name in ["blk.10.a", "token_embd.weight", "blk.2.b", "blk.2.a", "output_norm.weight", "v.blk.0.x"] {
            f.add_tensor(TensorEntry { name: name.into(), dims: vec![1], ty: TensorType::F32 });
        }
        f.sort_tensors_as_llama_cpp();
        let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["output_norm.weight", "token_embd.weight", "v.blk.0.x", "blk.2.a", "blk.2.b", "blk.10.a"]);
    }

    /// One head of 4 rows: rows (0, 1, 2, 3) → (0, 2, 1, 3), the halves interleaved.
    #[test]
    fn the_rope_permutation_interleaves_each_heads_halves() {
        let x: Vec<f32> = (0..8).map(|v| v as f32).collect();
        assert_eq!(permute_for_interleaved_rope(&x, 4, 2, 1), [0., 1., 4., 5., 2., 3., 6., 7.]);
        assert_eq!(permute_for_interleaved_rope(&x, 4, 2, 2), x, "heads of 2 rows are unchanged");
    }
}
