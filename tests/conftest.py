import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support.distribution import VOCAB  # noqa: E402
from support.models import write_model  # noqa: E402

from specserve import kernels  # noqa: E402

# one thread: tiny test models gain nothing from more, and it keeps tests fast on a busy machine
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory):
    """A random Qwen3 checkpoint whose greedy output loops a lot (peaky weights), so n-gram drafts happen."""
    return write_model(tmp_path_factory.mktemp("qwen3"), "qwen3", seed=1, std=0.25)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("llama"), "llama", seed=2, std=0.25)


@pytest.fixture(scope="session")
def tiny_qwen3_bf16(tmp_path_factory):
    """The same kind of checkpoint stored in bfloat16: served with bfloat16 linear layers."""
    return write_model(tmp_path_factory.mktemp("qwen3bf16"), "qwen3", seed=1, std=0.25, dtype=torch.bfloat16,
                       torch_dtype="bfloat16")


@pytest.fixture(scope="session")
def small_vocab_model(tmp_path_factory):
    """An 8-token model for the sampled-distribution checks (support/distribution.py)."""
    return write_model(tmp_path_factory.mktemp("v8"), "qwen3", seed=11, std=0.6, tokenizer=False, vocab_size=VOCAB)


@pytest.fixture
def torch_kernels():
    """Serve with PyTorch operations instead of the native kernels (the portable reference path)."""
    previous = kernels.requested()
    kernels.configure(kernels="torch")
    yield
    kernels.configure(kernels=previous)
