//! Image resampling exactly as Pillow does it (`Image.resize`, `libImaging/Resample.c`), which
//! is what transformers' PIL-backed image processors call.
//!
//! Pillow resamples 8-bit images in two separable passes (horizontal, then vertical), each with
//! filter weights computed in double precision, normalised, converted to fixed point with 22
//! fractional bits, and each pass rounded and clipped back to 8 bits. When downscaling, the filter
//! is stretched by the scale factor (antialiasing). Reproducing those steps gives bit-identical
//! pixels; the `image` crate's filters do not.

/// A Pillow resampling filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// `Image.NEAREST` (0).
    Nearest,
    /// `Image.BILINEAR` (2), a triangle of support 1.
    Bilinear,
    /// `Image.BICUBIC` (3), Keys' cubic with `a = −0.5`, support 2.
    Bicubic,
    /// `Image.LANCZOS` (1), windowed sinc of support 3.
    Lanczos,
}

impl Filter {
    /// Pillow's integer codes, as stored in `preprocessor_config.json` (`resample`).
    pub fn from_pil(code: u32) -> Option<Self> {
        match code {
            0 => Some(Self::Nearest),
            1 => Some(Self::Lanczos),
            2 => Some(Self::Bilinear),
            3 => Some(Self::Bicubic),
            _ => None,
        }
    }

    fn support(&self) -> f64 {
        match self {
            Self::Nearest => 0.0,
            Self::Bilinear => 1.0,
            Self::Bicubic => 2.0,
            Self::Lanczos => 3.0,
        }
    }

    fn weight(&self, x: f64) -> f64 {
        match self {
            Self::Nearest => 0.0,
            Self::Bilinear => {
                let x = x.abs();
                if x < 1.0 {
                    1.0 - x
                } else {
                    0.0
                }
            }
            Self::Bicubic => {
                const A: f64 = -0.5;
                let x = x.abs();
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
            Self::Lanczos => {
                if -3.0 < x && x < 3.0 {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let x = x * std::f64::consts::PI;
        x.sin() / x
    }
}

const PRECISION_BITS: u32 = 32 - 8 - 2;

/// Per output pixel: the first input index, the number of taps, and fixed-point weights.
struct Coeffs {
    bounds: Vec<(usize, usize)>,
    weights: Vec<i32>,
    ksize: usize,
}

/// Pillow's `precompute_coeffs` + `normalize_coeffs_8bpc` for the box `[in0, in1)`.
fn coeffs(in_size: usize, in0: f64, in1: f64, out_size: usize, filter: Filter) -> Coeffs {
    let scale = (in1 - in0) / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filter.support() * filterscale;
    let ksize = support.ceil() as usize * 2 + 1;
    let mut bounds = Vec::with_capacity(out_size);
    let mut weights = vec![0i32; out_size * ksize];
    let mut k = vec![0f64; ksize];
    for xx in 0..out_size {
        let center = in0 + (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filterscale;
        // C's (int) cast truncates toward zero.
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
        let n = xmax.saturating_sub(xmin);
        let mut ww = 0.0;
        for (x, kx) in k.iter_mut().enumerate().take(n) {
            let w = filter.weight((x as f64 + xmin as f64 - center + 0.5) * ss);
            *kx = w;
            ww += w;
        }
        for x in 0..n {
            let w = if ww != 0.0 { k[x] / ww } else { k[x] };
            let f = w * (1u32 << PRECISION_BITS) as f64;
            weights[xx * ksize + x] = if w < 0.0 { (-0.5 + f) as i32 } else { (0.5 + f) as i32 };
        }
        bounds.push((xmin, n));
    }
    Coeffs { bounds, weights, ksize }
}

/// Pillow's `clip8`: the fixed-point sum back to 8 bits, rounded (the sums start at one half)
/// and clipped.
#[inline]
fn clip8(v: i32) -> u8 {
    (v >> PRECISION_BITS).clamp(0, 255) as u8
}

/// The sums start at one half in fixed point, so the final shift rounds.
const HALF: i32 = 1 << (PRECISION_BITS - 1);

/// Resizes an interleaved 8-bit image (`channels` per pixel, row-major) to `out_w × out_h`.
///
/// Pillow's arithmetic exactly: 32-bit integer sums of `pixel × weight` (`INT32 ss` in
/// `Resample.c`; wrapping where C would), so the order of the additions cannot change a
/// result. The horizontal pass sums each output pixel's channels together; the vertical pass
/// adds whole source rows times one weight into a row of sums, which the compiler vectorises.
pub fn resize_u8(
    src: &[u8],
    w: usize,
    h: usize,
    channels: usize,
    out_w: usize,
    out_h: usize,
    filter: Filter,
) -> Vec<u8> {
    if filter == Filter::Nearest {
        return resize_nearest(src, w, h, channels, out_w, out_h);
    }
    let need_h = out_w != w;
    let need_v = out_h != h;
    let horiz = coeffs(w, 0.0, w as f64, out_w, filter);
    let vert = coeffs(h, 0.0, h as f64, out_h, filter);
    // Rows of the source the vertical pass will read.
    let y_first = vert.bounds.first().map(|b| b.0).unwrap_or(0);
    let y_last = vert.bounds.last().map(|b| b.0 + b.1).unwrap_or(h);

    // Without a horizontal pass the vertical one reads the source itself.
    let (tmp, tmp_w, tmp_y0): (std::borrow::Cow<[u8]>, usize, usize) = if need_h {
        let (in_row, out_row) = (w * channels, out_w * channels);
        let mut out = vec![0u8; out_row * (y_last - y_first)];
        by_rows(&mut out, out_row, &|r, dst| {
            let y = y_first + r;
            horizontal_row(&src[y * in_row..(y + 1) * in_row], dst, &horiz, channels);
        });
        (out.into(), out_w, y_first)
    } else {
        (src.into(), w, 0)
    };
    if !need_v {
        return tmp.into_owned();
    }
    let row_len = tmp_w * channels;
    let mut out = vec![0u8; row_len * out_h];
    by_rows(&mut out, row_len, &|yy, dst| {
        let (ymin, n) = vert.bounds[yy];
        let k = &vert.weights[yy * vert.ksize..yy * vert.ksize + n];
        let mut sums = vec![HALF; row_len];
        let rows = tmp[(ymin - tmp_y0) * row_len..].chunks_exact(row_len);
        for (row, &ky) in rows.zip(k) {
            tessera_kernels::ops::add_scaled_u8(&mut sums, row, ky);
        }
        for (o, &s) in dst.iter_mut().zip(&sums) {
            *o = clip8(s);
        }
    });
    out
}

/// From this many output bytes a pass is shared out among the kernels' pool threads.
const PARALLEL_MIN_BYTES: usize = 1 << 16;

/// Runs `f(r, row r of out)` for each `row_len`-byte row of `out`, in bands of rows among the
/// kernels' pool threads when `out` is large (`tessera_kernels::for_each_row`). Every row is
/// computed the same way whichever thread runs it.
fn by_rows(out: &mut [u8], row_len: usize, f: &(dyn Fn(usize, &mut [u8]) + Sync)) {
    let pool = tessera_kernels::ThreadPool::global();
    let min_rows = PARALLEL_MIN_BYTES.div_ceil(row_len.max(1));
    if tessera_kernels::for_each_row(pool, out, row_len, min_rows, f).is_err() {
        // A part panicked: run it all on this thread, where the panic shows with its message.
        let _ = tessera_kernels::for_each_row(pool, out, row_len, usize::MAX, f);
    }
}

/// One row of the horizontal pass: `row` (`channels` per pixel) → `dst`, one output pixel's
/// channels summed together over its taps.
fn horizontal_row(row: &[u8], dst: &mut [u8], c: &Coeffs, channels: usize) {
    for (xx, (px, &(xmin, n))) in dst.chunks_exact_mut(channels).zip(&c.bounds).enumerate() {
        let k = &c.weights[xx * c.ksize..xx * c.ksize + n];
        let taps = row[xmin * channels..(xmin + n) * channels].chunks_exact(channels);
        if channels == 3 {
            let mut ss = [HALF; 3];
            for (p, &kx) in taps.zip(k) {
                for (s, &v) in ss.iter_mut().zip(p) {
                    *s = s.wrapping_add(i32::from(v).wrapping_mul(kx));
                }
            }
            for (o, &s) in px.iter_mut().zip(&ss) {
                *o = clip8(s);
            }
        } else {
            for (ch, o) in px.iter_mut().enumerate() {
                let mut s = HALF;
                for (p, &kx) in taps.clone().zip(k) {
                    s = s.wrapping_add(i32::from(p[ch]).wrapping_mul(kx));
                }
                *o = clip8(s);
            }
        }
    }
}

/// Pillow's nearest-neighbour resize (`ImagingTransform` affine with pixel centres).
fn resize_nearest(src: &[u8], w: usize, h: usize, channels: usize, out_w: usize, out_h: usize) -> Vec<u8> {
    let mut out = vec![0u8; out_w * out_h * channels];
    let (sx, sy) = (w as f64 / out_w as f64, h as f64 / out_h as f64);
    for yy in 0..out_h {
        let y = (((yy as f64 + 0.5) * sy) as usize).min(h - 1);
        for xx in 0..out_w {
            let x = (((xx as f64 + 0.5) * sx) as usize).min(w - 1);
            let s = (y * w + x) * channels;
            out[(yy * out_w + xx) * channels..][..channels].copy_from_slice(&src[s..s + channels]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The resize as first written: one output value at a time, 64-bit sums, in Pillow's loop
    /// order. The fast passes must give exactly its bytes.
    fn resize_reference(src: &[u8], w: usize, h: usize, ch: usize, out_w: usize, out_h: usize, f: Filter) -> Vec<u8> {
        let clip = |v: i64| (v >> PRECISION_BITS).clamp(0, 255) as u8;
        let horiz = coeffs(w, 0.0, w as f64, out_w, f);
        let vert = coeffs(h, 0.0, h as f64, out_h, f);
        let mut tmp = vec![0u8; out_w * h * ch];
        for y in 0..h {
            for (xx, &(xmin, n)) in horiz.bounds.iter().enumerate() {
                for c in 0..ch {
                    let mut ss: i64 = 1 << (PRECISION_BITS - 1);
                    for x in 0..n {
                        ss += src[(y * w + xmin + x) * ch + c] as i64 * horiz.weights[xx * horiz.ksize + x] as i64;
                    }
                    tmp[(y * out_w + xx) * ch + c] = if out_w == w { src[(y * w + xx) * ch + c] } else { clip(ss) };
                }
            }
        }
        if out_h == h {
            return tmp;
        }
        let mut out = vec![0u8; out_w * out_h * ch];
        for (yy, &(ymin, n)) in vert.bounds.iter().enumerate() {
            for xx in 0..out_w {
                for c in 0..ch {
                    let mut ss: i64 = 1 << (PRECISION_BITS - 1);
                    for y in 0..n {
                        ss += tmp[((ymin + y) * out_w + xx) * ch + c] as i64 * vert.weights[yy * vert.ksize + y] as i64;
                    }
                    out[(yy * out_w + xx) * ch + c] = clip(ss);
                }
            }
        }
        out
    }

    #[test]
    fn fast_passes_give_the_references_bytes() {
        // A deterministic image with edges and noise (xorshift), enlarged and reduced by every
        // filter, in both directions, one pass or two, 1, 3 and 4 channels.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let sizes = [(37, 23, 128, 96), (451, 300, 2048, 1536), (200, 150, 31, 77), (64, 64, 64, 20), (90, 40, 17, 40)];
        for &(w, h, out_w, out_h) in &sizes {
            for ch in [1, 3, 4] {
                let src: Vec<u8> =
                    (0..w * h * ch).map(|i| if (i / ch) % w < w / 3 { 255 } else { (next() % 256) as u8 }).collect();
                for f in [Filter::Bilinear, Filter::Bicubic, Filter::Lanczos] {
                    let fast = resize_u8(&src, w, h, ch, out_w, out_h, f);
                    let slow = resize_reference(&src, w, h, ch, out_w, out_h, f);
                    assert!(fast == slow, "{f:?} {ch} channels {w}x{h} -> {out_w}x{out_h}");
                }
            }
        }
    }

    #[test]
    fn identity_size_is_a_copy() {
        let src: Vec<u8> = (0..4 * 3 * 3).map(|i| i as u8).collect();
        assert_eq!(resize_u8(&src, 4, 3, 3, 4, 3, Filter::Bicubic), src);
    }

    #[test]
    fn constant_images_stay_constant() {
        let src = vec![77u8; 10 * 7 * 3];
        for f in [Filter::Bilinear, Filter::Bicubic, Filter::Lanczos, Filter::Nearest] {
            let out = resize_u8(&src, 10, 7, 3, 4, 13, f);
            assert!(out.iter().all(|&v| v == 77), "{f:?}");
        }
    }

    #[test]
    fn weights_sum_to_one_in_fixed_point() {
        for f in [Filter::Bilinear, Filter::Bicubic, Filter::Lanczos] {
            let c = coeffs(100, 0.0, 100.0, 37, f);
            for (i, &(_, n)) in c.bounds.iter().enumerate() {
                let s: i64 = c.weights[i * c.ksize..i * c.ksize + n].iter().map(|&w| w as i64).sum();
                assert!((s - (1 << PRECISION_BITS)).abs() <= n as i64, "{f:?} pixel {i}: {s}");
            }
        }
    }
}
