//! The x86-64 SIMD kernels (AVX2, AVX-512 VNNI), one file per job:
//!
//! - [`rows`]: decode dot products of the 32-value block types (`Q4_0`, `Q4_1`, `Q5_0`,
//!   `Q5_1`, `Q8_0`) with `Q8` activations, one row or four rows at a time, on 256-bit
//!   registers (AVX2 `maddubs` + `madd`, or VNNI `vpdpbusd`);
//! - [`kquants`]: the same for the k-quants (`Q4_K`, `Q5_K`, `Q6_K`) with `Q8_K` activations (AVX2);
//! - [`kquants512`]: those k-quant rows on 512-bit registers (AVX-512 BW + VNNI);
//! - [`panel_dots`]: decode over the 16-row panel layout (`panels.rs`), 512-bit VNNI and AVX2;
//! - [`kpanel_dots`]: the same over the k-quants' panels (`kpanels.rs`), VNNI, and
//!   [`kpanel_dots256`] its AVX2 twins;
//! - [`igemm`]: the int8 prefill GEMM's micro-kernel (`igemm.rs` packs its panels), 512-bit VNNI
//!   and AVX2;
//! - [`sgemm512`]: the f32 GEMM's micro-kernel (`sgemm.rs` drives it), AVX-512 F;
//! - [`sgemm256`]: the same tiles on 256-bit registers (AVX2 + FMA + F16C);
//! - [`softmax512`]: softmax's numerators for attention over many queries, AVX-512 F, and
//!   [`softmax256`] the same on AVX2;
//! - [`activations`]: passes over f32 activation rows: `Q8` quantization and RMSNorm of eight rows (AVX2).
//!
//! This file holds what they share: CPU feature detection, the block-type codes the kernels are
//! generic over, and small load and reduction helpers. The arithmetic follows ggml's
//! (`ggml-cpu/arch/x86/quants.c`).
//!
//! # Safety
//! Every kernel is an `unsafe fn` compiled with `#[target_feature]` for the instructions it
//! uses: a caller runs it only after [`has_avx2`] (or, for the AVX-512 kernels, [`has_vnni`])
//! returned true — `matmul`'s [`Isa`](crate::Isa) detection does this once — and with the
//! buffer lengths its own `# Safety` section states. Within a kernel, raw-pointer reads rely on
//! those lengths, so `unsafe_op_in_unsafe_fn` is allowed throughout.

#![allow(unsafe_op_in_unsafe_fn)]

mod activations;
mod igemm;
mod kpanel_dots;
mod kpanel_dots256;
mod kquants;
mod kquants512;
mod panel_dots;
mod rows;
mod sgemm256;
mod sgemm512;
mod softmax256;
mod softmax512;

use std::arch::x86_64::*;

use crate::blocks::QType;
use crate::panels::PANEL_ROWS;

pub(crate) use activations::{quantize_q8_avx2, rms_norm_rows8};
pub(crate) use igemm::{igemm_tile, IGEMM_MR};
pub(crate) use kpanel_dots::kpanel_dots_fn;
pub(crate) use kquants::row_k_fn;
pub(crate) use panel_dots::panel_dots_fn;
pub(crate) use rows::{row_fn, rows4_fn};
pub(crate) use sgemm256::tile as sgemm_tile_avx2;
pub(crate) use sgemm512::tile as sgemm_tile;
pub(crate) use softmax256::softmax_numerators as softmax_numerators_256;
pub(crate) use softmax512::softmax_numerators as softmax_numerators_512;

pub(crate) fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
}

pub(crate) fn has_vnni() -> bool {
    has_avx2()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vnni")
}

// ---- The 32-value block types, as the const parameter the kernels are generic over.

const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q5_0: u8 = 2;
const Q5_1: u8 = 3;
const Q8_0: u8 = 4;

const fn code(t: QType) -> u8 {
    match t {
        QType::Q4_0 => Q4_0,
        QType::Q4_1 => Q4_1,
        QType::Q5_0 => Q5_0,
        QType::Q5_1 => Q5_1,
        _ => Q8_0,
    }
}

/// 32 bits → 32 bytes of 0xFF (bit set) or 0x00.
#[inline(always)]
pub(super) unsafe fn bytes_from_bits(p: *const u8) -> __m256i {
    let x32 = i32::from_le_bytes([*p, *p.add(1), *p.add(2), *p.add(3)]);
    let shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x32), shuf);
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
}

/// Stores a token's two halves (rows 0–7, 8–15) as the first `nvalid` rows at `out`.
#[inline(always)]
pub(super) unsafe fn store_halves(acc: &[__m256; 2], out: *mut f32, nvalid: usize) {
    let mut rows = [0f32; 16];
    _mm256_storeu_ps(rows.as_mut_ptr(), acc[0]);
    _mm256_storeu_ps(rows.as_mut_ptr().add(8), acc[1]);
    std::ptr::copy_nonoverlapping(rows.as_ptr(), out, nvalid.min(16));
}

#[inline(always)]
unsafe fn f16_to_f32(p: *const u8) -> f32 {
    let bits = u16::from_le_bytes([*p, *p.add(1)]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

const fn block_bytes(t: u8) -> usize {
    match t {
        Q4_0 => 18,
        Q4_1 => 20,
        Q5_0 => 22,
        Q5_1 => 24,
        _ => 34,
    }
}

const fn signed(t: u8) -> bool {
    matches!(t, Q4_0 | Q5_0 | Q8_0)
}

#[inline(always)]
unsafe fn hsum(x: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// The store mask of a panel's first `nvalid` rows.
#[inline(always)]
fn row_mask(nvalid: usize) -> __mmask16 {
    if nvalid >= PANEL_ROWS {
        0xFFFF
    } else {
        (1u16 << nvalid) - 1
    }
}

/// What the panel kernels' tests share (`panel_dots.rs`, `kpanel_dots.rs`).
#[cfg(test)]
mod panel_tests {
    use crate::blocks::QType;
    use crate::panels::PANEL_ROWS;

    /// A xorshift stream.
    pub(super) struct Rng(pub u64);

    impl Rng {
        pub fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 >> 11
        }

        /// Uniform in [−1, 1).
        pub fn unit(&mut self) -> f32 {
            (self.next() >> 30) as f32 / (1u64 << 23) as f32 - 1.0
        }
    }

    /// `rows × cols` of `t` for case 0: quantized from random values; 1: quantized from values
    /// at the type's largest magnitudes (±1 alternating); 2: raw random bytes (`Q8_0`'s −128,
    /// 6-bit scales and mins up to 63 among them); 3: every byte 0xFF (every value at its
    /// largest). Raw blocks get scales (and mins) of 0.01.
    pub(super) fn rows_of(t: QType, rows: usize, cols: usize, case: usize, rng: &mut Rng) -> Vec<u8> {
        if case < 2 {
            let w: Vec<f32> =
                (0..rows * cols).map(|i| if case == 1 { [-1.0, 1.0][i % 2] } else { rng.unit() }).collect();
            let pool = crate::ThreadPool::new(1);
            let Ok(bytes) = crate::quantize::quantize_rows(&pool, t, &w, rows, cols) else { panic!("quantize {t}") };
            return bytes;
        }
        let bb = t.block_bytes();
        let mut bytes: Vec<u8> =
            (0..rows * cols / t.block_elems() * bb).map(|_| if case == 3 { 0xFF } else { rng.next() as u8 }).collect();
        let f = half::f16::from_f32(0.01).to_bits().to_le_bytes();
        for blk in bytes.chunks_exact_mut(bb) {
            let at = if t == QType::Q6K { 208 } else { 0 };
            blk[at..at + 2].copy_from_slice(&f);
            if matches!(t, QType::Q4_1 | QType::Q5_1 | QType::Q4K | QType::Q5K) {
                blk[2..4].copy_from_slice(&f);
            }
        }
        bytes
    }

    /// `m` tokens of `cols` activations: random with every fifth at 3.0, or in case 3 all at
    /// 3.0 (every quantized activation +127: the largest sums).
    pub(super) fn acts_of(m: usize, cols: usize, case: usize, rng: &mut Rng) -> Vec<f32> {
        (0..m * cols).map(|i| if case == 3 || i % 5 == 0 { 3.0 } else { rng.unit() }).collect()
    }

    /// Runs `kernel(panel, out, nvalid)` over every panel of `packed` (`chunks` bytes each)
    /// into an `(m, rows)` output and asserts it holds `twin(token, row)`'s bits.
    pub(super) fn check_panels(
        rows: usize,
        m: usize,
        chunks: usize,
        packed: &[u8],
        label: &str,
        twin: impl Fn(usize, usize) -> f32,
        kernel: impl Fn(*const u8, *mut f32, usize),
    ) {
        let mut out = vec![f32::NAN; m * rows];
        for p in 0..rows.div_ceil(PANEL_ROWS) {
            // The kernel reads panel p and writes tokens 0..m × its rows (`ldo` = rows).
            kernel(
                packed[p * chunks..].as_ptr(),
                out[PANEL_ROWS * p..].as_mut_ptr(),
                (rows - PANEL_ROWS * p).min(PANEL_ROWS),
            );
        }
        for (i, g) in out.iter().enumerate() {
            let w = twin(i / rows, i % rows);
            assert_eq!(g.to_bits(), w.to_bits(), "{label} out {i}: {g} vs {w}");
        }
    }
}
