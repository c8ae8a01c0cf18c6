//! The flash prefill path against a plain f64 attention, on every kernel path this CPU runs.

use super::*;
use crate::kernels::attention::paged_attention;
use crate::kernels::attention::tests::values;

/// Causal attention in f64 of `len` new queries at the end of a `context`-long sequence, K/V
/// contiguous; each query sees at most the last `window` positions (itself included).
fn reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    len: usize,
    context: usize,
    shape: HeadShape,
    window: Option<usize>,
) -> Vec<f64> {
    let (hd, group) = (shape.head_dim, shape.num_heads / shape.num_kv_heads);
    let kvw = shape.num_kv_heads * hd;
    let mut out = vec![0.0; len * shape.num_heads * hd];
    for i in 0..len {
        let end = context - len + i + 1;
        let start = window.map_or(0, |w| end.saturating_sub(w));
        for h in 0..shape.num_heads {
            let kvh = h / group;
            let qh = &q[(i * shape.num_heads + h) * hd..][..hd];
            let scores: Vec<f64> = (start..end)
                .map(|j| {
                    let kj = &k[j * kvw + kvh * hd..][..hd];
                    let dot: f64 = qh.iter().zip(kj).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                    dot / (hd as f64).sqrt()
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = exps.iter().sum();
            for (e, j) in exps.iter().zip(start..end) {
                for d in 0..hd {
                    out[(i * shape.num_heads + h) * hd + d] += e / total * f64::from(v[j * kvw + kvh * hd + d]);
                }
            }
        }
    }
    out
}

/// One sequence's K/V scattered over a cache (slot `j` of the context at cache row
/// `(j · 7919) mod rows`, rows a little more than the context), and its queries.
struct Case {
    shape: HeadShape,
    context: usize,
    len: usize,
    k: Vec<f32>,
    v: Vec<f32>,
    q: Vec<f32>,
    slots: Vec<i64>,
    k_cache: Vec<f32>,
    v_cache: Vec<f32>,
}

impl Case {
    fn new(shape: HeadShape, context: usize, len: usize) -> Self {
        let kvw = shape.num_kv_heads * shape.head_dim;
        let rows = context + 13;
        let mut slots: Vec<i64> = Vec::with_capacity(context);
        let mut used = vec![false; rows];
        let mut next = 0usize;
        for _ in 0..context {
            next = (next + 7919) % rows;
            while used[next] {
                next = (next + 1) % rows;
            }
            used[next] = true;
            slots.push(next as i64);
        }
        let (k, v) = (values(context * kvw, 1), values(context * kvw, 2));
        let (mut k_cache, mut v_cache) = (vec![0.0; rows * kvw], vec![0.0; rows * kvw]);
        for (j, &slot) in slots.iter().enumerate() {
            let slot = slot as usize;
            k_cache[slot * kvw..][..kvw].copy_from_slice(&k[j * kvw..][..kvw]);
            v_cache[slot * kvw..][..kvw].copy_from_slice(&v[j * kvw..][..kvw]);
        }
        let q = values(len * shape.num_heads * shape.head_dim, 3);
        Self {
            shape,
            context,
            len,
            k,
            v,
            q,
            slots,
            k_cache,
            v_cache,
        }
    }

    fn span(&self) -> SequenceSpan<'_> {
        SequenceSpan {
            first_row: 0,
            len: self.len,
            slots: &self.slots,
        }
    }

    fn expected(&self, window: Option<usize>) -> Vec<f64> {
        reference(&self.q, &self.k, &self.v, self.len, self.context, self.shape, window)
    }
}

fn assert_close(got: &[f32], expected: &[f64], tolerance: f64, what: &str) {
    assert_eq!(got.len(), expected.len());
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        assert!((f64::from(*g) - e).abs() < tolerance, "{what}: element {i}: {g} vs {e}");
    }
}

/// Head layouts of the models kiln runs: SmolLM2 (9 over 3 of 64), Gemma 3 270M (4 over 1
/// of 256), a Mistral-like 8 over 2 of 128, and a head dim that is not a multiple of 16.
const SHAPES: [HeadShape; 4] = [
    HeadShape {
        num_heads: 9,
        num_kv_heads: 3,
        head_dim: 64,
    },
    HeadShape {
        num_heads: 4,
        num_kv_heads: 1,
        head_dim: 256,
    },
    HeadShape {
        num_heads: 8,
        num_kv_heads: 2,
        head_dim: 128,
    },
    HeadShape {
        num_heads: 6,
        num_kv_heads: 6,
        head_dim: 40,
    },
];

#[test]
fn every_path_matches_the_f64_reference_for_prompts_and_chunks_after_a_cached_prefix() {
    let paths: Vec<KernelPath> = KernelPath::ALL.into_iter().filter(|p| p.available()).collect();
    println!(
        "flash attention paths run: {:?}",
        paths.iter().map(|p| p.name()).collect::<Vec<_>>()
    );
    // (context, new tokens): a whole prompt in one tile, one over several tiles and key
    // blocks with partial last ones, and chunks after a cached prefix (chunked prefill),
    // one whose prefix ends inside a key block.
    for shape in SHAPES {
        for (context, len) in [(20, 20), (150, 150), (300, 77), (211, 33)] {
            let case = Case::new(shape, context, len);
            let expected = case.expected(None);
            for &path in &paths {
                let mut got = vec![f32::NAN; case.q.len()];
                attend_span_flash_on(
                    path,
                    &case.q,
                    &case.k_cache,
                    &case.v_cache,
                    &case.span(),
                    shape,
                    &mut got,
                );
                // Outputs are convex combinations of values ≤ 1.2; f32 scores over up to 256
                // terms, the softmax rescaled per key block: 1e-4 is far below any real error
                // (a wrong mask or a missed block moves outputs by 1e-2 or more).
                assert_close(
                    &got,
                    &expected,
                    1e-4,
                    &format!("{} {shape:?} {context}/{len}", path.name()),
                );
            }
        }
    }
}

#[test]
fn paged_attention_takes_the_flash_path_for_long_spans_beside_decodes() {
    // A 40-token chunk after 100 cached tokens and a decode row in the same step.
    let shape = SHAPES[0];
    let long = Case::new(shape, 140, 40);
    let q_width = shape.num_heads * shape.head_dim;
    let decode_q = values(q_width, 9);
    let mut q = long.q.clone();
    q.extend_from_slice(&decode_q);
    let decode_slots = &long.slots[..50];
    let spans = [
        long.span(),
        SequenceSpan {
            first_row: 40,
            len: 1,
            slots: decode_slots,
        },
    ];
    let got = paged_attention(&q, &long.k_cache, &long.v_cache, &spans, shape);
    let mut expected = long.expected(None);
    expected.extend(reference(&decode_q, &long.k, &long.v, 1, 50, shape, None));
    assert_close(&got, &expected, 1e-4, "mixed step");
}

#[test]
fn sliding_window_spans_as_the_model_plans_them_match_a_windowed_reference() {
    // The model's windowed plan (src/model/transformer.rs) keeps a span whose context fits
    // the window (the flash path here) and gives every query of a longer one its own span
    // over its last `window` positions.
    let shape = SHAPES[1];
    let window = 64;
    for (context, len) in [(60, 60), (200, 70)] {
        let case = Case::new(shape, context, len);
        let spans: Vec<SequenceSpan> = if context <= window {
            vec![case.span()]
        } else {
            (0..len)
                .map(|i| {
                    let visible = context - len + i + 1;
                    SequenceSpan {
                        first_row: i,
                        len: 1,
                        slots: &case.slots[visible.saturating_sub(window)..visible],
                    }
                })
                .collect()
        };
        let got = paged_attention(&case.q, &case.k_cache, &case.v_cache, &spans, shape);
        assert_close(
            &got,
            &case.expected(Some(window)),
            1e-4,
            &format!("window {window}, {context}/{len}"),
        );
    }
}

#[test]
fn short_spans_take_smaller_tiles_so_every_worker_has_units() {
    assert_eq!(tile_rows(512, 3, 2), QUERY_TILE);
    // 16 queries over 3 KV heads on 2 workers: 2 tiles of 8, 6 units.
    assert_eq!(tile_rows(16, 3, 2), MIN_TILE_ROWS);
    assert_eq!(tile_rows(40, 1, 2), 10);
    assert_eq!(tile_rows(3, 1, 16), MIN_TILE_ROWS);
}
