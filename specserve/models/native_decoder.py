"""The serving forward on the native kernels: packed weights of a decoder-layer stack and one
C call per step (specserve/kernels/native/decoder.cpp).

It computes what `transformer.decoder_layer_step` computes, with a float32 residual stream and
every row's result independent of the rest of the batch; the PyTorch path stays the reference
(tests/test_native_kernels.py compares the two).
"""
from __future__ import annotations

import ctypes
import threading

import torch
import torch.nn.functional as F

from ..kernels import capi, library
from ..kernels.packed import PackedLinear, gated_mlp_bias, gated_mlp_weight
from .config import ModelConfig
from .forward_output import ForwardOutput
from .kv_cache import KVCache
from .rope import RotaryEmbedding
from .step_batch import StepBatch
from .tap_store import TapStore


_KV_CODES = {getattr(torch, name): code for name, code in capi.CACHE_TYPES.values()}


def _cat_bias(*linears) -> torch.Tensor | None:
    if linears[0].bias is None:
        return None
    return torch.cat([lin.bias.detach().float() for lin in linears])


def _f32(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().float().contiguous()


def _ptr(t: torch.Tensor | None):
    return None if t is None else t.data_ptr()


class NativeLayers:
    """Decoder layers (Hugging Face module names) packed for the kernels, and the C model struct.

    `quant` ("int8" or None) applies to every linear layer. The struct's embedding, final norm and
    head stay empty unless `set_io` fills them (draft heads run single layers only).
    """

    def __init__(self, layers, cfg: ModelConfig, quant: str | None = None):
        self.cfg = cfg
        self.keep: list = []           # everything the C structs point into
        self.layers = (capi.Layer * len(layers))()
        inter_padded = None
        for i, layer in enumerate(layers):
            attn, mlp = layer.self_attn, layer.mlp
            qkv = PackedLinear(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
                               _cat_bias(attn.q_proj, attn.k_proj, attn.v_proj), quant)
            o = PackedLinear(attn.o_proj.weight, attn.o_proj.bias, quant)
            gate_up, inter_padded = gated_mlp_weight(mlp.gate_proj.weight.detach(), mlp.up_proj.weight.detach())
            gate_up = PackedLinear(gate_up, gated_mlp_bias(mlp.gate_proj.bias, mlp.up_proj.bias, inter_padded),
                                   quant, act=cfg.hidden_act)
            down_w = mlp.down_proj.weight.detach()
            down = PackedLinear(F.pad(down_w, (0, inter_padded - down_w.shape[1])), mlp.down_proj.bias, quant)
            norms = [_f32(layer.input_layernorm.weight), _f32(layer.post_attention_layernorm.weight),
                     _f32(attn.q_norm.weight) if cfg.qk_norm else None,
                     _f32(attn.k_norm.weight) if cfg.qk_norm else None]
            self.keep += [qkv, o, gate_up, down, *norms]
            self.layers[i] = capi.Layer(qkv.struct, o.struct, gate_up.struct, down.struct, *map(_ptr, norms))
        self.model = capi.Model(cfg.hidden_size, inter_padded or 0, cfg.num_attention_heads, cfg.num_key_value_heads,
                                cfg.head_dim, len(layers), cfg.rms_norm_eps,
                                ctypes.cast(self.layers, ctypes.POINTER(capi.Layer)))
        self.model_ref = ctypes.byref(self.model)

    def set_io(self, embed: torch.Tensor, final_norm: torch.Tensor, head: torch.Tensor | PackedLinear,
               quant: str | None = None) -> None:
        """The embedding, final norm and lm_head of the C model; `head` a weight to pack, or one already
        packed (a block drafter uses the target's)."""
        embed = embed.detach().contiguous()
        if embed.dtype not in (torch.float32, torch.bfloat16):
            embed = embed.float()
        if not isinstance(head, PackedLinear):
            head = PackedLinear(head, None, quant)
        final_norm = _f32(final_norm)
        self.keep += [embed, head, final_norm]
        self.head = head
        self.model.embed = embed.data_ptr()
        self.model.embed_type = capi.W_BF16 if embed.dtype == torch.bfloat16 else capi.W_F32
        self.model.final_norm = final_norm.data_ptr()
        self.model.head = head.struct
        self.model.vocab = head.out_features

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.keep if isinstance(p, PackedLinear))

    def layer(self, index: int, x: torch.Tensor, attn: capi.Attention, input: torch.Tensor | None = None,
              prefix_input: torch.Tensor | None = None) -> None:
        """Layer `index` over the rows of the float32 residual x [n, hidden] (updated in place).

        `input` [n, k] replaces rms_norm(x) as the q/k/v input; `prefix_input` [p, k] adds p rows
        before them that only write keys and values (attn describes all p + n rows, prefix first).
        """
        prefix = 0 if prefix_input is None else prefix_input.shape[0]
        library().ss_layer_forward(self.model_ref, index, x.data_ptr(), x.shape[0], _ptr(input), prefix,
                                   _ptr(prefix_input), ctypes.byref(attn))


def rms_norm_rows(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """rms_norm over float32 rows [n, dim] with a float32 weight (or none), in one kernel call."""
    x = x.contiguous()
    out = torch.empty_like(x)
    library().ss_rms_norm(x.data_ptr(), _ptr(weight), out.data_ptr(), x.shape[0], x.shape[-1], eps)
    return out


def attention_rows(rope: RotaryEmbedding, row_slots: torch.Tensor, positions: torch.Tensor,
                   key_len: torch.Tensor | None, cache: KVCache, keep: list,
                   rope_rows: tuple[torch.Tensor, torch.Tensor] | None = None) -> capi.Attention:
    """The kernels' view of rows: slot, position, visible keys [0, key_len) (None: causal, up to the
    row's own position) and RoPE rows, over `cache`. A kernel that derives the rows itself (a block
    draft) takes None for row_slots and positions.

    rope_rows: per-row (cos, sin) when the table cannot be indexed by position (dynamic NTK scaling).
    Every tensor the struct points into is appended to `keep`, which must outlive the call.
    """
    if rope_rows is None:
        cos, sin, rope_index = rope.cos, rope.sin, positions
    else:
        (cos, sin), rope_index = rope_rows, torch.arange(positions.shape[0], dtype=torch.int64)
    keep += [row_slots, positions, key_len, cos, sin, rope_index]
    return capi.Attention(_ptr(row_slots), _ptr(positions), _ptr(key_len), cos.data_ptr(),
                          sin.data_ptr(), _ptr(rope_index), cache.k.data_ptr(), cache.v.data_ptr(),
                          cache.n_slots, cache.capacity, _KV_CODES[cache.k.dtype], _KV_CODES[cache.v.dtype])


def causal_attention(rope: RotaryEmbedding, batch: StepBatch, cache: KVCache, keep: list) -> capi.Attention:
    """Causal attention for a StepBatch: each row sees its slot's keys up to its own position."""
    rope_rows = None
    if rope.rope_type == "dynamic":       # frequencies depend on each slot's length: gather per segment
        from .transformer import rope_tables
        rope_rows = rope_tables(rope, batch)
    return attention_rows(rope, batch.row_slots, batch.positions, None, cache, keep, rope_rows)


def refill_causal_attention(owner, filled_for: tuple, rope: RotaryEmbedding, batch: StepBatch, cache: KVCache,
                            keep: list) -> tuple:
    """Set `owner.attn` (a reused C struct's attention) to causal_attention(batch) and return what its cache
    and RoPE fields now point into; `filled_for` is what the last call returned. Those fields are set only
    when the cache or the table changes: right after a forward every Python operation runs on cold caches."""
    if rope.rope_type == "dynamic":
        owner.attn = causal_attention(rope, batch, cache, keep)
        return (None, None)
    if filled_for[0] is not cache or filled_for[1] is not rope.cos:
        owner.attn = attention_rows(rope, batch.row_slots, batch.positions, None, cache, keep)
        filled_for = (cache, rope.cos)       # the struct points into both: kept alive with it
    keep += [batch.row_slots, batch.positions]
    attn = owner.attn
    attn.row_slot, attn.row_pos = batch.row_slots.data_ptr(), batch.positions.data_ptr()
    attn.rope_index = attn.row_pos
    return filled_for


def draft_buffer(buffers: dict, n_slots: int, n_drafts: int) -> torch.Tensor:
    """A draft chain's output [n_slots, n_drafts] int64, one per shape, reused (the callers read it at once)."""
    out = buffers.get((n_slots, n_drafts))
    if out is None:
        out = buffers[(n_slots, n_drafts)] = torch.empty(n_slots, n_drafts, dtype=torch.int64)
    return out


def commit_lengths(batch: StepBatch, cache: KVCache) -> None:
    for seg in batch.segments:
        cache.lengths[seg.slot] = seg.pos0 + seg.n_rows


class NativeDecoder:
    """A CausalLM's serving forward on the native kernels."""

    def __init__(self, model, quant: str | None = None):
        cfg = model.config
        self.model, self.quant = model, quant
        self.stack = NativeLayers(model.model.layers, cfg, quant)
        self.stack.set_io(model.model.embed_tokens.weight, model.model.norm.weight, model.lm_head_weight, quant)
        self.hidden = cfg.hidden_size
        self.vocab = cfg.vocab_size
        self.lib = library()
        self._per_thread = threading.local()           # .step (a reused capi.Step) and .attn_for per thread
        self._taps: dict = {}
        self._drafts: dict = {}                         # draft_chain's outputs by shape
        self._chain_logits: dict = {}                   # ... and its first step's logits by row count
        self.id_map: torch.Tensor | None = None          # lm_head row -> token id, once cut_lm_head ran

    def cut_lm_head(self, rows: torch.Tensor) -> None:
        """Keep only these lm_head rows (a drafter's --spec-draft-vocab): logits have len(rows) columns, and
        draft_chain's drafts map back to token ids."""
        old = self.stack.head
        self.stack.set_io(self.model.model.embed_tokens.weight, self.model.model.norm.weight,
                          self.model.lm_head_weight[rows], self.quant)
        self.stack.keep.remove(old)
        self.vocab, self.id_map = len(rows), rows.to(torch.int64).contiguous()
        self._chain_logits.clear()

    @property
    def head(self) -> PackedLinear:
        return self.stack.head

    def forward_step(self, batch: StepBatch, cache: KVCache, taps=(), want_final_hidden: bool = False,
                     store: TapStore | None = None):
        """ForwardOutput with float32 logits, taps and final hidden state, and each output row's argmax;
        with `store`, the rows' taps go there instead (tap_store.py)."""
        keep: list = []
        step, out = self._step(batch, cache, taps, want_final_hidden, keep, store)
        self.lib.ss_model_forward(self.stack.model_ref, ctypes.byref(step))
        commit_lengths(batch, cache)
        return out

    def draft_chain(self, batch: StepBatch, cache: KVCache, n_more: int, pick=None) -> torch.Tensor:
        """Drafts [S, 1 + n_more] in one call: `batch` (output rows: each slot's last row, slot order), then
        n_more steps that feed each slot's last draft, picked by `pick` (a ChainPick; None: the argmax).
        The cache lengths include every fed row."""
        keep: list = []
        step, _ = self._step(batch, cache, (), False, keep, chain=True)
        drafts = draft_buffer(self._drafts, batch.output_rows.shape[0], 1 + n_more)
        self.lib.ss_model_draft_chain(self.stack.model_ref, ctypes.byref(step), n_more,
                                      None if pick is None else pick.ref, _ptr(self.id_map), drafts.data_ptr())
        for seg in batch.segments:
            cache.lengths[seg.slot] = seg.pos0 + seg.n_rows + n_more
        return drafts

    def _step(self, batch: StepBatch, cache: KVCache, taps, want_final_hidden: bool, keep: list,
              store: TapStore | None = None, chain: bool = False):
        """The C step struct of `batch` and the ForwardOutput its buffers fill; `keep` holds what it points into.
        One struct per decoder and thread, refilled: right after a forward every Python operation runs on cold
        caches, and the fields that change per step are few. `chain`: the first step of a draft chain, whose
        logits only the call reads (a buffer per row count, reused) and which needs no argmax."""
        n, hidden, mine = batch.n_tokens, self.hidden, self._per_thread
        if not hasattr(mine, "step"):
            mine.step, mine.attn_for = capi.Step(), (None, None)
        step = mine.step
        mine.attn_for = refill_causal_attention(step, mine.attn_for, self.model.rope, batch, cache, keep)
        n_out = int(batch.output_rows.shape[0])
        if chain:
            logits, argmax = self._chain_logits.get(n_out), None
            if logits is None:
                logits = self._chain_logits[n_out] = torch.empty(n_out, self.vocab, dtype=torch.float32)
        else:
            logits = torch.empty(n_out, self.vocab, dtype=torch.float32) if n_out else None
            argmax = torch.empty(n_out, dtype=torch.int64) if n_out else None
        final = torch.empty(n, hidden, dtype=torch.float32) if want_final_hidden else None
        tap_out, tap_layers = None, ()
        step.n_taps, step.tap_slot_rows = len(taps), 0
        if store is not None:           # written in place: nothing to allocate
            step.n_taps, step.tap_slot_rows = len(store.layers), store.capacity
            step.tap_layers, step.tap_out = ctypes.addressof(store.c_layers), store.data.data_ptr()
        elif taps:
            tap_layers, tap_ids = self._tap_layers(taps)
            tap_out = torch.empty(n, len(tap_layers) * hidden, dtype=torch.float32)
            step.tap_layers, step.tap_out = ctypes.addressof(tap_ids), tap_out.data_ptr()
        step.n_rows, step.tokens, step.n_out, step.out_rows = n, batch.tokens.data_ptr(), n_out, \
            batch.output_rows.data_ptr()
        step.logits, step.argmax, step.final_hidden = _ptr(logits), _ptr(argmax), _ptr(final)
        return step, ForwardOutput(logits, tap_out, tap_layers, final, argmax)

    def _tap_layers(self, taps) -> tuple[tuple[int, ...], ctypes.Array]:
        """(sorted layers, their C array), kept per distinct set of taps."""
        key = tuple(taps)
        if key not in self._taps:
            layers = tuple(sorted(taps))
            self._taps[key] = (layers, (ctypes.c_int32 * len(layers))(*layers))
        return self._taps[key]
