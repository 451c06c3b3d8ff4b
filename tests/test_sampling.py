"""The target's sampling distribution: top-k, top-p, min-p, temperature (llama.cpp order)."""
import numpy as np
import torch

from specserve.random_stream import CHUNK, RequestGenerator, draw_uniforms
from specserve.sampling import SamplingParams, make_generator, sample_rows, target_probs


def reference(logits, top_k=0, top_p=1.0, min_p=0.0, temperature=1.0):
    """A plain per-token implementation of the same chain."""
    keep = list(range(len(logits)))
    order = sorted(keep, key=lambda i: -logits[i])
    if top_k > 0:
        order = order[:top_k]
    p = torch.softmax(torch.tensor([logits[i] for i in order]), -1).tolist()
    if top_p < 1.0:
        kept, mass = [], 0.0
        for i, pi in zip(order, p):
            kept.append(i)
            mass += pi
            if mass >= top_p:
                break
        order = kept
    if min_p > 0:
        p = torch.softmax(torch.tensor([logits[i] for i in order]), -1).tolist()
        best = max(p)
        order = [i for i, pi in zip(order, p) if pi >= min_p * best]
    out = torch.zeros(len(logits))
    vals = torch.softmax(torch.tensor([logits[i] / temperature for i in order]), -1)
    out[order] = vals
    return out


def test_matches_reference_chain():
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        logits = torch.randn(30, generator=gen) * 2
        for kw in (dict(top_k=5), dict(top_p=0.7), dict(min_p=0.2), dict(top_k=10, top_p=0.9, min_p=0.05),
                   dict(temperature=0.5, top_p=0.8)):
            params = SamplingParams(temperature=kw.pop("temperature", 1.0), **kw)
            ours = target_probs(logits.unsqueeze(0), params)[0]
            ref = reference(logits.tolist(), params.top_k, params.top_p, params.min_p, params.temperature)
            assert torch.allclose(ours, ref, atol=1e-6), kw


def test_generators_are_reproducible():
    g1, s1 = make_generator(42)
    g2, _ = make_generator(42)
    assert s1 == 42 and torch.equal(torch.rand(5, generator=g1), torch.rand(5, generator=g2))
    _, random_seed = make_generator(None)
    assert random_seed >= 0


def test_buffered_uniforms_are_the_generators_own_stream():
    """A request's uniforms come CHUNK at a time from its generator, yet are the numbers one torch.rand per use
    gives, in order, across chunk boundaries and for draws longer than a chunk; a plain generator draws directly."""
    sizes = [1, 3, 7, 2, CHUNK - 5, 9, 2 * CHUNK + 1, 4, 1]
    gen, plain = RequestGenerator(11), torch.Generator().manual_seed(11)
    for n in sizes:
        got = gen.uniforms(n)
        assert got.dtype == np.float64 and got.shape == (n,)
        np.testing.assert_array_equal(got, torch.rand(n, generator=plain, dtype=torch.float64).numpy())
    plain = torch.Generator().manual_seed(3)
    expected = torch.rand(5, generator=torch.Generator().manual_seed(3), dtype=torch.float64).numpy()
    np.testing.assert_array_equal(draw_uniforms(plain, 5), expected)
    assert make_generator(5)[0].uniforms(4).tolist() == RequestGenerator(5).uniforms(4).tolist()


def test_wide_vocabularies_match_the_reference_chain():
    """Flat logits over 1000 tokens: top-p needs hundreds of candidates, top-k keeps 200 of them."""
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        logits = torch.randn(1000, generator=gen) * 0.3
        for kw in (dict(top_p=0.9), dict(top_k=200), dict(top_k=300, top_p=0.8, min_p=0.5), dict(temperature=0.7)):
            params = SamplingParams(temperature=kw.pop("temperature", 1.0), **kw)
            ours = target_probs(logits.unsqueeze(0), params)[0]
            ref = reference(logits.tolist(), params.top_k, params.top_p, params.min_p, params.temperature)
            assert torch.allclose(ours, ref, atol=1e-6), kw
            assert (ours > 0).sum() == (ref > 0).sum(), kw


def test_long_rows_and_ties_match_the_reference_chain():
    """Rows of 4096 (top-k from the blocks' maxima, top-p by selection over thousands of candidates) and rows
    of few distinct values (at the top-p cut the lower id first; at the top-k boundary every tie is kept)."""
    gen = torch.Generator().manual_seed(2)
    rows = [torch.randn(4096, generator=gen) * s for s in (0.3, 2.0)]
    tied = [torch.randint(0, 6, (4096,), generator=gen).float(), torch.randint(0, 3, (600,), generator=gen).float()]
    for logits in rows + tied:
        for kw in (dict(top_k=40), dict(top_k=5, temperature=0.8), dict(top_p=0.95), dict(top_p=0.3),
                   dict(top_k=40, top_p=0.95, min_p=0.05, temperature=0.8), dict(top_p=0.9, min_p=0.2)):
            params = SamplingParams(temperature=kw.pop("temperature", 1.0), **kw)
            ours = target_probs(logits.unsqueeze(0), params)[0]
            if params.top_k and any(logits is t for t in tied):
                kth = logits.sort(descending=True).values[params.top_k - 1]
                assert torch.equal(ours > 0, logits >= kth) or params.top_p < 1, kw
                continue
            ref = reference(logits.tolist(), params.top_k, params.top_p, params.min_p, params.temperature)
            assert torch.allclose(ours, ref, atol=1e-6), kw
            assert (ours > 0).sum() == (ref > 0).sum(), kw


def test_draws_follow_the_distribution():
    probs = torch.tensor([[0.5, 0.0, 0.2, 0.3], [0.0, 0.0, 1.0, 0.0]])
    gen, _ = make_generator(7)
    counts = torch.zeros(2, 4)
    for _ in range(4000):
        tokens = sample_rows(probs, gen)
        counts[0, tokens[0]] += 1
        counts[1, tokens[1]] += 1
    assert counts[0, 1] == 0 and counts[1, 2] == 4000
    assert torch.allclose(counts[0] / 4000, probs[0], atol=0.03)


def test_native_draw_is_the_in_order_draw():
    """The native draw finds the crossing with block sums in vector lanes; it must pick exactly the token of
    the definition (the first whose running double sum passes u * total, in order: PyTorch's cumsum), on
    dense and truncated rows, every vocabulary size, and uniforms aimed right at a token's edge."""
    from specserve.kernels import library
    from specserve.sampling import draw_with_uniform
    gen = torch.Generator().manual_seed(3)
    for vocab in (5, 127, 128, 129, 1000, 4096):
        for trial in range(12):
            p = torch.softmax(torch.randn(vocab, generator=gen) * (1 + trial), -1)
            if trial % 3 == 1:          # a top-k row: mostly zeros
                p[torch.randperm(vocab, generator=gen)[:max(1, vocab - 7)]] = 0
            if trial % 3 == 2:          # values far below the rest
                p[::5] *= 1e-30
            p = p / p.sum()
            cumulative = p.double().cumsum(0)
            edges = cumulative[torch.randint(vocab, (4,), generator=gen)] / cumulative[-1]
            uniforms = torch.cat([torch.rand(8, generator=gen, dtype=torch.float64), edges,
                                  edges.nextafter(torch.zeros(4, dtype=torch.float64)),
                                  edges.nextafter(torch.ones(4, dtype=torch.float64))]).clamp(0, 1 - 1e-16)
            rows = p.unsqueeze(0).repeat(len(uniforms), 1).contiguous()
            drawn = torch.empty(len(uniforms), dtype=torch.int64)
            u = np.ascontiguousarray(uniforms.numpy())
            library().ss_sample(rows.data_ptr(), len(uniforms), vocab, u.ctypes.data, drawn.data_ptr())
            assert drawn.tolist() == [draw_with_uniform(p, float(x)) for x in u], (vocab, trial)
