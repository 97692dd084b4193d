//! Portable dot products of one quantized weight row with quantized activations: the
//! obviously-correct twins of the SIMD kernels, and the fallback where no SIMD path exists.
//! Integer sums per block, then scales in f32, as ggml's `*_generic` dots.

use crate::blocks::{unpack32, unpack_k, Q8Block, Q8KBlock, QType};

/// `row` (whole blocks of `t`) · `act` (one `Q8Block` per 32 values).
pub fn dot_q8(t: QType, row: &[u8], act: &[Q8Block]) -> f32 {
    let bb = t.block_bytes();
    let mut sum = 0f32;
    for (b, a) in row.chunks_exact(bb).zip(act) {
        let u = unpack32(t, b);
        let sumi: i32 = u.q.iter().zip(&a.qs).map(|(&w, &x)| w as i32 * x as i32).sum();
        sum += sumi as f32 * (u.d * a.d) + u.m * a.s;
    }
    sum
}

/// `row` (whole blocks of a k-quant `t`) · `act` (one `Q8KBlock` per 256 values).
pub fn dot_q8k(t: QType, row: &[u8], act: &[Q8KBlock]) -> f32 {
    let bb = t.block_bytes();
    let mut sum = 0f32;
    for (b, a) in row.chunks_exact(bb).zip(act) {
        let u = unpack_k(t, b);
        let mut sq = 0i32;
        let mut sm = 0i32;
        for s in 0..256 / u.sub {
            let range = s * u.sub..(s + 1) * u.sub;
            let d: i32 = u.q[range.clone()].iter().zip(&a.qs[range]).map(|(&w, &x)| w as i32 * x as i32).sum();
            sq += u.scales[s] as i32 * d;
            if u.mins[s] != 0 {
                let bs: i32 = a.bsums[s * u.sub / 16..(s + 1) * u.sub / 16].iter().map(|&b| b as i32).sum();
                sm += u.mins[s] as i32 * bs;
            }
        }
        sum += u.d * a.d * sq as f32 - u.dmin * a.d * sm as f32;
    }
    sum
}
