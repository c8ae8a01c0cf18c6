//! The host swap pool: KV blocks copied out of the device cache when a request is preempted
//! by swapping, and copied back when it resumes. Indexed by the block manager's host ids.

use crate::kv_cache::backend_ops::KvCacheOps;
use crate::kv_cache::device_cache::{HostBlock, PagedKvCache};

/// Host copies of swapped-out blocks; a slot holds one block's K and V for every layer, in
/// the cache's dtype.
#[derive(Debug, Default)]
pub struct HostKvPool {
    blocks: Vec<Option<HostBlock>>,
}

/// Bytes of one host block's values.
fn host_bytes(block: &HostBlock) -> u64 {
    block.iter().map(|t| t.as_bytes().len() as u64).sum()
}

impl HostKvPool {
    pub fn new(num_blocks: usize) -> Self {
        Self {
            blocks: (0..num_blocks).map(|_| None).collect(),
        }
    }

    /// Copies device blocks to host blocks, `(device, host)` pairs; returns the bytes copied.
    pub fn swap_out<B: KvCacheOps>(&mut self, cache: &PagedKvCache<B>, pairs: &[(u32, u32)]) -> u64 {
        let mut bytes = 0;
        for &(device, host) in pairs {
            if let Some(slot) = self.blocks.get_mut(host as usize) {
                let data = cache.read_blocks(&[device]);
                bytes += host_bytes(&data);
                *slot = Some(data);
            }
        }
        bytes
    }

    /// Copies host blocks back to device blocks, `(host, device)` pairs, freeing the host
    /// copies; returns the bytes copied.
    pub fn swap_in<B: KvCacheOps>(&mut self, cache: &mut PagedKvCache<B>, pairs: &[(u32, u32)]) -> u64 {
        let mut bytes = 0;
        for &(host, device) in pairs {
            if let Some(data) = self.blocks.get_mut(host as usize).and_then(Option::take) {
                cache.write_blocks(&[device], &data);
                bytes += host_bytes(&data);
            }
        }
        bytes
    }

    /// Forgets every copy (the requests they belonged to failed with an executor restart).
    pub fn clear(&mut self) {
        self.blocks.iter_mut().for_each(|b| *b = None);
    }

    /// Host blocks currently holding data.
    pub fn num_occupied(&self) -> usize {
        self.blocks.iter().filter(|b| b.is_some()).count()
    }

    /// Bytes the host copies hold now.
    pub fn size_bytes(&self) -> u64 {
        self.blocks.iter().flatten().map(host_bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv_cache::device_cache::{CacheGeometry, SlotRun};
    use burn::backend::Flex;
    use burn::tensor::{Tensor, TensorData};

    #[test]
    fn blocks_survive_a_round_trip_through_the_host_in_every_dtype() {
        use burn::tensor::DType;
        let device = Default::default();
        let geometry = CacheGeometry {
            num_layers: 2,
            num_blocks: 4,
            block_size: 2,
            kv_dim: 3,
        };
        for dtype in [DType::F32, DType::F16, DType::BF16, DType::U8] {
            let mut cache = PagedKvCache::<Flex>::new(geometry, dtype, &device);
            let rows = |offset: f32| {
                Tensor::<Flex, 2>::from_data(
                    TensorData::new((0..6).map(|v| v as f32 + offset).collect::<Vec<_>>(), [2, 3]),
                    &device,
                )
            };
            let run = [SlotRun {
                token_row: 0,
                first_slot: 2,
                len: 2,
            }]; // block 1
            cache.write(0, &run, rows(0.0), rows(100.0));
            cache.write(1, &run, rows(200.0), rows(300.0));
            let before = cache.read_blocks(&[1]);
            let mut pool = HostKvPool::new(2);
            // Two layers, K and V, two tokens of three values: 24 values at the dtype's size.
            let bytes = pool.swap_out(&cache, &[(1, 0)]);
            assert_eq!(bytes, 24 * dtype.size() as u64, "{dtype:?}");
            assert_eq!(bytes, geometry.block_bytes(dtype));
            assert_eq!(pool.size_bytes(), bytes);
            assert_eq!(pool.num_occupied(), 1);
            pool.swap_in(&mut cache, &[(0, 3)]);
            assert_eq!(cache.read_blocks(&[3]), before, "{dtype:?}");
            assert_eq!(pool.num_occupied(), 0);
            assert_eq!(pool.size_bytes(), 0);
            // Read back widened: small integers are exact in every dtype.
            let slots = Tensor::from_data(TensorData::new(vec![6i64, 7], [2]), &device);
            let (k, _) = cache.gather(0, slots);
            let k = k.into_data().into_vec::<f32>().expect("widened to f32");
            assert_eq!(k, (0..6).map(|v| v as f32).collect::<Vec<_>>(), "{dtype:?}");
        }
    }
}
