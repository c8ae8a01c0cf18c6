//! Stop-string matching over streamed text.
//!
//! A stop string can straddle two detokenized deltas, so text that might be
//! the start of one is held back until it either completes a stop string
//! (then the text is cut at the stop string's start) or cannot any more
//! (then it is emitted). Only the longest suffix that is a proper prefix of
//! some stop string is held.
//!
//! Generation stops at the first stop string to *complete* (earliest end, as
//! if text arrived one character at a time; ties go to the longest), not the
//! one that starts first: with stops `["b", "abc"]`, `"ab"` stops at `"b"`,
//! since `"abc"` could only complete later. This rule makes the output
//! independent of how the text is chunked: no occurrence can start in text
//! already emitted, because that text was not the start of any stop string.

/// What one [`StopStringMatcher::push`] produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StopOutcome {
    /// Text safe to send to the client now.
    pub emit: String,
    /// A stop string matched: generation should end; later pushes emit nothing.
    pub stopped: bool,
}

/// Cuts streamed text before the first stop string to complete; the stop
/// string itself is not included (OpenAI's behaviour).
#[derive(Debug, Clone, Default)]
pub struct StopStringMatcher {
    stops: Vec<String>,
    /// Held-back tail: shorter than the longest stop string.
    held: String,
    stopped: bool,
}

impl StopStringMatcher {
    /// Empty stop strings are ignored (they would match before any text).
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
            stopped: false,
        }
    }

    /// True once a stop string has matched.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Emits `text` without looking for stop strings in it (vLLM's `min_tokens`): nothing is
    /// held back then, so matching resumes with the next [`push`](Self::push).
    pub fn pass(&mut self, text: &str) -> StopOutcome {
        if self.stopped {
            return self.push(text);
        }
        let mut emit = std::mem::take(&mut self.held);
        emit.push_str(text);
        StopOutcome {
            emit,
            stopped: self.stopped,
        }
    }

    /// Feeds the next piece of generated text.
    pub fn push(&mut self, text: &str) -> StopOutcome {
        if self.stopped {
            return StopOutcome {
                emit: String::new(),
                stopped: true,
            };
        }
        if self.stops.is_empty() {
            return StopOutcome {
                emit: text.to_owned(),
                stopped: false,
            };
        }
        let mut buf = std::mem::take(&mut self.held);
        buf.push_str(text);

        // First stop string to complete; a stop's first occurrence is its
        // earliest end. Ties on the end go to the earliest start (longest).
        let first = self
            .stops
            .iter()
            .filter_map(|s| buf.find(s.as_str()).map(|at| (at + s.len(), at)))
            .min();
        if let Some((_, at)) = first {
            buf.truncate(at);
            self.stopped = true;
            return StopOutcome {
                emit: buf,
                stopped: true,
            };
        }

        let hold_from = self.hold_start(&buf);
        self.held = buf.split_off(hold_from);
        StopOutcome {
            emit: buf,
            stopped: false,
        }
    }

    /// Returns the held-back text at the end of generation (nothing after a
    /// stop: everything from the stop string on is dropped).
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Byte index where the longest suffix of `buf` that is a proper prefix
    /// of some stop string begins (`buf.len()` if there is none).
    fn hold_start(&self, buf: &str) -> usize {
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let earliest = buf.len().saturating_sub(longest.saturating_sub(1));
        buf.char_indices()
            .map(|(i, _)| i)
            .filter(|&i| i >= earliest)
            .find(|&i| {
                let tail = &buf[i..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(buf.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], chunks: &[&str]) -> (String, bool) {
        let mut m = StopStringMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        let mut stopped = false;
        for c in chunks {
            let o = m.push(c);
            out.push_str(&o.emit);
            stopped |= o.stopped;
        }
        out.push_str(&m.flush());
        (out, stopped)
    }

    #[test]
    fn cuts_before_the_stop_string() {
        assert_eq!(run(&["END"], &["hello EN", "D and more"]), ("hello ".into(), true));
        assert_eq!(run(&["\n\n"], &["a\n", "\nb"]), ("a".into(), true));
    }

    #[test]
    fn holds_back_only_possible_prefixes() {
        let mut m = StopStringMatcher::new(vec!["STOP".into()]);
        let o = m.push("abcST");
        assert_eq!(o.emit, "abc");
        let o = m.push("x");
        assert_eq!(o.emit, "STx");
        assert!(!o.stopped);
        assert_eq!(m.flush(), "");
    }

    #[test]
    fn flush_returns_a_partial_match_at_the_end() {
        assert_eq!(run(&["STOP"], &["abc", "STO"]), ("abcSTO".into(), false));
    }

    #[test]
    fn first_completed_stop_wins() {
        assert_eq!(run(&["bcd", "cd", "zz"], &["abcde"]), ("a".into(), true));
        assert_eq!(run(&["b", "abé"], &["aabé"]), ("aa".into(), true));
        assert_eq!(run(&["b", "abé"], &["aa", "bé"]), ("aa".into(), true));
        assert_eq!(run(&["xyz", "y"], &["axy", "z"]), ("ax".into(), true));
    }

    #[test]
    fn nothing_after_stop_and_no_stops_passthrough() {
        let mut m = StopStringMatcher::new(vec!["x".into()]);
        assert!(m.push("axb").stopped);
        assert_eq!(
            m.push("more"),
            StopOutcome {
                emit: String::new(),
                stopped: true
            }
        );
        assert_eq!(m.flush(), "");
        assert_eq!(run(&[""], &["a", "b"]), ("ab".into(), false));
    }

    #[test]
    fn multibyte_stop_strings() {
        assert_eq!(run(&["é!"], &["caf", "é", "!x"]), ("caf".into(), true));
        assert_eq!(run(&["🙂🙂"], &["a🙂", "b"]), ("a🙂b".into(), false));
    }

    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    /// Any chunking gives the same result as one push; small alphabets make
    /// overlapping and self-similar stop strings ("aab" in "aaab") common.
    #[test]
    fn chunking_does_not_change_the_output() {
        let alphabet = ["a", "b", "c", "é", "🙂"];
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        for case in 0..3000 {
            let word = |rng: &mut Rng, max: usize| -> String {
                (0..max).map(|_| alphabet[rng.below(alphabet.len())]).collect()
            };
            let stops: Vec<String> = (0..rng.below(4))
                .map(|_| {
                    let len = 1 + rng.below(4);
                    word(&mut rng, len)
                })
                .collect();
            let len = rng.below(30);
            let text = word(&mut rng, len);
            let stop_refs: Vec<&str> = stops.iter().map(String::as_str).collect();
            let whole = run(&stop_refs, &[&text]);
            // Expected, computed directly.
            let cut = stops
                .iter()
                .filter_map(|s| text.find(s.as_str()).map(|at| (at + s.len(), at)))
                .min();
            let expected = (cut.map_or(text.clone(), |(_, at)| text[..at].to_owned()), cut.is_some());
            assert_eq!(whole, expected, "case {case}: {stops:?} {text:?}");

            let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
            let mut chunks = Vec::new();
            let mut start = 0;
            for &b in &bounds {
                if b > start && rng.below(3) == 0 {
                    chunks.push(&text[start..b]);
                    start = b;
                }
            }
            chunks.push(&text[start..]);
            assert_eq!(run(&stop_refs, &chunks), expected, "case {case}: {stops:?} {chunks:?}");
        }
    }
}
