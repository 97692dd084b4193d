//! Gemma 3's pan-and-scan, as transformers' `Gemma3ImageProcessorPil.pan_and_scan` does it
//! (v5.23): an image whose aspect ratio reaches `min_ratio_to_activate` is also cut, before any
//! resize, into 2 to `max_num_crops` equal crops along its long side (about one per aspect-ratio
//! unit, none narrower than `min_crop_size`); the model sees the whole image, then the crops.

use crate::image_io::RgbImage;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PanAndScan {
    pub min_crop_size: usize,
    pub max_num_crops: usize,
    pub min_ratio_to_activate: f64,
}

/// A crop: `(x, y, width, height)` in the original image (clipped to it).
pub type Rect = (usize, usize, usize, usize);

impl PanAndScan {
    /// The crops of a `height × width` image, in raster order (none when pan-and-scan does not
    /// apply).
    pub fn crops(&self, height: usize, width: usize) -> Vec<Rect> {
        if height == 0 || width == 0 {
            return Vec::new();
        }
        let (w, h) = (width as f64, height as f64);
        let count = |long: f64, short: f64, long_px: usize| -> Option<usize> {
            if long / short < self.min_ratio_to_activate {
                return None;
            }
            // Half-up rounding of the ratio, no crop under the minimum size, 2..=max crops.
            let n = ((long / short + 0.5).floor() as usize).min(long_px / self.min_crop_size.max(1));
            Some(n.max(2).min(self.max_num_crops))
        };
        let (cols, rows) = if width >= height {
            match count(w, h, width) {
                Some(n) => (n, 1),
                None => return Vec::new(),
            }
        } else {
            match count(h, w, height) {
                Some(n) => (1, n),
                None => return Vec::new(),
            }
        };
        if cols == 0 || rows == 0 {
            return Vec::new();
        }
        let (cw, ch) = (width.div_ceil(cols), height.div_ceil(rows));
        if cw.min(ch) < self.min_crop_size {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(rows * cols);
        for r in 0..rows {
            for c in 0..cols {
                let (x, y) = (c * cw, r * ch);
                out.push((x, y, cw.min(width.saturating_sub(x)), ch.min(height.saturating_sub(y))));
            }
        }
        out
    }
}

/// The pixels of `rect` (clipped to the image).
pub fn crop(img: &RgbImage, (x, y, w, h): Rect) -> RgbImage {
    let w = w.min(img.width.saturating_sub(x));
    let h = h.min(img.height.saturating_sub(y));
    let mut data = Vec::with_capacity(w * h * 3);
    for row in y..y + h {
        let start = (row * img.width + x) * 3;
        data.extend_from_slice(&img.data[start..start + w * 3]);
    }
    RgbImage::new(w, h, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GEMMA3: PanAndScan = PanAndScan { min_crop_size: 256, max_num_crops: 4, min_ratio_to_activate: 1.2 };

    #[test]
    fn crops_follow_the_aspect_ratio() {
        // Square: nothing. 1.5:1 landscape: 2 crops side by side. 3:1 portrait: 3 stacked.
        assert!(GEMMA3.crops(896, 896).is_empty());
        assert_eq!(GEMMA3.crops(600, 900), vec![(0, 0, 450, 600), (450, 0, 450, 600)]);
        assert_eq!(GEMMA3.crops(2400, 800).len(), 3);
        // Under the activation ratio, or crops that would be narrower than the minimum.
        assert!(GEMMA3.crops(1000, 1100).is_empty());
        assert!(GEMMA3.crops(200, 400).is_empty());
        // Never more than the maximum; the last crop clipped to the image.
        let wide = GEMMA3.crops(300, 3001);
        assert_eq!((wide.len(), wide[3]), (4, (2253, 0, 748, 300)));
    }

    #[test]
    fn crop_takes_the_rectangle() {
        let img = RgbImage::new(3, 2, (0..18).collect());
        let c = crop(&img, (1, 1, 5, 5));
        assert_eq!((c.width, c.height, c.data.clone()), (2, 1, vec![12, 13, 14, 15, 16, 17]));
    }
}
