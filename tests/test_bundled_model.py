"""The bundled stdlib-coder model: loading, tokenizer, chat template and data split."""
from __future__ import annotations

import json

import jinja2
import pytest
import torch
from jinja2.sandbox import ImmutableSandboxedEnvironment
from safetensors import safe_open

from specserve.bundled import STDLIB_CODER
from specserve.models.transformer import CausalLM
from specserve.train import corpus
from specserve.train.tokenizer_train import CHAT_TEMPLATE

BUNDLED = STDLIB_CODER
SNIPPET = 'def fibonacci(n):\n    """Return the n-th number."""\n    if n < 2:\n        return n\n'
TEXTS = [
    "",
    SNIPPET,
    "x\r\n\ty = 'caf\u00e9'  # na\u00efve \u2014 \u65e5\u672c\u8a9e \U0001f40d\n",
    "  leading and trailing spaces  ",
    "\x00\x01\x7f \u00a0\u200b\ufeff\U0010ffff",
    "word <|endoftext|> inside <|mask|> text",
]


@pytest.fixture(scope="module")
def hf_tokenizer():
    import transformers
    return transformers.AutoTokenizer.from_pretrained(BUNDLED)


@pytest.fixture(scope="module")
def raw_tokenizer():
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(BUNDLED / "tokenizer.json"))


def test_folder_contents_and_size():
    names = {p.name for p in BUNDLED.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json", "README.md"} <= names
    assert sum(p.stat().st_size for p in BUNDLED.iterdir()) <= 30e6
    config = json.loads((BUNDLED / "config.json").read_text())
    assert config["model_type"] == "qwen3" and config["architectures"] == ["Qwen3ForCausalLM"]
    assert config["torch_dtype"] == config["dtype"] == "bfloat16" and config["tie_word_embeddings"]
    generation = json.loads((BUNDLED / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 0 and generation.get("bos_token_id") is None
    with safe_open(str(BUNDLED / "model.safetensors"), framework="pt") as handle:
        keys = list(handle.keys())
        assert all(handle.get_slice(k).get_dtype() == "BF16" for k in keys)
    assert "lm_head.weight" not in keys


def test_transformers_and_specserve_logits_agree(hf_tokenizer):
    import transformers
    hf = transformers.AutoModelForCausalLM.from_pretrained(BUNDLED, dtype=torch.float32).eval()
    ours = CausalLM.from_pretrained(BUNDLED, dtype="float32")   # served as bfloat16 by default
    assert ours.dtype == torch.float32
    assert CausalLM.from_pretrained(BUNDLED).dtype == torch.bfloat16
    assert sum(p.numel() for p in ours.parameters()) <= 6_000_000
    ids = torch.tensor([hf_tokenizer(SNIPPET)["input_ids"]])
    with torch.no_grad():
        expected = hf(ids).logits[0].float()
        hidden, _ = ours.forward_full(ids)
        got = ours.logits(hidden[0])
    assert got.shape == expected.shape == (ids.shape[1], 4096)
    assert (got - expected).abs().max().item() < 1e-4


def test_trained_model_predicts_code():
    # The bundled weights must be trained, not random: a random model scores about
    # ln(4096) = 8.3 nats per token on this snippet, the trained one about 3.5.
    model = CausalLM.from_pretrained(BUNDLED)
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(BUNDLED / "tokenizer.json"))
    ids = torch.tensor([tok.encode(SNIPPET).ids])
    with torch.no_grad():
        hidden, _ = model.forward_full(ids)
        logits = model.logits(hidden[0, :-1])
    loss = torch.nn.functional.cross_entropy(logits, ids[0, 1:])
    assert loss.item() < 5.0


@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_round_trip(text, raw_tokenizer, hf_tokenizer):
    ids = raw_tokenizer.encode(text, add_special_tokens=False).ids
    assert raw_tokenizer.decode(ids, skip_special_tokens=False) == text
    hf_ids = hf_tokenizer(text)["input_ids"]
    assert hf_ids == ids                                   # no bos/eos added
    assert hf_tokenizer.decode(hf_ids) == text


def test_special_tokens(raw_tokenizer, hf_tokenizer):
    assert raw_tokenizer.get_vocab_size() == 4096
    assert raw_tokenizer.token_to_id("<|endoftext|>") == 0
    assert raw_tokenizer.token_to_id("<|mask|>") == 1
    assert hf_tokenizer.eos_token_id == hf_tokenizer.pad_token_id == 0
    assert hf_tokenizer.mask_token_id == 1 and hf_tokenizer.mask_token == "<|mask|>"
    assert hf_tokenizer.bos_token is None
    # The mask token has its own embedding row, distinct from eos and from the byte tokens.
    with safe_open(str(BUNDLED / "model.safetensors"), framework="pt") as handle:
        embed = handle.get_tensor("model.embed_tokens.weight").float()
    assert embed.shape == (4096, 256)
    assert embed[1].abs().sum() > 0
    assert not torch.equal(embed[1], embed[0])
    # Ordinary text never produces it.
    assert 1 not in raw_tokenizer.encode(SNIPPET + "mask <mask> |mask|").ids


def render(template: str, messages, env: jinja2.Environment, add_generation_prompt: bool = False) -> str:
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt)


CHAT_CASES = [
    ([], ""),
    ([{"role": "system", "content": "Utilities."}, {"role": "user", "content": "def add(a, b):"}],
     "# Utilities.\ndef add(a, b):"),
    ([{"role": "system", "content": "line one\n\nline three\n"}, {"role": "user", "content": "x = 1\n"}],
     "# line one\n# \n# line three\nx = 1\n"),
    ([{"role": "user", "content": "def f():"}, {"role": "assistant", "content": "    return 1"}],
     "def f():\n    return 1"),
    ([{"role": "user", "content": "a = 1\n"}, {"role": "assistant", "content": "b = 2\n"},
      {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}],
     "a = 1\nb = 2\nc\nd"),
]


@pytest.mark.parametrize("messages,expected", CHAT_CASES)
def test_chat_template(messages, expected, hf_tokenizer):
    stored = json.loads((BUNDLED / "tokenizer_config.json").read_text())["chat_template"]
    assert stored == CHAT_TEMPLATE
    plain = jinja2.Environment()
    sandbox = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    for add in (False, True):
        assert render(stored, messages, plain, add) == expected
        assert render(stored, messages, sandbox, add) == expected
        if messages:
            assert hf_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add) == expected


def test_split_is_deterministic_and_exclusive():
    files = corpus.list_files()
    assert files == sorted(files) and len(set(files)) == len(files)
    assert not any("site-packages" in f.split("/") for f in files)
    train, held = corpus.split_files(files)
    assert set(train).isdisjoint(held) and len(train) + len(held) == len(files)
    assert corpus.split_files(files) == (train, held)
    assert 0.02 < len(held) / len(files) < 0.08
    # The rule depends on the relative path only.
    assert corpus.is_held_out("os.py") == (int(__import__("hashlib").sha1(b"os.py").hexdigest(), 16) % 20 == 0)


def test_loading_skips_the_random_init_and_its_imports():
    """Weights built on the meta device to take a checkpoint are not randomly initialised first: that init
    imported torch._dynamo, about a second of every load (here with every drafter that has an embedding
    of its own); a model built off the meta device is initialised."""
    import subprocess
    import sys
    code = ("import sys\nfrom specserve import LLM\nfrom specserve.bundled import STDLIB_CODER_DRAFTERS as D\n"
            "for t in ('draft-dspark', 'draft-eagle3'):\n    LLM(str(D[t][0].parent / 'stdlib-coder'), spec_type=t, "
            "draft_model=str(D[t][0]))\nprint('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[-1] == "False"
    from specserve.models.transformer import new_embedding
    assert new_embedding(64, 8).weight.std() > 0.5
