"""Bad GGUF input gets a ModelLoadError that names the file and the problem: missing, empty, not GGUF,
corrupt, truncated, an unsupported architecture or tensor type, missing metadata, unknown tensors, and
drafters given in the wrong place or for the wrong target."""
import gguf
import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType

from support.block_drafters import write_block_drafter
from support.models import write_model
from specserve import LLM
from specserve.errors import IncompatibleDraftError, ModelLoadError
from specserve.models.gguf_export import export_gguf
from specserve.models.gguf_writer import parse_outtype
from specserve.models.transformer import CausalLM

Q = gguf.GGMLQuantizationType


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tiny_qwen3):
    path = tmp_path_factory.mktemp("gguf") / "model.gguf"
    export_gguf(tiny_qwen3, path, parse_outtype("f32"))
    return path


def rewrite(src, dst, arch=None, drop=(), extra_tensor=None, retype=None):
    """A copy of a GGUF file with its architecture renamed, keys dropped, a tensor added or one tensor
    stored in another type (as zero bytes of the right size)."""
    reader = GGUFReader(src)
    old_arch = str(reader.fields["general.architecture"].contents())
    arch = arch or old_arch
    writer = gguf.GGUFWriter(dst, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key in drop:
            continue
        key = key.replace(f"{old_arch}.", f"{arch}.", 1)
        main_type = GGUFValueType(field.types[0])
        sub = GGUFValueType(field.types[-1]) if main_type == GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), main_type, sub)
    for tensor in reader.tensors:
        if tensor.name == retype:
            rows, cols = (int(n) for n in reversed(tensor.shape))
            block, size = gguf.GGML_QUANT_SIZES[Q.Q4_0]
            writer.add_tensor(tensor.name, np.zeros((rows, cols // block * size), np.uint8), raw_dtype=Q.Q4_0)
        else:
            writer.add_tensor(tensor.name, np.asarray(tensor.data), raw_dtype=tensor.tensor_type)
    if extra_tensor:
        writer.add_tensor(extra_tensor, np.zeros(4, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def test_missing_empty_and_foreign_files(tmp_path):
    with pytest.raises(ModelLoadError, match="GGUF file not found"):
        CausalLM.from_pretrained(tmp_path / "nope.gguf")
    (tmp_path / "empty.gguf").write_bytes(b"")
    (tmp_path / "text.gguf").write_text("hello, not a model\n")
    for name in ("empty.gguf", "text.gguf"):
        with pytest.raises(ModelLoadError, match=f"{name} is not a GGUF file"):
            CausalLM.from_pretrained(tmp_path / name)


def test_corrupt_and_truncated_files(tmp_path, exported):
    data = exported.read_bytes()
    (tmp_path / "header.gguf").write_bytes(b"GGUF" + b"\xff" * 60)
    with pytest.raises(ModelLoadError, match="cannot read GGUF file .*header.gguf: it is corrupt or truncated"):
        CausalLM.from_pretrained(tmp_path / "header.gguf")
    for cut in (len(data) // 2, len(data) - 7, 200):
        (tmp_path / "cut.gguf").write_bytes(data[:cut])
        with pytest.raises(ModelLoadError, match="cut.gguf: it is corrupt or truncated|cut.gguf is truncated"):
            CausalLM.from_pretrained(tmp_path / "cut.gguf")


def test_unsupported_architecture_and_tensor_type(tmp_path, exported):
    with pytest.raises(ModelLoadError, match="GGUF architecture 'gemma3' is not supported; supported: llama, qwen2"):
        CausalLM.from_pretrained(rewrite(exported, tmp_path / "g.gguf", arch="gemma3"))
    with pytest.raises(ModelLoadError, match="'blk.0.ffn_up.weight' has type Q4_0.* supported tensor types: F32, F16"):
        CausalLM.from_pretrained(rewrite(exported, tmp_path / "q4.gguf", retype="blk.0.ffn_up.weight"))


def test_missing_metadata_and_unknown_tensors(tmp_path, exported):
    with pytest.raises(ModelLoadError, match="metadata key 'qwen3.block_count' is missing"):
        CausalLM.from_pretrained(rewrite(exported, tmp_path / "k.gguf", drop=("qwen3.block_count",)))
    with pytest.raises(ModelLoadError, match="blk.0.attn_sinks.weight are not part of a qwen3 model"):
        CausalLM.from_pretrained(rewrite(exported, tmp_path / "t.gguf", extra_tensor="blk.0.attn_sinks.weight"))


def test_drafters_in_the_wrong_place(tmp_path, tiny_qwen3, exported):
    target6 = write_model(tmp_path / "t6", "qwen3", seed=1, num_hidden_layers=6)
    drafter = write_block_drafter(tmp_path / "b", target6, "specserve", target_layer_ids=[0, 2, 4])
    drafter_gguf = tmp_path / "b.gguf"
    export_gguf(drafter, drafter_gguf, parse_outtype("f32"), target6)
    with pytest.raises(ModelLoadError, match="holds a DFlash / DSpark drafter, not a model: load it with -md"):
        LLM(drafter_gguf)
    with pytest.raises(ModelLoadError, match="is not an EAGLE-3 GGUF: its architecture is 'dflash'"):
        LLM(target6, spec_type="draft-eagle3", draft_model=drafter_gguf)
    with pytest.raises(ModelLoadError, match="is not a DFlash / DSpark GGUF: its architecture is 'qwen3'"):
        LLM(target6, spec_type="draft-dflash", draft_model=exported)
    # tiny_qwen3 has two layers: the drafter reads target layers up to 4
    with pytest.raises(IncompatibleDraftError, match="target_layer_ids"):
        LLM(tiny_qwen3, spec_type="draft-dflash", draft_model=drafter_gguf)
