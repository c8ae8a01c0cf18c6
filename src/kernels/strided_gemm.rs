//! One place that calls the `gemm` crate: `dst = scale · lhs · rhs` over strided f32 views,
//! on the calling thread (the kernels split their work over rayon themselves).

/// An f32 matrix in memory: element `(i, j)` is at `ptr + i·row_stride + j·col_stride`, so a
/// transpose or a column block of a wider matrix is a view, not a copy.
#[derive(Debug, Clone, Copy)]
pub struct View<P> {
    pub ptr: P,
    pub row_stride: usize,
    pub col_stride: usize,
}

impl<P> View<P> {
    /// A row-major matrix whose rows are `row_stride` apart.
    pub fn rows(ptr: P, row_stride: usize) -> Self {
        Self {
            ptr,
            row_stride,
            col_stride: 1,
        }
    }

    /// The transpose of a row-major matrix whose rows are `row_stride` apart.
    pub fn transposed(ptr: P, row_stride: usize) -> Self {
        Self {
            ptr,
            row_stride: 1,
            col_stride: row_stride,
        }
    }
}

/// Overwrites `dst` (`m × n`) with `scale · lhs · rhs` (`m × k` times `k × n`).
///
/// # Safety
/// Every view must lie inside its buffer for its whole shape, and `dst` must not overlap
/// `lhs` or `rhs` or be written by anyone else meanwhile.
pub unsafe fn gemm_into(
    [m, n, k]: [usize; 3],
    dst: View<*mut f32>,
    lhs: View<*const f32>,
    rhs: View<*const f32>,
    scale: f32,
) {
    // SAFETY: forwarded to the caller.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.ptr,
            dst.col_stride as isize,
            dst.row_stride as isize,
            false,
            lhs.ptr,
            lhs.col_stride as isize,
            lhs.row_stride as isize,
            rhs.ptr,
            rhs.col_stride as isize,
            rhs.row_stride as isize,
            0.0,
            scale,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}
