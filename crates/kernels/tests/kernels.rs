//! Every kernel against a dequantize-then-f64 reference, on random blocks (every bit pattern
//! of the quantized bytes is a valid block, so the bytes are random and only the f16 scales
//! are drawn from a sane range), on every instruction set this CPU has, with sizes that are
//! not multiples of the tiles or the thread split.
//!
//! Tolerance: the dot-product path quantizes the activations to 8 bits per block, so its
//! error is bounded by `Σ |w_j| · step_j / 2` (`step` = the block's activation scale) plus the
//! f16 rounding of the scales (2⁻¹¹ relative); the GEMM path works in f32 and must agree
//! with the reference to 1e-4 relative. SIMD and portable kernels compute the same integer
//! sums, so they must agree to f32 rounding.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tessera_kernels::blocks::{dequantize, quantize_q8, quantize_q8k};
use tessera_kernels::{ActKind, Isa, Layout, Q8Block, Q8KBlock, QMatrix, QType, ThreadPool};

fn f16_bytes(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_bits().to_le_bytes()
}

/// Random bytes with valid scales (`d` ∈ ±[0.001, 0.05], `dmin` ∈ [0, 0.05]), in GGUF's row
/// layout.
fn random_matrix(t: QType, rows: usize, cols: usize, rng: &mut StdRng) -> QMatrix {
    let data = random_blocks(t, rows, cols, rng);
    QMatrix::with_layout(t, rows, cols, data, Layout::Rows).expect("valid matrix")
}

/// The same matrix in every layout its type has (rows, and panels for every type on AVX-512 VNNI).
fn in_every_layout(w: &QMatrix) -> Vec<QMatrix> {
    let rows_bytes = w.bytes().to_vec();
    [Layout::Rows, Layout::Panels]
        .into_iter()
        .filter_map(|l| QMatrix::with_layout(w.qtype(), w.rows(), w.cols(), rows_bytes.clone(), l).ok())
        .collect()
}

fn random_blocks(t: QType, rows: usize, cols: usize, rng: &mut StdRng) -> Vec<u8> {
    let nb = rows * cols / t.block_elems();
    let bb = t.block_bytes();
    let mut data = vec![0u8; nb * bb];
    rng.fill(&mut data[..]);
    for b in data.chunks_exact_mut(bb) {
        let mut d = rng.random_range(0.001f32..0.05);
        if rng.random_bool(0.3) {
            d = -d;
        }
        let dmin = rng.random_range(0f32..0.05);
        match t {
            QType::Q6K => b[208..210].copy_from_slice(&f16_bytes(d)),
            QType::Q4_1 | QType::Q5_1 | QType::Q4K | QType::Q5K => {
                b[0..2].copy_from_slice(&f16_bytes(d));
                b[2..4].copy_from_slice(&f16_bytes(dmin));
            }
            _ => b[0..2].copy_from_slice(&f16_bytes(d)),
        }
    }
    data
}

fn random_x(m: usize, cols: usize, rng: &mut StdRng) -> Vec<f32> {
    (0..m * cols).map(|_| rng.random_range(-2.0f32..2.0)).collect()
}

/// `x · Wᵀ` in f64 from the dequantized weights; per output the activation-quantization
/// error bound of the dot-product path, and `Σ |w_j x_j|` (what f32 rounding scales with).
/// For types with a min (`w = d·q − dmin·m`), the scaled and the min parts are summed apart
/// and cancel, so their magnitudes count: `|d·q| ≤ |w| + |dmin·m|`, `|dmin·m| ≤ MIN_PART`.
fn reference(w: &QMatrix, x: &[f32], m: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (rows, cols) = (w.rows(), w.cols());
    let wf = w.dequantize();
    let block = match w.qtype().activation() {
        ActKind::Q8 => 32,
        ActKind::Q8K => 256,
    };
    let mut out = vec![0f64; m * rows];
    let mut bound = vec![0f64; m * rows];
    let mut mags = vec![0f64; m * rows];
    for t in 0..m {
        let xr = &x[t * cols..(t + 1) * cols];
        // The activation step of each block (Q8: max/127; Q8_K: max/127 too).
        let steps: Vec<f64> =
            xr.chunks(block).map(|c| c.iter().fold(0f32, |a, v| a.max(v.abs())) as f64 / 127.0).collect();
        for r in 0..rows {
            let wr = &wf[r * cols..(r + 1) * cols];
            let mut s = 0f64;
            let mut b = 0f64;
            let mut mag = 0f64;
            let mut xmag = 0f64;
            let min_part = match w.qtype() {
                QType::Q4_1 | QType::Q5_1 => MIN_PART_32,
                QType::Q4K | QType::Q5K => MIN_PART_K,
                _ => 0.0,
            };
            for j in 0..cols {
                xmag += (xr[j] as f64).abs();
                s += wr[j] as f64 * xr[j] as f64;
                b += (wr[j] as f64).abs() * steps[j / block] * 0.5;
                mag += ((wr[j] as f64).abs() + 2.0 * min_part) * (xr[j] as f64).abs();
            }
            out[t * rows + r] = s;
            mags[t * rows + r] = mag;
            // f16 scales: 2^-11 relative on each block's product, and on the stored
            // `s = d · Σ q` that multiplies the block min (|min| < 0.05 here).
            bound[t * rows + r] = 1.02 * b + 2.0 * mag * 2f64.powi(-11) + 0.05 * xmag * 2f64.powi(-10) + 1e-5;
        }
    }
    (out, bound, mags)
}

/// Largest |min part| of a value: `m` (< 0.05) for Q4_1/Q5_1, `dmin · min` (< 0.05 · 63) for k-quants.
const MIN_PART_32: f64 = 0.05;
const MIN_PART_K: f64 = 0.05 * 63.0;

fn sizes(t: QType) -> Vec<(usize, usize)> {
    let be = t.block_elems();
    // (rows, cols): rows not a multiple of the thread split or tile; cols of 1 and 3 blocks
    // (for 32-value types, K not a multiple of 256), and a wide row.
    vec![(1, be), (37, 3 * be), (130, 9 * be)]
}

#[test]
fn dot_products_are_within_the_activation_quantization_bound_on_every_isa() {
    let mut rng = StdRng::seed_from_u64(7);
    for t in QType::ALL {
        for (rows, cols) in sizes(t) {
            let w0 = random_matrix(t, rows, cols, &mut rng);
            for w in in_every_layout(&w0) {
                // Decode sizes, and prefill sizes (the int8 GEMM on AVX-512 VNNI and AVX2: tokens
                // not a multiple of its 8-token tile).
                for m in [1usize, 3, 7, tessera_kernels::GEMM_MIN_TOKENS, 29] {
                    let x = random_x(m, cols, &mut rng);
                    let (want, bound, _) = reference(&w, &x, m);
                    for isa in Isa::available() {
                        for threads in [1usize, 2, 3] {
                            let pool = ThreadPool::new(threads);
                            let mut got = vec![0f32; m * rows];
                            w.matmul_with(isa, &pool, &x, m, &mut got).expect("matmul");
                            for i in 0..m * rows {
                                let err = (got[i] as f64 - want[i]).abs();
                                assert!(
                                err <= bound[i],
                                "{t} {:?} {rows}x{cols} m={m} {isa:?} threads={threads} out {i}: got {} want {} (err {err:.3e} > bound {:.3e})",
                                w.layout(), got[i], want[i], bound[i]
                            );
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn panels_hold_exactly_the_rows_values() {
    let mut rng = StdRng::seed_from_u64(5);
    for t in [QType::Q4_0, QType::Q4_1, QType::Q5_0, QType::Q5_1, QType::Q8_0, QType::Q4K, QType::Q5K, QType::Q6K] {
        for (rows, cols) in [(1usize, 32usize), (17, 96), (48, 64)] {
            let cols = cols * t.block_elems() / 32;
            let w = random_matrix(t, rows, cols, &mut rng);
            let p = QMatrix::with_layout(t, rows, cols, w.bytes().to_vec(), Layout::Panels).expect("panels");
            assert_eq!(p.dequantize(), w.dequantize(), "{t} {rows}x{cols}");
            // Any row range, not only whole panels.
            let mut part = vec![0f32; 3 * cols];
            p.dequantize_rows(rows.saturating_sub(3), rows, &mut part[..3.min(rows) * cols]);
            let all = w.dequantize();
            let lo = rows.saturating_sub(3) * cols;
            assert_eq!(&part[..3.min(rows) * cols], &all[lo..rows * cols]);
        }
    }
}

#[test]
fn simd_kernels_equal_the_portable_twin() {
    let mut rng = StdRng::seed_from_u64(11);
    let pool = ThreadPool::new(2);
    for t in QType::ALL {
        let (rows, cols) = (45, 5 * t.block_elems());
        let w = random_matrix(t, rows, cols, &mut rng);
        for m in [1usize, 5] {
            let x = random_x(m, cols, &mut rng);
            let (_, _, mag) = reference(&w, &x, m);
            let mut portable = vec![0f32; m * rows];
            w.matmul_with(Isa::Portable, &pool, &x, m, &mut portable).expect("portable");
            // The panel layouts' kernels too, on the sets that read them (the others dequantize).
            let runs = in_every_layout(&w)
                .into_iter()
                .flat_map(|lw| Isa::available().into_iter().map(move |i| (i, lw.clone())));
            for (isa, lw) in runs.filter(|(i, lw)| lw.layout() == Layout::Rows || i.reads_panels(t)) {
                let mut got = vec![0f32; m * rows];
                lw.matmul_with(isa, &pool, &x, m, &mut got).expect("simd");
                for i in 0..m * rows {
                    // Same integer sums; only the f32 combination order differs (2⁻²⁴ ≈ 6e-8
                    // relative to the magnitude of what is summed).
                    let tol = 1e-7 * mag[i] + 1e-7;
                    assert!(
                        ((got[i] - portable[i]).abs() as f64) <= tol,
                        "{t} {:?} {isa:?} m={m} out {i}: {} vs portable {}",
                        lw.layout(),
                        got[i],
                        portable[i]
                    );
                }
            }
        }
    }
}

/// Inside `row_invariant` (the server's batched decode step) a matmul of m tokens gives every
/// token exactly, bit for bit, what that token gets alone: on every type, layout, instruction
/// set and thread count, at batch sizes across the kernels' token groups and the GEMM threshold.
#[test]
fn row_invariant_matmuls_give_each_token_what_it_gets_alone() {
    let mut rng = StdRng::seed_from_u64(17);
    for t in QType::ALL {
        let (rows, cols) = (37, 3 * t.block_elems());
        let w0 = random_matrix(t, rows, cols, &mut rng);
        for w in in_every_layout(&w0) {
            for m in [2usize, 4, 5, 9, tessera_kernels::GEMM_MIN_TOKENS + 3] {
                let x = random_x(m, cols, &mut rng);
                for isa in Isa::available() {
                    for threads in [1usize, 2] {
                        let pool = ThreadPool::new(threads);
                        let mut batch = vec![0f32; m * rows];
                        tessera_kernels::row_invariant(|| w.matmul_with(isa, &pool, &x, m, &mut batch))
                            .expect("matmul");
                        for tok in 0..m {
                            let mut alone = vec![0f32; rows];
                            w.matmul_with(isa, &pool, &x[tok * cols..(tok + 1) * cols], 1, &mut alone).expect("matmul");
                            let got = &batch[tok * rows..(tok + 1) * rows];
                            assert!(
                                got.iter().zip(&alone).all(|(a, b)| a.to_bits() == b.to_bits()),
                                "{t} {:?} {isa:?} threads={threads} m={m} token {tok}: {got:?} vs alone {alone:?}",
                                w.layout()
                            );
                        }
                    }
                }
            }
        }
    }
}

/// `matmul_uninit` writes every output element (a NaN left in the buffer would show) with the
/// values `matmul` gives, on every type and layout, alone, batched, row-invariant and through
/// the GEMM paths.
#[test]
fn matmul_into_an_uninitialised_buffer_writes_every_element() {
    use std::mem::MaybeUninit;
    let mut rng = StdRng::seed_from_u64(23);
    for t in QType::ALL {
        let (rows, cols) = (37, 3 * t.block_elems());
        let w0 = random_matrix(t, rows, cols, &mut rng);
        for w in in_every_layout(&w0) {
            for m in [1usize, 5, tessera_kernels::GEMM_MIN_TOKENS + 3] {
                let x = random_x(m, cols, &mut rng);
                for invariant in [false, true] {
                    let mut want = vec![0f32; m * rows];
                    let mut got = vec![MaybeUninit::new(f32::NAN); m * rows];
                    let mut run = || {
                        w.matmul(&x, m, &mut want).expect("matmul");
                        w.matmul_uninit(&x, m, &mut got).expect("matmul_uninit");
                    };
                    if invariant {
                        tessera_kernels::row_invariant(&mut run);
                    } else {
                        run();
                    }
                    // SAFETY: the buffer was initialised (to NaN) before the call.
                    let got: Vec<f32> = got.iter().map(|v| unsafe { v.assume_init() }).collect();
                    assert!(
                        got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{t} {:?} m={m} invariant={invariant}: {got:?} vs {want:?}",
                        w.layout()
                    );
                }
            }
        }
    }
    let w = random_matrix(QType::Q8_0, 2, 32, &mut rng);
    let mut short = vec![MaybeUninit::uninit(); 1];
    assert!(w.matmul_uninit(&[0.0; 32], 1, &mut short).is_err(), "an output too short is an error");
}

#[test]
fn f32_gemm_path_equals_the_f32_reference() {
    let mut rng = StdRng::seed_from_u64(3);
    for t in QType::ALL {
        for (rows, cols) in sizes(t) {
            let w0 = random_matrix(t, rows, cols, &mut rng);
            for w in in_every_layout(&w0) {
                for m in [tessera_kernels::GEMM_MIN_TOKENS, 41] {
                    let x = random_x(m, cols, &mut rng);
                    let (want, _, mag) = reference(&w, &x, m);
                    // The sets without the int8 GEMM (AVX-512 VNNI, AVX2) prefill with dequantized
                    // tiles and an f32 GEMM.
                    for (isa, threads) in Isa::available()
                        .into_iter()
                        .filter(|&i| !matches!(i, Isa::Avx512Vnni | Isa::Avx2))
                        .flat_map(|i| [1usize, 2, 3].map(|n| (i, n)))
                    {
                        let pool = ThreadPool::new(threads);
                        let mut got = vec![0f32; m * rows];
                        w.matmul_with(isa, &pool, &x, m, &mut got).expect("matmul");
                        for i in 0..m * rows {
                            // f32 sums of `cols` terms: rounding grows with Σ|w x| (terms cancel).
                            let tol = 1e-6 * (cols as f64).sqrt() * mag[i] + 1e-6;
                            assert!(
                                (got[i] as f64 - want[i]).abs() <= tol,
                                "{t} {:?} {rows}x{cols} m={m} {isa:?} threads={threads} out {i}: {} vs {}",
                                w.layout(),
                                got[i],
                                want[i]
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn dequantization_follows_the_ggml_formulas_on_hand_made_blocks() {
    // Q4_0: d = 0.5, nibbles j and j+16 → (q − 8) · d.
    let mut b = vec![0u8; 18];
    b[0..2].copy_from_slice(&f16_bytes(0.5));
    b[2] = 0x9F; // value 0: 0xF → 7·0.5 = 3.5; value 16: 0x9 → 1·0.5 = 0.5
    let mut y = [0f32; 32];
    dequantize(QType::Q4_0, &b, &mut y);
    assert_eq!((y[0], y[16], y[1]), (3.5, 0.5, -4.0));

    // Q5_1: d = 1, m = −2, value 0 has its fifth bit set: (0x3 | 0x10) − 2 = 17.
    let mut b = vec![0u8; 24];
    b[0..2].copy_from_slice(&f16_bytes(1.0));
    b[2..4].copy_from_slice(&f16_bytes(-2.0));
    b[4] = 0x01;
    b[8] = 0x03;
    let mut y = [0f32; 32];
    dequantize(QType::Q5_1, &b, &mut y);
    assert_eq!((y[0], y[1], y[16]), (17.0, -2.0, -2.0));

    // Q6_K: d = 0.25, scale of sub-block 0 = 2; value 0 = ((ql & 0xF) | (qh & 3) << 4) − 32.
    let mut b = vec![0u8; 210];
    b[208..210].copy_from_slice(&f16_bytes(0.25));
    b[192] = 2;
    b[0] = 0x05;
    b[128] = 0x03; // value 0 gets high bits 3: 0x35 − 32 = 21
    let mut y = [0f32; 256];
    dequantize(QType::Q6K, &b, &mut y);
    assert_eq!(y[0], 0.25 * 2.0 * 21.0);
}

#[test]
fn activation_quantizers_follow_llama_cpp() {
    let x: Vec<f32> = (0..256).map(|i| ((i as f32) * 0.37).sin() * 3.0).collect();
    let mut q8 = vec![Q8Block::default(); 8];
    quantize_q8(&x, &mut q8);
    for (b, xs) in q8.iter().zip(x.chunks(32)) {
        let amax = xs.iter().fold(0f32, |a, v| a.max(v.abs()));
        assert_eq!(b.d, half::f16::from_f32(amax / 127.0).to_f32());
        assert!(b.qs.iter().any(|&q| q.unsigned_abs() == 127));
        let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
        assert_eq!(b.s, half::f16::from_f32(amax / 127.0 * sum as f32).to_f32());
    }
    let mut q8k = vec![Q8KBlock::default(); 1];
    quantize_q8k(&x, &mut q8k);
    let b = &q8k[0];
    // The value of largest magnitude maps to −127; bsums are sums of 16.
    let (imax, _) =
        x.iter().enumerate().fold((0, 0f32), |(bi, bv), (i, v)| if v.abs() > bv { (i, v.abs()) } else { (bi, bv) });
    assert_eq!(b.qs[imax], -127);
    for j in 0..16 {
        assert_eq!(b.bsums[j], b.qs[16 * j..16 * j + 16].iter().map(|&q| q as i16).sum::<i16>());
    }
    for (q, v) in b.qs.iter().zip(&x) {
        assert!((*q as f32 * b.d - v).abs() <= b.d.abs() * 0.5 + 1e-6);
    }
}

#[test]
fn bad_shapes_are_errors_not_panics() {
    assert!(QMatrix::new(QType::Q4_0, 2, 48, vec![0; 2 * 18]).is_err(), "48 is not a multiple of 32");
    assert!(QMatrix::new(QType::Q4_0, 2, 32, vec![0; 35]).is_err(), "wrong byte count");
    let w = QMatrix::new(QType::Q8_0, 2, 32, vec![0; 2 * 34]).expect("valid");
    let mut out = vec![0f32; 2];
    assert!(w.matmul(&[0.0; 31], 1, &mut out).is_err(), "x too short");
}

#[test]
fn the_pool_runs_every_part_once_and_reports_a_panic() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let pool = ThreadPool::new(3);
    for _ in 0..200 {
        let hits: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
        pool.run(&|p| {
            hits[p].fetch_add(1, Ordering::Relaxed);
        })
        .expect("run");
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    }
    let r = pool.run(&|p| {
        if p == 1 {
            panic!("boom");
        }
    });
    assert!(r.is_err());
    // Still usable afterwards.
    pool.run(&|_| {}).expect("pool survives a panicking job");
}

#[cfg(target_arch = "aarch64")]
#[test]
fn neon_dotprod_kernels_run_here() {
    // Under `scripts/test_aarch64.sh` (qemu -cpu max) the dotprod path must be present, so
    // the tests above execute it rather than only the portable twin.
    assert!(Isa::available().contains(&Isa::NeonDotprod), "available: {:?}", Isa::available());
}

#[test]
fn weights_quantized_to_q8_0_round_to_the_nearest_step() {
    let mut rng = StdRng::seed_from_u64(9);
    let x = random_x(3, 64, &mut rng);
    let mut blocks = vec![0u8; x.len() / 32 * 34];
    tessera_kernels::blocks::quantize_q8_0_blocks(&x, &mut blocks);
    let mut back = vec![0f32; x.len()];
    dequantize(QType::Q8_0, &blocks, &mut back);
    for (c, (xs, ys)) in x.chunks(32).zip(back.chunks(32)).enumerate() {
        let d = xs.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
        for (v, y) in xs.iter().zip(ys) {
            // Half a step, plus the f16 rounding of the scale (2⁻¹¹ of up to 127 steps).
            assert!((v - y).abs() <= d * (0.5 + 127.0 / 2048.0), "block {c}: {v} came back as {y}");
        }
    }
}

/// Matrices that share an input (q/k/v, gate/up) run together by `matmul_shared_*`: each output
/// is bit for bit what `matmul_with` gives that matrix alone, for mixes of the 32-value types
/// and the k-quants in either layout, on every instruction set and thread count, few tokens
/// and many, inside `row_invariant` and outside.
#[test]
fn matrices_sharing_an_input_give_what_each_gives_alone() {
    use std::mem::MaybeUninit;
    let mut rng = StdRng::seed_from_u64(29);
    let cols = 512;
    let mixes: [&[(QType, usize)]; 3] = [
        &[(QType::Q4_1, 48), (QType::Q4_1, 16), (QType::Q4_1, 21)],
        &[(QType::Q4K, 40), (QType::Q6K, 19)],
        &[(QType::Q5_0, 33), (QType::Q6K, 16), (QType::Q8_0, 7)],
    ];
    for mix in mixes {
        let base: Vec<QMatrix> = mix.iter().map(|&(t, rows)| random_matrix(t, rows, cols, &mut rng)).collect();
        for panels in [false, true] {
            let mats: Vec<QMatrix> = base
                .iter()
                .map(|w| {
                    let layouts = in_every_layout(w);
                    let i = if panels { layouts.len() - 1 } else { 0 };
                    layouts[i].clone()
                })
                .collect();
            let refs: Vec<&QMatrix> = mats.iter().collect();
            for m in [1usize, 5, tessera_kernels::GEMM_MIN_TOKENS + 3] {
                let x = random_x(m, cols, &mut rng);
                for isa in Isa::available() {
                    for threads in [1usize, 2] {
                        let pool = ThreadPool::new(threads);
                        for invariant in [false, true] {
                            let run = |f: &mut dyn FnMut()| {
                                if invariant {
                                    tessera_kernels::row_invariant(&mut *f);
                                } else {
                                    f();
                                }
                            };
                            let mut alone: Vec<Vec<f32>> = mats.iter().map(|w| vec![0f32; m * w.rows()]).collect();
                            let mut shared = alone.clone();
                            run(&mut || {
                                for (w, out) in mats.iter().zip(alone.iter_mut()) {
                                    w.matmul_with(isa, &pool, &x, m, out).expect("matmul");
                                }
                                let mut outs: Vec<&mut [f32]> = shared.iter_mut().map(|o| &mut o[..]).collect();
                                QMatrix::matmul_shared_with(isa, &pool, &refs, &x, m, &mut outs).expect("shared");
                            });
                            for (i, (a, b)) in alone.iter().zip(&shared).enumerate() {
                                assert!(
                                    a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits()),
                                    "{mix:?} panels={panels} m={m} {isa:?} threads={threads} invariant={invariant}: matrix {i}"
                                );
                            }
                        }
                    }
                }
                // The uninitialised form writes every element, the same values.
                let mut want: Vec<Vec<f32>> = mats.iter().map(|w| vec![0f32; m * w.rows()]).collect();
                for (w, out) in mats.iter().zip(want.iter_mut()) {
                    w.matmul(&x, m, out).expect("matmul");
                }
                let mut got: Vec<Vec<MaybeUninit<f32>>> =
                    mats.iter().map(|w| vec![MaybeUninit::new(f32::NAN); m * w.rows()]).collect();
                let mut outs: Vec<&mut [MaybeUninit<f32>]> = got.iter_mut().map(|o| &mut o[..]).collect();
                QMatrix::matmul_shared_uninit(&refs, &x, m, &mut outs).expect("shared");
                for (g, w) in got.iter().zip(&want) {
                    // SAFETY: initialised (to NaN) before the call.
                    assert!(g.iter().zip(w).all(|(p, q)| unsafe { p.assume_init() }.to_bits() == q.to_bits()));
                }
            }
        }
    }
    // Shapes are checked: an output of the wrong length, or fewer outputs than matrices.
    let (a, b) = (random_matrix(QType::Q8_0, 4, 32, &mut rng), random_matrix(QType::Q8_0, 6, 32, &mut rng));
    let pool = ThreadPool::new(2);
    let (mut oa, mut ob) = (vec![0f32; 4], vec![0f32; 5]);
    assert!(
        QMatrix::matmul_shared_with(Isa::Portable, &pool, &[&a, &b], &[0.5; 32], 1, &mut [&mut oa, &mut ob]).is_err()
    );
    assert!(QMatrix::matmul_shared_with(Isa::Portable, &pool, &[&a, &b], &[0.5; 32], 1, &mut [&mut oa]).is_err());
}

/// `matmul_add_*` (a layer's skip connection added by the pool threads) gives the bits of
/// `residual + matmul` on every type, layout, instruction set and thread count, few tokens and
/// many, inside `row_invariant` and outside; a residual of the wrong length is an error.
#[test]
fn a_matmul_with_its_residual_equals_the_residual_plus_the_matmul() {
    use std::mem::MaybeUninit;
    let mut rng = StdRng::seed_from_u64(31);
    for t in QType::ALL {
        let (rows, cols) = (37, 2 * t.block_elems());
        let w0 = random_matrix(t, rows, cols, &mut rng);
        for w in in_every_layout(&w0) {
            for m in [1usize, 6, tessera_kernels::GEMM_MIN_TOKENS + 3] {
                let x = random_x(m, cols, &mut rng);
                let residual = random_x(m, rows, &mut rng);
                for isa in Isa::available() {
                    for threads in [1usize, 2] {
                        let pool = ThreadPool::new(threads);
                        for invariant in [false, true] {
                            let (mut plain, mut fused) = (vec![0f32; m * rows], vec![0f32; m * rows]);
                            let mut run = || {
                                w.matmul_with(isa, &pool, &x, m, &mut plain).expect("matmul");
                                w.matmul_add_with(isa, &pool, &x, m, &residual, &mut fused).expect("matmul_add");
                            };
                            if invariant {
                                tessera_kernels::row_invariant(&mut run);
                            } else {
                                run();
                            }
                            let want: Vec<f32> = residual.iter().zip(&plain).map(|(r, p)| r + p).collect();
                            assert!(
                                fused.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                                "{t} {:?} m={m} {isa:?} threads={threads} invariant={invariant}",
                                w.layout()
                            );
                        }
                    }
                }
                let mut want = vec![0f32; m * rows];
                w.matmul(&x, m, &mut want).expect("matmul");
                let mut got = vec![MaybeUninit::new(f32::NAN); m * rows];
                w.matmul_add_uninit(&x, m, &residual, &mut got).expect("matmul_add_uninit");
                // SAFETY: initialised (to NaN) before the call.
                assert!(got
                    .iter()
                    .zip(want.iter().zip(&residual))
                    .all(|(g, (p, r))| unsafe { g.assume_init() }.to_bits() == (r + p).to_bits()));
                let mut short = vec![0f32; m * rows];
                assert!(w
                    .matmul_add_with(Isa::Portable, &ThreadPool::new(1), &x, m, &residual[1..], &mut short)
                    .is_err());
            }
        }
    }
}

/// Without `BudgetedAlloc` as the global allocator nothing can be enforced: the work runs on the
/// calling thread (no thread per call), and its panic is reported.
#[test]
fn without_the_budgeted_allocator_budgeted_work_runs_inline() {
    use tessera_kernels::{budgets_enforced, with_memory_budget, BudgetError};
    assert!(!budgets_enforced());
    let caller = std::thread::current().id();
    assert_eq!(with_memory_budget(1, move || std::thread::current().id() == caller), Ok(true));
    assert_eq!(with_memory_budget(1, || -> u8 { panic!("the work panics") }), Err(BudgetError::Failed));
}

/// The KV cache's f16 conversion rounds as `half` does (ties to even, subnormals, overflow to
/// infinity), in the SIMD body and the tail alike, and refuses mismatched lengths.
#[test]
fn f16_conversion_equals_half() {
    let mut x: Vec<f32> = (0..1003).map(|i| ((i as f32) * 0.917).sin() * 10f32.powi(i % 13 - 8)).collect();
    x.extend([0.0, -0.0, 65504.0, 65520.0, -1e9, f32::INFINITY, 6.0e-8, 2.9e-8, 1.0 + 1.0 / 2048.0]);
    let mut y = vec![half::f16::ZERO; x.len()];
    tessera_kernels::ops::f32_to_f16(&x, &mut y).unwrap();
    for (v, h) in x.iter().zip(&y) {
        assert_eq!(h.to_bits(), half::f16::from_f32(*v).to_bits(), "{v}");
    }
    assert!(tessera_kernels::ops::f32_to_f16(&x, &mut y[1..]).is_err());
}
