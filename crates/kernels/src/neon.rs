//! aarch64 dot products of 32-value blocks (`Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`) with `Q8`
//! activations, using the dotprod extension's `sdot` (every Apple-silicon CPU has it).
//!
//! `sdot` is issued through `asm!` because its intrinsic is not stable Rust; each block
//! becomes two int8x16 registers of weights (values 0..15, then 16..31 of the block).

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::aarch64::*;

use crate::blocks::{Q8Block, QType};

/// `acc + Σ` of four-wide int8 products per int32 lane.
#[inline(always)]
unsafe fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    core::arch::asm!(
        "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
        acc = inout(vreg) acc,
        a = in(vreg) a,
        b = in(vreg) b,
        options(pure, nomem, nostack),
    );
    acc
}

#[inline(always)]
fn f16_at(p: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([p[at], p[at + 1]])).to_f32()
}

/// The high (fifth) bits of a Q5 block, as 0x10 or 0 per value.
#[inline(always)]
unsafe fn high_bits(qh: &[u8]) -> (uint8x16_t, uint8x16_t) {
    let bits = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    // Lane j of the low half tests bit j, of the high half bit j + 16.
    const SEL: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    let sel = vld1q_u8(SEL.as_ptr());
    let b = bits.to_le_bytes();
    let lo = vcombine_u8(vdup_n_u8(b[0]), vdup_n_u8(b[1]));
    let hi = vcombine_u8(vdup_n_u8(b[2]), vdup_n_u8(b[3]));
    let ten = vdupq_n_u8(0x10);
    (vandq_u8(vtstq_u8(lo, sel), ten), vandq_u8(vtstq_u8(hi, sel), ten))
}

#[target_feature(enable = "neon,dotprod")]
unsafe fn row_neon(t: QType, row: &[u8], act: &[Q8Block]) -> f32 {
    let bb = t.block_bytes();
    let mut sum = 0f32;
    for (b, a) in row.chunks_exact(bb).zip(act) {
        let d = f16_at(b, 0);
        let (w0, w1, m) = match t {
            QType::Q8_0 => (vld1q_s8(b[2..].as_ptr() as *const i8), vld1q_s8(b[18..].as_ptr() as *const i8), 0.0),
            QType::Q4_0 | QType::Q4_1 => {
                let off = if t == QType::Q4_0 { 2 } else { 4 };
                let v = vld1q_u8(b[off..].as_ptr());
                let lo = vandq_u8(v, vdupq_n_u8(0x0F));
                let hi = vshrq_n_u8(v, 4);
                if t == QType::Q4_0 {
                    let eight = vdupq_n_s8(8);
                    (vsubq_s8(vreinterpretq_s8_u8(lo), eight), vsubq_s8(vreinterpretq_s8_u8(hi), eight), 0.0)
                } else {
                    (vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi), f16_at(b, 2))
                }
            }
            _ => {
                let off = if t == QType::Q5_0 { 2 } else { 4 };
                let (h0, h1) = high_bits(&b[off..off + 4]);
                let v = vld1q_u8(b[off + 4..].as_ptr());
                let lo = vorrq_u8(vandq_u8(v, vdupq_n_u8(0x0F)), h0);
                let hi = vorrq_u8(vshrq_n_u8(v, 4), h1);
                if t == QType::Q5_0 {
                    let sixteen = vdupq_n_s8(16);
                    (vsubq_s8(vreinterpretq_s8_u8(lo), sixteen), vsubq_s8(vreinterpretq_s8_u8(hi), sixteen), 0.0)
                } else {
                    (vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi), f16_at(b, 2))
                }
            }
        };
        let x0 = vld1q_s8(a.qs.as_ptr());
        let x1 = vld1q_s8(a.qs[16..].as_ptr());
        let s = sdot(sdot(vdupq_n_s32(0), w0, x0), w1, x1);
        sum += vaddvq_s32(s) as f32 * (d * a.d) + m * a.s;
    }
    sum
}

pub(crate) fn has_dotprod() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}

macro_rules! row_for {
    ($name:ident, $t:expr) => {
        unsafe fn $name(row: &[u8], act: &[Q8Block]) -> f32 {
            row_neon($t, row, act)
        }
    };
}
row_for!(row_q4_0, QType::Q4_0);
row_for!(row_q4_1, QType::Q4_1);
row_for!(row_q5_0, QType::Q5_0);
row_for!(row_q5_1, QType::Q5_1);
row_for!(row_q8_0, QType::Q8_0);

/// The row kernel for `t` (a 32-value type). Callers check `has_dotprod()` first.
pub(crate) fn row_fn(t: QType) -> unsafe fn(&[u8], &[Q8Block]) -> f32 {
    match t {
        QType::Q4_0 => row_q4_0,
        QType::Q4_1 => row_q4_1,
        QType::Q5_0 => row_q5_0,
        QType::Q5_1 => row_q5_1,
        _ => row_q8_0,
    }
}

// ---- k-quants with Q8_K activations: `sdot` per sub-block, its scale applied to the sum.

use crate::blocks::{scale_min_k4, Q8KBlock};

#[inline(always)]
unsafe fn dot32(w0: int8x16_t, w1: int8x16_t, y: *const i8) -> i32 {
    vaddvq_s32(sdot(sdot(vdupq_n_s32(0), w0, vld1q_s8(y)), w1, vld1q_s8(y.add(16))))
}

#[target_feature(enable = "neon,dotprod")]
unsafe fn row_q45k_neon<const FIVE: bool>(row: &[u8], act: &[Q8KBlock]) -> f32 {
    let bb = if FIVE { 176 } else { 144 };
    let mut sum = 0f32;
    let low4 = vdupq_n_u8(0x0F);
    let one = vdupq_n_u8(1);
    for (b, a) in row.chunks_exact(bb).zip(act) {
        let d = f16_at(b, 0) * a.d;
        let dmin = f16_at(b, 2) * a.d;
        let (mut scales, mut mins) = ([0i32; 8], [0i32; 8]);
        for j in 0..8 {
            let (s, m) = scale_min_k4(j, &b[4..16]);
            scales[j] = s as i32;
            mins[j] = m as i32;
        }
        let summ: i32 = (0..8).map(|j| mins[j] * (a.bsums[2 * j] as i32 + a.bsums[2 * j + 1] as i32)).sum();
        let qs = if FIVE { &b[48..176] } else { &b[16..144] };
        let (qh0, qh1) = if FIVE {
            (vld1q_u8(b[16..].as_ptr()), vld1q_u8(b[32..].as_ptr()))
        } else {
            (vdupq_n_u8(0), vdupq_n_u8(0))
        };
        let y = a.qs.as_ptr();
        let mut sumi = 0i32;
        for c in 0..4 {
            let v0 = vld1q_u8(qs[32 * c..].as_ptr());
            let v1 = vld1q_u8(qs[32 * c + 16..].as_ptr());
            let (mut l0, mut l1) = (vandq_u8(v0, low4), vandq_u8(v1, low4));
            let (mut h0, mut h1) = (vshrq_n_u8(v0, 4), vshrq_n_u8(v1, 4));
            if FIVE {
                let s_lo = vdupq_n_s8(-(2 * c as i8));
                let s_hi = vdupq_n_s8(-(2 * c as i8 + 1));
                let bit = |qh: uint8x16_t, s: int8x16_t| vshlq_n_u8(vandq_u8(vshlq_u8(qh, s), one), 4);
                l0 = vorrq_u8(l0, bit(qh0, s_lo));
                l1 = vorrq_u8(l1, bit(qh1, s_lo));
                h0 = vorrq_u8(h0, bit(qh0, s_hi));
                h1 = vorrq_u8(h1, bit(qh1, s_hi));
            }
            let s = |u: uint8x16_t| vreinterpretq_s8_u8(u);
            sumi += scales[2 * c] * dot32(s(l0), s(l1), y.add(64 * c));
            sumi += scales[2 * c + 1] * dot32(s(h0), s(h1), y.add(64 * c + 32));
        }
        sum += d * sumi as f32 - dmin * summ as f32;
    }
    sum
}

#[target_feature(enable = "neon,dotprod")]
unsafe fn row_q6k_neon(row: &[u8], act: &[Q8KBlock]) -> f32 {
    let mut sum = 0f32;
    let low4 = vdupq_n_u8(0x0F);
    let three = vdupq_n_u8(3);
    let m32 = vdupq_n_s8(32);
    for (b, a) in row.chunks_exact(210).zip(act) {
        let d = f16_at(b, 208) * a.d;
        let sc = &b[192..208];
        let y = a.qs.as_ptr();
        let mut sumi = 0i32;
        for h in 0..2 {
            let ql = &b[64 * h..];
            let qh = &b[128 + 32 * h..];
            // 16 lanes at a time: `half` 0 is values l = 0..16 of each group, 1 is l = 16..32.
            for half in 0..2 {
                let o = 16 * half;
                let ql0 = vld1q_u8(ql[o..].as_ptr());
                let ql1 = vld1q_u8(ql[32 + o..].as_ptr());
                let qhv = vld1q_u8(qh[o..].as_ptr());
                let hb = |s: i8| vshlq_n_u8(vandq_u8(vshlq_u8(qhv, vdupq_n_s8(-s)), three), 4);
                let v = [
                    vorrq_u8(vandq_u8(ql0, low4), hb(0)),
                    vorrq_u8(vandq_u8(ql1, low4), hb(2)),
                    vorrq_u8(vshrq_n_u8(ql0, 4), hb(4)),
                    vorrq_u8(vshrq_n_u8(ql1, 4), hb(6)),
                ];
                for (k, v) in v.iter().enumerate() {
                    let w = vsubq_s8(vreinterpretq_s8_u8(*v), m32);
                    let idx = 128 * h + 32 * k + o;
                    let p = vaddvq_s32(sdot(vdupq_n_s32(0), w, vld1q_s8(y.add(idx))));
                    sumi += sc[idx / 16] as i8 as i32 * p;
                }
            }
        }
        sum += d * sumi as f32;
    }
    sum
}

/// The row kernel of a k-quant type. Callers check `has_dotprod()` first.
pub(crate) fn row_k_fn(t: QType) -> Option<crate::matmul::RowKFn> {
    match t {
        QType::Q4K => Some(row_q45k_neon::<false>),
        QType::Q5K => Some(row_q45k_neon::<true>),
        QType::Q6K => Some(row_q6k_neon),
        _ => None,
    }
}
