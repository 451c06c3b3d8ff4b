"""Tokenizer wrapper: chat templates as transformers renders them, streaming detokenization."""
import json

from transformers import AutoTokenizer

from support.models import write_tokenizer
from specserve.models.tokenizer import IncrementalDetokenizer, Tokenizer

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Say 'x' ✓"}]

LLAMA3_STYLE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}{{ '<sys>' + m['content'] | trim }}"
                "{% else %}{{ '<' + m['role'] + '>' + m['content'] + eos_token }}{% endif %}\n{% endfor %}"
                "{% if add_generation_prompt %}<assistant>{% endif %}")


def test_chat_templates_match_transformers(tmp_path):
    for i, template in enumerate([None, LLAMA3_STYLE]):
        d = tmp_path / f"t{i}"
        if template is None:
            write_tokenizer(d)
        else:
            write_tokenizer(d, chat_template=template)
            cfg = json.loads((d / "tokenizer_config.json").read_text())
            cfg["bos_token"] = "<|im_start|>"
            (d / "tokenizer_config.json").write_text(json.dumps(cfg))
        ours, ref = Tokenizer(d), AutoTokenizer.from_pretrained(d)
        for gen_prompt in (True, False):
            assert ours.apply_chat_template(MESSAGES, add_generation_prompt=gen_prompt) == \
                ref.apply_chat_template(MESSAGES, add_generation_prompt=gen_prompt, tokenize=False)


def test_chat_template_file_and_errors(tmp_path):
    d = tmp_path / "t"
    write_tokenizer(d)
    (d / "chat_template.jinja").write_text("{% for m in messages %}[{{ m['content'] }}]{% endfor %}")
    assert Tokenizer(d).apply_chat_template(MESSAGES[:2]) == "[Be brief.][Hi there]"
    (d / "chat_template.jinja").write_text("{{ raise_exception('no system role') }}")
    try:
        Tokenizer(d).apply_chat_template(MESSAGES)
    except Exception as exc:
        assert "no system role" in str(exc)
    else:
        raise AssertionError("expected an error")


def test_incremental_detokenization_equals_full_decode(tmp_path):
    write_tokenizer(tmp_path)
    tok = Tokenizer(tmp_path)
    text = "def café():\n    return 'ünïcödé ✓ 🙂'  # done\n"
    ids = tok.encode(text)
    detok = IncrementalDetokenizer(tok)
    pieces = [detok.push([i]) for i in ids] + [detok.flush()]
    assert "".join(pieces) == tok.decode(ids) == text
    assert all("\ufffd" not in p for p in pieces)
