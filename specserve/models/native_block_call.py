"""A block drafter's serving forward as one native call (kernels/native/block_draft.cpp), reused from call to
call: right after the target's forward every Python operation runs on caches the weights just evicted, so
the struct's weight fields are set once, its attention fields once per cache, and a draft's outputs go
into buffers kept per shape (valid until the next draft of that shape).
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


def _numpy(index: "torch.Tensor | np.ndarray") -> np.ndarray:
    """An index array as numpy (the callers pass either)."""
    return index if isinstance(index, np.ndarray) else index.numpy()


def _context_parts(ctx_feats: "torch.Tensor | ContextParts | None", keep: list) -> ContextParts:
    if ctx_feats is None:
        return []
    if isinstance(ctx_feats, torch.Tensor):
        feats = ctx_feats.float().contiguous()
        keep.append(feats)
        return [(feats.shape[0], [feats.data_ptr()])] if feats.shape[0] else []
    return ctx_feats


class NativeBlockCall:
    """The native call of one BlockDrafter after new_cache (its layers packed): `forward` is forward_cached,
    `draft` adds the lm_head, the draft picks, the Markov chain and the confidence head."""

    def __init__(self, drafter):
        self.drafter = drafter
        self.norm = float32_copy(drafter.hidden_norm.weight)           # what the struct points into
        self.struct = capi.BlockDraft(fc=drafter.packed_fc.struct, hidden_norm=self.norm.data_ptr())
        self.attn_for: tuple = (None, None)
        markov, confidence = drafter.markov_head, drafter.confidence_head
        self.markov_weights = None if markov is None else markov.native_weights()
        self.confidence_weights = None if confidence is None else drafter.confidence_weights()
        self.vocab = drafter.native.model.vocab
        self.model_ref = drafter.native.model_ref
        self.first_draft_row = drafter.block_rows_for(1) - 1
        self.chains: dict[tuple[int, int], NativeChain] = {}
        self.hidden: dict[tuple[int, int], torch.Tensor] = {}

    def forward(self, cache: KVCache, ctx_feats, ctx_slots, ctx_positions, slots, pos0, block_tokens,
                chain: NativeChain | None = None, hidden: torch.Tensor | None = None) -> torch.Tensor:
        """forward_cached: context rows go in as key/value-only prefix rows. With `chain`, the same call
        also runs the lm_head over the draft rows and picks the drafts into it. ctx_feats: a tensor [C, m*H]
        or ContextParts (the rows read where the target's forward wrote them). The kernel derives the rows'
        slots, positions and visible keys from the index arrays (numpy or torch)."""
        drafter, step = self.drafter, self.struct
        n_slots, nb = block_tokens.shape
        keep: list = []
        parts = _context_parts(ctx_feats, keep)
        n_ctx = sum(rows for rows, _ in parts)
        starts = np.ascontiguousarray(_numpy(pos0), dtype=np.int64)
        row_slots = np.asarray(slots, dtype=np.int64)
        index = [row_slots, starts]
        if n_ctx:
            index += [np.ascontiguousarray(_numpy(a), dtype=np.int64) for a in (ctx_slots, ctx_positions)]
        rope = drafter._rope(max(starts.tolist()) + nb)
        if rope.rope_type == "dynamic":     # per-row RoPE tables: rows given
            row_slots_all, positions, key_len, rope_rows = self._explicit_rows(index, nb)
            step.attn = attention_rows(rope, row_slots_all, positions, key_len, cache, keep, rope_rows)
            self.attn_for = (None, None)
        elif self.attn_for[0] is not cache or self.attn_for[1] is not rope.cos:
            step.attn = attention_rows(rope, None, None, None, cache, keep)
            self.attn_for = (cache, rope.cos)      # what the struct points into, kept alive with it
        block_tokens = np.ascontiguousarray(_numpy(block_tokens), dtype=np.int64)
        if hidden is None:
            hidden = torch.empty(n_slots, nb, drafter.cfg.hidden_size, dtype=torch.float32)
        addresses = [a for _, chunk in parts for a in chunk]
        part_ptrs = (ctypes.c_void_p * max(1, len(addresses)))(*addresses)
        chunk_rows = np.array([rows for rows, _ in parts], dtype=np.int64)
        keep += [index, block_tokens, chunk_rows, part_ptrs]
        step.n_ctx, step.n_chunks, step.n_parts = n_ctx, len(parts), len(parts[0][1]) if parts else 1
        step.ctx_chunk_rows, step.ctx_parts = chunk_rows.ctypes.data, ctypes.addressof(part_ptrs)
        step.n_slots, step.n_block, step.block_tokens = n_slots, nb, block_tokens.ctypes.data
        step.slot, step.pos0, step.hidden_out = row_slots.ctypes.data, starts.ctypes.data, hidden.data_ptr()
        step.ctx_slot, step.ctx_pos = (index[2].ctypes.data, index[3].ctypes.data) if n_ctx else (None, None)
        if chain is None:
            NativeChain.clear(step)
        else:
            chain.fill(step, self.first_draft_row)
        library().ss_block_draft_forward(self.model_ref, ctypes.byref(step))
        return hidden

    def draft(self, cache: KVCache, ctx_feats, ctx_slots, ctx_positions, slots, pos0, block_tokens, n_draft: int,
              anchors: np.ndarray, markov: bool, temperatures=None, uniforms=None, confidence: bool = False):
        """(the block's final-normed rows [S, nb, H], tokens [S, n], logits [S, n, V] after the Markov bias,
        q [S, n, V] of the sampled slots or None, the confidence head's predictions [S, n] (numpy) when
        `confidence`, else None). All are buffers of this shape's next draft too."""
        n_slots, nb = block_tokens.shape
        chain = self.chains.get((n_slots, n_draft))
        if chain is None:
            chain = self.chains[(n_slots, n_draft)] = NativeChain(n_slots, n_draft, self.vocab)
        hidden = self.hidden.get((n_slots, nb))
        if hidden is None:
            hidden = self.hidden[(n_slots, nb)] = torch.empty(n_slots, nb, self.drafter.cfg.hidden_size)
        chain.set(anchors, self.markov_weights if markov else None, temperatures, uniforms,
                  self.confidence_weights if confidence else None)
        self.forward(cache, ctx_feats, ctx_slots, ctx_positions, slots, pos0, block_tokens, chain, hidden)
        return hidden, chain.tokens, chain.logits, chain.q, chain.confidence if confidence else None

    def _explicit_rows(self, index: list[np.ndarray], nb: int) -> tuple:
        """(row slots, positions, visible keys, per-row RoPE tables) of context rows then block rows, for
        RoPE whose tables depend on the length (dynamic NTK), which the kernel cannot index by position."""
        slots, starts = index[:2]
        ctx_slots, ctx_positions = index[2:] if len(index) > 2 else (slots[:0], starts[:0])
        positions = np.concatenate([ctx_positions, (starts[:, None] + np.arange(nb)).reshape(-1)])
        row_slots = np.concatenate([ctx_slots, np.repeat(slots, nb)])
        key_len = np.concatenate([np.zeros(len(ctx_slots), dtype=np.int64), np.repeat(starts + nb, nb)])
        positions, row_slots, key_len = (torch.from_numpy(a) for a in (positions, row_slots, key_len))
        return row_slots, positions, key_len, self.drafter._cos_sin(positions)
