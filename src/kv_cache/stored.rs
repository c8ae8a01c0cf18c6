//! One layer's K (or V) as the cache stores it: a float tensor (f32, f16, bf16), or FP8 E4M3
//! codes in a `u8` integer tensor, burn having no 8-bit float type.

use burn::tensor::{DType, Int, IntDType, Tensor, TensorData};

use super::backend_ops::KvCacheOps;
use super::slot_runs::SlotRun;
use crate::kernels::fp8::{self, E4m3};

/// `[slots, kv_dim]` values in the cache's dtype.
pub enum Stored<B: KvCacheOps> {
    Float(Tensor<B, 2>),
    /// E4M3 codes, scale 1.0.
    Fp8(Tensor<B, 2, Int>),
}

impl<B: KvCacheOps> Stored<B> {
    /// Zeros of `dtype` (`U8`: FP8 E4M3, whose code 0 is +0.0).
    pub fn zeros(shape: [usize; 2], dtype: DType, device: &B::Device) -> Self {
        match dtype {
            DType::U8 => Self::Fp8(Tensor::zeros(shape, (device, DType::U8))),
            float => Self::Float(Tensor::zeros(shape, (device, float))),
        }
    }

    /// Host data as [`into_data`](Self::into_data) gives it back.
    pub fn from_data(data: TensorData, device: &B::Device) -> Self {
        match data.dtype {
            DType::U8 => Self::Fp8(Tensor::from_data(data, (device, DType::U8))),
            _ => Self::Float(Tensor::from_data(data, device)),
        }
    }

    pub fn into_data(self) -> TensorData {
        match self {
            Self::Float(t) => t.into_data(),
            Self::Fp8(t) => t.into_data(),
        }
    }

    /// The rows `slots`, as stored.
    pub fn select(&self, slots: Tensor<B, 1, Int>) -> Self {
        match self {
            Self::Float(t) => Self::Float(t.clone().select(0, slots)),
            Self::Fp8(t) => Self::Fp8(t.clone().select(0, slots)),
        }
    }

    /// The values as f32 (exact: every stored value is an f32).
    pub fn widened(self) -> Tensor<B, 2> {
        match self {
            Self::Float(t) if t.dtype() == DType::F32 => t,
            Self::Float(t) => t.cast(DType::F32),
            Self::Fp8(codes) => {
                // Through a 256-entry table: any backend's select, no 8-bit float op needed.
                let [rows, width] = codes.dims();
                let device = codes.device();
                let table: Vec<f32> = (0..=255u8).map(|c| E4m3(c).to_f32()).collect();
                let table = Tensor::<B, 1>::from_data(TensorData::new(table, [256]), &device);
                let index = codes.cast(IntDType::I64).reshape([rows * width]);
                table.select(0, index).reshape([rows, width])
            }
        }
    }

    /// `rows` (f32) written into the runs' slots, rounded to the stored type.
    pub fn write_rows(self, runs: &[SlotRun], rows: Tensor<B, 2>) -> Self {
        match self {
            Self::Float(cache) => Self::Float(B::write_rows(cache, runs, rows)),
            Self::Fp8(cache) => {
                let [tokens, width] = rows.dims();
                let device = rows.device();
                let values = rows.into_data().convert::<f32>();
                let values = values.as_slice::<f32>().expect("converted to f32");
                let mut codes = vec![0u8; values.len()];
                fp8::encode_slice(values, fp8::as_codes_mut(&mut codes));
                let codes = Tensor::from_data(TensorData::new(codes, [tokens, width]), (&device, DType::U8));
                Self::Fp8(B::write_code_rows(cache, runs, codes))
            }
        }
    }

    /// `rows`, already in the stored type (from [`from_data`](Self::from_data)), written
    /// into the runs' slots.
    pub fn write_stored_rows(self, runs: &[SlotRun], rows: Self) -> Self {
        match (self, rows) {
            (Self::Float(cache), Self::Float(rows)) => Self::Float(B::write_rows(cache, runs, rows)),
            (Self::Fp8(cache), Self::Fp8(rows)) => Self::Fp8(B::write_code_rows(cache, runs, rows)),
            _ => unreachable!("a block is written back in the dtype it was read in"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;

    #[test]
    fn fp8_rows_read_back_through_the_table_as_their_codes_values() {
        let device = Default::default();
        let values: Vec<f32> = vec![0.3, -1.7, 500.0, 1e-3, -0.0, 37.5];
        let rows = Tensor::<Flex, 2>::from_data(TensorData::new(values.clone(), [2, 3]), &device);
        let run = [SlotRun {
            token_row: 0,
            first_slot: 2,
            len: 2,
        }];
        let cache = Stored::<Flex>::zeros([5, 3], DType::U8, &device).write_rows(&run, rows);
        let slots = Tensor::<Flex, 1, Int>::from_data(TensorData::new(vec![3i64, 2, 0], [3]), &device);
        let read = cache
            .select(slots)
            .widened()
            .into_data()
            .into_vec::<f32>()
            .expect("f32");
        let want = |i: usize| fp8::encode(values[i]).to_f32();
        let expected: Vec<f32> = (3..6).chain(0..3).map(want).chain([0.0; 3]).collect();
        assert_eq!(read, expected);
        assert_eq!(read[5], E4m3(0x7E).to_f32(), "500 saturates at 448");
    }
}
