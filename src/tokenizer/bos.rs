//! BOS insertion: the model decides (`tokenizer.ggml.add_bos_token`, `tokenizer_config.json`'s
//! `add_bos_token`), held as the tokenizer's post-processor, so every caller that encodes with
//! special tokens (completions, chat, `/tokenize`) gets the same ids.

use tokenizers::Tokenizer;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::processors::template::TemplateProcessing;

/// llama.cpp's default when the GGUF does not say: SentencePiece vocabularies and the Llama 3
/// family add BOS, the other byte-level ones do not.
pub fn default_add_bos(model: &str, pre: Option<&str>) -> bool {
    model == "llama" || matches!(pre, Some("llama-bpe" | "llama3" | "llama-v3" | "falcon3"))
}

/// Makes `encode(text, true)` put `bos` (its text and id) first; `None` turns BOS off.
pub fn set_bos(tokenizer: &mut Tokenizer, bos: Option<(&str, u32)>) -> Result<(), String> {
    let Some((text, id)) = bos else {
        tokenizer.with_post_processor(None::<PostProcessorWrapper>);
        return Ok(());
    };
    // Through serde: the string form of a template splits token names on ':'.
    let bos_piece = serde_json::json!({"SpecialToken": {"id": text, "type_id": 0}});
    let template = serde_json::json!({
        "single": [bos_piece, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [bos_piece, {"Sequence": {"id": "A", "type_id": 0}}, bos_piece, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {text: {"id": text, "ids": [id], "tokens": [text]}},
    });
    let processor: TemplateProcessing = serde_json::from_value(template).map_err(|e| e.to_string())?;
    tokenizer.with_post_processor(Some(PostProcessorWrapper::Template(processor)));
    Ok(())
}

/// The prompt's ids, with the model's special tokens when `add_special_tokens`. A text that
/// already starts with BOS (a chat template that renders `{{ bos_token }}`) keeps one BOS.
pub fn encode_prompt(tokenizer: &Tokenizer, text: &str, add_special_tokens: bool) -> tokenizers::Result<Vec<u32>> {
    let encoding = tokenizer.encode(text, add_special_tokens)?;
    let mut ids = encoding.get_ids().to_vec();
    let added_first = add_special_tokens && encoding.get_special_tokens_mask().first() == Some(&1);
    if added_first && ids.len() >= 2 && ids[0] == ids[1] && adds_bos(tokenizer) {
        ids.remove(0);
    }
    Ok(ids)
}

/// Whether encoding with special tokens adds any (kiln's post-processors add only BOS).
pub fn adds_bos(tokenizer: &Tokenizer) -> bool {
    use tokenizers::PostProcessor;
    tokenizer
        .get_post_processor()
        .is_some_and(|p| p.added_tokens(false) > 0)
}
