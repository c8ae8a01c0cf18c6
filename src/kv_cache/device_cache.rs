//! The KV-cache tensors: one preallocated K and one V tensor per layer, addressed by slot
//! (`block * block_size + offset`). The executor owns them; the block manager decides
//! which slots a sequence uses.

use burn::tensor::{Int, Tensor, TensorData};

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
}

/// Slot ids of positions `0..context_len` of a sequence, in order.
pub fn context_slots(block_table: &[u32], block_size: usize, context_len: usize) -> Vec<i64> {
    (0..context_len)
        .map(|pos| (block_table[pos / block_size] as usize * block_size + pos % block_size) as i64)
        .collect()
}

struct LayerCache<B: KvCacheOps> {
    /// `[num_slots, kv_dim]`; `None` only while being updated in place.
    k: Option<Tensor<B, 2>>,
    v: Option<Tensor<B, 2>>,
}

/// Preallocated paged K/V tensors for every layer.
pub struct PagedKvCache<B: KvCacheOps> {
    geometry: CacheGeometry,
    layers: Vec<LayerCache<B>>,
    device: B::Device,
}

impl<B: KvCacheOps> PagedKvCache<B> {
    pub fn new(geometry: CacheGeometry, device: &B::Device) -> Self {
        let shape = [geometry.num_slots(), geometry.kv_dim];
        let layers = (0..geometry.num_layers)
            .map(|_| LayerCache {
                k: Some(Tensor::zeros(shape, device)),
                v: Some(Tensor::zeros(shape, device)),
            })
            .collect();
        Self {
            geometry,
            layers,
            device: device.clone(),
        }
    }

    pub fn geometry(&self) -> CacheGeometry {
        self.geometry
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
        cache.k = Some(B::write_rows(k, runs, k_new));
        cache.v = Some(B::write_rows(v, runs, v_new));
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
        B::paged_attention(q, k, v, spans, shape)
    }

    /// Gathers the K/V rows of the given slots.
    ///
    /// # Shapes
    /// - slots: `[context]`
    /// - output: two tensors `[context, kv_dim]`
    pub fn gather(&self, layer: usize, slots: Tensor<B, 1, Int>) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let cache = &self.layers[layer];
        let k = cache.k.as_ref().expect("layer K cache present");
        let v = cache.v.as_ref().expect("layer V cache present");
        (k.clone().select(0, slots.clone()), v.clone().select(0, slots))
    }

    /// Copies whole blocks out to host memory (swap out): per layer, K then V.
    pub fn read_blocks(&self, blocks: &[u32]) -> Vec<f32> {
        let slots = self.block_slots(blocks);
        let mut out = Vec::new();
        for layer in 0..self.geometry.num_layers {
            let (k, v) = self.gather(layer, slots.clone());
            out.extend(k.into_data().to_vec::<f32>().unwrap_or_default());
            out.extend(v.into_data().to_vec::<f32>().unwrap_or_default());
        }
        out
    }

    /// Writes host data produced by [`read_blocks`](Self::read_blocks) into `blocks` (swap in).
    pub fn write_blocks(&mut self, blocks: &[u32], data: &[f32]) {
        let bs = self.geometry.block_size;
        let kv_dim = self.geometry.kv_dim;
        let per_tensor = blocks.len() * bs * kv_dim;
        for layer in 0..self.geometry.num_layers {
            let base = layer * 2 * per_tensor;
            let to_tensor = |offset: usize| {
                Tensor::<B, 2>::from_data(
                    TensorData::new(data[offset..offset + per_tensor].to_vec(), [blocks.len() * bs, kv_dim]),
                    &self.device,
                )
            };
            let k_new = to_tensor(base);
            let v_new = to_tensor(base + per_tensor);
            let runs: Vec<SlotRun> = blocks
                .iter()
                .enumerate()
                .map(|(i, &b)| SlotRun {
                    token_row: i * bs,
                    first_slot: b as usize * bs,
                    len: bs,
                })
                .collect();
            self.write(layer, &runs, k_new, v_new);
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
