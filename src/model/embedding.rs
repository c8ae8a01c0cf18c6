//! The token embedding: a `[vocab, hidden]` tensor on the device, or, on the CPU's packed
//! path, the matrix in its quantised blocks with only the step's rows widened to f32. A
//! tied output head shares those blocks (one copy of the table for both), where a widened
//! copy used to cost four bytes a weight (113 MB for SmolLM2, 671 MB for Gemma 3 270M).

use std::sync::Arc;

use burn::tensor::{Int, Tensor, TensorData, backend::Backend};

use crate::kernels::{GgmlType, PackedMatrix};

#[derive(Debug, Clone)]
pub enum Embedding<B: Backend> {
    /// `[vocab, hidden]` in f32 on the device (CUDA, `--dequantize-weights`, safetensors,
    /// and types without a packed kernel).
    Dense(Tensor<B, 2>),
    /// `[vocab, hidden]` as packed from the file's `source` type; rows are widened as ggml's
    /// dequantisation of `source` widens them (bit for bit the f32 table's rows).
    Packed {
        matrix: Arc<PackedMatrix>,
        source: GgmlType,
    },
}

impl<B: Backend> Embedding<B> {
    /// The rows of `ids`, `[ids.len(), hidden]`, in host memory.
    pub fn host_rows(&self, ids: &[i64], device: &B::Device) -> Vec<f32> {
        match self {
            Embedding::Dense(_) => super::projection::to_host(self.rows(ids, device)),
            Embedding::Packed { matrix, source } => {
                let mut out = vec![0.0; ids.len() * matrix.cols];
                for (row, &id) in out.chunks_exact_mut(matrix.cols).zip(ids) {
                    matrix.row_as_ggml(id as usize, *source, row);
                }
                out
            }
        }
    }

    /// The rows of `ids` as a `[ids.len(), hidden]` tensor on `device`.
    pub fn rows(&self, ids: &[i64], device: &B::Device) -> Tensor<B, 2> {
        match self {
            Embedding::Dense(table) => {
                let ids = Tensor::<B, 1, Int>::from_data(TensorData::new(ids.to_vec(), [ids.len()]), device);
                table.clone().select(0, ids)
            }
            Embedding::Packed { matrix, .. } => {
                let rows = self.host_rows(ids, device);
                Tensor::from_data(TensorData::new(rows, [ids.len(), matrix.cols]), device)
            }
        }
    }

    /// Bytes the table holds beyond what `head` holds: nothing when the head is the same
    /// packed matrix (tied weights).
    pub fn size_bytes_beside(&self, head: Option<&Arc<PackedMatrix>>) -> u64 {
        match self {
            Embedding::Dense(table) => (table.shape().num_elements() * size_of::<f32>()) as u64,
            Embedding::Packed { matrix, .. } if head.is_some_and(|h| Arc::ptr_eq(h, matrix)) => 0,
            Embedding::Packed { matrix, .. } => matrix.size_bytes() as u64,
        }
    }

    /// `[vocab, hidden]`
    pub fn dims(&self) -> [usize; 2] {
        match self {
            Embedding::Dense(table) => table.dims(),
            Embedding::Packed { matrix, .. } => [matrix.rows, matrix.cols],
        }
    }
}
