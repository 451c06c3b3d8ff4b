"""Which slot a request takes (llama-server's rule): the free slot whose last request shares the
longest prefix with the prompt, above the similarity threshold, else the least recently used one."""
import numpy as np
import pytest

from specserve import LLM, SamplingParams
from specserve.engine.request import Request
from specserve.engine.slot_choice import SlotChooser, common_prefix
from specserve.errors import OptionError


def arr(*tokens):
    return np.array(tokens, dtype=np.int64)


def test_common_prefix():
    assert common_prefix(arr(1, 2, 3), arr(1, 2, 4, 5)) == 2
    assert common_prefix(arr(1, 2), arr(1, 2, 3)) == 2
    assert common_prefix(arr(), arr(1)) == 0 and common_prefix(arr(7), arr(8)) == 0


def test_least_recently_used_first_and_the_highest_slot_among_unused():
    chooser = SlotChooser(3)
    assert chooser.choose([0, 1, 2], arr(5, 6)) == 2          # never used: the highest, as llama.cpp's `<=`
    chooser.release(2, arr(5, 6, 7))
    assert chooser.choose([0, 1, 2], arr(9, 9)) == 1          # unrelated prompt: the oldest, 0 and 1 tie
    chooser.release(1, arr(9, 9, 1))
    chooser.release(0, arr(8, 8, 8))
    assert chooser.choose([0, 1, 2], arr(4)) == 2             # slot 2 was released first


def test_the_most_similar_slot_above_the_threshold():
    chooser = SlotChooser(3, similarity=0.5)
    chooser.release(0, arr(1, 2, 3, 4))
    chooser.release(1, arr(1, 2, 9, 9))
    assert chooser.choose([0, 1, 2], arr(1, 2, 3, 4, 5, 6)) == 0            # 4/6 of the prompt
    assert chooser.choose([1, 2], arr(1, 2, 3, 4, 5, 6)) == 2               # 2/6 is not above 0.5: LRU
    assert chooser.choose([0, 1, 2], arr(1, 2, 7)) == 0                     # ties keep the first slot
    assert SlotChooser(3, similarity=0.0).choose([0, 1, 2], arr(1, 2, 3)) == 2


def test_a_conversation_comes_back_to_its_slot(tiny_qwen3):
    llm = LLM(tiny_qwen3, n_parallel=3)
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)

    def run(prompt):
        request = Request(f"r{len(prompt)}-{prompt[0]}", prompt, params)
        llm.service.run([request])
        return request.slot, prompt + list(map(int, request.output_ids))

    first, history = run([5, 6, 7, 8, 9, 10, 11, 12])
    other, _ = run([40, 41, 42, 43])
    again, _ = run(history + [13, 14])                   # the conversation continues
    assert (first, other, again) == (2, 1, 2)


def test_bad_threshold_is_an_error(tiny_qwen3):
    with pytest.raises(OptionError, match="slot-prompt-similarity"):
        LLM(tiny_qwen3, slot_prompt_similarity=1.5)
