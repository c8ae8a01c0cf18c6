//! How the SIMD row kernels walk their work: rows in panels, tokens in tiles, and the bounds
//! they check once before reading without checks. Shared by `avx2.rs` and `avx512.rs`, apart
//! from `matmul.rs`, which dispatches to them.

use std::ops::Range;

use super::packed::PackedMatrix;

/// Tokens that share one widened weight block (eight AVX2 accumulators).
pub const TOKEN_TILE: usize = 8;
/// Output rows per unit of parallel work (a panel stays in L1/L2 across token tiles).
pub(super) const ROW_PANEL: usize = 16;

/// The preconditions of the SIMD row kernels, which read without bounds checks: `x` holds
/// `tokens` rows, `out` holds `rows × tokens`, and every block of `rows` exists.
pub(super) fn assert_row_kernel_bounds(x: &[f32], tokens: usize, w: &PackedMatrix, rows: &Range<usize>, out: &[f32]) {
    assert!(x.len() >= tokens * w.cols && out.len() >= rows.len() * tokens && rows.end <= w.rows);
    assert_blocks_exist(w);
}

/// Every block of `w` has its scales, quants and (where the format has them) min.
pub(super) fn assert_blocks_exist(w: &PackedMatrix) {
    let blocks = w.rows * w.blocks_per_row();
    assert!(w.scales.len() >= blocks * w.format.scales_per_block());
    assert!(w.quants.len() >= blocks * w.format.quant_bytes());
    assert!(!w.format.has_mins() || w.mins.len() >= blocks);
}

/// Walks `rows` in panels and `tokens` in tiles, handing each (row, first token, tile
/// length) its slice of `out` (`[rows.len(), tokens]`): the loop the SIMD kernels share.
#[inline(always)]
pub(super) fn for_each_tile(
    tokens: usize,
    rows: Range<usize>,
    out: &mut [f32],
    mut tile: impl FnMut(usize, usize, usize, &mut [f32]),
) {
    let base = rows.start;
    for panel in row_panels(rows) {
        for (t0, n) in token_tiles(tokens) {
            for r in panel.clone() {
                tile(r, t0, n, &mut out[(r - base) * tokens + t0..][..n]);
            }
        }
    }
}

/// Splits `tokens` into tiles of at most [`TOKEN_TILE`]: `(first token, length)`.
pub(super) fn token_tiles(tokens: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..tokens)
        .step_by(TOKEN_TILE)
        .map(move |t0| (t0, TOKEN_TILE.min(tokens - t0)))
}

/// Rows of `rows` in panels of [`ROW_PANEL`].
pub(super) fn row_panels(rows: Range<usize>) -> impl Iterator<Item = Range<usize>> {
    let end = rows.end;
    rows.step_by(ROW_PANEL).map(move |r0| r0..(r0 + ROW_PANEL).min(end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_and_panels_cover_every_index_once() {
        let tiles: Vec<_> = token_tiles(19).collect();
        assert_eq!(tiles, vec![(0, 8), (8, 8), (16, 3)]);
        let panels: Vec<_> = row_panels(5..40).collect();
        assert_eq!(panels, vec![5..21, 21..37, 37..40]);
    }
}
