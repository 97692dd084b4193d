//! GGUF block formats: their byte layouts, dequantization, and the quantization of
//! activations into the 8-bit blocks their dot products take.
//!
//! Layouts and arithmetic follow ggml (`ggml/src/ggml-quants.c`, `ggml-common.h` of
//! llama.cpp b6000-era): a weight row is a sequence of blocks of 32 (`Q4_0` … `Q8_0`) or 256
//! (`Q4_K`, `Q5_K`, `Q6_K`) values. Activations are quantized per block like llama.cpp does
//! before its dot products: `Q8_0` (scale), `Q8_1` (scale and scale × sum) and `Q8_K`
//! (f32 scale and sums of 16), so that tessera's integer arithmetic is llama.cpp's.

use half::f16;

/// A GGUF weight type this crate multiplies.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QType {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4K,
    Q5K,
    Q6K,
}

/// The activation blocks a weight type's dot product takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActKind {
    /// 32 int8 values and a scale (`Q8_0`); the sum is also kept (`Q8_1`).
    Q8,
    /// 256 int8 values, an f32 scale and sums of each 16 (`Q8_K`).
    Q8K,
}

impl QType {
    pub const ALL: [QType; 8] =
        [Self::Q4_0, Self::Q4_1, Self::Q5_0, Self::Q5_1, Self::Q8_0, Self::Q4K, Self::Q5K, Self::Q6K];

    /// Values per block.
    pub const fn block_elems(self) -> usize {
        match self {
            Self::Q4K | Self::Q5K | Self::Q6K => 256,
            _ => 32,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q8_0 => 34,
            Self::Q4K => 144,
            Self::Q5K => 176,
            Self::Q6K => 210,
        }
    }

    pub const fn activation(self) -> ActKind {
        match self {
            Self::Q4K | Self::Q5K | Self::Q6K => ActKind::Q8K,
            _ => ActKind::Q8,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q4K => "Q4_K",
            Self::Q5K => "Q5_K",
            Self::Q6K => "Q6_K",
        }
    }
}

impl std::fmt::Display for QType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One block of 32 quantized activations: `x ≈ d · qs`, and `s = d · Σ qs` (ggml's
/// `block_q8_0` / `block_q8_1`; `d` and `s` hold the f16-rounded values ggml stores).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct Q8Block {
    pub qs: [i8; 32],
    pub d: f32,
    pub s: f32,
    /// `Σ qs` as an integer (lets SIMD kernels use unsigned weights: `Σ (w+c)·q − c·Σ q`).
    pub isum: i32,
}

impl Default for Q8Block {
    fn default() -> Self {
        Self { qs: [0; 32], d: 0.0, s: 0.0, isum: 0 }
    }
}

/// One block of 256 quantized activations (ggml's `block_q8_K`): `x ≈ d · qs`, and
/// `bsums[i] = Σ qs[16i .. 16i+16]`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct Q8KBlock {
    pub qs: [i8; 256],
    pub bsums: [i16; 16],
    pub d: f32,
}

impl Default for Q8KBlock {
    fn default() -> Self {
        Self { qs: [0; 256], bsums: [0; 16], d: 0.0 }
    }
}

#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

#[inline(always)]
fn round_f16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// Rounds to the nearest integer, ties to even, for |v| < 2²² (the magic-number trick ggml's
/// `nearest_int` uses: adding 1.5 · 2²³ rounds v into the low mantissa bits, which are read
/// as an integer; unlike `f32::round_ties_even` or an `as` cast, it is plain arithmetic that
/// vectorises).
#[inline(always)]
fn round_even(v: f32) -> i32 {
    const MAGIC: f32 = 12582912.0; // 1.5 · 2²³
    (v + MAGIC).to_bits() as i32 - MAGIC.to_bits() as i32
}

/// [`quantize_q8`] (the same values) in AVX2 intrinsics when the kernels use them (the loops
/// compiled for AVX2 still summed and maxed one lane at a time).
pub(crate) fn quantize_q8_wide(x: &[f32], out: &mut [Q8Block]) {
    #[cfg(target_arch = "x86_64")]
    if crate::ops::avx2_kernels() && x.len() == 32 * out.len() {
        // SAFETY: `Isa::best` names only instruction sets this CPU has (F16C with AVX2 here);
        // the lengths match.
        return unsafe { crate::x86::quantize_q8_avx2(x, out) };
    }
    quantize_q8(x, out)
}

/// [`quantize_q8k`] (the same values) compiled for AVX2 when the kernels use it.
pub(crate) fn quantize_q8k_wide(x: &[f32], out: &mut [Q8KBlock]) {
    #[cfg(target_arch = "x86_64")]
    if crate::ops::avx2_kernels() {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(x: &[f32], out: &mut [Q8KBlock]) {
            quantize_q8k(x, out)
        }
        // SAFETY: `Isa::best` names only instruction sets this CPU has.
        return unsafe { avx2(x, out) };
    }
    quantize_q8k(x, out)
}

/// Quantizes `x` (a multiple of 32 long) into `out` (`x.len() / 32` blocks), as ggml's
/// x86 `quantize_row_q8_1` does: `d = max|x| / 127`, round half to even, and the sum.
#[inline(always)]
pub fn quantize_q8(x: &[f32], out: &mut [Q8Block]) {
    debug_assert_eq!(x.len(), out.len() * 32);
    for (xs, y) in x.chunks_exact(32).zip(out.iter_mut()) {
        // The largest magnitude over eight lanes first (max is exact in any order): loops over
        // lanes vectorise, a fold over one accumulator does not.
        let mut lanes = [0f32; 8];
        for c in xs.chunks_exact(8) {
            for (l, &v) in lanes.iter_mut().zip(c) {
                *l = l.max(v.abs());
            }
        }
        let amax = lanes.iter().fold(0f32, |m, &v| m.max(v));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mut r = [0i32; 32];
        for (r, &v) in r.iter_mut().zip(xs) {
            *r = round_even(v * id);
        }
        for (q, &r) in y.qs.iter_mut().zip(&r) {
            *q = r as i8;
        }
        let sum: i32 = r.iter().sum();
        y.d = round_f16(d);
        y.s = round_f16(d * sum as f32);
        y.isum = sum;
    }
}

/// Quantizes weights `x` (a multiple of 32 long) into GGUF `Q8_0` blocks (`out`: 34 bytes per
/// 32 values), as ggml's `quantize_row_q8_0_ref`: `d = max|x| / 127` stored as f16, values
/// rounded half away from zero.
pub fn quantize_q8_0_blocks(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!(x.len() / 32 * 34, out.len());
    for (xs, y) in x.chunks_exact(32).zip(out.chunks_exact_mut(34)) {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        y[..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        for (q, &v) in y[2..].iter_mut().zip(xs) {
            *q = (v * id).round() as i8 as u8;
        }
    }
}

/// Quantizes `x` (a multiple of 256 long) into `Q8_K` blocks, as ggml's
/// `quantize_row_q8_K_ref`: the scale maps the value of largest magnitude to −127.
#[inline(always)]
pub fn quantize_q8k(x: &[f32], out: &mut [Q8KBlock]) {
    debug_assert_eq!(x.len(), out.len() * 256);
    for (xs, y) in x.chunks_exact(256).zip(out.iter_mut()) {
        let (mut max, mut amax) = (0f32, 0f32);
        for &v in xs {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            *y = Q8KBlock::default();
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in y.qs.iter_mut().zip(xs) {
            *q = round_even(iscale * v).min(127) as i8;
        }
        for (j, s) in y.bsums.iter_mut().enumerate() {
            *s = y.qs[16 * j..16 * j + 16].iter().map(|&q| q as i16).sum();
        }
        y.d = 1.0 / iscale;
    }
}

/// The bias that makes `t`'s integer values unsigned bytes `u = q + bias` (what `vpdpbusd`
/// multiplies): the offset of the symmetric types; 0 for those with a min, already unsigned.
pub(crate) const fn unsigned_bias(t: QType) -> i32 {
    match t {
        QType::Q4_0 => 8,
        QType::Q5_0 => 16,
        QType::Q8_0 => 128,
        QType::Q6K => 32,
        _ => 0,
    }
}

/// The integer content of a 32-value block: `x = d · q + m` (`m` = 0 for the symmetric types).
pub(crate) struct Unpacked32 {
    pub d: f32,
    pub m: f32,
    pub q: [i8; 32],
}

/// Unpacks one block of a 32-value type (`b` is exactly its bytes).
pub(crate) fn unpack32(t: QType, b: &[u8]) -> Unpacked32 {
    let mut q = [0i8; 32];
    let d = f16_at(b, 0);
    let mut m = 0.0;
    match t {
        QType::Q4_0 | QType::Q4_1 => {
            let (qs, bias) = if t == QType::Q4_0 { (&b[2..18], 8) } else { (&b[4..20], 0) };
            if t == QType::Q4_1 {
                m = f16_at(b, 2);
            }
            for j in 0..16 {
                q[j] = (qs[j] & 0x0F) as i8 - bias;
                q[j + 16] = (qs[j] >> 4) as i8 - bias;
            }
        }
        QType::Q5_0 | QType::Q5_1 => {
            let off = if t == QType::Q5_0 { 2 } else { 4 };
            if t == QType::Q5_1 {
                m = f16_at(b, 2);
            }
            let qh = u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]]);
            let qs = &b[off + 4..off + 20];
            let bias = if t == QType::Q5_0 { 16 } else { 0 };
            for j in 0..16 {
                let h0 = (((qh >> j) << 4) & 0x10) as u8;
                let h1 = ((qh >> (j + 12)) & 0x10) as u8;
                q[j] = ((qs[j] & 0x0F) | h0) as i8 - bias;
                q[j + 16] = ((qs[j] >> 4) | h1) as i8 - bias;
            }
        }
        QType::Q8_0 => {
            for j in 0..32 {
                q[j] = b[2 + j] as i8;
            }
        }
        _ => unreachable!("unpack32 on a 256-value type"),
    }
    Unpacked32 { d, m, q }
}

/// The integer content of a 256-value k-quant block:
/// `x = d · scale[sub] · q − dmin · min[sub]`, with sub-blocks of `sub` values (32 for
/// `Q4_K`/`Q5_K`, 16 for `Q6_K`, whose `q` is signed and has no min).
pub(crate) struct UnpackedK {
    pub d: f32,
    pub dmin: f32,
    pub q: [i8; 256],
    pub scales: [i8; 16],
    pub mins: [u8; 16],
    pub sub: usize,
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` of a Q4_K/Q5_K block.
#[inline(always)]
pub(crate) fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        ((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
    }
}

/// Unpacks one block of a k-quant type (`b` is exactly its bytes).
pub(crate) fn unpack_k(t: QType, b: &[u8]) -> UnpackedK {
    let mut u = UnpackedK { d: 0.0, dmin: 0.0, q: [0; 256], scales: [0; 16], mins: [0; 16], sub: 32 };
    match t {
        QType::Q4K | QType::Q5K => {
            u.d = f16_at(b, 0);
            u.dmin = f16_at(b, 2);
            let sc = &b[4..16];
            for j in 0..8 {
                let (s, m) = scale_min_k4(j, sc);
                u.scales[j] = s as i8; // 6-bit: fits
                u.mins[j] = m;
            }
            let (qh, qs) = if t == QType::Q5K { (Some(&b[16..48]), &b[48..176]) } else { (None, &b[16..144]) };
            // 4 chunks of 64 values: low nibbles of 32 bytes, then high nibbles.
            for c in 0..4 {
                for l in 0..32 {
                    let byte = qs[32 * c + l];
                    let (mut lo, mut hi) = (byte & 0x0F, byte >> 4);
                    if let Some(qh) = qh {
                        lo |= ((qh[l] >> (2 * c)) & 1) << 4;
                        hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
                    }
                    u.q[64 * c + l] = lo as i8;
                    u.q[64 * c + 32 + l] = hi as i8;
                }
            }
        }
        QType::Q6K => {
            u.sub = 16;
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            u.d = f16_at(b, 208);
            for (dst, &s) in u.scales.iter_mut().zip(sc) {
                *dst = s as i8;
            }
            for half in 0..2 {
                let (ql, qh) = (&ql[64 * half..], &qh[32 * half..]);
                let y = &mut u.q[128 * half..128 * half + 128];
                for l in 0..32 {
                    y[l] = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i8 - 32;
                    y[l + 32] = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                    y[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                    y[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                }
            }
        }
        _ => unreachable!("unpack_k on a 32-value type"),
    }
    u
}

/// Dequantizes a whole number of blocks of type `t` (`bytes`) into `out`.
pub fn dequantize(t: QType, bytes: &[u8], out: &mut [f32]) {
    let (be, bb) = (t.block_elems(), t.block_bytes());
    debug_assert_eq!(bytes.len() / bb * be, out.len());
    for (b, y) in bytes.chunks_exact(bb).zip(out.chunks_exact_mut(be)) {
        if be == 32 {
            let u = unpack32(t, b);
            for (y, &q) in y.iter_mut().zip(&u.q) {
                *y = u.d * q as f32 + u.m;
            }
        } else {
            let u = unpack_k(t, b);
            for (j, y) in y.iter_mut().enumerate() {
                let s = j / u.sub;
                *y = u.d * u.scales[s] as f32 * u.q[j] as f32 - u.dmin * u.mins[s] as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SIMD activation quantizer gives the portable one's bits: blocks of mixed signs and
    /// scales, ties at .5 after scaling, an all-zero block, a block whose largest magnitude is
    /// negative, values that round to f16 subnormals and past f16's range.
    #[test]
    fn wide_q8_quantizer_equals_the_portable_one() {
        let mut x: Vec<f32> = (0..32 * 64).map(|i| ((i as f32) * 0.731).sin() * (1.0 + (i % 97) as f32)).collect();
        x[32..64].fill(0.0);
        x[64..96].iter_mut().enumerate().for_each(|(i, v)| *v = i as f32 - 31.0);
        x[96..128].iter_mut().enumerate().for_each(|(i, v)| *v = (i as f32 - 16.0) * 0.5 * 127.0 / 8.0);
        x[128..160].iter_mut().enumerate().for_each(|(i, v)| *v = (i as f32 - 3.0) * 1e-6);
        x[160..192].iter_mut().enumerate().for_each(|(i, v)| *v = (i as f32 - 20.0) * 1e5);
        let (mut a, mut b) = (vec![Q8Block::default(); 64], vec![Q8Block::default(); 64]);
        quantize_q8(&x, &mut a);
        quantize_q8_wide(&x, &mut b);
        for (i, (a, b)) in a.iter().zip(&b).enumerate() {
            assert_eq!(a.qs, b.qs, "block {i}");
            assert_eq!((a.d.to_bits(), a.s.to_bits(), a.isum), (b.d.to_bits(), b.s.to_bits(), b.isum), "block {i}");
        }
    }
}
