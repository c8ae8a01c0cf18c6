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
