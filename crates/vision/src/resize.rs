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

#[inline]
fn clip8(v: i64) -> u8 {
    (v >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Resizes an interleaved 8-bit image (`channels` per pixel, row-major) to `out_w × out_h`.
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

    let (tmp, tmp_w, tmp_y0) = if need_h {
        let rows = y_last - y_first;
        let mut out = vec![0u8; out_w * rows * channels];
        for y in 0..rows {
            let row = &src[(y + y_first) * w * channels..(y + y_first + 1) * w * channels];
            for (xx, &(xmin, n)) in horiz.bounds.iter().enumerate() {
                let k = &horiz.weights[xx * horiz.ksize..xx * horiz.ksize + n];
                for c in 0..channels {
                    let mut ss: i64 = 1 << (PRECISION_BITS - 1);
                    for (x, &kx) in k.iter().enumerate() {
                        ss += row[(xmin + x) * channels + c] as i64 * kx as i64;
                    }
                    out[(y * out_w + xx) * channels + c] = clip8(ss);
                }
            }
        }
        (out, out_w, y_first)
    } else {
        (src.to_vec(), w, 0)
    };
    if !need_v {
        return tmp;
    }
    let mut out = vec![0u8; out_w * out_h * channels];
    for (yy, &(ymin, n)) in vert.bounds.iter().enumerate() {
        let k = &vert.weights[yy * vert.ksize..yy * vert.ksize + n];
        let ymin = ymin - tmp_y0;
        for xx in 0..tmp_w {
            for c in 0..channels {
                let mut ss: i64 = 1 << (PRECISION_BITS - 1);
                for (y, &ky) in k.iter().enumerate() {
                    ss += tmp[((ymin + y) * tmp_w + xx) * channels + c] as i64 * ky as i64;
                }
                out[(yy * out_w + xx) * channels + c] = clip8(ss);
            }
        }
    }
    out
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
