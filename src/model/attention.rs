//! Causal grouped-query attention of one sequence's new tokens over its paged context.

use burn::tensor::{Bool, Tensor, TensorData, activation::softmax, backend::Backend};

/// Attention of `q_len` new query tokens over `context` cached tokens, the last `q_len` of
/// which are the new tokens themselves (positions `context - q_len .. context`).
///
/// # Shapes
/// - q: `[q_len, num_heads, head_dim]` (RoPE applied)
/// - k, v: `[context, num_kv_heads * head_dim]` (K with RoPE applied)
/// - output: `[q_len, num_heads * head_dim]`
pub fn causal_gqa<B: Backend>(q: Tensor<B, 3>, k: Tensor<B, 2>, v: Tensor<B, 2>, num_kv_heads: usize) -> Tensor<B, 2> {
    let [q_len, num_heads, head_dim] = q.dims();
    let [context, _] = k.dims();
    let group = num_heads / num_kv_heads;
    let device = q.device();

    // Rows ordered (query, head-in-group) so each KV head serves its whole group at once.
    let q = q
        .reshape([q_len, num_kv_heads, group, head_dim])
        .permute([1, 0, 2, 3])
        .reshape([num_kv_heads, q_len * group, head_dim]);
    let k = k.reshape([context, num_kv_heads, head_dim]).permute([1, 2, 0]);
    let v = v.reshape([context, num_kv_heads, head_dim]).swap_dims(0, 1);

    let scale = (head_dim as f64).powf(-0.5);
    let mut scores = q.matmul(k).mul_scalar(scale);
    if q_len > 1 {
        let first_pos = context - q_len;
        let mask: Vec<bool> = (0..q_len * group)
            .flat_map(|row| {
                let pos = first_pos + row / group;
                (0..context).map(move |key| key > pos)
            })
            .collect();
        let mask = Tensor::<B, 3, Bool>::from_data(TensorData::new(mask, [1, q_len * group, context]), &device);
        scores = scores.mask_fill(mask, f32::NEG_INFINITY);
    }
    let probs = softmax(scores, 2);
    probs
        .matmul(v)
        .reshape([num_kv_heads, q_len, group, head_dim])
        .permute([1, 0, 2, 3])
        .reshape([q_len, num_heads * head_dim])
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use burn::tensor::{Tensor, TensorData};

    use super::causal_gqa;
    use crate::kernels::attention::{HeadShape, SequenceSpan, paged_attention};

    /// The burn path (used on CUDA) and the host kernel (used on flex) agree on a prefill
    /// chunk of 4 queries at the end of a 7-token context: f32 sums of 7 terms, so 1e-5.
    #[test]
    fn burn_path_matches_the_paged_host_kernel() {
        let shape = HeadShape {
            num_heads: 4,
            num_kv_heads: 2,
            head_dim: 8,
        };
        let (context, len) = (7, 4);
        let kvw = shape.num_kv_heads * shape.head_dim;
        let qw = shape.num_heads * shape.head_dim;
        let values = |n: usize, seed: usize| -> Vec<f32> {
            (0..n)
                .map(|i| (((i * 29 + seed * 13) % 83) as f32 - 41.0) / 30.0)
                .collect()
        };
        let (q, k, v) = (values(len * qw, 1), values(context * kvw, 2), values(context * kvw, 3));
        let device = Default::default();
        let tensor = |data: &[f32], dims: [usize; 2]| {
            Tensor::<Flex, 2>::from_data(TensorData::new(data.to_vec(), dims), &device)
        };
        let burn = causal_gqa(
            tensor(&q, [len, qw]).reshape([len, shape.num_heads, shape.head_dim]),
            tensor(&k, [context, kvw]),
            tensor(&v, [context, kvw]),
            shape.num_kv_heads,
        )
        .into_data()
        .to_vec::<f32>()
        .expect("f32");
        let slots: Vec<i64> = (0..context as i64).collect();
        let spans = [SequenceSpan {
            first_row: 0,
            len,
            slots: &slots,
        }];
        let host = paged_attention(&q, &k, &v, &spans, shape);
        for (i, (a, b)) in burn.iter().zip(&host).enumerate() {
            assert!((a - b).abs() < 1e-5, "element {i}: burn {a} vs host {b}");
        }
    }
}
