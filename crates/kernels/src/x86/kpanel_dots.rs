//! x86-64 decode over the k-quants' panel layout (`kpanels.rs`: `Q4_K`, `Q5_K`, `Q6_K`) on AVX-512 VNNI: one 32-bit lane
//! per weight row, so a `vpdpbusd` multiplies four values of 16 rows with four activations
//! broadcast to every lane. Per 256-value block, the 16 rows' 6-bit scales and mins are
//! unpacked together (ggml's mask trick, lane-wise; `Q5_K`'s fifth bits added by byte masks),
//! each 32-value sub-block's integer dot is
//! scaled by its row's scale (`vpmulld`), and the mins meet the activations' pair sums in two
//! `vpdpwssd`s per four sub-blocks. The row kernels (`kquants512.rs`) spend ~60 instructions on
//! one row's block; here ~250 serve 16 rows, and no horizontal sums are needed.
//!
//! On AVX2 their twins in `kpanel_dots256.rs` give the same bits.
//!
//! # Safety
//! The kernels [`kpanel_dots_fn`] returns run only on a CPU with AVX-512 VNNI (`has_vnni()`),
//! or AVX2 (`has_avx2()`) for the AVX2 ones, with the panel, the activations and the output
//! their `# Safety` section describes.

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use super::kpanel_dots256::kpanel_tokens_avx2;
use super::row_mask;
use crate::blocks::{Q8KBlock, QType};

// No software prefetch: a panel is one sequential stream, which the hardware prefetcher follows
// best alone (`kbench` from DRAM, 32768 × 4096, one thread: Q4_K 23–26 GB/s without, 19–21
// with every line of the chunk two ahead; Q6_K 22–23 without, 16–18 with). The AVX2 twins
// (Zen 3) read more with one line per step prefetched (`kpanel_dots256.rs`).

/// Tokens per pass over a panel.
const MR_MAX: usize = 4;

/// 16 rows (one panel, `nb` chunks at `panel`) × `MR` tokens (`act`, `nb` blocks each) into
/// `out[t · ldo + r]` for the first `nvalid` rows. Each token's lane gets the same operations
/// in the same order whatever `MR` is, so a token's result does not depend on its neighbours.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn q45k_panel_vnni<const FIVE: bool, const MR: usize>(
    panel: *const u8,
    nb: usize,
    act: *const Q8KBlock,
    out: *mut f32,
    ldo: usize,
    nvalid: usize,
) {
    let low = _mm512_set1_epi8(0x0F);
    let (m6, m4, m2) = (_mm512_set1_epi32(0x3f3f_3f3f), _mm512_set1_epi32(0x0f0f_0f0f), _mm512_set1_epi32(0x0303_0303));
    let byte = _mm512_set1_epi32(0xFF);
    let even = _mm512_set1_epi32(0x00FF_00FF);
    // A chunk: 16 × 144 bytes (`Q4_K`) or 16 × 176 (`Q5_K`: 512 bytes of fifth bits before
    // the nibbles).
    let (cb, qs) = if FIVE { (16 * 176, 768) } else { (16 * 144, 256) };
    let sixteen = _mm512_set1_epi8(0x10);
    let mut acc = [_mm512_setzero_ps(); MR];
    for b in 0..nb {
        let chunk = panel.add(b * cb);
        let word = |g: usize| _mm512_loadu_si512(chunk.add(64 + 64 * g) as *const _);
        let (u0, u1, u2) = (word(0), word(1), word(2));
        // Each lane: scales 0–3, scales 4–7, mins 0–3, mins 4–7, a byte each.
        let s03 = _mm512_and_si512(u0, m6);
        let s47 = _mm512_or_si512(
            _mm512_and_si512(u2, m4),
            _mm512_slli_epi32::<4>(_mm512_and_si512(_mm512_srli_epi32::<6>(u0), m2)),
        );
        let m03 = _mm512_and_si512(u1, m6);
        let m47 = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi32::<4>(u2), m4),
            _mm512_slli_epi32::<4>(_mm512_and_si512(_mm512_srli_epi32::<6>(u1), m2)),
        );
        let mut isum = [_mm512_setzero_si512(); MR];
        for c in 0..4 {
            let sc = if c < 2 { s03 } else { s47 };
            let (sl, sh) = match c % 2 {
                0 => (_mm512_and_si512(sc, byte), _mm512_and_si512(_mm512_srli_epi32::<8>(sc), byte)),
                _ => (_mm512_and_si512(_mm512_srli_epi32::<16>(sc), byte), _mm512_srli_epi32::<24>(sc)),
            };
            let q = chunk.add(qs + 512 * c);
            let mut lo = [_mm512_setzero_si512(); 8];
            let mut hi = [_mm512_setzero_si512(); 8];
            for i in 0..8 {
                let raw = _mm512_loadu_si512(q.add(64 * i) as *const _);
                lo[i] = _mm512_and_si512(raw, low);
                hi[i] = _mm512_and_si512(_mm512_srli_epi16::<4>(raw), low);
                if FIVE {
                    // Fifth bits 2c (low nibbles) and 2c + 1 (high) of step i's bytes.
                    let bits = _mm512_loadu_si512(chunk.add(256 + 64 * i) as *const _);
                    let kl = _mm512_test_epi8_mask(bits, _mm512_set1_epi8(1 << (2 * c)));
                    let kh = _mm512_test_epi8_mask(bits, _mm512_set1_epi8((2 << (2 * c)) as u8 as i8));
                    lo[i] = _mm512_mask_add_epi8(lo[i], kl, lo[i], sixteen);
                    hi[i] = _mm512_mask_add_epi8(hi[i], kh, hi[i], sixteen);
                }
            }
            for (t, isum) in isum.iter_mut().enumerate() {
                let x = (*act.add(t * nb + b)).qs.as_ptr().add(64 * c);
                let xs = |k: usize| _mm512_set1_epi32((x.add(4 * k) as *const i32).read_unaligned());
                let (mut dl, mut dh) = (_mm512_setzero_si512(), _mm512_setzero_si512());
                for i in 0..8 {
                    dl = _mm512_dpbusd_epi32(dl, lo[i], xs(i));
                    dh = _mm512_dpbusd_epi32(dh, hi[i], xs(8 + i));
                }
                *isum =
                    _mm512_add_epi32(*isum, _mm512_add_epi32(_mm512_mullo_epi32(dl, sl), _mm512_mullo_epi32(dh, sh)));
            }
        }
        // The mins as 16-bit pairs per lane: (m0, m2), (m1, m3), (m4, m6), (m5, m7).
        let mp = [
            _mm512_and_si512(m03, even),
            _mm512_and_si512(_mm512_srli_epi32::<8>(m03), even),
            _mm512_and_si512(m47, even),
            _mm512_and_si512(_mm512_srli_epi32::<8>(m47), even),
        ];
        let d = _mm512_cvtph_ps(_mm256_loadu_si256(chunk as *const __m256i));
        let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(chunk.add(32) as *const __m256i));
        for (t, acc) in acc.iter_mut().enumerate() {
            let a = &*act.add(t * nb + b);
            // Sub-block j's activation sum: two 16-value sums.
            let bs = |j: usize| (a.bsums[2 * j] as i32 + a.bsums[2 * j + 1] as i32) & 0xFFFF;
            let pair = |j: usize, k: usize| _mm512_set1_epi32(bs(j) | (bs(k) << 16));
            let mut msum = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mp[0], pair(0, 2));
            msum = _mm512_dpwssd_epi32(msum, mp[1], pair(1, 3));
            msum = _mm512_dpwssd_epi32(msum, mp[2], pair(4, 6));
            msum = _mm512_dpwssd_epi32(msum, mp[3], pair(5, 7));
            let ad = _mm512_set1_ps(a.d);
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, ad), *acc);
            *acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(dmin, ad), *acc);
        }
    }
    let mask = row_mask(nvalid);
    for (t, acc) in acc.iter().enumerate() {
        _mm512_mask_storeu_ps(out.add(t * ldo), mask, *acc);
    }
}

/// `Q6_K`'s chunk (`kpanels.rs`): the 16 `d`, the scale words, then per half `n` and step `l`
/// the three value registers at `Q6_VALUES + 192 (8n + l)`; padded to whole lines.
pub(super) const Q6_SCALES: usize = 32;
pub(super) const Q6_VALUES: usize = Q6_SCALES + 4 * 64;
pub(super) const CB6: usize = (Q6_VALUES + 16 * 192).next_multiple_of(64);

/// [`q45k_panel_vnni`] for `Q6_K`: per 128-value half and per four-byte step, the low nibbles
/// and high bit pairs of 16 rows make four registers of 6-bit values (each for its own
/// 16-value scale group), dotted with the activations; the −32 offset is taken out once per
/// block through the activations' 16-value sums (Σ s·(q − 32)·y = Σ s·q·y − 32 Σ s·bsum).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn q6k_panel_vnni<const MR: usize>(
    panel: *const u8,
    nb: usize,
    act: *const Q8KBlock,
    out: *mut f32,
    ldo: usize,
    nvalid: usize,
) {
    let low = _mm512_set1_epi8(0x0F);
    let (h0, h1, h2, h3) =
        (_mm512_set1_epi8(0x03), _mm512_set1_epi8(0x0C), _mm512_set1_epi8(0x30), _mm512_set1_epi8(0xC0u8 as i8));
    let mut acc = [_mm512_setzero_ps(); MR];
    for b in 0..nb {
        let chunk = panel.add(b * CB6);
        let load = |at: usize| _mm512_loadu_si512(chunk.add(at) as *const _);
        let words = [load(Q6_SCALES), load(Q6_SCALES + 64), load(Q6_SCALES + 128), load(Q6_SCALES + 192)];
        // Scale g of every row, sign-extended to its lane.
        let scale = |g: usize| {
            let w = words[g / 4];
            match g % 4 {
                0 => _mm512_srai_epi32::<24>(_mm512_slli_epi32::<24>(w)),
                1 => _mm512_srai_epi32::<24>(_mm512_slli_epi32::<16>(w)),
                2 => _mm512_srai_epi32::<24>(_mm512_slli_epi32::<8>(w)),
                _ => _mm512_srai_epi32::<24>(w),
            }
        };
        let mut isum = [_mm512_setzero_si512(); MR];
        for n in 0..2 {
            for h in 0..2 {
                let mut dots = [[_mm512_setzero_si512(); 4]; MR];
                for l in 4 * h..4 * h + 4 {
                    let at = Q6_VALUES + 192 * (8 * n + l);
                    let (ql0, ql1, qh) = (load(at), load(at + 64), load(at + 128));
                    let q = [
                        _mm512_or_si512(_mm512_and_si512(ql0, low), _mm512_slli_epi16::<4>(_mm512_and_si512(qh, h0))),
                        _mm512_or_si512(_mm512_and_si512(ql1, low), _mm512_slli_epi16::<2>(_mm512_and_si512(qh, h1))),
                        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16::<4>(ql0), low), _mm512_and_si512(qh, h2)),
                        _mm512_or_si512(
                            _mm512_and_si512(_mm512_srli_epi16::<4>(ql1), low),
                            _mm512_srli_epi16::<2>(_mm512_and_si512(qh, h3)),
                        ),
                    ];
                    for (t, dots) in dots.iter_mut().enumerate() {
                        let x = (*act.add(t * nb + b)).qs.as_ptr().add(128 * n + 4 * l);
                        for (k, d) in dots.iter_mut().enumerate() {
                            let xs = _mm512_set1_epi32((x.add(32 * k) as *const i32).read_unaligned());
                            *d = _mm512_dpbusd_epi32(*d, q[k], xs);
                        }
                    }
                }
                for (t, dots) in dots.iter().enumerate() {
                    for (k, d) in dots.iter().enumerate() {
                        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(*d, scale(8 * n + 2 * k + h)));
                    }
                }
            }
        }
        // The scales as 16-bit pairs per lane: (s4w, s4w+2) and (s4w+1, s4w+3).
        let even = words.map(|w| _mm512_srai_epi16::<8>(_mm512_slli_epi16::<8>(w)));
        let odd = words.map(|w| _mm512_srai_epi16::<8>(w));
        let d = _mm512_cvtph_ps(_mm256_loadu_si256(chunk as *const __m256i));
        for (t, acc) in acc.iter_mut().enumerate() {
            let a = &*act.add(t * nb + b);
            let pair = |j: usize, k: usize| _mm512_set1_epi32((a.bsums[j] as u16 as i32) | ((a.bsums[k] as i32) << 16));
            let mut msum = _mm512_setzero_si512();
            for w in 0..4 {
                msum = _mm512_dpwssd_epi32(msum, even[w], pair(4 * w, 4 * w + 2));
                msum = _mm512_dpwssd_epi32(msum, odd[w], pair(4 * w + 1, 4 * w + 3));
            }
            let i = _mm512_sub_epi32(isum[t], _mm512_slli_epi32::<5>(msum));
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_mul_ps(d, _mm512_set1_ps(a.d)), *acc);
        }
    }
    let mask = row_mask(nvalid);
    for (t, acc) in acc.iter().enumerate() {
        _mm512_mask_storeu_ps(out.add(t * ldo), mask, *acc);
    }
}

/// 16 rows (one panel, `nb` chunks at `panel`) × `m` tokens (`act`, `nb` blocks each) into
/// `out[t · ldo + r]` for the first `nvalid` rows, up to `MR_MAX` tokens per pass.
///
/// # Safety
/// The CPU has AVX-512 VNNI; `panel` holds `nb` chunks of the k-quant `T`; `act` holds `m · nb` blocks;
/// `out` is valid for those writes.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn kpanel_tokens<const T: u8>(
    panel: *const u8,
    nb: usize,
    act: &[Q8KBlock],
    m: usize,
    out: *mut f32,
    ldo: usize,
    nvalid: usize,
) {
    let mut t0 = 0;
    while t0 < m {
        let (a, o) = (act.as_ptr().add(t0 * nb), out.add(t0 * ldo));
        let mr = (m - t0).min(MR_MAX);
        match (T, mr) {
            (Q4K, 1) => q45k_panel_vnni::<false, 1>(panel, nb, a, o, ldo, nvalid),
            (Q4K, 2) => q45k_panel_vnni::<false, 2>(panel, nb, a, o, ldo, nvalid),
            (Q4K, 3) => q45k_panel_vnni::<false, 3>(panel, nb, a, o, ldo, nvalid),
            (Q4K, _) => q45k_panel_vnni::<false, MR_MAX>(panel, nb, a, o, ldo, nvalid),
            (Q5K, 1) => q45k_panel_vnni::<true, 1>(panel, nb, a, o, ldo, nvalid),
            (Q5K, 2) => q45k_panel_vnni::<true, 2>(panel, nb, a, o, ldo, nvalid),
            (Q5K, 3) => q45k_panel_vnni::<true, 3>(panel, nb, a, o, ldo, nvalid),
            (Q5K, _) => q45k_panel_vnni::<true, MR_MAX>(panel, nb, a, o, ldo, nvalid),
            (_, 1) => q6k_panel_vnni::<1>(panel, nb, a, o, ldo, nvalid),
            (_, 2) => q6k_panel_vnni::<2>(panel, nb, a, o, ldo, nvalid),
            (_, 3) => q6k_panel_vnni::<3>(panel, nb, a, o, ldo, nvalid),
            (_, _) => q6k_panel_vnni::<MR_MAX>(panel, nb, a, o, ldo, nvalid),
        }
        t0 += mr;
    }
}

pub(super) const Q4K: u8 = 0;
pub(super) const Q5K: u8 = 1;
const Q6K: u8 = 2;

/// A panel decode kernel: `(panel, nb, act, m, out, ldo, nvalid)`.
type KPanelDotsFn = unsafe fn(*const u8, usize, &[Q8KBlock], usize, *mut f32, usize, usize);

/// The panel decode kernel of the k-quant `t`, VNNI or AVX2. Callers check `has_vnni()` or
/// `has_avx2()`.
pub(crate) fn kpanel_dots_fn(t: QType, vnni: bool) -> KPanelDotsFn {
    match (t, vnni) {
        (QType::Q4K, true) => kpanel_tokens::<Q4K>,
        (QType::Q5K, true) => kpanel_tokens::<Q5K>,
        (_, true) => kpanel_tokens::<Q6K>,
        (QType::Q4K, false) => kpanel_tokens_avx2::<Q4K>,
        (QType::Q5K, false) => kpanel_tokens_avx2::<Q5K>,
        (_, false) => kpanel_tokens_avx2::<Q6K>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::{quantize_q8k, unpack_k};
    use crate::panels;
    use crate::x86::panel_tests::{acts_of, check_panels, rows_of, Rng};

    /// A row's dot the kernels' way: per block the exact integer sums of the scaled values and
    /// of the mins, then the same `fma` steps (`f32::mul_add` rounds once, as `vfmadd`).
    fn twin(t: QType, row: &[u8], act: &[Q8KBlock]) -> f32 {
        let mut acc = 0f32;
        for (b, a) in row.chunks_exact(t.block_bytes()).zip(act) {
            let u = unpack_k(t, b);
            let (mut sq, mut sm) = (0i32, 0i32);
            for s in 0..256 / u.sub {
                let r = s * u.sub..(s + 1) * u.sub;
                let dot: i32 = u.q[r.clone()].iter().zip(&a.qs[r]).map(|(&w, &x)| w as i32 * x as i32).sum();
                sq += u.scales[s] as i32 * dot;
                let bs: i32 = a.bsums[s * u.sub / 16..(s + 1) * u.sub / 16].iter().map(|&b| b as i32).sum();
                sm += u.mins[s] as i32 * bs;
            }
            acc = (sq as f32).mul_add(u.d * a.d, acc);
            if t != QType::Q6K {
                acc = (-(sm as f32)).mul_add(u.dmin * a.d, acc);
            }
        }
        acc
    }

    /// The AVX2 and VNNI k-quant panel kernels give the twin's bits for one token and several,
    /// and a panel's last rows, on the harness's four cases: every 6-bit scale and min up to 63,
    /// `Q6_K`'s scales down to −128, and every value and activation at its largest do not
    /// saturate the AVX2 kernels' 16-bit sums.
    #[test]
    fn avx2_and_vnni_kpanel_kernels_equal_the_twin_bit_for_bit() {
        if !super::super::has_avx2() {
            return;
        }
        let (rows, cols) = (21, 512);
        let nb = cols / 256;
        let mut rng = Rng(13);
        for t in [QType::Q4K, QType::Q5K, QType::Q6K] {
            let bb = t.block_bytes();
            for case in 0..4 {
                let data = rows_of(t, rows, cols, case, &mut rng);
                let packed = panels::repack(t, rows, cols, &data);
                let row = |r: usize| &data[r * nb * bb..(r + 1) * nb * bb];
                for m in 1..=5 {
                    let mut act = vec![Q8KBlock::default(); m * nb];
                    quantize_q8k(&acts_of(m, cols, case, &mut rng), &mut act);
                    for vnni in [false].into_iter().chain(super::super::has_vnni().then_some(true)) {
                        let label = format!("{t} case {case} m={m} vnni={vnni}");
                        let twin = |tk: usize, r: usize| twin(t, row(r), &act[tk * nb..(tk + 1) * nb]);
                        check_panels(
                            rows,
                            m,
                            nb * panels::chunk_bytes(t),
                            &packed,
                            &label,
                            twin,
                            |panel, out, nvalid| {
                                // SAFETY: the CPU runs this kernel; the panel holds nb chunks; act
                                // holds m · nb blocks; out has m rows of `rows` from the panel's first.
                                unsafe { kpanel_dots_fn(t, vnni)(panel, nb, &act, m, out, rows, nvalid) }
                            },
                        );
                    }
                }
            }
        }
    }
}
