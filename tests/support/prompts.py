"""Token-id prompts the engine tests share. Each kind exercises something different: repeats (n-gram
drafts hit), a cycle, one token over and over, a long run (prompt chunks), digits of pi (little to
copy) and a two-token prompt (drafting starts from almost nothing)."""
import numpy as np

REPEATS = [5, 9, 12, 5, 9, 12, 5, 9, 12, 40, 41, 42, 5, 9, 12, 5, 9]
CYCLE = [100, 101, 102, 103, 104, 105, 106, 107, 100, 101, 102, 103]
SAME = [7] * 30
RUN = list(range(60, 110))
PI = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2, 7, 9, 5]
TWO = [250, 251]

# the batch for lossless checks: every kind, lengths 2..50 (prompt chunks and decode rows mixed)
ENGINE_PROMPTS = [REPEATS, CYCLE, SAME, RUN, PI, TWO]
# for the n-gram methods: histories long enough to hold repeats
NGRAM_PROMPTS = [REPEATS, CYCLE, SAME, PI * 2, TWO]
# for the block drafters (tiny drafters reproduce the target's bigrams on these)
BLOCK_PROMPTS = [REPEATS, CYCLE, SAME, RUN, TWO]
# short prompts for the model drafters (tiny heads, many slots)
DRAFTER_PROMPTS = [[5, 9, 12, 5, 9, 12, 5, 9], list(range(60, 90)), [7] * 12, PI[:8], TWO]
# three prompts for the kernel-variant checks (KV cache types, quantization)
SMALL_PROMPTS = [[5, 9, 12, 5, 9, 12, 40], [7, 7, 8, 100, 3], list(range(20, 60))]


def arr(tokens) -> np.ndarray:
    """Token ids as the proposers see them."""
    return np.array(tokens, dtype=np.int64)
