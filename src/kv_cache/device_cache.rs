//! The KV-cache tensors: one preallocated K and one V tensor per layer, addressed by slot
//! (`block * block_size + offset`). The executor owns them; the block manager decides
//! which slots a sequence uses.

use burn::tensor::{DType, Int, Tensor, TensorData};

pub use super::stored::Stored;

use super::backend_ops::KvCacheOps;
pub use super::slot_runs::{SlotRun, slot_runs};
use crate::kernels::attention::{HeadShape, SequenceSpan};

/// Geometry of the device cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheGeometry {
    pub num_layers: usize,
    pub num_blocks: usize,
    pub block_size: usize,
    /// K (or V) values per token per layer: kv heads × head dim.
    pub kv_dim: usize,
}

impl CacheGeometry {
    pub fn num_slots(&self) -> usize {
        self.num_blocks * self.block_size
    }

    /// Bytes of one block's K and V in every layer, stored as `dtype`.
    pub fn block_bytes(&self, dtype: DType) -> u64 {
        (2 * self.num_layers * self.block_size * self.kv_dim * dtype.size()) as u64
    }
}

/// The tensor type K and V are stored in for a `--kv-cache-dtype` setting. `U8` stands for
/// FP8 E4M3 codes (`kernels::fp8`), held in an integer tensor: burn has no 8-bit float.
pub fn storage_dtype(setting: crate::config::KvCacheDtype) -> DType {
    use crate::config::KvCacheDtype as D;
    match setting.resolved() {
        D::Float32 => DType::F32,
        D::Bfloat16 => DType::BF16,
        D::Float16 | D::Auto => DType::F16,
        D::Fp8 => DType::U8,
    }
}

/// Slot ids of positions `0..context_len` of a sequence, in order.
pub fn context_slots(block_table: &[u32], block_size: usize, context_len: usize) -> Vec<i64> {
    (0..context_len)
        .map(|pos| (block_table[pos / block_size] as usize * block_size + pos % block_size) as i64)
        .collect()
}

struct LayerCache<B: KvCacheOps> {
    /// `[num_slots, kv_dim]`; `None` only while being updated in place.
    k: Option<Stored<B>>,
    v: Option<Stored<B>>,
}

/// Preallocated paged K/V tensors for every layer.
pub struct PagedKvCache<B: KvCacheOps> {
    geometry: CacheGeometry,
    /// What K and V are stored as; they are written and read as f32.
    dtype: DType,
    layers: Vec<LayerCache<B>>,
    device: B::Device,
}

/// One block's K and V in every layer, in the cache's dtype: what the host swap pool keeps.
pub type HostBlock = Vec<TensorData>;

impl<B: KvCacheOps> PagedKvCache<B> {
    /// A zeroed cache whose K and V are stored as `dtype` (F32, F16, BF16, or U8 for FP8 E4M3).
    pub fn new(geometry: CacheGeometry, dtype: DType, device: &B::Device) -> Self {
        let shape = [geometry.num_slots(), geometry.kv_dim];
        let layers = (0..geometry.num_layers)
            .map(|_| LayerCache {
                k: Some(Stored::zeros(shape, dtype, device)),
                v: Some(Stored::zeros(shape, dtype, device)),
            })
            .collect();
        Self {
            geometry,
            dtype,
            layers,
            device: device.clone(),
        }
    }

    pub fn geometry(&self) -> CacheGeometry {
        self.geometry
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Bytes the device tensors hold.
    pub fn size_bytes(&self) -> u64 {
        self.geometry.num_blocks as u64 * self.geometry.block_bytes(self.dtype)
    }

    /// Writes the step's new K/V rows into their slots. Each tensor is moved out and
    /// back so the backend can update it in place (a shared tensor would be copied).
    ///
    /// # Shapes
    /// - k_new, v_new: `[tokens, kv_dim]`
    pub fn write(&mut self, layer: usize, runs: &[SlotRun], k_new: Tensor<B, 2>, v_new: Tensor<B, 2>) {
        let cache = &mut self.layers[layer];
        let k = cache.k.take().expect("layer K cache present between steps");
        let v = cache.v.take().expect("layer V cache present between steps");
        cache.k = Some(k.write_rows(runs, k_new));
        cache.v = Some(v.write_rows(runs, v_new));
    }

    /// Causal attention of the step's queries read straight from this layer's cache, where
    /// the backend has such a kernel (`None`: use [`gather`](Self::gather) and burn ops).
    ///
    /// # Shapes
    /// - q: `[tokens, num_heads * head_dim]`
    /// - output: `[tokens, num_heads * head_dim]`
    pub fn attention(
        &self,
        layer: usize,
        q: Tensor<B, 2>,
        spans: &[SequenceSpan],
        shape: HeadShape,
    ) -> Option<Tensor<B, 2>> {
        let cache = &self.layers[layer];
        let k = cache.k.as_ref().expect("layer K cache present");
        let v = cache.v.as_ref().expect("layer V cache present");
        match (k, v) {
            (Stored::Float(k), Stored::Float(v)) => B::paged_attention(q, k, v, spans, shape),
            (Stored::Fp8(k), Stored::Fp8(v)) => B::paged_attention_fp8(q, k, v, spans, shape),
            _ => unreachable!("K and V are stored alike"),
        }
    }

    /// Gathers the K/V rows of the given slots, widened to f32.
    ///
    /// # Shapes
    /// - slots: `[context]`
    /// - output: two tensors `[context, kv_dim]`
    pub fn gather(&self, layer: usize, slots: Tensor<B, 1, Int>) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let (k, v) = self.gather_stored(layer, slots);
        (k.widened(), v.widened())
    }

    /// The K/V rows of the given slots as stored.
    fn gather_stored(&self, layer: usize, slots: Tensor<B, 1, Int>) -> (Stored<B>, Stored<B>) {
        let cache = &self.layers[layer];
        let k = cache.k.as_ref().expect("layer K cache present");
        let v = cache.v.as_ref().expect("layer V cache present");
        (k.select(slots.clone()), v.select(slots))
    }

    /// Copies whole blocks out to host memory (swap out), as stored: per layer, K then V.
    pub fn read_blocks(&self, blocks: &[u32]) -> HostBlock {
        let slots = self.block_slots(blocks);
        let mut out = Vec::with_capacity(2 * self.geometry.num_layers);
        for layer in 0..self.geometry.num_layers {
            let (k, v) = self.gather_stored(layer, slots.clone());
            out.push(k.into_data());
            out.push(v.into_data());
        }
        out
    }

    /// Writes host data produced by [`read_blocks`](Self::read_blocks) into `blocks` (swap in).
    pub fn write_blocks(&mut self, blocks: &[u32], data: &[TensorData]) {
        let bs = self.geometry.block_size;
        for layer in 0..self.geometry.num_layers {
            let to_stored = |t: &TensorData| Stored::<B>::from_data(t.clone(), &self.device);
            let k_new = to_stored(&data[2 * layer]);
            let v_new = to_stored(&data[2 * layer + 1]);
            let runs: Vec<SlotRun> = blocks
                .iter()
                .enumerate()
                .map(|(i, &b)| SlotRun {
                    token_row: i * bs,
                    first_slot: b as usize * bs,
                    len: bs,
                })
                .collect();
            let cache = &mut self.layers[layer];
            let k = cache.k.take().expect("layer K cache present between steps");
            let v = cache.v.take().expect("layer V cache present between steps");
            cache.k = Some(k.write_stored_rows(&runs, k_new));
            cache.v = Some(v.write_stored_rows(&runs, v_new));
        }
    }

    /// Copies whole device blocks, (source, destination) pairs, in order.
    pub fn copy_blocks(&mut self, pairs: &[(u32, u32)]) {
        for &(source, destination) in pairs {
            let data = self.read_blocks(&[source]);
            self.write_blocks(&[destination], &data);
        }
    }

    fn block_slots(&self, blocks: &[u32]) -> Tensor<B, 1, Int> {
        let bs = self.geometry.block_size;
        let slots: Vec<i64> = blocks
            .iter()
            .flat_map(|&b| (0..bs).map(move |o| (b as usize * bs + o) as i64))
            .collect();
        let n = slots.len();
        Tensor::from_data(TensorData::new(slots, [n]), &self.device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_runs_split_at_block_boundaries() {
        // Blocks 7 and 3, block size 4: positions 2..7 → slots 30,31 | 12,13,14.
        let runs = slot_runs(&[7, 3], 4, 2, 5, 10);
        assert_eq!(
            runs,
            vec![
                SlotRun {
                    token_row: 10,
                    first_slot: 30,
                    len: 2
                },
                SlotRun {
                    token_row: 12,
                    first_slot: 12,
                    len: 3
                },
            ]
        );
        assert_eq!(context_slots(&[7, 3], 4, 6), vec![28, 29, 30, 31, 12, 13]);
    }
}
