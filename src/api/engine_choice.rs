//! Which engine of a data-parallel server takes a request: the one holding its longest cached
//! prefix, unless that engine is loaded well beyond the least loaded one, else the least
//! loaded (load in tokens, as the routers' token-load policies weigh replicas). Ties go round
//! in turn, so requests that arrive together on idle engines spread. A pure function over the
//! engines' facts, asked of every engine at submission.

/// What one engine says about a prompt at submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EngineFacts {
    /// Prompt tokens its prefix cache holds now (whole blocks).
    pub cached_tokens: u64,
    /// Tokens it must still hold or compute: the running batch's context plus the waiting
    /// requests' uncomputed tokens.
    pub load_tokens: u64,
}

/// How far beyond the least loaded engine a cache holder may be and still win: its load
/// may exceed the least one by this many tokens, or by the least one's own load (twice as
/// loaded), whichever is more. Below it the cached prefix saves more than the queue costs.
pub const PREFIX_LOAD_SLACK_TOKENS: u64 = 1024;

/// The index of the engine to use; `turn` breaks ties (the caller advances it per request).
/// `facts` is never empty.
pub fn choose(facts: &[EngineFacts], turn: usize) -> usize {
    let n = facts.len();
    let least = facts.iter().map(|f| f.load_tokens).min().unwrap_or(0);
    // Walk from `turn` so that equal candidates take turns.
    let order = (0..n).map(|k| (turn + k) % n);
    let best_cached = facts.iter().map(|f| f.cached_tokens).max().unwrap_or(0);
    if best_cached > 0 {
        let slack = least.max(PREFIX_LOAD_SLACK_TOKENS);
        let holder = order
            .clone()
            .filter(|&i| facts[i].cached_tokens == best_cached)
            .min_by_key(|&i| facts[i].load_tokens);
        if let Some(i) = holder
            && facts[i].load_tokens <= least + slack
        {
            return i;
        }
    }
    order.min_by_key(|&i| facts[i].load_tokens).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(list: &[(u64, u64)]) -> Vec<EngineFacts> {
        list.iter()
            .map(|&(cached_tokens, load_tokens)| EngineFacts {
                cached_tokens,
                load_tokens,
            })
            .collect()
    }

    #[test]
    fn idle_engines_take_turns() {
        let idle = facts(&[(0, 0), (0, 0), (0, 0)]);
        let picks: Vec<usize> = (0..6).map(|turn| choose(&idle, turn)).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn without_a_cached_prefix_the_least_loaded_wins() {
        let f = facts(&[(0, 500), (0, 20), (0, 300)]);
        for turn in 0..3 {
            assert_eq!(choose(&f, turn), 1);
        }
    }

    #[test]
    fn the_engine_holding_the_longest_prefix_wins_while_its_load_is_near_the_least() {
        let f = facts(&[(64, 900), (0, 0), (32, 0)]);
        assert_eq!(choose(&f, 1), 0, "900 tokens is within the 1024-token slack");
        let f = facts(&[(64, 2000), (0, 1000), (32, 1500)]);
        assert_eq!(choose(&f, 0), 0, "1000 beyond the least is within the slack");
    }

    #[test]
    fn a_cache_holder_loaded_well_beyond_the_least_loses_to_the_least_loaded() {
        let f = facts(&[(64, 5000), (0, 100), (0, 50)]);
        assert_eq!(choose(&f, 0), 2);
        // Twice the least load plus one is beyond it.
        let f = facts(&[(64, 4001), (0, 2000)]);
        assert_eq!(choose(&f, 0), 1);
        let f = facts(&[(64, 4000), (0, 2000)]);
        assert_eq!(choose(&f, 0), 0);
    }

    #[test]
    fn among_equal_prefix_holders_the_less_loaded_wins() {
        let f = facts(&[(64, 300), (64, 100), (0, 0)]);
        assert_eq!(choose(&f, 0), 1);
    }

    #[test]
    fn one_engine_is_always_chosen() {
        assert_eq!(choose(&facts(&[(0, 7)]), 5), 0);
        assert_eq!(choose(&facts(&[(16, 7)]), 5), 0);
    }
}
