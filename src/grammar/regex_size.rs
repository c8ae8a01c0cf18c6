//! How far a regex's counted repetitions expand. `((a{1000}){1000}){1000}` is a few bytes of
//! text but a billion positions; the mask engine meets that only mid-generation, when a
//! step runs out of its per-token budget. Such a regex is refused before generation (400),
//! as Rust's `regex` crate refuses it by compiled size.

use regex_syntax::hir::{Hir, HirKind};

/// The most positions a regex may expand to.
/// (Measured on the default model: a regex of 10^5 positions generates; 10^6 exhausted the
/// per-token budget at the second token.)
pub const MAX_REGEX_POSITIONS: u64 = 100_000;

/// Positions `regex` expands to (an unbounded repetition counts its minimum plus one),
/// saturating; `None` when it does not parse (the compiler then says why).
pub fn expanded_positions(regex: &str) -> Option<u64> {
    let hir = regex_syntax::ParserBuilder::new().build().parse(regex).ok()?;
    Some(positions(&hir))
}

fn positions(hir: &Hir) -> u64 {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => 0,
        HirKind::Literal(literal) => literal.0.len() as u64,
        HirKind::Class(_) => 1,
        HirKind::Repetition(repetition) => {
            let count = repetition.max.unwrap_or(repetition.min.saturating_add(1)).max(1);
            positions(&repetition.sub).saturating_mul(u64::from(count))
        }
        HirKind::Capture(capture) => positions(&capture.sub),
        HirKind::Concat(parts) | HirKind::Alternation(parts) => {
            parts.iter().map(positions).fold(0, u64::saturating_add)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_counts_multiply_and_plain_regexes_stay_small() {
        assert_eq!(expanded_positions("((a{1000}){1000}){1000}"), Some(1_000_000_000));
        assert_eq!(expanded_positions("(ab|c){3}"), Some(9));
        assert_eq!(expanded_positions("[0-9]+-x*"), Some(4));
        assert!(expanded_positions(r"\d{3}-\d{4}").is_some_and(|n| n < 10));
        assert_eq!(expanded_positions("(unclosed"), None);
        let huge = "((x{4294967295}){4294967295}){4294967295}";
        assert_eq!(expanded_positions(huge), Some(u64::MAX), "saturates");
    }
}
