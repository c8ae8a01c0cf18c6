//! vLLM's `GET /tokenizer_info` (behind `--enable-tokenizer-info-endpoint`): the tokenizer's
//! configuration as Hugging Face's `tokenizer_config.json` spells it, plus `tokenizer_class`,
//! so a remote client (lm-eval's remote tokenizer) can tokenize and template as the server
//! does. Built once, when the model is prepared.

use actix_web::{HttpResponse, web};
use serde_json::{Map, Value, json};
use tokenizers::Tokenizer;

use super::AppState;

/// What the configuration is built from.
pub struct TokenizerConfigSource<'a> {
    pub tokenizer: &'a Tokenizer,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub add_bos: bool,
    pub chat_template: &'a str,
    pub max_model_len: usize,
}

/// The `tokenizer_config.json` fields kiln knows, and `tokenizer_class`.
pub fn tokenizer_config(source: &TokenizerConfigSource<'_>) -> Value {
    let text = |id: Option<u32>| id.and_then(|id| source.tokenizer.id_to_token(id));
    let mut added: Vec<_> = source.tokenizer.get_added_tokens_decoder().into_iter().collect();
    added.sort_by_key(|(id, _)| *id);
    let added_tokens_decoder: Map<String, Value> = added
        .into_iter()
        .map(|(id, token)| {
            let entry = json!({
                "content": token.content,
                "single_word": token.single_word,
                "lstrip": token.lstrip,
                "rstrip": token.rstrip,
                "normalized": token.normalized,
                "special": token.special,
            });
            (id.to_string(), entry)
        })
        .collect();
    json!({
        // kiln's tokenizer is a `tokenizers` one, as transformers' fast tokenizer wraps it.
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": text(source.bos),
        "eos_token": text(source.eos),
        "add_bos_token": source.add_bos,
        "add_eos_token": false,
        "model_max_length": source.max_model_len,
        "chat_template": source.chat_template,
        "added_tokens_decoder": added_tokens_decoder,
    })
}

pub async fn tokenizer_info(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(state.model.tokenizer_config.as_ref())
}
