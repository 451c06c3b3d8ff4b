"""ctypes view of the native kernel library (native/kernels.h): structs and function signatures."""
from __future__ import annotations

import ctypes
from ctypes import POINTER, c_float, c_int32, c_int64, c_void_p

W_F32, W_BF16, W_I8, W_Q8 = 0, 1, 2, 3
OUT_STORE, OUT_ADD, OUT_SWIGLU = 0, 1, 2
ACTIVATION_IDS = {"silu": 0, "swish": 0, "gelu": 1, "gelu_pytorch_tanh": 2, "gelu_new": 2, "relu": 3}
FEATURE_AVX512, FEATURE_AVX512_BF16, FEATURE_AMX = 1, 2, 4
FEATURE_AVX512_VNNI = 16     # int8 dot products: q8 weights run on them (gemm_q8.cpp)
FEATURE_AVX2 = 32            # AVX2 + FMA without AVX-512 (gemm_avx2.cpp)
# KV cache element types: llama.cpp's --cache-type names -> (torch dtype name, kernel code)
CACHE_TYPES = {"f32": ("float32", 0), "f16": ("float16", 1), "bf16": ("bfloat16", 2)}


class Weight(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("scales", c_void_p), ("bias", c_void_p), ("type", c_int32),
                ("n", c_int32), ("k", c_int32), ("act", c_int32)]


class Layer(ctypes.Structure):
    _fields_ = [("qkv", Weight), ("o", Weight), ("gate_up", Weight), ("down", Weight),
                ("input_norm", c_void_p), ("post_norm", c_void_p), ("q_norm", c_void_p), ("k_norm", c_void_p)]


class Model(ctypes.Structure):
    _fields_ = [("hidden", c_int32), ("intermediate_padded", c_int32), ("n_heads", c_int32),
                ("n_kv_heads", c_int32), ("head_dim", c_int32), ("n_layers", c_int32), ("eps", c_float),
                ("layers", POINTER(Layer)), ("final_norm", c_void_p), ("head", Weight), ("embed", c_void_p),
                ("embed_type", c_int32), ("vocab", c_int32)]


class Attention(ctypes.Structure):
    _fields_ = [("row_slot", c_void_p), ("row_pos", c_void_p), ("key_len", c_void_p), ("cos", c_void_p),
                ("sin", c_void_p), ("rope_index", c_void_p), ("k_cache", c_void_p), ("v_cache", c_void_p),
                ("n_slots", c_int64), ("capacity", c_int64), ("k_type", c_int32), ("v_type", c_int32)]


class Step(ctypes.Structure):
    _fields_ = [("n_rows", c_int64), ("tokens", c_void_p), ("attn", Attention), ("n_taps", c_int32),
                ("tap_layers", c_void_p), ("tap_out", c_void_p), ("tap_slot_rows", c_int64), ("n_out", c_int64), ("out_rows", c_void_p),
                ("logits", c_void_p), ("argmax", c_void_p), ("final_hidden", c_void_p)]


class BlockDraft(ctypes.Structure):
    _fields_ = [("n_ctx", c_int64), ("n_chunks", c_int64), ("n_parts", c_int64), ("ctx_chunk_rows", c_void_p),
                ("ctx_parts", c_void_p), ("fc", Weight), ("hidden_norm", c_void_p),
                ("n_slots", c_int64), ("n_block", c_int64), ("block_tokens", c_void_p), ("ctx_slot", c_void_p),
                ("ctx_pos", c_void_p), ("slot", c_void_p), ("pos0", c_void_p), ("attn", Attention),
                ("hidden_out", c_void_p), ("first_draft_row", c_int64), ("n_draft", c_int64), ("logits", c_void_p),
                ("tokens", c_void_p), ("w2t", c_void_p), ("w1", c_void_p), ("rank", c_int64),
                ("markov_table", c_void_p), ("anchors", c_void_p), ("temperature", c_void_p), ("top_k", c_void_p),
                ("top_p", c_void_p), ("min_p", c_void_p), ("uniforms", c_void_p),
                ("q", c_void_p), ("q_vocab", c_int64), ("conf_w", c_void_p), ("conf_per_token", c_void_p), ("conf_bias", c_float),
                ("confidence", c_void_p), ("id_map", c_void_p)]


class ChainPick(ctypes.Structure):
    _fields_ = [("p_min_k", c_int32), ("n_steps", c_int64), ("temperature", c_void_p), ("top_k", c_void_p),
                ("top_p", c_void_p), ("min_p", c_void_p), ("uniforms", c_void_p), ("q", c_void_p),
                ("q_vocab", c_int64), ("p_min", c_float), ("top_prob", c_void_p)]


class HeadChain(ctypes.Structure):
    _fields_ = [("n_rows", c_int64), ("tokens", c_void_p), ("hidden_in", c_void_p), ("attn", Attention),
                ("n_out", c_int64), ("out_rows", c_void_p), ("embed_norm", c_void_p), ("hidden_norm", c_void_p),
                ("proj", Weight), ("id_map", c_void_p), ("hidden_first", c_int32), ("zero_embed_at_pos0", c_int32),
                ("residual_normed", c_int32), ("feed_normed", c_int32), ("fc", Weight)]


_SIGNATURES = {
    "ss_version": (c_int32, []),
    "ss_features": (c_int32, []),
    "ss_set_threads": (None, [c_int32]),
    "ss_get_threads": (c_int32, []),
    "ss_set_spin_us": (None, [c_int32]),
    "ss_pool_stats": (None, [POINTER(c_int64)]),
    "ss_packed_bytes": (c_int64, [c_int32, c_int64, c_int64]),
    "ss_pack": (None, [c_int32, c_void_p, c_int32, c_int64, c_int64, c_void_p]),
    "ss_linear": (None, [POINTER(Weight), c_void_p, c_int64, c_int64, c_void_p, c_int64, c_int32]),
    "ss_rms_norm": (None, [c_void_p, c_void_p, c_void_p, c_int64, c_int64, c_float]),
    "ss_layer_forward": (None, [POINTER(Model), c_int32, c_void_p, c_int64, c_void_p, c_int64, c_void_p,
                                POINTER(Attention)]),
    "ss_model_forward": (c_int32, [POINTER(Model), POINTER(Step)]),
    "ss_model_draft_chain": (c_int32, [POINTER(Model), POINTER(Step), c_int64, c_void_p, c_void_p, c_void_p]),
    "ss_sampling_probs": (None, [c_void_p, c_int64, c_int64, c_int32, c_float, c_float, c_float, c_void_p]),
    "ss_sample": (None, [c_void_p, c_int64, c_int64, c_void_p, c_void_p]),
    "ss_verify_logits": (c_int64, [c_void_p, c_int64, c_int64, c_int32, c_float, c_float, c_float, c_void_p, c_void_p,
                                   c_void_p, c_void_p]),
    "ss_block_draft_forward": (c_int32, [POINTER(Model), POINTER(BlockDraft)]),
    "ss_markov_table": (None, [c_void_p, c_void_p, c_int64, c_int64, c_void_p]),
    "ss_head_draft_chain": (c_int32, [POINTER(Model), POINTER(HeadChain), c_int64, c_void_p, c_void_p]),
    "ss_ngram_mod_add": (c_int64, [c_void_p, c_int64, c_void_p, c_int64, c_int64, c_int32]),
    "ss_ngram_mod_draft": (c_int64, [c_void_p, c_int64, c_void_p, c_int32, c_int64, c_int64, c_void_p]),
}
ABI_VERSION = 5


def bind(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib
