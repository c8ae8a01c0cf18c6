//! Where a step's new tokens land: runs of consecutive cache slots, which the device cache
//! and the backends' cache writes share.

/// New tokens of one sequence that land in consecutive slots of one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotRun {
    /// Row of the first token in the step's flattened token batch.
    pub token_row: usize,
    pub first_slot: usize,
    pub len: usize,
}

/// Splits a sequence's new positions into runs of consecutive slots.
pub fn slot_runs(
    block_table: &[u32],
    block_size: usize,
    first_position: usize,
    count: usize,
    first_row: usize,
) -> Vec<SlotRun> {
    let mut runs = Vec::new();
    let mut done = 0;
    while done < count {
        let pos = first_position + done;
        let offset = pos % block_size;
        let len = (block_size - offset).min(count - done);
        let block = block_table[pos / block_size] as usize;
        runs.push(SlotRun {
            token_row: first_row + done,
            first_slot: block * block_size + offset,
            len,
        });
        done += len;
    }
    runs
}
