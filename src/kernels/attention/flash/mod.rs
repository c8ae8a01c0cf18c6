//! Prefill attention in the flash-attention style. Per tile of query rows and per KV head, the
//! group's query heads are stacked into one matrix and the context's keys are walked in
//! blocks: scores (`Q·Kᵀ`) and the weighted sum of values (`P·V`) run as register-blocked
//! micro-kernels on the block, with an online softmax (a running max and sum per row), so
//! the scores never outgrow the L1/L2 caches and each key block serves every head of its
//! group. The previous path (a `gemm` call per head and tile over the whole context) packed
//! the context again for every call and reached 50-80 GFLOP/s at 2k-8k tokens of context.
//! Key blocks are copied straight out of the paged cache by each unit (see [`Context`]).
//!
//! The body is written once over fixed-size arrays and compiled per instruction set
//! (AVX-512, AVX2 + FMA, portable), as the decode kernels are.

use rayon::prelude::*;

use super::kv_elem::{KvElem, MAX_HEAD_DIM};
use super::types::{HeadShape, SequenceSpan};
use crate::kernels::dispatch::{KernelPath, active};
use crate::kernels::exp::exp;
use crate::kernels::scratch::resize_counted;

/// Spans with at least this many new tokens take this path.
pub const FLASH_MIN_QUERIES: usize = 16;
/// Query rows (per head) in a tile; a tile and a KV head are one unit of parallel work.
const QUERY_TILE: usize = 32;
const MIN_TILE_ROWS: usize = 8;
/// Spans of at least this many tiles gather their context once for all tiles; shorter ones
/// copy each key block as they reach it.
const GATHER_MIN_TILES: usize = 3;
/// Keys per block of the online softmax: one block's transposed keys, the group's scores and
/// its values stay in L1/L2 while both products run.
const KEY_BLOCK: usize = 64;
/// Widest column run the value product keeps in registers per row; head dims are padded to
/// [`LANES`].
const VALUE_COLUMNS: usize = 64;
const LANES: usize = 16;

/// Attention of one span's query rows on the active kernel path.
///
/// # Shapes
/// - q: `[span.len, num_heads * head_dim]` (the span's rows, RoPE applied)
/// - k_cache, v_cache: `[slots, num_kv_heads * head_dim]`
/// - out: `[span.len, num_heads * head_dim]`, overwritten
pub fn attend_span_flash<T: KvElem>(
    q: &[f32],
    k_cache: &[T],
    v_cache: &[T],
    span: &SequenceSpan,
    shape: HeadShape,
    out: &mut [f32],
) {
    attend_span_flash_on(active(), q, k_cache, v_cache, span, shape, out);
}

/// [`attend_span_flash`] on `path`, which this CPU must run (tests compare the paths).
pub(super) fn attend_span_flash_on<T: KvElem>(
    path: KernelPath,
    q: &[f32],
    k_cache: &[T],
    v_cache: &[T],
    span: &SequenceSpan,
    shape: HeadShape,
    out: &mut [f32],
) {
    assert!(path.available(), "this CPU cannot run the {} kernels", path.name());
    shape.check();
    assert!(
        shape.head_dim <= MAX_HEAD_DIM,
        "head dim {} over {MAX_HEAD_DIM}",
        shape.head_dim
    );
    let HeadShape {
        num_heads,
        num_kv_heads,
        head_dim,
    } = shape;
    let (q_width, kv_width) = (num_heads * head_dim, num_kv_heads * head_dim);
    assert_eq!(q.len(), span.len * q_width, "q must be [span.len, {q_width}]");
    assert!(k_cache.len() == v_cache.len() && k_cache.len().is_multiple_of(kv_width));
    span.check(span.first_row + span.len, k_cache.len() / kv_width);
    assert_eq!(out.len(), q.len(), "out must be shaped like q");
    if span.len == 0 {
        return;
    }
    let group_width = num_heads / num_kv_heads * head_dim;
    let tile_rows = tile_rows(span.len, num_kv_heads, rayon::current_num_threads());
    let tiles = span.len.div_ceil(tile_rows);
    let context = Context {
        gathered: (tiles >= GATHER_MIN_TILES).then(|| Gathered::new(k_cache, v_cache, span.slots, shape)),
        k_cache,
        v_cache,
        slots: span.slots,
        shape,
        head_dim_padded: head_dim.next_multiple_of(LANES),
    };
    let cached_before = span.slots.len() - span.len;
    // One unit per (tile, KV head), the last tiles (the most keys) first; each returns its
    // heads' columns, `[rows, group_width]`.
    let unit_tile = |unit: usize| (tiles - 1 - unit / num_kv_heads, unit % num_kv_heads);
    let results: Vec<Vec<f32>> = (0..tiles * num_kv_heads)
        .into_par_iter()
        .map(|unit| {
            let (tile, kv_head) = unit_tile(unit);
            let first = tile * tile_rows;
            let rows = tile_rows.min(span.len - first);
            let tile = Tile {
                q: &q[first * q_width..(first + rows) * q_width],
                first_query: cached_before + first,
                rows,
            };
            let mut out = vec![0.0f32; rows * group_width];
            // The scratch is borrowed out here: a closure handed to the thread-local's `with`
            // is compiled for the baseline CPU, so the body must be called inside it.
            SCRATCH.with_borrow_mut(|scratch| run_group(path, &context, &tile, kv_head, scratch, &mut out));
            out
        })
        .collect();
    for (unit, result) in results.iter().enumerate() {
        let (tile, kv_head) = unit_tile(unit);
        for (i, row) in result.chunks_exact(group_width).enumerate() {
            out[(tile * tile_rows + i) * q_width + kv_head * group_width..][..group_width].copy_from_slice(row);
        }
    }
}

/// Query rows per tile: [`QUERY_TILE`], fewer when a short span would leave workers idle
/// (a 16-token chunk over three KV heads is six units of 8 rows, not three of 16), never
/// under [`MIN_TILE_ROWS`].
fn tile_rows(len: usize, kv_heads: usize, threads: usize) -> usize {
    let wanted_tiles = (2 * threads).div_ceil(kv_heads);
    len.div_ceil(wanted_tiles).clamp(MIN_TILE_ROWS, QUERY_TILE)
}

/// The context's keys and values, gathered once per call out of the paged cache for spans
/// of many tiles (each tile would copy every block again otherwise): keys
/// transposed per KV head and key block (`[kv_head][block][head_dim][KEY_BLOCK]`, so a
/// block's scores are a query element times a contiguous vector, and a block is one
/// contiguous 16 KiB: rows of a whole context apart would sit a multiple of 4 KiB apart and
/// fight over the same cache sets) and values per KV head (`[kv_head][padded][head_dim_padded]`),
/// both zero past the context.
struct Gathered {
    keys_t: Vec<f32>,
    values: Vec<f32>,
    /// Context length rounded up to whole key blocks.
    padded: usize,
    shape: HeadShape,
    head_dim_padded: usize,
}

impl Gathered {
    fn new<T: KvElem>(k_cache: &[T], v_cache: &[T], slots: &[i64], shape: HeadShape) -> Self {
        let HeadShape {
            num_kv_heads, head_dim, ..
        } = shape;
        let kv_width = num_kv_heads * head_dim;
        let padded = slots.len().div_ceil(KEY_BLOCK) * KEY_BLOCK;
        let head_dim_padded = head_dim.next_multiple_of(LANES);
        let mut keys_t = vec![0.0f32; num_kv_heads * head_dim * padded];
        let mut values = vec![0.0f32; num_kv_heads * padded * head_dim_padded];
        keys_t
            .par_chunks_mut(head_dim * padded)
            .zip(values.par_chunks_mut(padded * head_dim_padded))
            .enumerate()
            .for_each(|(kv_head, (keys_t, values))| {
                let column = kv_head * head_dim;
                // Sixteen keys at a time, so each transposed row is written in runs.
                // The run's keys widened, `[LANES][head_dim]`, then transposed.
                let mut run_keys = vec![0.0f32; LANES * head_dim];
                for (run, slots) in slots.chunks(LANES).enumerate() {
                    let first = run * LANES;
                    for (j, &slot) in slots.iter().enumerate() {
                        let row = slot as usize * kv_width + column;
                        T::widen_into(
                            &v_cache[row..row + head_dim],
                            &mut values[(first + j) * head_dim_padded..][..head_dim],
                        );
                        T::widen_into(&k_cache[row..row + head_dim], &mut run_keys[j * head_dim..][..head_dim]);
                    }
                    let (block, offset) = (first / KEY_BLOCK, first % KEY_BLOCK);
                    for d in 0..head_dim {
                        let dst = &mut keys_t[(block * head_dim + d) * KEY_BLOCK + offset..][..slots.len()];
                        for (j, t) in dst.iter_mut().enumerate() {
                            *t = run_keys[j * head_dim + d];
                        }
                    }
                }
            });
        Self {
            keys_t,
            values,
            padded,
            shape,
            head_dim_padded,
        }
    }

    /// KV head `kv_head`'s key block at `block_start`, `[head_dim][KEY_BLOCK]`, and its values,
    /// `[KEY_BLOCK][head_dim_padded]`.
    fn block(&self, kv_head: usize, block_start: usize) -> (&[f32], &[f32]) {
        let (head_dim, hdp, padded) = (self.shape.head_dim, self.head_dim_padded, self.padded);
        let keys = &self.keys_t[kv_head * head_dim * padded + block_start * head_dim..][..KEY_BLOCK * head_dim];
        let values = &self.values[(kv_head * padded + block_start) * hdp..][..KEY_BLOCK * hdp];
        (keys, values)
    }
}

/// The span's context in the paged cache. Each unit copies one key block at a time out of it
/// (keys transposed, `[head_dim][KEY_BLOCK]`, so a block's scores are a query element times
/// a contiguous vector; values `[KEY_BLOCK][head_dim_padded]`) into its own L1-sized scratch:
/// no copy of the whole context per call, which at 8k tokens and a short chunk cost as much
/// as the attention itself.
struct Context<'a, T> {
    /// The whole context gathered up front, for spans of many tiles.
    gathered: Option<Gathered>,
    k_cache: &'a [T],
    v_cache: &'a [T],
    slots: &'a [i64],
    shape: HeadShape,
    head_dim_padded: usize,
}

impl<T: KvElem> Context<'_, T> {
    /// Copies KV head `kv_head`'s keys and values at context positions `block_start ..` (up to
    /// a block) into `keys_t` and `values`, zero past the context.
    #[inline(always)]
    fn gather_block(&self, kv_head: usize, block_start: usize, keys_t: &mut [f32], values: &mut [f32]) {
        let (head_dim, hdp) = (self.shape.head_dim, self.head_dim_padded);
        let kv_width = self.shape.num_kv_heads * head_dim;
        let column = kv_head * head_dim;
        let slots = &self.slots[block_start..self.slots.len().min(block_start + KEY_BLOCK)];
        let mut key_buf = [0.0f32; MAX_HEAD_DIM];
        for (j, &slot) in slots.iter().enumerate() {
            let row = slot as usize * kv_width + column;
            for (d, &k) in T::widened(&self.k_cache[row..row + head_dim], &mut key_buf)
                .iter()
                .enumerate()
            {
                keys_t[d * KEY_BLOCK + j] = k;
            }
            T::widen_into(&self.v_cache[row..row + head_dim], &mut values[j * hdp..][..head_dim]);
        }
        if slots.len() < KEY_BLOCK {
            for d in 0..head_dim {
                keys_t[d * KEY_BLOCK + slots.len()..(d + 1) * KEY_BLOCK].fill(0.0);
            }
            values[slots.len() * hdp..].fill(0.0);
        }
    }
}

/// One tile of query rows of the span.
struct Tile<'a> {
    /// `[rows, num_heads * head_dim]`
    q: &'a [f32],
    /// Context position of the tile's first query.
    first_query: usize,
    rows: usize,
}

/// Each worker's buffers, kept between calls.
#[derive(Default)]
struct Scratch {
    /// The group's queries, scaled, `[stacked rows, head_dim]`, row `i · group + g`.
    queries: Vec<f32>,
    /// One key block's scores, then its probabilities, `[stacked rows, KEY_BLOCK]`.
    scores: Vec<f32>,
    /// Unnormalised outputs, `[stacked rows, head_dim_padded]`.
    acc: Vec<f32>,
    /// The key block being worked on: keys transposed, `[head_dim][KEY_BLOCK]`, and values,
    /// `[KEY_BLOCK][head_dim_padded]` (the padding stays zero).
    keys_t: Vec<f32>,
    values: Vec<f32>,
    /// Running max and sum per stacked row.
    max: Vec<f32>,
    sum: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// Rows the micro-kernels block together on each path: four keep the AVX-512 accumulators
/// (4 × 4 vectors) in its 32 registers; the narrower paths have half the registers.
const ROWS_AVX512: usize = 4;
const ROWS_NARROW: usize = 2;

fn run_group<T: KvElem>(
    path: KernelPath,
    context: &Context<T>,
    tile: &Tile,
    kv_head: usize,
    scratch: &mut Scratch,
    out: &mut [f32],
) {
    match path {
        // SAFETY: the CPU supports the features each function is compiled for (asserted by
        // the caller).
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx512 => unsafe { group_avx512(context, tile, kv_head, scratch, out) },
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx2 => unsafe { group_avx2(context, tile, kv_head, scratch, out) },
        _ => group_body::<T, ROWS_NARROW>(context, tile, kv_head, scratch, out),
    }
}

/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn group_avx512<T: KvElem>(
    context: &Context<T>,
    tile: &Tile,
    kv_head: usize,
    scratch: &mut Scratch,
    out: &mut [f32],
) {
    group_body::<T, ROWS_AVX512>(context, tile, kv_head, scratch, out)
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn group_avx2<T: KvElem>(
    context: &Context<T>,
    tile: &Tile,
    kv_head: usize,
    scratch: &mut Scratch,
    out: &mut [f32],
) {
    group_body::<T, ROWS_NARROW>(context, tile, kv_head, scratch, out)
}

/// Attention of the tile's query heads over KV head `kv_head`, written to `out`
/// (`[rows, group * head_dim]`, the group's heads side by side).
#[inline(always)]
fn group_body<T: KvElem, const R: usize>(
    context: &Context<T>,
    tile: &Tile,
    kv_head: usize,
    scratch: &mut Scratch,
    out: &mut [f32],
) {
    let HeadShape {
        num_heads,
        num_kv_heads,
        head_dim,
    } = context.shape;
    let (group, q_width, hdp) = (num_heads / num_kv_heads, num_heads * head_dim, context.head_dim_padded);
    let stacked = (tile.rows * group).next_multiple_of(R);
    let scale = (head_dim as f32).powf(-0.5);
    let Scratch {
        queries,
        scores,
        acc,
        keys_t,
        values,
        max,
        sum,
    } = scratch;
    // Stacked rows past the tile's (padding to R) hold zero queries; they are computed and
    // dropped, and never produce NaN (their scores are 0).
    queries.clear();
    resize_counted(queries, stacked * head_dim, 0.0);
    for i in 0..tile.rows {
        for g in 0..group {
            let head = kv_head * group + g;
            let src = &tile.q[i * q_width + head * head_dim..][..head_dim];
            for (d, s) in queries[(i * group + g) * head_dim..][..head_dim].iter_mut().zip(src) {
                *d = s * scale;
            }
        }
    }
    scores.clear();
    resize_counted(scores, stacked * KEY_BLOCK, 0.0);
    acc.clear();
    resize_counted(acc, stacked * hdp, 0.0);
    max.clear();
    resize_counted(max, stacked, f32::NEG_INFINITY);
    sum.clear();
    resize_counted(sum, stacked, 0.0);
    resize_counted(keys_t, head_dim * KEY_BLOCK, 0.0);
    // Zeroed in full, so the padding columns are zero whatever an earlier call's head dim was.
    values.clear();
    resize_counted(values, KEY_BLOCK * hdp, 0.0);
    // Keys the tile's last row sees; earlier rows mask the rest of the last block.
    let visible_end = tile.first_query + tile.rows;
    for block_start in (0..visible_end).step_by(KEY_BLOCK) {
        let (block_keys, block_values): (&[f32], &[f32]) = match &context.gathered {
            Some(gathered) => gathered.block(kv_head, block_start),
            None => {
                context.gather_block(kv_head, block_start, keys_t, values);
                (keys_t, values)
            }
        };
        score_block::<R>(queries, head_dim, block_keys, scores);
        // Stacked row r is query r / group, which sees keys up to first_query + r / group.
        let diagonal = block_start + KEY_BLOCK > tile.first_query + 1;
        for (r, row) in scores.chunks_exact_mut(KEY_BLOCK).enumerate() {
            let seen = if diagonal {
                (tile.first_query + r / group + 1)
                    .saturating_sub(block_start)
                    .min(KEY_BLOCK)
            } else {
                KEY_BLOCK
            };
            if seen == 0 {
                row.fill(0.0);
                continue;
            }
            // Whole fixed-size rows, masked by -inf, so every loop below vectorises.
            let row: &mut [f32; KEY_BLOCK] = row.try_into().expect("a key block");
            row[seen..].fill(f32::NEG_INFINITY);
            let new_max = max[r].max(row_max(row));
            // exp(-inf) clamps to ~1e-38, and acc and sum are still 0 on a row's first block.
            let correction = exp(max[r] - new_max);
            max[r] = new_max;
            for s in row.iter_mut() {
                *s = exp(*s - new_max);
            }
            row[seen..].fill(0.0);
            let mut lanes = [0.0f32; LANES];
            for chunk in row.chunks_exact(LANES) {
                for (lane, s) in lanes.iter_mut().zip(chunk) {
                    *lane += s;
                }
            }
            sum[r] = sum[r] * correction + lanes.iter().sum::<f32>();
            if correction != 1.0 {
                acc[r * hdp..][..hdp].iter_mut().for_each(|a| *a *= correction);
            }
        }
        add_values::<R>(scores, block_values, hdp, acc);
    }
    for i in 0..tile.rows {
        for g in 0..group {
            let r = i * group + g;
            let inv = 1.0 / sum[r];
            let dst = &mut out[(i * group + g) * head_dim..][..head_dim];
            for (o, a) in dst.iter_mut().zip(&acc[r * hdp..][..head_dim]) {
                *o = a * inv;
            }
        }
    }
}

/// The largest of `row`, in vector lanes (`f32::max`'s NaN rules keep a fold scalar).
#[inline(always)]
fn row_max(row: &[f32; KEY_BLOCK]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    for chunk in row.chunks_exact(LANES) {
        for (lane, &s) in lanes.iter_mut().zip(chunk) {
            *lane = if s > *lane { s } else { *lane };
        }
    }
    lanes.iter().fold(f32::NEG_INFINITY, |m, &l| if l > m { l } else { m })
}

/// `scores[r][c] = Σ_d queries[r][d] · keys_t[d][c]` for one key block (`[head_dim][KEY_BLOCK]`):
/// R rows at a time, each key vector loaded once for the R rows.
#[inline(always)]
fn score_block<const R: usize>(queries: &[f32], head_dim: usize, keys_t: &[f32], scores: &mut [f32]) {
    for (q_rows, s_rows) in queries
        .chunks_exact(R * head_dim)
        .zip(scores.chunks_exact_mut(R * KEY_BLOCK))
    {
        let mut acc = [[0.0f32; KEY_BLOCK]; R];
        for d in 0..head_dim {
            let keys: &[f32; KEY_BLOCK] = keys_t[d * KEY_BLOCK..][..KEY_BLOCK].try_into().expect("block");
            for (i, a) in acc.iter_mut().enumerate() {
                let q = q_rows[i * head_dim + d];
                for (a, k) in a.iter_mut().zip(keys) {
                    *a += q * k;
                }
            }
        }
        for (dst, a) in s_rows.chunks_exact_mut(KEY_BLOCK).zip(&acc) {
            dst.copy_from_slice(a);
        }
    }
}

/// `acc[r] += Σ_j probs[r][j] · values[j]` for one key block, in column runs of
/// [`VALUE_COLUMNS`] (then [`LANES`]) kept in registers for R rows.
#[inline(always)]
fn add_values<const R: usize>(probs: &[f32], values: &[f32], hdp: usize, acc: &mut [f32]) {
    let wide = hdp / VALUE_COLUMNS * VALUE_COLUMNS;
    for column in (0..wide).step_by(VALUE_COLUMNS) {
        add_value_columns::<R, VALUE_COLUMNS>(probs, values, hdp, column, acc);
    }
    for column in (wide..hdp).step_by(LANES) {
        add_value_columns::<R, LANES>(probs, values, hdp, column, acc);
    }
}

#[inline(always)]
fn add_value_columns<const R: usize, const C: usize>(
    probs: &[f32],
    values: &[f32],
    hdp: usize,
    column: usize,
    acc: &mut [f32],
) {
    for (p_rows, a_rows) in probs.chunks_exact(R * KEY_BLOCK).zip(acc.chunks_exact_mut(R * hdp)) {
        let mut regs = [[0.0f32; C]; R];
        for (i, reg) in regs.iter_mut().enumerate() {
            reg.copy_from_slice(&a_rows[i * hdp + column..][..C]);
        }
        for j in 0..KEY_BLOCK {
            let value: &[f32; C] = values[j * hdp + column..][..C].try_into().expect("columns");
            for (i, reg) in regs.iter_mut().enumerate() {
                let p = p_rows[i * KEY_BLOCK + j];
                for (a, v) in reg.iter_mut().zip(value) {
                    *a += p * v;
                }
            }
        }
        for (i, reg) in regs.iter().enumerate() {
            a_rows[i * hdp + column..][..C].copy_from_slice(reg);
        }
    }
}

#[cfg(test)]
mod tests;
