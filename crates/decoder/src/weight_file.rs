//! A checkpoint's files as the loader reads them: safetensors files are read with `read` at the
//! tensors' offsets (after their headers are checked against their sizes), not memory-mapped,
//! and every weight file (safetensors or GGUF) remembers what it was when it was opened — its
//! length, modification time and inode — so that a file changed during a load is noticed.
//!
//! Why not a memory map (Candle's `MmapedSafetensors`): a mapped file that another process
//! truncates turns the next read of a page past its new end into SIGBUS, which kills the process
//! with no error to report; `read` gets a short read instead, reported as an error naming the
//! tensor and the file. Reading costs the same copy the mapped loader made (Candle copies every
//! tensor out of the map) without the map's page-cache pages counted against the process.
//!
//! What is detected ([`WeightFile::check_unchanged`], called once the whole model is loaded):
//! the file shrunk or grew, was rewritten in place (its modification time moved), or its path
//! now names another file (replaced by a rename). Not detected: a rewrite that keeps the length
//! and lands within the file system's timestamp granularity of the open (a few milliseconds), or
//! that sets the old modification time back; nothing is hashed. Once loaded, weights live in
//! memory and the files are no longer read.

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use candle_core::{DType, Device, Tensor};

use crate::error::{DecoderError, Result};

/// What a file was when it was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileIdentity {
    len: u64,
    modified: Option<SystemTime>,
    /// (device, inode) where the platform has them.
    node: Option<(u64, u64)>,
}

impl FileIdentity {
    fn of(m: &Metadata) -> Self {
        #[cfg(unix)]
        let node = {
            use std::os::unix::fs::MetadataExt;
            Some((m.dev(), m.ino()))
        };
        #[cfg(not(unix))]
        let node = None;
        Self { len: m.len(), modified: m.modified().ok(), node }
    }

    /// How `now` differs from `self`, in words (None: it does not).
    fn change(&self, now: &Self) -> Option<String> {
        if self.node != now.node {
            Some("replaced by another file".into())
        } else if self.len != now.len {
            Some(format!("{} bytes when opened, {} now", self.len, now.len))
        } else if self.modified != now.modified {
            Some("rewritten (its modification time moved)".into())
        } else {
            None
        }
    }
}

/// One open weight file and what it was when opened.
pub(crate) struct WeightFile {
    pub(crate) path: PathBuf,
    file: Mutex<File>,
    /// The same open file for positional reads ([`read_at`](Self::read_at) on Unix), which
    /// several threads make at once and which move no shared cursor.
    #[cfg(unix)]
    positional: File,
    identity: FileIdentity,
}

impl WeightFile {
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let err = |e: std::io::Error| DecoderError::WeightFile { path: path.to_path_buf(), reason: e.to_string() };
        let file = File::open(path).map_err(err)?;
        let identity = FileIdentity::of(&file.metadata().map_err(err)?);
        #[cfg(unix)]
        let positional = file.try_clone().map_err(err)?;
        Ok(Self {
            path: path.to_path_buf(),
            file: Mutex::new(file),
            #[cfg(unix)]
            positional,
            identity,
        })
    }

    pub(crate) fn len(&self) -> u64 {
        self.identity.len
    }

    /// The file, for one reader at a time (reads seek).
    pub(crate) fn lock(&self) -> std::io::Result<std::sync::MutexGuard<'_, File>> {
        self.file.lock().map_err(|_| std::io::Error::other("file lock poisoned"))
    }

    /// Runs `f` on the file under [`lock`](Self::lock).
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut File) -> std::io::Result<T>) -> std::io::Result<T> {
        f(&mut *self.lock()?)
    }

    /// Fills `buf` from `offset`; a file that ends first is an error that says how long it is now.
    /// Threads may read at once (on Unix: `pread`, no lock).
    pub(crate) fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::result::Result<(), String> {
        #[cfg(unix)]
        let read = std::os::unix::fs::FileExt::read_exact_at(&self.positional, buf, offset);
        #[cfg(not(unix))]
        let read = self.with(|f| f.seek(SeekFrom::Start(offset)).and_then(|_| f.read_exact(buf)));
        read.map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                let now = self.with(|f| f.metadata()).map(|m| m.len()).unwrap_or(0);
                format!(
                    "the file ends before bytes {offset}..{}: it is {now} bytes now, {} when opened (did it shrink while \
                     loading?)",
                    offset + buf.len() as u64,
                    self.identity.len
                )
            } else {
                e.to_string()
            }
        })
    }

    /// `shape`'s values, stored as `kind` from `offset`, as an f32 tensor: one read, then
    /// widened (exactly) on every thread of the global pool — Candle's readers widen on one
    /// thread, a second of a 2B model's f16 vision tower.
    pub(crate) fn read_f32(&self, offset: u64, kind: Float, shape: &[usize], device: &Device) -> StrResult<Tensor> {
        let len: usize = shape.iter().product();
        let cols = shape.last().copied().unwrap_or(1).max(1);
        let mut out: Vec<f32> = Vec::new();
        out.try_reserve_exact(len).map_err(|e| format!("{len} values: {e}"))?;
        out.resize(len, 0.0);
        if kind == Float::F32 {
            // SAFETY: any 4 bytes are an f32; the slice covers exactly `out`'s values.
            let bytes = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), len * 4) };
            self.read_at(offset, bytes)?;
            out.iter_mut().for_each(|v| *v = f32::from_bits(u32::from_le(v.to_bits())));
        } else {
            let raw = self.read_u16s(offset, len)?;
            let widen = |r: usize, row: &mut [f32]| {
                use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
                let bits = &raw[r * cols..][..row.len()];
                match kind {
                    Float::BF16 => bits.reinterpret_cast::<half::bf16>().convert_to_f32_slice(row),
                    _ => bits.reinterpret_cast::<half::f16>().convert_to_f32_slice(row),
                }
            };
            if tessera_kernels::for_each_row(tessera_kernels::ThreadPool::global(), &mut out, cols, 16, &widen).is_err()
            {
                // A worker panicked (no input can make it): the same work on this thread.
                out.chunks_exact_mut(cols).enumerate().for_each(|(r, row)| widen(r, row));
            }
        }
        Tensor::from_vec(out, shape, device).map_err(|e| e.to_string())
    }

    /// `count` f16 values from `offset`, as stored (kept in f16: [`PackedF32::from_f16`](tessera_kernels::PackedF32::from_f16)).
    pub(crate) fn read_f16(&self, offset: u64, count: usize) -> StrResult<Vec<half::f16>> {
        Ok(self.read_u16s(offset, count)?.into_iter().map(half::f16::from_bits).collect())
    }

    /// `count` little-endian 16-bit values from `offset`, in one read.
    fn read_u16s(&self, offset: u64, count: usize) -> StrResult<Vec<u16>> {
        let mut out: Vec<u16> = Vec::new();
        out.try_reserve_exact(count).map_err(|e| format!("{count} values: {e}"))?;
        out.resize(count, 0);
        // SAFETY: any 2 bytes are a u16; the slice covers exactly `out`'s values.
        self.read_at(offset, unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), count * 2) })?;
        out.iter_mut().for_each(|v| *v = u16::from_le(*v));
        Ok(out)
    }

    /// Fails if the open file or the file its path names now is not what was opened.
    pub(crate) fn check_unchanged(&self) -> Result<()> {
        let changed = |what: String| DecoderError::WeightFile {
            path: self.path.clone(),
            reason: format!("changed while the model was being loaded ({what}); load it again"),
        };
        let open = self.with(|f| f.metadata()).map_err(|e| changed(e.to_string()))?;
        if let Some(what) = self.identity.change(&FileIdentity::of(&open)) {
            return Err(changed(what));
        }
        let named = std::fs::metadata(&self.path).map_err(|e| changed(format!("its path: {e}")))?;
        match self.identity.change(&FileIdentity::of(&named)) {
            Some(what) => Err(changed(what)),
            None => Ok(()),
        }
    }
}

type StrResult<T> = std::result::Result<T, String>;

/// Stored float formats that widen to f32 exactly ([`WeightFile::read_f32`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Float {
    F32,
    F16,
    BF16,
}

impl Float {
    /// The kind of a safetensors dtype name, if a float one.
    pub(crate) fn of_safetensors(dtype: &str) -> Option<Self> {
        match dtype {
            "F32" => Some(Self::F32),
            "F16" => Some(Self::F16),
            "BF16" => Some(Self::BF16),
            _ => None,
        }
    }

    /// The kind of a GGUF tensor type, if a float one.
    pub(crate) fn of_ggml(dtype: candle_core::quantized::GgmlDType) -> Option<Self> {
        use candle_core::quantized::GgmlDType;
        match dtype {
            GgmlDType::F32 => Some(Self::F32),
            GgmlDType::F16 => Some(Self::F16),
            GgmlDType::BF16 => Some(Self::BF16),
            _ => None,
        }
    }
}

/// Where one tensor of a safetensors checkpoint is.
#[derive(Debug, Clone)]
pub(crate) struct StoredTensor {
    /// Index into [`Safetensors::files`].
    file: usize,
    /// The format's name of its dtype (`F32`, `BF16`, …).
    pub(crate) dtype: String,
    pub(crate) shape: Vec<usize>,
    /// Byte offset in the file (header included) and length.
    offset: u64,
    len: usize,
}

/// The tensors of one or more safetensors files (the shards of one checkpoint), read on demand.
pub(crate) struct Safetensors {
    pub(crate) files: Vec<WeightFile>,
    tensors: HashMap<String, StoredTensor>,
}

impl Safetensors {
    /// Opens every file and checks its header ([`parse_safetensors_header`]).
    pub(crate) fn open(paths: &[PathBuf]) -> Result<Self> {
        let mut files = Vec::with_capacity(paths.len());
        let mut tensors = HashMap::new();
        for (i, path) in paths.iter().enumerate() {
            let file = WeightFile::open(path)?;
            let err = |reason: String| DecoderError::WeightFile { path: path.clone(), reason };
            let len = file.len();
            let (data_start, entries) = file
                .with(|f| {
                    f.seek(SeekFrom::Start(0))?;
                    Ok(parse_safetensors_header(std::io::BufReader::new(f), len))
                })
                .map_err(|e| err(e.to_string()))?
                .map_err(err)?;
            for e in entries {
                let len =
                    usize::try_from(e.end - e.begin).map_err(|_| err(format!("tensor `{}` is too large", e.name)))?;
                let shape = e.shape.iter().map(|&d| usize::try_from(d).unwrap_or(usize::MAX)).collect();
                let stored = StoredTensor { file: i, dtype: e.dtype, shape, offset: data_start + e.begin, len };
                if tensors.insert(e.name.clone(), stored).is_some() {
                    return Err(err(format!("tensor `{}` is in more than one shard", e.name)));
                }
            }
            files.push(file);
        }
        Ok(Self { files, tensors })
    }

    pub(crate) fn get(&self, name: &str) -> Option<&StoredTensor> {
        self.tensors.get(name)
    }

    pub(crate) fn names(&self) -> impl Iterator<Item = &String> {
        self.tensors.keys()
    }

    /// Values `start .. start + count` of an f16 `t`, kept in f16 ([`WeightFile::read_f16`]);
    /// None for other dtypes.
    pub(crate) fn read_f16(&self, t: &StoredTensor, start: usize, count: usize) -> StrResult<Vec<half::f16>> {
        self.files[t.file].read_f16(t.offset.saturating_add(2 * start as u64), count)
    }

    /// Reads a float `t` as f32 ([`WeightFile::read_f32`]); None for other dtypes.
    pub(crate) fn load_f32(&self, t: &StoredTensor, device: &Device) -> Option<StrResult<Tensor>> {
        let kind = Float::of_safetensors(&t.dtype)?;
        Some(self.files[t.file].read_f32(t.offset, kind, &t.shape, device))
    }

    /// Reads `t` onto `device` in its stored dtype.
    pub(crate) fn load(&self, t: &StoredTensor, device: &Device) -> std::result::Result<Tensor, String> {
        let dtype = match t.dtype.as_str() {
            "U8" => DType::U8,
            "U32" => DType::U32,
            "I16" => DType::I16,
            "I32" => DType::I32,
            "I64" => DType::I64,
            "BF16" => DType::BF16,
            "F16" => DType::F16,
            "F32" => DType::F32,
            "F64" => DType::F64,
            "F8_E4M3" => DType::F8E4M3,
            other => return Err(format!("stored as {other}, which tessera does not read")),
        };
        let file = &self.files[t.file];
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(t.len).map_err(|e| format!("{} bytes: {e}", t.len))?;
        bytes.resize(t.len, 0);
        file.read_at(t.offset, &mut bytes)?;
        Tensor::from_raw_buffer(&bytes, dtype, &t.shape, device).map_err(|e| e.to_string())
    }
}

/// The safetensors format's own limit on a header (its crate refuses larger ones).
const MAX_SAFETENSORS_HEADER: u64 = 100_000_000;

/// A JSON object's entries in file order, duplicates kept (a map would keep the last).
struct Entries(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Entries {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Entries;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<Entries, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    out.push(entry);
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(Visitor)
    }
}

/// One tensor of a checked header: its data range is relative to the end of the header.
pub(crate) struct HeaderEntry {
    name: String,
    dtype: String,
    shape: Vec<u64>,
    begin: u64,
    end: u64,
}

/// Checks a safetensors header read from the start of a `len`-byte file: the header's size, and
/// for every tensor a known dtype, a shape whose byte size is its data range, ranges inside the
/// file that do not overlap or leave gaps, and no name twice (Candle's reader would keep the
/// last). Returns where the data starts and the tensors; the error says what is wrong without
/// the file's name.
pub(crate) fn parse_safetensors_header(
    mut file: impl Read,
    len: u64,
) -> std::result::Result<(u64, Vec<HeaderEntry>), String> {
    let mut n = [0u8; 8];
    file.read_exact(&mut n).map_err(|_| format!("too short to be safetensors ({len} bytes)"))?;
    let header_len = u64::from_le_bytes(n);
    if header_len > len.saturating_sub(8) {
        return Err(format!("header claims {header_len} bytes but the file has {len}"));
    }
    if header_len > MAX_SAFETENSORS_HEADER {
        return Err(format!("header of {header_len} bytes is over the format's limit of {MAX_SAFETENSORS_HEADER}"));
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header).map_err(|e| e.to_string())?;
    let Entries(entries) = serde_json::from_slice(&header).map_err(|e| format!("invalid safetensors header: {e}"))?;
    let data_len = len - 8 - header_len;
    let mut names = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (name, entry) in &entries {
        if !names.insert(name.as_str()) {
            return Err(format!("tensor `{name}` appears twice in the header"));
        }
        if name == "__metadata__" {
            continue;
        }
        let bad = |what: &str| format!("tensor `{name}`: {what}");
        let dtype = entry.get("dtype").and_then(|d| d.as_str()).ok_or_else(|| bad("no `dtype`"))?;
        let size: u64 = match dtype {
            "BOOL" | "U8" | "I8" | "F8_E4M3" | "F8_E5M2" => 1,
            "U16" | "I16" | "F16" | "BF16" => 2,
            "U32" | "I32" | "F32" => 4,
            "U64" | "I64" | "F64" => 8,
            other => return Err(bad(&format!("unknown dtype `{other}`"))),
        };
        let shape = entry
            .get("shape")
            .and_then(|s| s.as_array())
            .and_then(|s| s.iter().map(|d| d.as_u64()).collect::<Option<Vec<u64>>>())
            .ok_or_else(|| bad("`shape` is not a list of sizes"))?;
        let bytes = shape
            .iter()
            .try_fold(size, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| bad(&format!("shape {shape:?} overflows")))?;
        let offsets = entry
            .get("data_offsets")
            .and_then(|o| o.as_array())
            .and_then(|o| o.iter().map(|x| x.as_u64()).collect::<Option<Vec<u64>>>())
            .filter(|o| o.len() == 2)
            .ok_or_else(|| bad("`data_offsets` is not [begin, end]"))?;
        let (begin, end) = (offsets[0], offsets[1]);
        if end < begin {
            return Err(bad(&format!("data_offsets [{begin}, {end}] end before they begin")));
        }
        if end > data_len {
            return Err(format!("truncated: tensor `{name}` ends at data byte {end} but only {data_len} are present"));
        }
        if end - begin != bytes {
            return Err(bad(&format!(
                "{dtype} {shape:?} takes {bytes} bytes but its data_offsets span {}",
                end - begin
            )));
        }
        out.push(HeaderEntry { name: name.clone(), dtype: dtype.to_string(), shape, begin, end });
    }
    let mut spans: Vec<(u64, u64, &str)> = out.iter().map(|e| (e.begin, e.end, e.name.as_str())).collect();
    spans.sort();
    for pair in spans.windows(2) {
        if pair[1].0 < pair[0].1 {
            return Err(format!("tensors `{}` and `{}` overlap in the file", pair[0].2, pair[1].2));
        }
    }
    // The format packs the tensors with nothing between them (its reader refuses gaps too).
    let mut at = 0;
    for &(begin, end, name) in &spans {
        if begin > at {
            return Err(format!("data bytes {at}..{begin} before tensor `{name}` belong to no tensor"));
        }
        at = end;
    }
    if data_len > at {
        return Err(format!("data bytes {at}..{data_len} after the last tensor belong to no tensor"));
    }
    Ok((8 + header_len, out))
}
