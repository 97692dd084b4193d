//! Idefics3 / SmolVLM image splitting, as transformers' PIL-backed `Idefics3ImageProcessorPil`
//! does it (v5.23, `image_processing_pil_idefics3.py`):
//!
//! 1. resize (Lanczos, 8-bit) so the longest edge is `size.longest_edge` — up *or* down — with
//!    the other edge rounded up to even, and capped at 4096;
//! 2. with splitting: resize again so both edges are multiples of `max_image_size`, cut the
//!    result into `rows × cols` tiles of `max_image_size²` (raster order), and append a global
//!    view resized to `max_image_size²` from step 2's image; an image that is a single tile is
//!    not split (`rows = cols = 0`) and is its own global view;
//! 3. without splitting: one `max_image_size²` resize.
//!
//! Every resize works on 8-bit pixels, so each is rounded as Pillow rounds it.

use crate::image_io::RgbImage;
use crate::preprocess::resize;
use crate::resize::Filter;

/// transformers' `MAX_IMAGE_SIZE`: no edge is resized beyond this.
pub const MAX_IMAGE_SIZE: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TilingConfig {
    /// `size.longest_edge`; `None` skips the first resize (`do_resize: false`).
    pub longest_edge: Option<usize>,
    /// `max_image_size.longest_edge`: the tile side, equal to the vision tower's image size.
    pub tile: usize,
    pub do_image_splitting: bool,
    pub filter: Filter,
}

/// The images the tower sees for one input image, in the order the prompt names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tiles {
    /// `rows·cols` tiles in raster order, then the global view (just the image when unsplit).
    pub images: Vec<RgbImage>,
    pub rows: usize,
    pub cols: usize,
}

/// `_resize_output_size_rescale_to_max_len`: `(height, width)` with the longest edge `max_len`
/// and the other rounded up to even, at least 1.
pub fn rescale_to_max_len(height: usize, width: usize, max_len: usize) -> (usize, usize) {
    let aspect = width as f64 / height as f64;
    let even = |v: usize| v + v % 2;
    let (h, w) = if width >= height {
        (even((max_len as f64 / aspect) as usize), max_len)
    } else {
        (max_len, even((max_len as f64 * aspect) as usize))
    };
    (h.max(1), w.max(1))
}

/// `_resize_output_size_scale_below_upper_bound`: shrinks so that no edge exceeds `max_len`.
pub fn scale_below(height: usize, width: usize, max_len: usize) -> (usize, usize) {
    let aspect = width as f64 / height as f64;
    let (mut h, mut w) = (height, width);
    if width >= height && width > max_len {
        w = max_len;
        h = (w as f64 / aspect) as usize;
    } else if height > width && height > max_len {
        h = max_len;
        w = (h as f64 * aspect) as usize;
    }
    (h.max(1), w.max(1))
}

/// `resize_for_vision_encoder`'s target: both edges rounded up to multiples of `tile`.
pub fn multiple_of_tile(height: usize, width: usize, tile: usize) -> (usize, usize) {
    let aspect = width as f64 / height as f64;
    let up = |v: f64| (v / tile as f64).ceil() as usize * tile;
    if width >= height {
        let w = up(width as f64);
        let h = (w as f64 / aspect) as usize;
        (up(h as f64), w)
    } else {
        let h = up(height as f64);
        let w = (h as f64 * aspect) as usize;
        (h, up(w as f64))
    }
}

fn resized(img: &RgbImage, (h, w): (usize, usize), filter: Filter) -> RgbImage {
    if (img.height, img.width) == (h, w) {
        // Pillow returns a copy for a same-size resize; skip the work.
        return img.clone();
    }
    resize(img, h, w, filter)
}

fn crop(img: &RgbImage, top: usize, left: usize, h: usize, w: usize) -> RgbImage {
    let mut data = Vec::with_capacity(h * w * 3);
    for y in top..top + h {
        let start = (y * img.width + left) * 3;
        data.extend_from_slice(&img.data[start..start + w * 3]);
    }
    RgbImage::new(w, h, data)
}

/// The size after the first resize (step 1), `(height, width)`.
fn first_size(height: usize, width: usize, cfg: &TilingConfig) -> (usize, usize) {
    match cfg.longest_edge {
        Some(edge) => {
            let (h, w) = rescale_to_max_len(height, width, edge);
            scale_below(h, w, MAX_IMAGE_SIZE)
        }
        None => (height, width),
    }
}

/// The tile grid `(rows, cols)` an image of `height × width` is split into (`(0, 0)`: one
/// unsplit view), from the sizes alone — what the prompt's image placeholders depend on.
pub fn grid(height: usize, width: usize, cfg: &TilingConfig) -> (usize, usize) {
    if !cfg.do_image_splitting {
        return (0, 0);
    }
    let (h, w) = first_size(height, width, cfg);
    let (h, w) = multiple_of_tile(h, w, cfg.tile);
    if h <= cfg.tile && w <= cfg.tile {
        (0, 0)
    } else {
        ((h - cfg.tile) / cfg.tile + 1, (w - cfg.tile) / cfg.tile + 1)
    }
}

/// Splits `img` as the reference processor does (see the module docs).
pub fn split_image(img: &RgbImage, cfg: &TilingConfig) -> Tiles {
    let img = resized(img, first_size(img.height, img.width, cfg), cfg.filter);
    let t = cfg.tile;
    if !cfg.do_image_splitting {
        return Tiles { images: vec![resized(&img, (t, t), cfg.filter)], rows: 0, cols: 0 };
    }
    let img = resized(&img, multiple_of_tile(img.height, img.width, t), cfg.filter);
    if img.height <= t && img.width <= t {
        return Tiles { images: vec![img], rows: 0, cols: 0 };
    }
    let (rows, cols) = ((img.height - t) / t + 1, (img.width - t) / t + 1);
    let mut images = Vec::with_capacity(rows * cols + 1);
    for r in 0..rows {
        for c in 0..cols {
            images.push(crop(&img, r * t, c * t, t, t));
        }
    }
    images.push(resized(&img, (t, t), cfg.filter));
    Tiles { images, rows, cols }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_sizes_follow_the_reference_formulas() {
        // SmolVLM: longest edge 2048, tiles of 512. A 451×300 photo (w×h) → 2048 wide,
        // 300·2048/451 = 1362.3 → 1362 (even) high; then 2048×1536: 3 rows, 4 columns.
        assert_eq!(rescale_to_max_len(300, 451, 2048), (1362, 2048));
        assert_eq!(multiple_of_tile(1362, 2048, 512), (1536, 2048));
        // Portrait, odd result rounded up to even.
        assert_eq!(rescale_to_max_len(451, 300, 2048), (2048, 1362));
        assert_eq!(rescale_to_max_len(3, 1, 64), (64, 22));
        assert_eq!(scale_below(100, 8000, MAX_IMAGE_SIZE), (51, 4096));
    }

    #[test]
    fn tiles_are_raster_order_crops_plus_a_global_view() {
        // A 4×2 (w×h) image whose pixels encode their position; tile 2, no first resize.
        let data: Vec<u8> = (0..8u8).flat_map(|i| [i, i, i]).collect();
        let img = RgbImage::new(4, 2, data);
        let cfg = TilingConfig { longest_edge: None, tile: 2, do_image_splitting: true, filter: Filter::Lanczos };
        let t = split_image(&img, &cfg);
        assert_eq!((t.rows, t.cols, t.images.len()), (1, 2, 3));
        assert_eq!(grid(2, 4, &cfg), (1, 2));
        assert_eq!(t.images[0].data.iter().step_by(3).copied().collect::<Vec<_>>(), vec![0, 1, 4, 5]);
        assert_eq!(t.images[1].data.iter().step_by(3).copied().collect::<Vec<_>>(), vec![2, 3, 6, 7]);
        assert_eq!((t.images[2].width, t.images[2].height), (2, 2));
        // One tile's worth: not split.
        let small = RgbImage::new(2, 2, vec![9; 12]);
        let t = split_image(&small, &cfg);
        assert_eq!((t.rows, t.cols, t.images.len()), (0, 0, 1));
    }
}
