//! MiniCPM-V 4.6's image slicing (transformers 5.23 `MiniCPMV4_6ImageProcessor`): an image
//! becomes a *source* view — the whole image resized to about `scale_resolution`² pixels, sides
//! multiples of `patch_size × merge` — and, when it is larger than that, a grid of *slices*: the
//! image resized so that a `rows × cols` grid of equal slices each holds about
//! `scale_resolution`² pixels. The grid is the one (of `m − 1`, `m` or `m + 1` slices, `m` the
//! image's area over `scale_resolution`², at most `max_slice_nums`) whose shape is closest to
//! the image's aspect ratio in log space, more rows winning a tie. Each view's tokens are its
//! patches over `merge²` (16 under `downsample_mode` "16x", 4 under "4x").
//!
//! Arithmetic as Python does it: `int()` truncates, `round()` rounds half to even.

/// The slicing settings (the image processor's fields).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MiniCpmSlicing {
    pub max_slice_nums: usize,
    pub scale_resolution: usize,
    pub patch_size: usize,
    /// Slices at all (`slice_mode`); without, the source view alone, upscaled as needed.
    pub slice_mode: bool,
    /// Side of the merge of patches into one token: 4 ("16x"), 2 ("4x").
    pub merge: usize,
}

/// Where an image's views come from: the source view's `(height, width)` and, when sliced, the
/// `(rows, cols)` grid and the `(height, width)` the image is resized to before it is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceLayout {
    pub source: (usize, usize),
    pub grid: Option<(usize, usize)>,
    pub refine: Option<(usize, usize)>,
}

/// `max(round(length / divisor) · divisor, divisor)`, Python's `round`.
fn ensure_divide(length: f64, divisor: usize) -> usize {
    let d = divisor as f64;
    ((length / d).round_ties_even() as usize * divisor).max(divisor)
}

impl MiniCpmSlicing {
    /// transformers' `find_best_resize` for an image of `height × width` (fractional for a
    /// slice of a grid).
    fn best_resize(&self, height: f64, width: f64, allow_upscale: bool) -> (usize, usize) {
        let s = self.scale_resolution as f64;
        let (mut h, mut w) = (height, width);
        if h * w > s * s || allow_upscale {
            let aspect = width / height;
            h = (s / aspect.sqrt()).trunc();
            w = (h * aspect).trunc();
        }
        let unit = self.patch_size * self.merge;
        (ensure_divide(h, unit), ensure_divide(w, unit))
    }

    /// The `(rows, cols)` grid of slices for an image of `height × width`; `None` when it is not
    /// sliced (no larger than one slice, or `slice_mode` off).
    pub fn grid(&self, height: usize, width: usize) -> Option<(usize, usize)> {
        if !self.slice_mode || height == 0 || width == 0 {
            return None;
        }
        let (h, w) = (height as f64, width as f64);
        let log_ratio = (w / h).ln();
        let s = self.scale_resolution as f64;
        let multiple = ((w * h / (s * s)).ceil() as usize).min(self.max_slice_nums);
        if multiple <= 1 {
            return None;
        }
        let mut best = (1, 1);
        let mut min_error = f64::INFINITY;
        for slices in [multiple - 1, multiple, multiple + 1] {
            if slices == 1 || slices > self.max_slice_nums {
                continue;
            }
            for rows in (1..=slices).filter(|&r| slices.is_multiple_of(r)) {
                let cols = slices / rows;
                let error = (log_ratio - (cols as f64 / rows as f64).ln()).abs();
                if error < min_error || (error == min_error && rows > best.0) {
                    best = (rows, cols);
                    min_error = min_error.min(error);
                }
            }
        }
        Some(best)
    }

    /// The image's views: the source size, and the grid and pre-cut size when sliced.
    pub fn layout(&self, height: usize, width: usize) -> SliceLayout {
        let grid = self.grid(height, width);
        let source = self.best_resize(height as f64, width as f64, grid.is_none());
        let refine = grid.map(|(rows, cols)| {
            let refine_w = ensure_divide(width as f64, cols);
            let refine_h = ensure_divide(height as f64, rows);
            let (h, w) = self.best_resize(refine_h as f64 / rows as f64, refine_w as f64 / cols as f64, true);
            (h * rows, w * cols)
        });
        SliceLayout { source, grid, refine }
    }

    /// Tokens of a view of `height × width` pixels.
    pub fn view_tokens(&self, (height, width): (usize, usize)) -> usize {
        (height / self.patch_size) * (width / self.patch_size) / (self.merge * self.merge)
    }
}

impl SliceLayout {
    /// Each slice's `(height, width)` (all slices of a grid are equal), when sliced.
    pub fn slice_size(&self) -> Option<(usize, usize)> {
        let ((rows, cols), (h, w)) = (self.grid?, self.refine?);
        Some((h / rows, w / cols))
    }

    /// The views' sizes in the processor's order: the source, then the slices row by row.
    pub fn views(&self) -> Vec<(usize, usize)> {
        let mut views = vec![self.source];
        if let (Some((rows, cols)), Some(size)) = (self.grid, self.slice_size()) {
            views.extend(std::iter::repeat_n(size, rows * cols));
        }
        views
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V46: MiniCpmSlicing =
        MiniCpmSlicing { max_slice_nums: 9, scale_resolution: 448, patch_size: 14, slice_mode: true, merge: 4 };

    #[test]
    fn python_rounding_and_truncation() {
        // round(2.5) = 2 and round(3.5) = 4 in Python: 140 / 56 = 2.5 → 112, 196 / 56 = 3.5 → 224.
        assert_eq!((ensure_divide(140.0, 56), ensure_divide(196.0, 56), ensure_divide(10.0, 56)), (112, 224, 56));
    }

    #[test]
    fn a_small_image_is_one_upscaled_view() {
        let l = V46.layout(100, 100);
        assert_eq!((l.grid, l.source, l.views().len()), (None, (448, 448), 1));
        assert_eq!(V46.view_tokens(l.source), 64);
        let off = MiniCpmSlicing { slice_mode: false, ..V46 };
        assert_eq!(off.layout(2000, 3000).grid, None);
    }
}
