"""Data-parallel training under torchrun (gloo on loopback, 2 ranks on CPU): the 2-rank run takes the
same optimizer steps on the same global batch as one process, for a block drafter (DSpark, through
`specserve train-draft`, including a resume at another world size) and for a chain drafter
(draft-simple); the regenerated data is the same file whichever the world size."""
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from support.models import write_model
from specserve.train.block_trainer import BlockTrainConfig, BlockTrainer
from specserve.train.regen_data import build_regen_dataset, load_regen_dataset

pytestmark = [pytest.mark.train, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(ranks: int, *args: str) -> subprocess.CompletedProcess:
    """`torchrun --nproc-per-node ranks ARGS` on loopback, as a user starts it."""
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(ranks),
           "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("dp-target"), "qwen3", seed=3, std=0.25, num_hidden_layers=4)


REGEN = {"n_samples": 14, "new_tokens": 20, "prompt_tokens_min": 8, "prompt_tokens_max": 24}


@pytest.fixture(scope="module")
def data(target, tmp_path_factory):
    path = tmp_path_factory.mktemp("dp-data") / "regen.npz"
    build_regen_dataset(target, path, n_parallel=4, progress=False, **REGEN)
    return path


def test_regenerated_data_is_the_same_at_any_world_size(target, data, tmp_path):
    sharded = tmp_path / "regen-2.npz"
    torchrun(2, "-m", "specserve.train.regen_data", "--target", str(target), "--out", str(sharded),
             "--samples", str(REGEN["n_samples"]), "--new-tokens", str(REGEN["new_tokens"]), "-np", "4")
    assert sharded.is_file() and not list(tmp_path.glob("*.tmp*"))
    # the command's prompt-length defaults differ from the fixture's: rebuild the 1-rank file the same way
    single = tmp_path / "regen-1.npz"
    build_regen_dataset(target, single, n_parallel=4, progress=False, n_samples=REGEN["n_samples"],
                        new_tokens=REGEN["new_tokens"])
    one, two = load_regen_dataset(single), load_regen_dataset(sharded)
    assert len(one) == len(two) == REGEN["n_samples"]
    for a, b in zip(one, two):
        assert a.n_prompt == b.n_prompt and np.array_equal(a.tokens, b.tokens)


def _train_args(target, data, out, steps):
    return ["--method", "draft-dspark", "--target", str(target), "--data", str(data), "--out", str(out),
            "--steps", str(steps), "--batch-size", "4", "--seq-len", "48", "--anchors", "4", "--block-size", "4",
            "--layers", "1", "--taps", "2", "--markov-rank", "8", "--checkpoint-every", "2", "--eval-samples", "2",
            "--no-progress", "-t", "1"]


def _weights(out: Path) -> dict:
    state = torch.load(out / "checkpoints" / "last.pt", weights_only=False)
    return state["step"], state["model"]


def _assert_same(a: dict, b: dict, atol: float = 2e-5) -> None:
    assert a.keys() == b.keys()
    worst = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    assert worst < atol, f"largest weight difference {worst:.3g}"


def test_block_drafter_two_ranks_equal_one_and_resume_at_another_world_size(target, data, tmp_path):
    from specserve.cli import main
    one, two, resumed = tmp_path / "one", tmp_path / "two", tmp_path / "resumed"
    assert main(["train-draft", *_train_args(target, data, one, 4)]) == 0
    done = torchrun(2, "-m", "specserve", "train-draft", *_train_args(target, data, two, 4))
    assert done.stdout.count("wrote ") == 1                    # rank 0 alone reports and writes
    step_one, w_one = _weights(one)
    step_two, w_two = _weights(two)
    assert step_one == step_two == 4
    start = BlockTrainer(BlockTrainConfig(method="draft-dspark", target_dir=str(target), out_dir=str(resumed),
                                          data_path=str(data), steps=4, batch_size=4, max_len=48, anchors=4,
                                          block_size=4, num_layers=1, num_taps=2, markov_rank=8,
                                          checkpoint_every=2, eval_samples=2, threads=1), progress=False)
    _, initial = start.step, {k: v.clone() for k, v in start.model.state_dict().items()}
    start.train(stop_after=2)
    torchrun(2, "-m", "specserve", "train-draft", *_train_args(target, data, resumed, 4))
    step_resumed, w_resumed = _weights(resumed)
    assert step_resumed == 4
    moved = max(float((w_one[k] - initial[k]).abs().max()) for k in initial)
    assert moved > 1e-3                                        # training changed the drafter
    _assert_same(w_one, w_two)
    _assert_same(w_one, w_resumed)
    assert sorted(p.name for p in one.iterdir()) == sorted(p.name for p in two.iterdir())


def test_chain_drafter_two_ranks_equal_one(target, data, tmp_path):
    script = str(ROOT / "tests" / "support" / "chain_data_parallel.py")
    weights = {}
    for ranks in (1, 2):
        out = tmp_path / f"draft-{ranks}.pt"
        torchrun(ranks, script, str(target), str(data), str(out), "4")
        weights[ranks] = torch.load(out)
    _assert_same(weights[1], weights[2])
