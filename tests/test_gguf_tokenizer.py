"""GGUF tokenizers: a byte-level BPE written to GGUF metadata and rebuilt from it encodes and decodes
every test string exactly as the Hugging Face tokenizer does, for each pre-tokenizer GGUF names
(gpt-2, qwen2, llama-bpe), with the same special tokens, BOS handling and chat template; anything
else is refused by name."""
import json

import gguf
import pytest
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from support.models import CHATML, SPECIAL, TRAINING_TEXT
from specserve.errors import ModelLoadError
from specserve.models.gguf_file import GgufFile
from specserve.models.gguf_tokenizer import LLAMA3_REGEX, QWEN2_REGEX, tokenizer_entries, tokenizer_from_gguf
from specserve.models.gguf_writer import GgufOut
from specserve.models.tokenizer import Tokenizer as SpecTokenizer

VOCAB = 400
TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "class Stack:\n\tdef push(self, x):\n\t\tself.items.append(x)  # trailing   \n\n\n",
    "   leading spaces, then\r\nWindows lines\r\n",
    "I've been 'told he's there, 'RE you sure? 'M not sure I'LL make it, 'D you like some tea? We'Ve a'lL",
    "3 33 333 3333 33333 333333 3333333 3.3 3..3 3...3 1e-6 0x1F",
    "Zoë naïve café — ünïcödé ✓ нещо на Български 我想在apple工作1314151天～",
    "🚀 (normal) 😶\u200d🌫️ (emoji sequence) ✅ 🦙🦙",
    "e\u0301 vs \u00e9 (decomposed and composed)",
    "<|endoftext|>text between<|mask|>special tokens<|im_start|>user\nhi<|im_end|>",
    "------======= '''''' ``````` \"\"\"\" ...... !!!!!! ??????",
    "",
]


def _pre_tokenizer(pre: str):
    if pre == "gpt-2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False)
    regex = {"qwen2": QWEN2_REGEX, "llama-bpe": LLAMA3_REGEX}[pre]
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(regex), behavior="isolated"),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def write_hf_tokenizer(out, pre: str):
    """A trained byte-level BPE in the style of the model family that uses `pre` (Llama 3 adds BOS)."""
    tok = Tokenizer(models.BPE(ignore_merges=pre == "llama-bpe"))
    if pre == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = _pre_tokenizer(pre)
    tok.decoder = decoders.ByteLevel()
    special = SPECIAL + (["<|begin_of_text|>"] if pre == "llama-bpe" else [])
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 8, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAINING_TEXT, trainer)
    tok.add_tokens(["<think>"])                      # a non-special added token: USER_DEFINED in GGUF
    config = {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "mask_token": "<|mask|>",
              "chat_template": CHATML}
    if pre == "llama-bpe":
        bos = "<|begin_of_text|>"
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, tok.token_to_id(bos))])
        config.update(bos_token=bos, add_bos_token=True)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


def write_tokenizer_gguf(path, entries):
    out = GgufOut("qwen3", gguf.GGMLQuantizationType.F32)
    out.add(entries)
    return out.write(path, path.parent)


@pytest.mark.parametrize("pre", ["gpt-2", "qwen2", "llama-bpe"])
def test_round_trip_equals_the_hugging_face_tokenizer(tmp_path, pre):
    folder = write_hf_tokenizer(tmp_path / "hf", pre)
    entries = tokenizer_entries(folder, VOCAB)
    assert dict((e[0], e[1]) for e in entries)["tokenizer.ggml.pre"] == pre
    ours = tokenizer_from_gguf(GgufFile(write_tokenizer_gguf(tmp_path / "t.gguf", entries)))
    theirs = SpecTokenizer(folder)
    for text in TEXTS:
        ids = theirs.encode(text)
        assert ours.encode(text) == ids, text
        assert ours.encode(text, add_special_tokens=False) == theirs.encode(text, add_special_tokens=False), text
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(ids, skip_special_tokens=skip), text
    assert ours.special == theirs.special
    assert (ours.bos_token_id, ours.eos_token_id) == (theirs.bos_token_id, theirs.eos_token_id)
    assert ours.config["add_bos_token"] == (pre == "llama-bpe")
    messages = [{"role": "user", "content": "Write a quicksort."}]
    assert ours.apply_chat_template(messages) == theirs.apply_chat_template(messages)
    for token_id in range(theirs.vocab_size):
        assert ours.id_to_token(token_id) == theirs.id_to_token(token_id)


def test_token_types_and_padding_rows_follow_llama_cpp(tmp_path):
    folder = write_hf_tokenizer(tmp_path / "hf", "gpt-2")
    entries = {e[0]: e[1] for e in tokenizer_entries(folder, VOCAB + 5)}
    tokens, types = entries["tokenizer.ggml.tokens"], entries["tokenizer.ggml.token_type"]
    assert len(tokens) == len(types) == VOCAB + 5                 # rows past the vocabulary are [PADn], UNUSED
    assert tokens[-1] == f"[PAD{VOCAB + 4}]" and types[-1] == gguf.TokenType.UNUSED
    assert types[tokens.index("<|mask|>")] == gguf.TokenType.CONTROL
    assert types[tokens.index("<think>")] == gguf.TokenType.USER_DEFINED
    assert entries["tokenizer.ggml.eos_token_id"] == entries["tokenizer.ggml.padding_token_id"] == 0
    assert entries["tokenizer.ggml.mask_token_id"] == 1
    assert "tokenizer.ggml.add_bos_token" not in entries          # as the converter: written only when declared


def test_unsupported_tokenizers_are_refused_by_name(tmp_path):
    folder = write_hf_tokenizer(tmp_path / "hf", "gpt-2")
    entries = tokenizer_entries(folder, VOCAB)
    for key, value, message in (("tokenizer.ggml.pre", "deepseek-llm", "tokenizer.ggml.pre 'deepseek-llm'"),
                                ("tokenizer.ggml.model", "llama", "tokenizer.ggml.model 'llama'")):
        changed = [(e[0], value, *e[2:]) if e[0] == key else e for e in entries]
        path = write_tokenizer_gguf(tmp_path / f"{value}.gguf", changed)
        with pytest.raises(ModelLoadError, match=message):
            tokenizer_from_gguf(GgufFile(path))
    # the exporter refuses a pre-tokenizer GGUF cannot name instead of writing a file that tokenizes differently
    data = json.loads((folder / "tokenizer.json").read_text())
    data["pre_tokenizer"] = {"type": "Whitespace"}
    (folder / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(ModelLoadError, match="pre-tokenizer is none of those GGUF files can name"):
        tokenizer_entries(folder, VOCAB)


def test_a_gguf_without_tokenizer_serves_token_ids(tmp_path):
    path = write_tokenizer_gguf(tmp_path / "none.gguf", [])
    assert tokenizer_from_gguf(GgufFile(path)) is None
