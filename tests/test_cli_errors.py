"""Command-line mistakes get one `error: ...` line naming the problem and a non-zero exit, never a
traceback: bad training data, impossible training options, a missing target, a busy port."""
import socket
import subprocess
import sys

import numpy as np
import pytest

from support.cli import ROOT, run

pytestmark = pytest.mark.slow


def _error_line(result) -> str:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    return result.stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def bad_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad_data")
    np.save(folder / "array.npy", np.zeros(3))
    (folder / "pickled.npz").write_bytes(b"\x80\x04K\x01.")
    np.savez(folder / "no_keys.npz", a=np.zeros(3))
    return folder


@pytest.mark.parametrize("name,expected", [("pickled.npz", "is not a regenerated data file"),
                                           ("array.npy", "is not a regenerated data file"),
                                           ("no_keys.npz", "it holds a, not tokens, offsets, n_prompt, meta")])
@pytest.mark.parametrize("method", ["dflash", "draft-simple"])
def test_train_draft_with_bad_data(bad_data, tmp_path, name, expected, method):
    line = _error_line(run("train-draft", "--method", method, "--data", str(bad_data / name), "--out", str(tmp_path)))
    assert line.startswith("error: ") and expected in line


def test_chain_drafters_need_existing_data(tmp_path):
    """(dflash/dspark build a missing --data file from the target instead)"""
    line = _error_line(run("train-draft", "--method", "eagle3", "--data", str(tmp_path / "missing.npz"), "--out",
                           str(tmp_path / "out")))
    assert line.startswith("error: data file not found")


@pytest.mark.parametrize("args,expected", [
    (["--method", "draft-dflash", "--block-size", "0"], "--block-size must be at least 1, got 0"),
    (["--method", "dflash", "--steps", "0"], "--steps must be at least 1, got 0"),
    (["--method", "dspark", "--taps", "40"], "--taps 40: the target"),
    (["--method", "dspark", "--tap-layers", "1,9"], "--tap-layers '1,9': need increasing layer indices in 0..5"),
    (["--method", "dflash", "--tap-layers", "3,1"], "--tap-layers '3,1': need increasing layer indices"),
    (["--method", "dflash", "--tap-layers", "one"], "--tap-layers 'one': expected comma-separated layer indices"),
    (["--method", "draft-simple", "--draft-layers", "-1"], "--draft-layers must be at least 1, got -1"),
    (["--method", "eagle3", "--lr", "0"], "--lr must be positive"),
    # an option of other methods is an error, not ignored
    (["--method", "draft-simple", "--anchors", "8"], "--anchors is an option of draft-dflash, draft-dspark, not of "
                                                     "draft-simple"),
    (["--method", "dspark", "--max-minutes", "5"], "--max-minutes is an option of draft-simple, draft-eagle3, "
                                                   "draft-mtp, not of draft-dspark"),
    (["--method", "mtp", "--draft-layers", "3"], "--draft-layers is an option of draft-simple, not of draft-mtp"),
    (["--method", "draft-simple", "--ttt-depth", "2"], "--ttt-depth is an option of draft-eagle3, draft-mtp, not of "
                                                       "draft-simple"),
])
def test_train_draft_impossible_options(bad_data, tmp_path, args, expected):
    line = _error_line(run("train-draft", *args, "--data", str(bad_data / "no_keys.npz"), "--out", str(tmp_path)))
    assert line == f"error: {expected}" or (line.startswith("error: ") and expected in line)


@pytest.mark.parametrize("args", [["--method", "mtp", "--ttt-depth", "2", "--no-progress"],
                                  ["--method", "dflash", "--anchors", "8", "--no-progress"]])
def test_train_draft_options_of_the_method_pass_the_check(bad_data, tmp_path, args):
    """(the error is then about the data: the options were accepted)"""
    line = _error_line(run("train-draft", *args, "--data", str(bad_data / "no_keys.npz"), "--out", str(tmp_path)))
    assert "is not a regenerated data file" in line or "it holds a, not tokens" in line


def test_train_draft_taps_two_ways(bad_data, tmp_path):
    result = run("train-draft", "--method", "dspark", "--taps", "3", "--tap-layers", "1,2,3", "--data",
                 str(bad_data / "no_keys.npz"), "--out", str(tmp_path))
    assert result.returncode == 2 and "argument --tap-layers: not allowed with argument --taps" in _error_line(result)


def test_regen_data_with_a_missing_or_broken_target(tmp_path):
    def regen(target):
        return subprocess.run([sys.executable, "-m", "specserve.train.regen_data", "--target", str(target), "--out",
                               str(tmp_path / "out.npz")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert "model directory not found" in _error_line(regen(tmp_path / "nowhere"))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    assert "config.json is not valid JSON" in _error_line(regen(broken))


def test_serve_on_a_busy_port():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = _error_line(run("serve", "--port", str(port)))
    assert line == f"error: cannot listen on 127.0.0.1:{port}: Address already in use (is another server running " \
                   f"there?)"


def test_prompt_and_file_together(tmp_path):
    (tmp_path / "p.txt").write_text("x")
    line = _error_line(run("generate", "-p", "x", "-f", str(tmp_path / "p.txt"), "-n", "2"))
    assert line == "error: give the prompt with -p/--prompt or with -f/--file, not both"
