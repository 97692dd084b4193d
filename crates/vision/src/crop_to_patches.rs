//! InternVL's dynamic tiling, as transformers v5.23's PIL-backed `GotOcr2ImageProcessorPil`
//! does it with `crop_to_patches` (`image_processing_pil_got_ocr2.py`; InternVL's processor
//! turns it on):
//!
//! 1. among the grids of `cols × rows` tiles with `min_patches ≤ cols·rows ≤ max_patches`,
//!    ordered by tile count (columns outer, rows inner, stable), take the one whose aspect
//!    ratio `cols / rows` is closest to the image's `width / height`; on a tie the later
//!    (larger) grid wins while the image's area exceeds half of the grid's pixel area;
//! 2. resize the image (8-bit, Pillow's filter) to `cols·S × rows·S` and cut it into tiles of
//!    `S × S` in raster order;
//! 3. when there is more than one tile, append a thumbnail: the *original* image resized to
//!    `S × S`.

use crate::image_io::RgbImage;
use crate::preprocess::resize;
use crate::resize::Filter;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CropToPatches {
    /// The tile side `S` (the processor's `size`, the tower's input).
    pub tile: usize,
    pub min_patches: usize,
    pub max_patches: usize,
    pub filter: Filter,
}

impl CropToPatches {
    /// The grid `(cols, rows)` of an image of `height × width` (`get_optimal_tiled_canvas`).
    pub fn grid(&self, height: usize, width: usize) -> (usize, usize) {
        let mut grids = Vec::new();
        for cols in 1..=self.max_patches {
            for rows in 1..=self.max_patches {
                if (self.min_patches..=self.max_patches).contains(&(cols * rows)) {
                    grids.push((cols, rows));
                }
            }
        }
        grids.sort_by_key(|(c, r)| c * r); // stable, as Python's `sorted`
        let aspect = width as f64 / height as f64;
        let area = (width * height) as f64;
        let (mut best, mut best_diff) = ((1, 1), f64::INFINITY);
        for (cols, rows) in grids {
            let diff = (aspect - cols as f64 / rows as f64).abs();
            if diff < best_diff {
                (best, best_diff) = ((cols, rows), diff);
            } else if diff == best_diff && area > 0.5 * (self.tile * self.tile * cols * rows) as f64 {
                best = (cols, rows);
            }
        }
        best
    }

    /// Views (tiles, then the thumbnail when there are several tiles) an image of
    /// `height × width` becomes.
    pub fn views(&self, height: usize, width: usize) -> usize {
        match self.grid(height, width) {
            (1, 1) => 1,
            (cols, rows) => cols * rows + 1,
        }
    }

    /// The `S × S` views of `img`, in the order the tower reads them.
    pub fn split(&self, img: &RgbImage) -> Vec<RgbImage> {
        let (cols, rows) = self.grid(img.height, img.width);
        let s = self.tile;
        let resized = resized(img, rows * s, cols * s, self.filter);
        let mut views = Vec::with_capacity(cols * rows + 1);
        for i in 0..cols * rows {
            let (row, col) = (i / cols, i % cols);
            let mut data = Vec::with_capacity(s * s * 3);
            for y in row * s..(row + 1) * s {
                let start = (y * resized.width + col * s) * 3;
                data.extend_from_slice(&resized.data[start..start + s * 3]);
            }
            views.push(RgbImage::new(s, s, data));
        }
        if views.len() != 1 {
            views.push(resized_from(img, s, self.filter));
        }
        views
    }
}

fn resized(img: &RgbImage, h: usize, w: usize, filter: Filter) -> RgbImage {
    if (img.height, img.width) == (h, w) {
        return img.clone();
    }
    resize(img, h, w, filter)
}

fn resized_from(img: &RgbImage, s: usize, filter: Filter) -> RgbImage {
    resized(img, s, s, filter)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(max_patches: usize) -> CropToPatches {
        CropToPatches { tile: 448, min_patches: 1, max_patches, filter: Filter::Bicubic }
    }

    #[test]
    fn grids_follow_the_reference_rule() {
        // 451×300 (w×h): 3×2 is closest to 1.503 among ≤ 12 tiles; ≤ 4 tiles: 2×1.
        assert_eq!(cfg(12).grid(300, 451), (3, 2));
        assert_eq!(cfg(4).grid(300, 451), (2, 1));
        // A square image ties 1×1, 2×2 and 3×3; the larger wins while the image covers more
        // than half of the grid's area: 800² > ½·448²·4 but not ½·448²·9; 1000² both; 512² neither.
        assert_eq!(cfg(12).grid(800, 800), (2, 2));
        assert_eq!(cfg(12).grid(1000, 1000), (3, 3));
        assert_eq!(cfg(12).grid(512, 512), (1, 1));
        assert_eq!(cfg(12).grid(100, 100), (1, 1));
        assert_eq!(cfg(12).views(100, 100), 1);
        assert_eq!(cfg(12).views(300, 451), 7);
    }

    #[test]
    fn tiles_are_raster_order_crops_plus_a_thumbnail() {
        // A 4×2 (w×h) image whose pixels encode their position, tiles of 2: a 2×1 grid, no
        // resize, then the thumbnail of the whole image.
        let data: Vec<u8> = (0..8u8).flat_map(|i| [i, i, i]).collect();
        let img = RgbImage::new(4, 2, data);
        let c = CropToPatches { tile: 2, min_patches: 1, max_patches: 4, filter: Filter::Bicubic };
        let views = c.split(&img);
        assert_eq!(views.len(), 3);
        assert_eq!(views[0].data.iter().step_by(3).copied().collect::<Vec<_>>(), vec![0, 1, 4, 5]);
        assert_eq!(views[1].data.iter().step_by(3).copied().collect::<Vec<_>>(), vec![2, 3, 6, 7]);
        assert_eq!((views[2].width, views[2].height), (2, 2));
    }
}
