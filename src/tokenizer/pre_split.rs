//! How a byte-level BPE vocabulary splits text before merging, per llama.cpp's
//! `tokenizer.ggml.pre`: the regexes are llama.cpp's (src/llama-vocab.cpp), assembled as the
//! Hugging Face `tokenizer.json` of each model family does, so ids match the HF tokenizer.

use tokenizers::SplitDelimiterBehavior;
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};

/// GPT-2's split, inside Hugging Face's `ByteLevel` pre-tokenizer (`use_regex: true`).
const GPT2: Step = Step::Gpt2ByteLevel;

/// Llama 3's split (tiktoken cl100k style: up to three digits together).
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's: Llama 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen 3.5's: Qwen2's with combining marks kept in words.
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

// DeepSeek's splits are written with escapes: some of their characters (U+1FD3) have NFC
// decompositions, and an editor that normalises would turn a range into an empty one.
/// Runs of CJK ideographs and Hangul.
const DEEPSEEK_CJK: &str = "[\u{4e00}-\u{9fa5}\u{800}-\u{4e00}\u{ac00}-\u{d7ff}]+";

const DEEPSEEK_LLM: [&str; 6] = [
    "[\r\n]",
    "\\s?[A-Za-z\u{b5}\u{c0}-\u{d6}\u{d8}-\u{f6}\u{f8}-\u{1ba}\u{1bc}-\u{1bf}\u{1c4}-\u{293}\u{295}-\u{2af}\u{370}-\u{373}\u{376}\u{377}\u{37b}-\u{37d}\u{37f}\u{386}\u{388}-\u{38a}\u{38c}\u{38e}-\u{3a1}\u{3a3}-\u{3f5}\u{3f7}-\u{481}\u{48a}-\u{52f}\u{531}-\u{556}\u{10a0}-\u{10c5}\u{13a0}-\u{13f5}\u{13f8}-\u{13fd}\u{1c90}-\u{1cba}\u{1cbd}-\u{1cbf}\u{1d00}-\u{1d2b}\u{1d6b}-\u{1d77}\u{1d79}-\u{1d9a}\u{1e00}-\u{1f15}\u{1f18}-\u{1f1d}\u{1f20}-\u{1f45}\u{1f48}-\u{1f4d}\u{1f50}-\u{1f57}\u{1f59}\u{1f5b}\u{1f5d}\u{1f5f}-\u{1f7d}\u{1f80}-\u{1fb4}\u{1fb6}-\u{1fbc}\u{1fbe}\u{1fc2}-\u{1fc4}\u{1fc6}-\u{1fcc}\u{1fd0}-\u{1fd3}\u{1fd6}-\u{1fdb}\u{1fe0}-\u{1fec}\u{1ff2}-\u{1ff4}\u{1ff6}-\u{1ffc}\u{2102}\u{2107}\u{210a}-\u{2113}\u{2115}\u{2119}-\u{211d}\u{2124}\u{2126}\u{2128}\u{212a}-\u{212d}\u{212f}-\u{2134}\u{2139}\u{213c}-\u{213f}\u{2145}-\u{2149}\u{214e}\u{2183}\u{2184}\u{2c00}-\u{2c7b}\u{2c7e}-\u{2ce4}\u{2ceb}-\u{2cee}\u{2cf2}\u{2cf3}\u{a640}-\u{a66d}\u{a680}-\u{a69b}\u{a722}-\u{a76f}\u{a771}-\u{a787}\u{a78b}-\u{a78e}\u{ab70}-\u{abbf}\u{fb00}-\u{fb06}\u{fb13}-\u{fb17}\u{ff21}-\u{ff3a}\u{ff41}-\u{ff5a}\u{10400}-\u{1044f}\u{104b0}-\u{104d3}\u{104d8}-\u{104fb}\u{10c80}-\u{10cb2}\u{10cc0}-\u{10cf2}\u{118a0}-\u{118df}\u{1e900}-\u{1e943}]+",
    "\\s?[!-/:-~\u{ff01}-\u{ff0f}\u{ff1a}-\u{ff5e}\u{2018}-\u{201f}\u{3000}-\u{3002}]+",
    r"\s+$",
    DEEPSEEK_CJK,
    r"\p{N}+",
];

const DEEPSEEK_CODER: [&str; 5] = ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", DEEPSEEK_CJK, r"\p{N}"];

const FALCON: [&str; 3] = [
    r"[\p{P}\$\+<=>\^~\|`]+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    "[0-9][0-9][0-9]",
];

/// One stage of a pre-tokenizer.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Isolate each match of a regex.
    Regex(&'static str),
    /// Every digit on its own.
    SingleDigits,
    /// GPT-2's regex and the byte-to-unicode map in one (ends the sequence).
    Gpt2ByteLevel,
}

/// A family of pre-tokenizers: its `tokenizer.ggml.pre` names and how it splits.
struct Family {
    names: &'static [&'static str],
    /// Unicode NFC normalisation before splitting (Qwen2, GPT-NeoX/MPT).
    nfc: bool,
    /// A whole pre-token found in the vocabulary is taken as is (Llama 3).
    ignore_merges: bool,
    steps: &'static [Step],
}

const FAMILIES: &[Family] = &[
    Family {
        names: &["gpt-2", "phi-2", "olmo"],
        nfc: false,
        ignore_merges: false,
        steps: &[GPT2],
    },
    Family {
        names: &["mpt"],
        nfc: true,
        ignore_merges: false,
        steps: &[GPT2],
    },
    Family {
        names: &["smollm", "starcoder", "refact", "codeshell", "exaone", "minerva-7b"],
        nfc: false,
        ignore_merges: false,
        steps: &[Step::SingleDigits, GPT2],
    },
    Family {
        names: &["command-r"],
        nfc: true,
        ignore_merges: false,
        steps: &[Step::SingleDigits, GPT2],
    },
    Family {
        names: &["llama-bpe", "llama3", "llama-v3", "falcon3"],
        nfc: false,
        ignore_merges: true,
        steps: &[Step::Regex(LLAMA3)],
    },
    Family {
        names: &["dbrx", "smaug-bpe"],
        nfc: false,
        ignore_merges: false,
        steps: &[Step::Regex(LLAMA3)],
    },
    Family {
        names: &["qwen2", "deepseek-r1-qwen"],
        nfc: true,
        ignore_merges: false,
        steps: &[Step::Regex(QWEN2)],
    },
    Family {
        names: &["qwen35"],
        nfc: false,
        ignore_merges: false,
        steps: &[Step::Regex(QWEN35)],
    },
    Family {
        names: &["deepseek-llm"],
        nfc: false,
        ignore_merges: false,
        steps: &[
            Step::Regex(DEEPSEEK_LLM[0]),
            Step::Regex(DEEPSEEK_LLM[1]),
            Step::Regex(DEEPSEEK_LLM[2]),
            Step::Regex(DEEPSEEK_LLM[3]),
            Step::Regex(DEEPSEEK_LLM[4]),
            Step::Regex(DEEPSEEK_LLM[5]),
        ],
    },
    Family {
        names: &["deepseek-coder"],
        nfc: false,
        ignore_merges: false,
        steps: &[
            Step::Regex(DEEPSEEK_CODER[0]),
            Step::Regex(DEEPSEEK_CODER[1]),
            Step::Regex(DEEPSEEK_CODER[2]),
            Step::Regex(DEEPSEEK_CODER[3]),
            Step::Regex(DEEPSEEK_CODER[4]),
        ],
    },
    Family {
        names: &["falcon"],
        nfc: false,
        ignore_merges: false,
        steps: &[Step::Regex(FALCON[0]), Step::Regex(FALCON[1]), Step::Regex(FALCON[2])],
    },
];

/// The pre-tokenization of one `tokenizer.ggml.pre`, ready to install in a tokenizer.
pub struct PreSplit {
    pub normalizer: Option<NormalizerWrapper>,
    pub pre_tokenizer: PreTokenizerWrapper,
    pub ignore_merges: bool,
}

/// Every `tokenizer.ggml.pre` kiln can tokenize, comma-separated (for error messages).
pub fn supported_pre() -> String {
    FAMILIES
        .iter()
        .flat_map(|f| f.names.iter().copied())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The split for `pre`; `None` when kiln does not know it (the caller refuses the model).
pub fn pre_split(pre: &str) -> Option<Result<PreSplit, tokenizers::Error>> {
    let family = FAMILIES.iter().find(|f| f.names.contains(&pre))?;
    Some(build(family))
}

fn build(family: &Family) -> Result<PreSplit, tokenizers::Error> {
    let mut stages = Vec::with_capacity(family.steps.len() + 1);
    for step in family.steps {
        stages.push(match step {
            Step::Regex(regex) => PreTokenizerWrapper::Split(Split::new(
                SplitPattern::Regex((*regex).to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )?),
            Step::SingleDigits => PreTokenizerWrapper::Digits(Digits::new(true)),
            Step::Gpt2ByteLevel => PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true)),
        });
    }
    if !matches!(family.steps.last(), Some(Step::Gpt2ByteLevel)) {
        stages.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, false)));
    }
    let pre_tokenizer = if stages.len() == 1 {
        stages.remove(0)
    } else {
        PreTokenizerWrapper::Sequence(Sequence::new(stages))
    };
    Ok(PreSplit {
        normalizer: family.nfc.then(|| NormalizerWrapper::NFC(NFC)),
        pre_tokenizer,
        ignore_merges: family.ignore_merges,
    })
}
