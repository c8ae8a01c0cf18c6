//! Incremental detokenization for streaming (the vLLM/TGI offsets scheme).
//!
//! Decoding one token at a time is wrong for two reasons: byte-level BPE
//! tokens can be fragments of one UTF-8 character, and SentencePiece-style
//! decoders drop or add a leading space depending on what precedes a token.
//! So each step decodes a small window twice, `tokens[prefix..read]` (text
//! already emitted) and `tokens[prefix..]`, and emits the difference, holding
//! back while the window ends in U+FFFD (an incomplete character).
//!
//! Holding back is bounded: an incomplete UTF-8 character is at most 3 bytes, so
//! at most the last 3 tokens (each at least one byte) can still change. Once more
//! than [`MAX_HELD_TOKENS`] wait, all but the last few are settled and emitted
//! (an invalid byte as U+FFFD, as the full decode shows it), cut between characters. The window stays a
//! few tokens long, so a stream of lone continuation bytes costs linear work, not
//! a re-decode of everything since the last complete character on every token.
//!
//! The window starts with the last few prompt tokens rather than empty, so
//! the first generated token is decoded in context: with Llama/Mistral
//! tokenizers, `"▁world"` decodes to `"world"` on its own but `" world"`
//! after `"Hello"`, and OpenAI (and vLLM) return the latter.

use tokenizers::Tokenizer;

/// Prompt tokens kept as context (vLLM uses the same 5).
pub const PROMPT_CONTEXT_TOKENS: usize = 5;

/// Most tokens held back waiting for a character to complete; more than the 3 bytes an
/// incomplete UTF-8 character can have, each token carrying at least one.
pub const MAX_HELD_TOKENS: usize = 4;

/// Turns a stream of token ids into a stream of complete UTF-8 text.
#[derive(Debug, Clone)]
pub struct IncrementalDetokenizer {
    /// The decode window: context tokens, then not-yet-emitted ones.
    tokens: Vec<u32>,
    /// Start of the context whose text is decoded but not re-emitted.
    prefix_offset: usize,
    /// End of the tokens whose text has been emitted.
    read_offset: usize,
    /// Tokens decoded so far, all calls together: the work this stream has cost.
    decoded_tokens: usize,
}

impl IncrementalDetokenizer {
    /// Starts a stream after a prompt. Only the last
    /// [`PROMPT_CONTEXT_TOKENS`] of `prompt_ids_tail` are kept, so callers may
    /// pass the whole prompt; pass `&[]` to decode without context.
    pub fn new(prompt_ids_tail: &[u32]) -> Self {
        let start = prompt_ids_tail.len().saturating_sub(PROMPT_CONTEXT_TOKENS);
        let tokens = prompt_ids_tail[start..].to_vec();
        Self {
            read_offset: tokens.len(),
            tokens,
            prefix_offset: 0,
            decoded_tokens: 0,
        }
    }

    /// Adds one generated token and returns the text it completes (often
    /// empty: a partial character, or a skipped special token).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> String {
        self.tokens.push(id);
        let prefix_text = self.decode(tok, self.prefix_offset, self.read_offset);
        let new_text = self.decode(tok, self.prefix_offset, self.tokens.len());
        if new_text.len() > prefix_text.len() && !new_text.ends_with('\u{FFFD}') {
            let delta = new_suffix(&prefix_text, &new_text).to_owned();
            self.advance(self.tokens.len());
            return delta;
        }
        let held = self.tokens.len() - self.read_offset;
        if held <= MAX_HELD_TOKENS {
            return String::new();
        }
        // Only the last few tokens can still change: settle the rest, cut where the settled
        // text is how the whole decode begins (not inside a character, which would show as
        // U+FFFD alone). Characters are at most 4 bytes, so one of 4 cuts in a row is such.
        let latest_cut = self.tokens.len() - MAX_HELD_TOKENS;
        for settled_end in (self.read_offset + 1..=latest_cut).rev().take(4) {
            let settled_text = self.decode(tok, self.prefix_offset, settled_end);
            if !new_text.starts_with(&settled_text) {
                continue;
            }
            let delta = if settled_text.len() > prefix_text.len() {
                new_suffix(&prefix_text, &settled_text).to_owned()
            } else {
                String::new()
            };
            self.advance(settled_end);
            return delta;
        }
        String::new()
    }

    /// Flushes text still held back (e.g. a trailing incomplete character,
    /// which comes out as U+FFFD exactly as a full decode would show it).
    pub fn finish(&mut self, tok: &Tokenizer) -> String {
        let prefix_text = self.decode(tok, self.prefix_offset, self.read_offset);
        let new_text = self.decode(tok, self.prefix_offset, self.tokens.len());
        let delta = if new_text.len() > prefix_text.len() {
            new_suffix(&prefix_text, &new_text).to_owned()
        } else {
            String::new()
        };
        self.tokens.clear();
        self.prefix_offset = 0;
        self.read_offset = 0;
        delta
    }

    /// Tokens decoded so far over all calls (each push decodes a window of a few).
    pub fn decoded_tokens(&self) -> usize {
        self.decoded_tokens
    }

    /// The text emitted up to `read_end` becomes the next step's context.
    fn advance(&mut self, read_end: usize) {
        self.prefix_offset = self.read_offset;
        self.read_offset = read_end;
        self.tokens.drain(..self.prefix_offset);
        self.read_offset -= self.prefix_offset;
        self.prefix_offset = 0;
    }

    fn decode(&mut self, tok: &Tokenizer, start: usize, end: usize) -> String {
        self.decoded_tokens += end - start;
        decode(tok, &self.tokens[start..end])
    }
}

/// `new_text` minus the already-emitted `prefix_text`. Normally a plain
/// prefix; if a decoder rewrote the boundary (e.g. a context ending in a
/// partial character now completed), emit from the last common character.
fn new_suffix<'a>(prefix_text: &str, new_text: &'a str) -> &'a str {
    if let Some(rest) = new_text.strip_prefix(prefix_text) {
        return rest;
    }
    let common = prefix_text
        .char_indices()
        .zip(new_text.chars())
        .find(|((_, a), b)| a != b)
        .map_or(prefix_text.len().min(new_text.len()), |((i, _), _)| i);
    &new_text[common..]
}

/// Decodes with special tokens skipped; a decode failure (an id the
/// tokenizer cannot map) yields no text rather than failing the stream.
fn decode(tok: &Tokenizer, ids: &[u32]) -> String {
    tok.decode(ids, true).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "detokenization failed");
        String::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::AddedToken;
    use tokenizers::models::bpe::{BPE, Vocab};
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;

    /// GPT-2 style byte-level BPE: the 256 byte characters plus a few merges,
    /// so some tokens span several bytes and multi-byte chars span tokens.
    fn tokenizer() -> Tokenizer {
        let mut chars: Vec<char> = ByteLevel::alphabet().into_iter().collect();
        chars.sort_unstable();
        let mut vocab: Vocab = chars
            .iter()
            .enumerate()
            .map(|(i, c)| (c.to_string(), i as u32))
            .collect();
        let merges: Vec<(String, String)> = [("h", "e"), ("l", "l"), ("he", "ll"), ("Ġ", "w")]
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        for (a, b) in &merges {
            let next = vocab.len() as u32;
            vocab.insert(format!("{a}{b}"), next);
        }
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .expect("valid bpe");
        let mut tok = Tokenizer::new(bpe);
        tok.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
        tok.with_decoder(Some(ByteLevel::default()));
        tok.add_special_tokens(&[AddedToken::from("<|eot|>", true)]);
        tok
    }

    fn encode(tok: &Tokenizer, text: &str) -> Vec<u32> {
        tok.encode(text, false).expect("encodes").get_ids().to_vec()
    }

    fn stream(tok: &Tokenizer, prompt: &[u32], ids: &[u32]) -> (Vec<String>, String) {
        let mut d = IncrementalDetokenizer::new(prompt);
        let mut pieces: Vec<String> = ids.iter().map(|&id| d.push(tok, id)).collect();
        pieces.push(d.finish(tok));
        let joined = pieces.concat();
        (pieces, joined)
    }

    #[test]
    fn merges_are_used() {
        let tok = tokenizer();
        assert_eq!(encode(&tok, "hello").len(), 2); // "hell" + "o"
    }

    #[test]
    fn multibyte_char_is_held_until_complete() {
        let tok = tokenizer();
        let ids = encode(&tok, "café 🙂!");
        assert!(ids.len() > "café 🙂!".chars().count(), "chars split across tokens");
        let (pieces, joined) = stream(&tok, &[], &ids);
        assert_eq!(joined, "café 🙂!");
        assert!(pieces.iter().all(|p| !p.contains('\u{FFFD}')), "{pieces:?}");
        assert!(pieces.contains(&"é".to_owned()), "{pieces:?}");
        assert!(pieces.contains(&" 🙂".to_owned()) || pieces.contains(&"🙂".to_owned()));
    }

    #[test]
    fn prompt_context_and_special_tokens() {
        let tok = tokenizer();
        let prompt = encode(&tok, "say hello");
        let eot = tok.token_to_id("<|eot|>").expect("special token");
        let mut ids = encode(&tok, " world, ünïcode");
        ids.push(eot);
        let (_, joined) = stream(&tok, &prompt, &ids);
        assert_eq!(joined, " world, ünïcode");
        assert_eq!(joined, tok.decode(&ids, true).unwrap());
    }

    #[test]
    fn truncated_char_is_flushed_as_replacement() {
        let tok = tokenizer();
        let ids = encode(&tok, "a🙂");
        let cut = &ids[..ids.len() - 1];
        let (pieces, joined) = stream(&tok, &[], cut);
        assert_eq!(joined, tok.decode(cut, true).unwrap());
        assert!(pieces.last().is_some_and(|p| p.ends_with('\u{FFFD}')));
    }

    /// Tiny deterministic PRNG (xorshift) so the property test needs no deps.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn concatenated_pushes_equal_full_decode() {
        let tok = tokenizer();
        let alphabet = [
            "a", "h", "e", "ll", "o", " ", "w", "é", "ü", "漢", "🙂", "👍🏽", "\n", "!",
        ];
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..300 {
            let len = rng.below(20);
            let text: String = (0..len).map(|_| alphabet[rng.below(alphabet.len())]).collect();
            let prompt_text: String = (0..rng.below(6)).map(|_| alphabet[rng.below(alphabet.len())]).collect();
            let ids = encode(&tok, &text);
            let (pieces, joined) = stream(&tok, &encode(&tok, &prompt_text), &ids);
            assert_eq!(joined, text, "prompt {prompt_text:?}");
            assert_eq!(joined, tok.decode(&ids, true).unwrap());
            assert!(pieces.iter().all(|p| !p.contains('\u{FFFD}')));
        }
        // Arbitrary byte tokens, including invalid UTF-8: still the full decode.
        for _ in 0..300 {
            let ids: Vec<u32> = (0..rng.below(24)).map(|_| rng.below(256) as u32).collect();
            let (_, joined) = stream(&tok, &[], &ids);
            assert_eq!(joined, tok.decode(&ids, true).unwrap(), "{ids:?}");
        }
        // Mostly continuation and lead bytes, so characters stay incomplete for long runs.
        for _ in 0..300 {
            let ids: Vec<u32> = (0..rng.below(40))
                .map(|_| [0x80, 0x9f, 0xbf, 0xc3, 0xe2, 0xf0, b'a'][rng.below(7)] as u32)
                .map(|byte| byte_token(&tok, byte as u8))
                .collect();
            let (_, joined) = stream(&tok, &[], &ids);
            assert_eq!(joined, tok.decode(&ids, true).unwrap(), "{ids:?}");
        }
    }

    /// The id of the token that is exactly `byte`: GPT-2's byte-to-character map (printable
    /// bytes stand for themselves, the rest for 256 onwards in order).
    fn byte_token(tok: &Tokenizer, byte: u8) -> u32 {
        let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
        let ch = if printable(byte) {
            char::from(byte)
        } else {
            char::from_u32(256 + (0..byte).filter(|&b| !printable(b)).count() as u32).expect("a char")
        };
        tok.token_to_id(&ch.to_string()).expect("every byte is a token")
    }

    #[test]
    fn a_long_run_of_lone_continuation_bytes_costs_linear_decode_work() {
        let tok = tokenizer();
        let lone = byte_token(&tok, 0x80);
        let n = 2000;
        let mut d = IncrementalDetokenizer::new(&[]);
        let mut emitted = 0;
        let mut text = String::new();
        for i in 1..=n {
            let piece = d.push(&tok, lone);
            emitted += usize::from(!piece.is_empty());
            text.push_str(&piece);
            assert!(
                text.chars().count() + MAX_HELD_TOKENS >= i,
                "held back more than {MAX_HELD_TOKENS} at {i}"
            );
        }
        text.push_str(&d.finish(&tok));
        assert_eq!(text, tok.decode(&vec![lone; n], true).unwrap());
        assert!(emitted >= n - MAX_HELD_TOKENS, "emitted as it went: {emitted} pieces");
        // A few tokens a push (the window is at most context + settled + held); a window
        // growing since the last complete character would decode about n * n tokens.
        let work = d.decoded_tokens();
        assert!(work <= 16 * n, "decoded {work} tokens for {n} pushes");
    }
}
