"""The native CPU kernels: packed linear layers against F.linear, every row bit-identical whatever the
batch and thread count, the fused decoder forward against the PyTorch one, and clear failures."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from specserve import kernels
from specserve.kernels import capi
from specserve.kernels.packed import PackedLinear, gated_mlp_bias, gated_mlp_weight, quantize_int8
from specserve.kernels.threads import default_threads
from specserve.models.step_batch import StepBatch
from specserve.models.tap_store import FINAL, TapStore
from specserve.models.transformer import CausalLM
from support.models import write_model

pytestmark = pytest.mark.skipif(kernels.requested() == "torch", reason="SPECSERVE_KERNELS=torch")

WEIGHT_CASES = [(torch.float32, None), (torch.bfloat16, None), (torch.float32, "int8"), (torch.float32, "q8")]


def _weights(n, k, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(n, k, generator=gen) * 0.1).to(dtype), torch.randn(n, generator=gen) * 0.1


def _reference(x, weight, bias, quant):
    """float64 x W^T + b with the kernel's input rounding: bf16 rows for bf16 weights, q*scale for int8,
    and for q8 also each row rounded to int8 with scale max|x| / 127 (round half to even)."""
    w = weight.double()
    if quant in ("int8", "q8"):
        q, scale = quantize_int8(weight)
        w = q.double() * scale.double().unsqueeze(1)
    if quant == "q8":
        amax = x.abs().amax(dim=1, keepdim=True)
        x = torch.round(x * torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))).clamp(-127, 127) * (amax / 127)
    if weight.dtype == torch.bfloat16 and kernels.has_bf16_dot():
        x = x.bfloat16()
    return F.linear(x.double(), w, None if bias is None else bias.double())


@pytest.mark.parametrize("dtype,quant", WEIGHT_CASES)
@pytest.mark.parametrize("n,k", [(37, 45), (64, 256), (300, 200), (16, 1)])
def test_packed_linear_matches_reference(dtype, quant, n, k):
    weight, bias = _weights(n, k, dtype)
    x = torch.randn(7, k)
    got = PackedLinear(weight, bias, quant)(x)
    torch.testing.assert_close(got.double(), _reference(x, weight, bias, quant), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("dtype,quant", WEIGHT_CASES)
@pytest.mark.parametrize("k", [45, 96, 128])  # odd k: the tiles' last step; q8 with k in whole 64-byte steps
                                              # also runs on AMX tiles from 4 rows
def test_rows_are_bit_identical_in_any_batch_and_thread_count(dtype, quant, k):
    weight, bias = _weights(200, k, dtype)
    packed = PackedLinear(weight, bias, quant)
    x = torch.randn(100, k)
    previous = kernels.library().ss_get_threads()
    try:
        kernels.library().ss_set_threads(1)
        alone = torch.cat([packed(x[i:i + 1]) for i in range(x.shape[0])])
        for threads in (1, 2):
            kernels.library().ss_set_threads(threads)
            for rows in (2, 3, 5, 16, 17, 33, 64, 100):
                assert torch.equal(packed(x[:rows]), alone[:rows]), (threads, rows)
    finally:
        kernels.library().ss_set_threads(previous)


@pytest.mark.parametrize("quant", [None, "q8"])
def test_add_mode_accumulates_into_the_output(quant):
    weight, bias = _weights(40, 24, torch.float32)
    packed, x = PackedLinear(weight, bias, quant), torch.randn(3, 24)
    residual = torch.randn(3, 40)
    out = residual.clone()
    packed(x, out=out, mode=capi.OUT_ADD)
    torch.testing.assert_close(out.double(), residual.double() + _reference(x, weight, bias, quant), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("k", [45, 200])
def test_q8_products_are_the_integer_reference_bit_for_bit(k):
    """Rows rounded to int8 (max |x| / 127, half to even) by the vector body and the scalar tail alike,
    exact int32 sums, then row scale and column scale: the same bits on every instruction set."""
    gen = torch.Generator().manual_seed(5)
    weight, x = torch.randn(40, k, generator=gen) * 0.1, torch.randn(7, k, generator=gen)
    got = PackedLinear(weight, None, "q8")(x)
    wq, scale = quantize_int8(weight)
    amax = x.abs().amax(dim=1)
    q = torch.round(x * (127.0 / amax).unsqueeze(1)).clamp(-127, 127)
    sums = (q.long() @ wq.long().T).float()
    assert torch.equal(got, sums * (amax / 127.0).unsqueeze(1) * scale.unsqueeze(0))


@pytest.mark.parametrize("k", [36, 64])
def test_q8_gated_mlp_epilogue_matches_the_integer_reference(k):
    gen = torch.Generator().manual_seed(4)
    gate, up = torch.randn(40, k, generator=gen) * 0.3, torch.randn(40, k, generator=gen) * 0.3
    weight, _ = gated_mlp_weight(gate, up)
    x = torch.randn(5, k, generator=gen)
    out = PackedLinear(weight, None, "q8")(x, mode=capi.OUT_SWIGLU)
    both = _reference(x, weight, None, "q8").view(5, -1, 2, 16)        # blocks alternate gate and up
    expected = (F.silu(both[:, :, 0]) * both[:, :, 1]).reshape(5, -1)
    torch.testing.assert_close(out.double(), expected, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("act,fn", [("silu", F.silu), ("gelu", F.gelu),
                                    ("gelu_pytorch_tanh", lambda t: F.gelu(t, approximate="tanh"))])
def test_gated_mlp_epilogue(act, fn):
    gen = torch.Generator().manual_seed(3)
    gate, up = torch.randn(40, 32, generator=gen) * 0.3, torch.randn(40, 32, generator=gen) * 0.3
    gate_b, up_b = torch.randn(40, generator=gen), torch.randn(40, generator=gen)
    weight, padded = gated_mlp_weight(gate, up)
    assert padded == 48
    packed = PackedLinear(weight, gated_mlp_bias(gate_b, up_b, padded), act=act)
    x = torch.randn(5, 32)
    out = packed(x, mode=capi.OUT_SWIGLU)
    expected = fn(F.linear(x, gate, gate_b)) * F.linear(x, up, up_b)
    torch.testing.assert_close(out[:, :40], expected, atol=2e-5, rtol=2e-5)
    assert torch.equal(out[:, 40:], torch.zeros(5, 8))


def test_int8_quantization_error_is_small():
    weight, _ = _weights(64, 128, torch.float32)
    q, scale = quantize_int8(weight)
    assert q.dtype == torch.int8 and q.abs().max() <= 127
    assert (q.float() * scale.unsqueeze(1) - weight).abs().max() <= scale.max() / 2 + 1e-7


@pytest.fixture(scope="module")
def qwen3_pair(tiny_qwen3):
    """The same checkpoint served by the native kernels and by PyTorch operations."""
    native = CausalLM.from_pretrained(tiny_qwen3)
    native_cache = native.new_cache(4, 256)
    assert native.native is not None
    kernels.configure(kernels="torch")
    try:
        reference = CausalLM.from_pretrained(tiny_qwen3)
        reference_cache = reference.new_cache(4, 256)
    finally:
        kernels.configure(kernels="auto")
    assert reference.native is None
    return native, native_cache, reference, reference_cache


def test_native_forward_matches_pytorch(qwen3_pair):
    native, native_cache, reference, reference_cache = qwen3_pair
    prompt = torch.arange(3, 40)
    steps = [StepBatch.build([(0, prompt, 0), (2, prompt[:9], 0)], list(range(46))),
             StepBatch.build([(0, [5, 6, 7], 37), (2, [8], 9)], [0, 1, 2, 3])]
    for batch in steps:
        ours = native.forward_step(batch, native_cache, taps=(-1, 0, 1), want_final_hidden=True)
        ref = reference.forward_step(batch, reference_cache, taps=(-1, 0, 1), want_final_hidden=True)
        torch.testing.assert_close(ours.logits, ref.logits, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(ours.final_hidden, ref.final_hidden.float(), atol=1e-4, rtol=1e-4)
        for layer in (-1, 0, 1):
            torch.testing.assert_close(ours.tap(layer), ref.tap(layer).float(), atol=1e-4, rtol=1e-4)
    assert native_cache.lengths[:3] == [40, 0, 10]


def test_the_tap_store_holds_each_rows_states_at_its_slot_and_position(qwen3_pair):
    """The engine's forward writes the taps and the final state into the store by (slot, position), on
    both paths, the same values the forward returns per row; a later row at a position replaces the state
    there (a rejected draft's row is rewritten by the next step's)."""
    native, native_cache, reference, reference_cache = qwen3_pair
    hidden = native.config.hidden_size
    stores = [TapStore.for_drafters((1, -1, FINAL), 4, 256, hidden) for _ in range(2)]
    assert stores[0].layers == (-1, 1, FINAL)
    prompt = torch.arange(3, 40)
    steps = [StepBatch.build([(0, prompt, 0), (2, prompt[:9], 0)], [36, 44]),
             StepBatch.build([(0, [5, 6, 7], 37), (2, [8], 9)], [0, 1, 2, 3]),
             StepBatch.build([(0, [9], 38)], [0])]                  # position 38 again: rows 6, 7 rejected
    for batch in steps:
        out = [model.forward_step(batch, cache, store=store) for model, cache, store in
               zip((native, reference), (native_cache, reference_cache), stores)]
        assert out[0].taps is None and out[0].final_hidden is None
        torch.testing.assert_close(out[0].logits, out[1].logits, atol=1e-4, rtol=1e-4)
    for store in stores:          # what a per-row forward of the same committed rows returns
        per_row = reference.forward_step(StepBatch.build([(0, list(range(3, 40)) + [5, 9], 0)], []),
                                         reference.new_cache(1, 256), taps=(-1, 1), want_final_hidden=True)
        torch.testing.assert_close(store.rows(0, 0, 39, (1,)), per_row.tap(1).float(), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(store.rows(0, 0, 39, (FINAL, -1)),
                                   torch.cat([per_row.final_hidden, per_row.tap(-1)], dim=-1).float(),
                                   atol=1e-4, rtol=1e-4)
        assert store.rows(2, 0, 10).shape == (10, 3 * hidden) and store.rows(2, 0, 10).is_contiguous()


@pytest.mark.parametrize("head_dim", [40, 64, 128])
def test_native_attention_matches_pytorch_at_wider_heads(tmp_path, head_dim):
    """The attention kernel unrolls by 16-lane chunks of the head dim: a partial last chunk (40), the
    bundled model's 64 and the widest unrolled (128), over more rows than one tile holds."""
    folder = write_model(tmp_path / "m", tokenizer=False, head_dim=head_dim, num_attention_heads=4,
                         num_key_value_heads=1)
    native = CausalLM.from_pretrained(folder)
    kernels.configure(kernels="torch")
    try:
        reference = CausalLM.from_pretrained(folder)
    finally:
        kernels.configure(kernels="auto")
    caches = native.new_cache(2, 128), reference.new_cache(2, 128)
    for batch in (StepBatch.build([(0, torch.arange(3, 70), 0), (1, torch.arange(5, 20), 0)], [66, 81]),
                  StepBatch.build([(0, [5, 6, 7, 8, 9, 10, 11], 67), (1, [8, 9], 15)], list(range(9)))):
        ours, ref = (model.forward_step(batch, cache) for model, cache in zip((native, reference), caches))
        torch.testing.assert_close(ours.logits, ref.logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_native_forward_rows_are_batch_invariant(tiny_qwen3_bf16, threads):
    """A slot's logits are bit-identical alone and beside other slots' decode rows, drafts and prompt chunks."""
    model = CausalLM.from_pretrained(tiny_qwen3_bf16)
    previous = kernels.library().ss_get_threads()
    kernels.library().ss_set_threads(threads)
    try:
        alone_cache, mixed_cache = model.new_cache(5, 256), model.new_cache(5, 256)
        prompt = torch.arange(10, 60)
        for cache in (alone_cache, mixed_cache):
            model.forward_step(StepBatch.build([(s, prompt, 0) for s in range(4)], [0]), cache)
        alone = model.forward_step(StepBatch.build([(1, [7, 8, 9], 50)], [0, 1, 2]), alone_cache)
        mixed = model.forward_step(StepBatch.build(
            [(0, [3], 50), (1, [7, 8, 9], 50), (2, list(range(20)), 50), (4, list(range(33)), 0)],
            [1, 2, 3]), mixed_cache)
        assert torch.equal(alone.logits, mixed.logits)
    finally:
        kernels.library().ss_set_threads(previous)


def test_default_threads_are_physical_cores():
    assert 1 <= default_threads() <= len(os.sched_getaffinity(0))


def _kernel_mode_in_subprocess(tmp_path, **env):
    code = "from specserve import kernels; print(kernels.mode())"
    full_env = dict(os.environ, SPECSERVE_CACHE=str(tmp_path / "cache"), CXX="false", **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env)


@pytest.mark.slow
def test_a_failed_build_falls_back_to_pytorch_with_a_warning(tmp_path):
    result = _kernel_mode_in_subprocess(tmp_path, SPECSERVE_KERNELS="auto")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "torch"
    assert "native kernels unavailable" in result.stderr and "compiling the native kernels" in result.stderr


@pytest.mark.slow
def test_requiring_native_kernels_that_cannot_build_is_an_error(tmp_path):
    result = _kernel_mode_in_subprocess(tmp_path, SPECSERVE_KERNELS="native")
    assert result.returncode != 0
    assert "the native kernels are unavailable" in result.stderr


def test_unknown_kernel_mode_is_an_option_error():
    from specserve.errors import OptionError
    with pytest.raises(OptionError, match="--kernels must be one of auto, native, torch"):
        kernels.configure(kernels="fast")


@pytest.mark.parametrize("cache_types", [("f16", "f16"), ("bf16", "bf16"), ("bf16", "f32")])
def test_half_precision_kv_cache(tiny_qwen3, cache_types):
    """f16/bf16 keys and values: logits close to the float32 cache's, rows still batch-invariant."""
    model = CausalLM.from_pretrained(tiny_qwen3)
    full, half, half_mixed = model.new_cache(3, 256), model.new_cache(3, 256, cache_types), \
        model.new_cache(3, 256, cache_types)
    assert half.k.dtype == getattr(torch, {"f16": "float16", "bf16": "bfloat16"}[cache_types[0]])
    prompt = torch.arange(3, 70)
    outs = [model.forward_step(StepBatch.build([(0, prompt, 0)], list(range(67))), c) for c in (full, half)]
    torch.testing.assert_close(outs[1].logits, outs[0].logits, atol=0.05, rtol=0.05)
    model.forward_step(StepBatch.build([(0, prompt, 0), (1, prompt[:30], 0)], [0]), half_mixed)
    alone = model.forward_step(StepBatch.build([(0, [4, 5], 67)], [0, 1]), half)
    mixed = model.forward_step(StepBatch.build([(1, list(range(40)), 30), (0, [4, 5], 67)], [40, 41]), half_mixed)
    assert torch.equal(alone.logits, mixed.logits)


PORTABLE_CHECK = """
import torch, torch.nn.functional as F
from specserve import kernels
from specserve.kernels.packed import PackedLinear
from specserve.models.step_batch import StepBatch
from specserve.models.transformer import CausalLM
assert kernels.library().ss_features() == {features}, kernels.library().ss_features()
gen = torch.Generator().manual_seed(0)
for dtype, quant in [(torch.float32, None), (torch.bfloat16, None), (torch.float32, "int8"), (torch.float32, "q8")]:
    w = (torch.randn(40, 37, generator=gen) * 0.1).to(dtype)
    x = torch.randn(5, 37, generator=gen)
    packed = PackedLinear(w, None, quant)
    ref = F.linear(x, w.float()) if quant is None else None
    if ref is not None:
        torch.testing.assert_close(packed(x), ref, atol=1e-4, rtol=1e-4)
    rows = torch.cat([packed(x[i:i + 1]) for i in range(5)])
    assert torch.equal(rows, packed(x)), (dtype, quant)
model = CausalLM.from_pretrained({model!r})
cache, mixed = model.new_cache(2, 128), model.new_cache(2, 128, ("f16", "bf16"))
prompt = torch.arange(3, 40)
out = model.forward_step(StepBatch.build([(0, prompt, 0)], list(range(37))), cache)
kernels.configure(kernels="torch")
ref_model = CausalLM.from_pretrained({model!r})
ref = ref_model.forward_step(StepBatch.build([(0, prompt, 0)], list(range(37))), ref_model.new_cache(1, 128))
torch.testing.assert_close(out.logits, ref.logits, atol=1e-4, rtol=1e-4)
model.forward_step(StepBatch.build([(0, prompt, 0)], [0]), mixed)
print("portable ok")
"""


@pytest.mark.slow
@pytest.mark.parametrize("march,features", [("x86-64-v2", 0), ("x86-64-v3", capi.FEATURE_AVX2)])
def test_kernels_without_avx512(tiny_qwen3, tmp_path, march, features):
    """The kernels as a CPU without AVX-512 runs them: portable (x86-64-v2) and AVX2 + FMA (x86-64-v3,
    gemm_avx2.cpp): right, and batch-invariant."""
    if os.uname().machine != "x86_64":
        pytest.skip("x86-64-v2/v3 are x86 targets")
    env = dict(os.environ, SPECSERVE_MARCH=march, SPECSERVE_CACHE=str(tmp_path / "cache"))
    check = PORTABLE_CHECK.format(model=str(tiny_qwen3), features=features)
    result = subprocess.run([sys.executable, "-c", check],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 0 and "portable ok" in result.stdout, result.stderr[-3000:]
