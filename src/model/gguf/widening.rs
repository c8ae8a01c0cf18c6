//! Which of a file's block-quantised types run without a packed kernel: their tensors are
//! dequantised (widened) to f32 at load, which costs memory and speed, so it is logged once.

use std::collections::BTreeSet;

use super::GgufFile;
use crate::kernels::PackedMatrix;

impl GgufFile {
    /// The block-quantised types (Q5_0, the K-quants, …) of this file's tensors that have no
    /// packed kernel, by name.
    pub fn types_widened_at_load(&self) -> BTreeSet<String> {
        self.tensors()
            .iter()
            .filter(|t| t.ty.block_layout().0 > 1 && !PackedMatrix::has_kernel(t.ty))
            .map(|t| t.ty.to_string())
            .collect()
    }

    /// Logs [`types_widened_at_load`](Self::types_widened_at_load), once, when there are any.
    pub fn log_widened_types(&self) {
        let widened = self.types_widened_at_load();
        if !widened.is_empty() {
            let types = widened.into_iter().collect::<Vec<_>>().join(", ");
            tracing::info!(
                path = %self.path().display(),
                types,
                "no packed kernel for these tensor types: widened to f32 at load"
            );
        }
    }
}
