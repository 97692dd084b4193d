//! Attention heatmaps: per-patch weights drawn over the image the model saw, so a person can
//! see where a generated token looked.

use crate::error::{Result, VisionError};
use crate::image_io::RgbImage;

/// The largest picture drawn, in pixels.
const MAX_PIXELS: usize = 1 << 28;

/// Weights scaled to `[0, 1]` by their maximum (all zeros stay zeros).
pub fn patch_intensities(weights: &[f32]) -> Vec<f32> {
    let max = weights.iter().copied().fold(0f32, f32::max);
    if max <= 0.0 {
        return vec![0.0; weights.len()];
    }
    weights.iter().map(|w| (w / max).max(0.0)).collect()
}

/// Draws `weights` (one per patch, raster order over a `rows × cols` grid) over `img`,
/// upscaled by `scale` (nearest neighbour): patches keep their brightness in proportion to
/// their intensity (the most attended patch is shown as is, unattended ones are dimmed to 25%),
/// so the picture shows where the token looked whatever the image's colours.
pub fn render_heatmap(img: &RgbImage, weights: &[f32], rows: usize, cols: usize, scale: usize) -> Result<RgbImage> {
    const FLOOR: f32 = 0.25;
    let too_large = || {
        VisionError::Config(format!(
            "a heatmap of the {}×{} view at scale {scale} is over {MAX_PIXELS} pixels",
            img.width, img.height
        ))
    };
    let w = img.width.checked_mul(scale).ok_or_else(too_large)?;
    let h = img.height.checked_mul(scale).ok_or_else(too_large)?;
    if scale == 0 || w.checked_mul(h).is_none_or(|n| n > MAX_PIXELS) {
        return Err(too_large());
    }
    let intensity = patch_intensities(weights);
    let mut out = vec![0u8; w * h * 3];
    for y in 0..h {
        for x in 0..w {
            let (sx, sy) = (x / scale, y / scale);
            let p = img.pixel(sx, sy);
            let cell = (sy * rows / img.height) * cols + sx * cols / img.width;
            let k = FLOOR + (1.0 - FLOOR) * intensity.get(cell).copied().unwrap_or(0.0);
            for c in 0..3 {
                out[(y * w + x) * 3 + c] = (p[c] as f32 * k).round() as u8;
            }
        }
    }
    Ok(RgbImage::new(w, h, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heatmap_follows_the_weights() {
        let img = RgbImage::new(4, 4, vec![128; 4 * 4 * 3]);
        let weights = [0.1, 0.4, 0.0, 0.5];
        let out = render_heatmap(&img, &weights, 2, 2, 2).unwrap();
        assert!(render_heatmap(&img, &weights, 2, 2, usize::MAX).is_err());
        assert!(render_heatmap(&img, &weights, 2, 2, 0).is_err());
        // A pixel of each 4×4 cell: brightness grows with the weight.
        let r = [out.pixel(1, 1)[0], out.pixel(5, 1)[0], out.pixel(1, 5)[0], out.pixel(5, 5)[0]];
        assert_eq!(r[2], 32, "a zero weight dims to 25%");
        assert_eq!(r[3], 128, "the largest weight keeps the pixel");
        assert!(r[2] < r[0] && r[0] < r[1] && r[1] < r[3], "{r:?}");
        assert_eq!(patch_intensities(&weights)[3], 1.0);
    }
}
