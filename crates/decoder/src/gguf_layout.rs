//! A GGUF file's layout checked before Candle's reader sees it. Candle bounds every length by
//! the file size, but it divides by `general.alignment` (0 panics), keeps the last of duplicate
//! keys and tensor names, reads invalid UTF-8 lossily, and never checks where tensors lie. Here
//! the header is walked once with every count and length bounded by what remains of the file,
//! and the tensors must be known types, whole blocks, aligned, inside the file and disjoint.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use candle_core::quantized::GgmlDType;

use crate::error::{DecoderError, Result};

/// GGUF value types (the spec's numbering).
const STRING: u32 = 8;
const ARRAY: u32 = 9;
/// Deeper array nesting than this is refused (the spec's arrays hold scalars or strings).
const MAX_ARRAY_DEPTH: usize = 2;
const MAX_DIMS: u32 = 4;
/// Files align tensors to 32 bytes (llama.cpp's default) or a little more.
const MAX_ALIGNMENT: u64 = 1 << 16;

struct Walker<R> {
    reader: R,
    pos: u64,
    len: u64,
}

impl<R: Read> Walker<R> {
    fn bytes(&mut self, n: u64, what: &dyn Fn() -> String) -> std::result::Result<Vec<u8>, String> {
        if n > self.len - self.pos {
            return Err(format!("truncated: {} needs {n} bytes but only {} remain", what(), self.len - self.pos));
        }
        let mut v = vec![0u8; n as usize];
        self.reader.read_exact(&mut v).map_err(|e| format!("{}: {e}", what()))?;
        self.pos += n;
        Ok(v)
    }

    fn skip(&mut self, n: u64, what: &dyn Fn() -> String) -> std::result::Result<(), String> {
        if n > self.len - self.pos {
            return Err(format!("truncated: {} needs {n} bytes but only {} remain", what(), self.len - self.pos));
        }
        std::io::copy(&mut (&mut self.reader).take(n), &mut std::io::sink()).map_err(|e| format!("{}: {e}", what()))?;
        self.pos += n;
        Ok(())
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> std::result::Result<u32, String> {
        let b = self.bytes(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> std::result::Result<u64, String> {
        let b = self.bytes(8, what)?;
        Ok(u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    }

    fn length(&mut self, what: &dyn Fn() -> String) -> std::result::Result<u64, String> {
        self.u64(what)
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> std::result::Result<String, String> {
        let n = self.length(what)?;
        let mut bytes = self.bytes(n, what)?;
        // Candle's reader drops trailing NULs, so `general.alignment\0` is `general.alignment`
        // to it: read names as it does, or a duplicate would slip past the checks below.
        while bytes.last() == Some(&0) {
            bytes.pop();
        }
        String::from_utf8(bytes).map_err(|_| format!("{} is not valid UTF-8", what()))
    }

    /// Skips one value of type `ty`, checking strings' UTF-8; returns it when it is an
    /// unsigned integer of at most 32 bits (for `general.alignment`: Candle ignores a u64 one
    /// and would read the data from another offset than the one checked here).
    fn value(&mut self, ty: u32, depth: usize, what: &dyn Fn() -> String) -> std::result::Result<Option<u64>, String> {
        let scalar = |ty: u32| -> Option<u64> {
            match ty {
                0 | 1 | 7 => Some(1),
                2 | 3 => Some(2),
                4..=6 => Some(4),
                10..=12 => Some(8),
                _ => None,
            }
        };
        match ty {
            STRING => self.string(what).map(|_| None),
            ARRAY => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(format!("{} nests arrays deeper than {MAX_ARRAY_DEPTH}", what()));
                }
                let elem = self.u32(what)?;
                let count = self.length(what)?;
                let min = match elem {
                    STRING => 8,
                    ARRAY => 12,
                    t => scalar(t).ok_or_else(|| format!("{} has an array of unknown value type {t}", what()))?,
                };
                if count.saturating_mul(min) > self.len - self.pos {
                    return Err(format!(
                        "{} declares {count} elements, more than the {} bytes left can hold",
                        what(),
                        self.len - self.pos
                    ));
                }
                match scalar(elem) {
                    Some(size) => self.skip(count * size, what)?,
                    None => {
                        for _ in 0..count {
                            self.value(elem, depth + 1, what)?;
                        }
                    }
                }
                Ok(None)
            }
            t => {
                let size = scalar(t).ok_or_else(|| format!("{} has unknown value type {t}", what()))?;
                let b = self.bytes(size, what)?;
                let mut v = [0u8; 8];
                v[..b.len()].copy_from_slice(&b);
                Ok(matches!(t, 0 | 2 | 4).then(|| u64::from_le_bytes(v)))
            }
        }
    }
}

/// The tensor types Candle reads (GGML's numbering).
fn ggml_type(t: u32) -> Option<GgmlDType> {
    Some(match t {
        0 => GgmlDType::F32,
        1 => GgmlDType::F16,
        2 => GgmlDType::Q4_0,
        3 => GgmlDType::Q4_1,
        6 => GgmlDType::Q5_0,
        7 => GgmlDType::Q5_1,
        8 => GgmlDType::Q8_0,
        9 => GgmlDType::Q8_1,
        10 => GgmlDType::Q2K,
        11 => GgmlDType::Q3K,
        12 => GgmlDType::Q4K,
        13 => GgmlDType::Q5K,
        14 => GgmlDType::Q6K,
        15 => GgmlDType::Q8K,
        30 => GgmlDType::BF16,
        _ => return None,
    })
}

struct TensorSpan {
    name: String,
    start: u64,
    end: u64,
}

/// Checks `path`'s GGUF header and tensor layout; the error names the key or tensor at fault.
pub fn check_gguf_layout(path: &Path) -> Result<()> {
    let fail = |reason: String| DecoderError::WeightFile { path: path.to_path_buf(), reason };
    let file = File::open(path).map_err(|e| fail(e.to_string()))?;
    let len = file.metadata().map_err(|e| fail(e.to_string()))?.len();
    check_gguf_header(BufReader::new(file), len).map_err(fail)
}

/// [`check_gguf_layout`] over any reader of a `len`-byte GGUF file; the error says what is
/// wrong without the file's name.
pub fn check_gguf_header(reader: impl Read, len: u64) -> std::result::Result<(), String> {
    walk(&mut Walker { reader, pos: 0, len })
}

fn walk<R: Read>(w: &mut Walker<R>) -> std::result::Result<(), String> {
    let header = || "the header".to_string();
    let magic = w.bytes(4, &header).map_err(|_| format!("not a GGUF file ({} bytes)", w.len))?;
    if magic != b"GGUF" {
        return Err(format!("not a GGUF file: its magic is {:?}, not \"GGUF\"", String::from_utf8_lossy(&magic)));
    }
    let version = w.u32(&header)?;
    if !(2..=3).contains(&version) {
        return Err(format!("GGUF version {version} is not supported (2 and 3 are; re-convert version 1 files)"));
    }
    let n_tensors = w.length(&header)?;
    let n_kv = w.length(&header)?;
    // A metadata entry takes at least 13 bytes (key length, type, a byte), a tensor 24.
    if n_kv.saturating_mul(13).saturating_add(n_tensors.saturating_mul(24)) > w.len - w.pos {
        return Err(format!(
            "the header declares {n_tensors} tensors and {n_kv} metadata entries, more than the file's {} bytes hold",
            w.len
        ));
    }
    let mut keys = HashSet::new();
    let mut alignment = 32u64;
    for i in 0..n_kv {
        let key = w.string(&|| format!("metadata key #{i}"))?;
        let what = || format!("metadata `{key}`");
        let ty = w.u32(&what)?;
        let value = w.value(ty, 0, &what)?;
        if key == "general.alignment" {
            alignment = value.ok_or_else(|| {
                format!("`general.alignment` has value type {ty}, not an unsigned integer of 8–32 bits")
            })?;
        }
        if !keys.insert(key.clone()) {
            return Err(format!("metadata key `{key}` appears twice"));
        }
    }
    if alignment == 0 || !alignment.is_power_of_two() || alignment > MAX_ALIGNMENT {
        return Err(format!("`general.alignment` is {alignment}, not a power of two up to {MAX_ALIGNMENT}"));
    }
    let mut names = HashSet::new();
    let mut spans = Vec::new();
    for i in 0..n_tensors {
        let name = w.string(&|| format!("tensor #{i}'s name"))?;
        let what = || format!("tensor `{name}`");
        let n_dims = w.u32(&what)?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(format!("tensor `{name}` has {n_dims} dimensions (1 to {MAX_DIMS} expected)"));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(w.length(&what)?);
        }
        let ty = w.u32(&what)?;
        let dtype = ggml_type(ty).ok_or_else(|| format!("tensor `{name}` has unknown type {ty}"))?;
        let offset = w.u64(&what)?;
        if dims.contains(&0) {
            return Err(format!("tensor `{name}` has an empty dimension: shape {dims:?}"));
        }
        let elems = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= usize::MAX as u64)
            .ok_or_else(|| format!("tensor `{name}`'s shape {dims:?} overflows"))?;
        let block = dtype.block_size() as u64;
        if dims[0] % block != 0 {
            return Err(format!(
                "tensor `{name}` of type {dtype:?} has rows of {} values, not whole blocks of {block}",
                dims[0]
            ));
        }
        if offset % alignment != 0 {
            return Err(format!(
                "tensor `{name}` starts at data offset {offset}, not a multiple of the alignment {alignment}"
            ));
        }
        let bytes = elems / block * dtype.type_size() as u64;
        let end = offset.checked_add(bytes).ok_or_else(|| format!("tensor `{name}`'s data range overflows"))?;
        if !names.insert(name.clone()) {
            return Err(format!("tensor `{name}` appears twice"));
        }
        spans.push(TensorSpan { name, start: offset, end });
    }
    let data_start = w.pos.div_ceil(alignment) * alignment;
    let data_len = w.len.saturating_sub(data_start);
    spans.sort_by_key(|s| (s.start, s.end));
    // Writers pack tensors one after the other (each start aligned): a tensor whose type says
    // fewer bytes than it has leaves a gap, one that says more overlaps the next.
    if let Some(s) = spans.iter().find(|s| s.end > data_len) {
        return Err(format!(
            "truncated: tensor `{}` ends at data byte {} but only {data_len} are present",
            s.name, s.end
        ));
    }
    if let Some(pair) = spans.windows(2).find(|p| p[1].start < p[0].end) {
        return Err(format!("tensors `{}` and `{}` overlap in the file", pair[0].name, pair[1].name));
    }
    let mut expected_start = 0;
    for (i, s) in spans.iter().enumerate() {
        if s.start > expected_start {
            let before =
                if i == 0 { "the data's start".to_string() } else { format!("tensor `{}`", spans[i - 1].name) };
            return Err(format!(
                "data bytes {expected_start}..{} between {before} and tensor `{}` belong to no tensor: a type \
                 that does not match its bytes?",
                s.start, s.name
            ));
        }
        expected_start = s.end.div_ceil(alignment) * alignment;
    }
    if let Some(last) = spans.last() {
        if data_len > expected_start.max(last.end) {
            return Err(format!(
                "data bytes {}..{data_len} after the last tensor, `{}`, belong to no tensor: a type that does not \
                 match its bytes?",
                last.end, last.name
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GGUF v3 file: `kv` (key, type, value bytes), then `tensors` (name, dims, type,
    /// offset), aligned to `align`, then `data` bytes.
    fn gguf(kv: &[(&[u8], u32, Vec<u8>)], tensors: &[(&str, &[u64], u32, u64)], align: u64, data: usize) -> Vec<u8> {
        let s = |b: &[u8]| [&(b.len() as u64).to_le_bytes()[..], b].concat();
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend((tensors.len() as u64).to_le_bytes());
        out.extend((kv.len() as u64).to_le_bytes());
        for (k, t, v) in kv {
            out.extend(s(k));
            out.extend(t.to_le_bytes());
            out.extend(v);
        }
        for (name, dims, ty, offset) in tensors {
            out.extend(s(name.as_bytes()));
            out.extend((dims.len() as u32).to_le_bytes());
            for d in *dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(ty.to_le_bytes());
            out.extend(offset.to_le_bytes());
        }
        let align = align.max(1) as usize;
        out.resize(out.len().div_ceil(align) * align + data, 0);
        out
    }

    fn check(bytes: &[u8]) -> std::result::Result<(), String> {
        check_gguf_header(bytes, bytes.len() as u64)
    }

    fn u32v(v: u32) -> Vec<u8> {
        v.to_le_bytes().to_vec()
    }

    #[test]
    fn a_well_formed_file_passes() {
        let f = gguf(&[(b"general.alignment", 4, u32v(32))], &[("a", &[8, 2], 0, 0), ("b", &[32], 8, 64)], 32, 128);
        assert_eq!(check(&f), Ok(()));
    }

    #[test]
    fn hostile_layouts_are_refused_naming_the_key_or_tensor() {
        let t = |name: &'static str, offset: u64| (name, &[8u64][..], 0u32, offset);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (gguf(&[(b"general.alignment", 4, u32v(0))], &[t("a", 0)], 1, 32), "`general.alignment` is 0"),
            (gguf(&[(b"general.alignment", 4, u32v(3))], &[t("a", 0)], 3, 32), "`general.alignment` is 3"),
            (gguf(&[(b"k", 4, u32v(1)), (b"k", 4, u32v(2))], &[], 32, 0), "metadata key `k` appears twice"),
            // Found by fuzzing: Candle drops a name's trailing NULs, so this second key replaced
            // the first alignment in its reader, and it divided by zero.
            (
                gguf(
                    &[(b"general.alignment", 4, u32v(32)), (b"general.alignment\0\0", 0, vec![0])],
                    &[t("a", 0)],
                    32,
                    64,
                ),
                "metadata key `general.alignment` appears twice",
            ),
            (gguf(&[(b"general.alignment", 10, 64u64.to_le_bytes().to_vec())], &[t("a", 0)], 64, 64), "value type 10"),
            (gguf(&[], &[t("a", 0), t("a\0", 32)], 32, 64), "tensor `a` appears twice"),
            (gguf(&[], &[t("a", 0), t("a", 32)], 32, 64), "tensor `a` appears twice"),
            (gguf(&[], &[t("a", 0), t("b", 0)], 32, 64), "overlap"),
            (gguf(&[], &[t("a", 4)], 32, 64), "not a multiple of the alignment 32"),
            (gguf(&[], &[t("a", 64)], 32, 64), "truncated: tensor `a`"),
            (gguf(&[], &[("q", &[33], 8, 0)], 32, 64), "not whole blocks of 32"),
            (gguf(&[], &[("e", &[0, 8], 0, 0)], 32, 64), "empty dimension"),
            (gguf(&[], &[("o", &[1 << 40, 1 << 40], 0, 0)], 32, 64), "overflows"),
            (gguf(&[], &[("u", &[8], 1234, 0)], 32, 64), "unknown type 1234"),
            (gguf(&[], &[("d", &[1, 1, 1, 1, 1], 0, 0)], 32, 64), "5 dimensions"),
            (gguf(&[(b"\xff\xfe", 4, u32v(1))], &[], 32, 0), "not valid UTF-8"),
            (gguf(&[(b"s", STRING, u64::MAX.to_le_bytes().to_vec())], &[], 32, 0), "truncated: metadata `s` needs"),
            (
                gguf(&[(b"arr", ARRAY, [u32v(4), (1u64 << 62).to_le_bytes().to_vec()].concat())], &[], 32, 0),
                "declares 4611686018427387904 elements",
            ),
            (gguf(&[(b"x", 99, vec![])], &[], 32, 0), "unknown value type 99"),
        ];
        for (bytes, needle) in cases {
            let err = check(&bytes).expect_err(needle);
            assert!(err.contains(needle), "{needle}: {err}");
        }
        let mut v = gguf(&[], &[], 32, 0);
        v[4] = 9;
        assert!(check(&v).expect_err("version").contains("version 9"));
        assert!(check(b"GGML").expect_err("magic").contains("not a GGUF file"));
        // Counts far beyond the file are caught at the first element that does not fit.
        let mut v = gguf(&[], &[], 32, 0);
        v[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(check(&v).expect_err("count").contains("declares 18446744073709551615 tensors"));
    }
}
