//! How long one sequence may be: the model's context, the operator's `max_model_len`, and what
//! the KV cache can hold for a single sequence. A sequence longer than the cache could never be
//! admitted again once preempted, and first-come-first-served admission would then stall every
//! request behind it (vLLM refuses to start in that case too).

/// Why a configured context length cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "max_model_len {requested} needs {requested} tokens of KV cache for one sequence, but the cache \
     holds {cache_tokens} ({num_blocks} blocks of {block_size}); lower --max-model-len or raise \
     --kv-cache-memory / --num-gpu-blocks-override"
)]
pub struct CacheTooSmall {
    pub requested: usize,
    pub cache_tokens: usize,
    pub num_blocks: usize,
    pub block_size: usize,
}

/// The context length kiln serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextLength {
    pub max_model_len: usize,
    /// The model's own context was cut to fit the cache (worth one warning at start).
    pub clamped_to_cache: bool,
}

/// `requested` is the configured `max_model_len` (0: not given); `max_positions` the model's
/// context. Not given, it is the model's context clamped to the cache; given and larger than
/// the cache, it is refused; given and larger than the model's context, it is the context.
pub fn context_length(
    requested: usize,
    max_positions: usize,
    num_blocks: usize,
    block_size: usize,
) -> Result<ContextLength, CacheTooSmall> {
    let cache_tokens = num_blocks * block_size;
    if requested == 0 {
        return Ok(ContextLength {
            max_model_len: max_positions.min(cache_tokens),
            clamped_to_cache: cache_tokens < max_positions,
        });
    }
    let max_model_len = requested.min(max_positions);
    if max_model_len > cache_tokens {
        return Err(CacheTooSmall {
            requested: max_model_len,
            cache_tokens,
            num_blocks,
            block_size,
        });
    }
    Ok(ContextLength {
        max_model_len,
        clamped_to_cache: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_context_is_clamped_to_the_cache() {
        let c = context_length(0, 8192, 24, 16).expect("clamps");
        assert_eq!(
            c,
            ContextLength {
                max_model_len: 384,
                clamped_to_cache: true
            }
        );
        let c = context_length(0, 256, 64, 16).expect("fits");
        assert_eq!(
            c,
            ContextLength {
                max_model_len: 256,
                clamped_to_cache: false
            }
        );
    }

    #[test]
    fn explicit_context_larger_than_the_cache_is_refused_naming_the_flags() {
        let err = context_length(1000, 8192, 24, 16).unwrap_err();
        assert_eq!(err.cache_tokens, 384);
        let text = err.to_string();
        for flag in ["--max-model-len", "--kv-cache-memory", "--num-gpu-blocks-override"] {
            assert!(text.contains(flag), "{text}");
        }
        assert_eq!(
            context_length(384, 8192, 24, 16).expect("fits exactly").max_model_len,
            384
        );
    }

    #[test]
    fn explicit_context_beyond_the_model_is_the_models_context() {
        // 4096 > the model's 2048, which fits the cache: served at 2048, as before.
        assert_eq!(context_length(4096, 2048, 256, 16).expect("fits").max_model_len, 2048);
    }
}
