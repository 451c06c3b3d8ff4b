"""A block drafter's serving forward as one native call (kernels/native/block_draft.cpp), reused from call to
call: right after the target's forward every Python operation runs on caches the weights just evicted, so
each draft shape (slots x block rows, drafts) keeps its own struct and buffers, pointed at once, and a call
only writes values into them (`DraftShape`; its outputs are valid until the next draft of that shape).
"""
from __future__ import annotations

import ctypes

import numpy as np
import torch

from ..kernels import capi, library
from .kv_cache import KVCache
from .native_block_chain import NativeChain
from .native_decoder import attention_rows
from .transformer import float32_copy

# A draft's new context rows for the native call, read where they are: per chunk of rows, its row count
# and the address of each of its parts (one per tapped layer: float32, contiguous rows of H values).
ContextParts = list[tuple[int, list[int]]]


def _numpy(index: "torch.Tensor | np.ndarray | list") -> "np.ndarray | list":
    """An index array as numpy or a list (the callers pass either)."""
    return index.numpy() if isinstance(index, torch.Tensor) else index


class DraftShape:
    """One draft shape's inputs and outputs: each slot's number and first position (`index` [2, S]), its
    block's tokens (`block` [S, nb]), the new context rows' slots and positions, chunk row counts and part
    addresses, the block's final-normed rows (`hidden` [S, nb, H]) and the drafts (`chain`, when drafting)."""

    def __init__(self, base: capi.BlockDraft, n_slots: int, nb: int, n_draft: int, vocab: int, q_vocab: int,
                 hidden_size: int, first_draft_row: int):
        self.struct = step = capi.BlockDraft.from_buffer_copy(base)
        self.ref = ctypes.byref(step)
        self.index = np.zeros((2, n_slots), dtype=np.int64)
        self.block = np.zeros((n_slots, nb), dtype=np.int64)
        self.hidden = torch.empty(n_slots, nb, hidden_size)
        self.chain = NativeChain(n_slots, n_draft, vocab, q_vocab) if n_draft else None
        step.n_slots, step.n_block, step.block_tokens = n_slots, nb, self.block.ctypes.data
        step.slot, step.pos0, step.hidden_out = self.index[0].ctypes.data, self.index[1].ctypes.data, \
            self.hidden.data_ptr()
        if self.chain is None:
            NativeChain.clear(step)
        else:
            self.chain.point(step, first_draft_row)
        self.attn_for: tuple = (None, None)         # (cache, RoPE table) the struct's attention points into
        self.ctx_rows = self.ctx_chunks = 0
        self._grow_context(64, n_slots)

    def _grow_context(self, rows: int, addresses: int) -> None:
        step = self.struct
        if rows > self.ctx_rows:
            self.ctx_rows = max(rows, 2 * self.ctx_rows)
            self.ctx_index = np.zeros((2, self.ctx_rows), dtype=np.int64)
            step.ctx_slot, step.ctx_pos = self.ctx_index[0].ctypes.data, self.ctx_index[1].ctypes.data
        if addresses > self.ctx_chunks:
            self.ctx_chunks = max(addresses, 2 * self.ctx_chunks)
            self.chunk_rows = np.zeros(self.ctx_chunks, dtype=np.int64)
            self.part_ptrs = (ctypes.c_void_p * self.ctx_chunks)()
            step.ctx_chunk_rows, step.ctx_parts = self.chunk_rows.ctypes.data, ctypes.addressof(self.part_ptrs)

    def set_context(self, chunk_rows: list[int], addresses: list[int], ctx_slots, ctx_positions) -> None:
        """The new context rows: per chunk its row count, the addresses of its parts (chunk by chunk), and
        every row's slot and position (lists or arrays)."""
        n_ctx = sum(chunk_rows)
        self._grow_context(n_ctx, max(len(addresses), len(chunk_rows)))
        if n_ctx:
            self.ctx_index[0, :n_ctx] = ctx_slots
            self.ctx_index[1, :n_ctx] = ctx_positions
            self.chunk_rows[:len(chunk_rows)] = chunk_rows
            self.part_ptrs[:len(addresses)] = addresses
        step = self.struct
        step.n_ctx, step.n_chunks = n_ctx, len(chunk_rows)
        step.n_parts = len(addresses) // len(chunk_rows) if chunk_rows else 1


class NativeBlockCall:
    """The native call of one BlockDrafter after new_cache (its layers packed): `forward` is forward_cached,
    `draft` adds the lm_head, the draft picks, the Markov chain and the confidence head. `shape` and `run`
    are the same call for a caller that writes the shape's buffers itself (the serving draft)."""

    def __init__(self, drafter):
        self.drafter = drafter
        self.norm = float32_copy(drafter.hidden_norm.weight)           # what the structs point into
        self.struct = capi.BlockDraft(fc=drafter.packed_fc.struct, hidden_norm=self.norm.data_ptr())
        markov, confidence = drafter.markov_head, drafter.confidence_head
        self.markov_weights = None if markov is None else markov.native_weights()
        ids = drafter.vocab_ids
        if ids is not None:         # an lm_head cut to some tokens: the Markov bias's columns for those
            self.struct.id_map = ids.data_ptr()
            if self.markov_weights is not None:
                w1, w2t, table = self.markov_weights
                self.markov_weights = (w1, w2t[:, ids].contiguous(), None if table is None else table[:, ids].contiguous())
        self.markov_ptrs = NativeChain.markov_ptrs(self.markov_weights)
        self.confidence_weights = None if confidence is None else drafter.confidence_weights()
        self.vocab = drafter.native.model.vocab
        self.model_ref = drafter.native.model_ref
        self.first_draft_row = drafter.block_rows_for(1) - 1
        self.shapes: dict[tuple[int, int, int], DraftShape] = {}

    def shape(self, n_slots: int, nb: int, n_draft: int) -> DraftShape:
        """The buffers of calls for n_slots blocks of nb rows drafting n_draft tokens (0: the layers alone)."""
        key = (n_slots, nb, n_draft)
        shape = self.shapes.get(key)
        if shape is None:
            shape = self.shapes[key] = DraftShape(self.struct, n_slots, nb, n_draft, self.vocab,
                                                  self.drafter.shared.lm_head.shape[0], self.drafter.cfg.hidden_size,
                                                  self.first_draft_row)
        return shape

    def run(self, shape: DraftShape, cache: KVCache, end: int, markov: bool = False, sampling: bool = False,
            confidence: bool = False) -> None:
        """One call on the shape's buffers, as written (`end`: past the last position of any row). When
        drafting: with the Markov head or not, reading the chain's temperatures and uniforms (some slot
        samples) or not, and evaluating the confidence head or not."""
        step, keep = shape.struct, []
        rope = self.drafter._rope(end)
        if rope.rope_type == "dynamic":     # per-row RoPE tables: rows given
            row_slots, positions, key_len, rope_rows = self._explicit_rows(shape)
            step.attn = attention_rows(rope, row_slots, positions, key_len, cache, keep, rope_rows)
            shape.attn_for = (None, None)
        elif shape.attn_for[0] is not cache or shape.attn_for[1] is not rope.cos:
            step.attn = attention_rows(rope, None, None, None, cache, keep)
            shape.attn_for = (cache, rope.cos)      # what the struct points into, kept alive with it
        if shape.chain is not None:
            shape.chain.set(step, self.markov_ptrs if markov else None, sampling,
                            self.confidence_weights if confidence else None)
        library().ss_block_draft_forward(self.model_ref, shape.ref)

    def _load(self, shape: DraftShape, ctx_feats, ctx_slots, ctx_positions, slots, pos0, block_tokens) -> tuple:
        """Write forward_cached's inputs into the shape's buffers: ctx_feats a tensor [C, m*H] or ContextParts
        (the rows read where the target's forward wrote them); index arrays numpy, torch or lists. Returns
        what must outlive the call."""
        keep = []
        if isinstance(ctx_feats, torch.Tensor):
            feats = ctx_feats.float().contiguous()
            keep.append(feats)
            ctx_feats = [(feats.shape[0], [feats.data_ptr()])] if feats.shape[0] else []
        parts = ctx_feats or []
        shape.set_context([rows for rows, _ in parts], [a for _, chunk in parts for a in chunk],
                          _numpy(ctx_slots) if parts else [], _numpy(ctx_positions) if parts else [])
        shape.index[0] = _numpy(slots)
        shape.index[1] = _numpy(pos0)
        shape.block[:] = _numpy(block_tokens)
        return keep

    def forward(self, cache: KVCache, ctx_feats, ctx_slots, ctx_positions, slots, pos0, block_tokens) -> torch.Tensor:
        """forward_cached: context rows go in as key/value-only prefix rows; the block's final-normed rows
        [S, nb, H] (a buffer of this shape's next call too)."""
        n_slots, nb = block_tokens.shape
        shape = self.shape(n_slots, nb, 0)
        keep = self._load(shape, ctx_feats, ctx_slots, ctx_positions, slots, pos0, block_tokens)
        self.run(shape, cache, int(shape.index[1].max()) + nb)
        del keep
        return shape.hidden

    def draft(self, cache: KVCache, ctx_feats, ctx_slots, ctx_positions, slots, pos0, block_tokens, n_draft: int,
              anchors, markov: bool, temperatures=None, uniforms=None, confidence: bool = False, samplers=None):
        """(the block's final-normed rows [S, nb, H], tokens [S, n], logits [S, n, V] after the Markov bias,
        q [S, n, target vocabulary] of the sampled slots or None, the confidence head's predictions [S, n] (numpy) when
        `confidence`, else None). All are buffers of this shape's next draft too. `samplers` [S]: the
        sampled slots' requests (DraftRequest: top_k, top_p, min_p; None: no filter)."""
        n_slots, nb = block_tokens.shape
        shape = self.shape(n_slots, nb, n_draft)
        keep = self._load(shape, ctx_feats, ctx_slots, ctx_positions, slots, pos0, block_tokens)
        chain = shape.chain
        chain.anchors[:] = _numpy(anchors)
        sampling = uniforms is not None
        if sampling:
            chain.temperatures[:] = _numpy(temperatures)
            chain.set_samplers(samplers or [None] * n_slots)
            chain.uniforms[:] = uniforms
        self.run(shape, cache, int(shape.index[1].max()) + nb, markov, sampling, confidence)
        del keep
        return shape.hidden, chain.tokens, chain.logits, chain.q, chain.confidence if confidence else None

    def _explicit_rows(self, shape: DraftShape) -> tuple:
        """(row slots, positions, visible keys, per-row RoPE tables) of context rows then block rows, for
        RoPE whose tables depend on the length (dynamic NTK), which the kernel cannot index by position."""
        slots, starts = shape.index
        nb, n_ctx = shape.block.shape[1], shape.struct.n_ctx
        ctx_slots, ctx_positions = shape.ctx_index[:, :n_ctx]
        positions = np.concatenate([ctx_positions, (starts[:, None] + np.arange(nb)).reshape(-1)])
        row_slots = np.concatenate([ctx_slots, np.repeat(slots, nb)])
        key_len = np.concatenate([np.zeros(n_ctx, dtype=np.int64), np.repeat(starts + nb, nb)])
        positions, row_slots, key_len = (torch.from_numpy(a) for a in (positions, row_slots, key_len))
        return row_slots, positions, key_len, self.drafter._cos_sin(positions)
