"""Another git revision of specserve, importable beside the working tree's: for A/B runs of a code change
in one process (benchmarks/interleaved.py, configurations written REV@SPEC...).

The revision's `specserve/` folder is exported with `git archive` to runs/revisions/<commit>/ and renamed
`specserve_<commit>`; its modules import each other relatively, so the copy runs its own code, and its
native kernels (other sources) build into their own cached library.
"""
from __future__ import annotations

import importlib
import io
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent


def load_revision(rev: str) -> SimpleNamespace:
    """The package as of git revision `rev`: its LLM, SamplingParams, kernels, served_options,
    shipped_drafters and BUNDLED_MODEL (the working tree's when rev is empty)."""
    name = "specserve"
    if rev:
        commit = subprocess.run(["git", "rev-parse", "--verify", rev + "^{commit}"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
        name = f"specserve_{commit[:12]}"
        dest = ROOT / "runs" / "revisions" / commit
        if not (dest / name).is_dir():
            archive = subprocess.run(["git", "archive", commit, "specserve"], cwd=ROOT, capture_output=True,
                                     check=True).stdout
            dest.mkdir(parents=True, exist_ok=True)
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(dest, filter="data")
            (dest / "specserve").rename(dest / name)
        if str(dest) not in sys.path:
            sys.path.insert(0, str(dest))
    package = importlib.import_module(name)
    bundled = importlib.import_module(name + ".bundled")
    return SimpleNamespace(LLM=package.LLM, SamplingParams=package.SamplingParams, kernels=package.kernels,
                           served_options=bundled.served_options, shipped_drafters=bundled.shipped_drafters,
                           BUNDLED_MODEL=importlib.import_module(name + ".llm").BUNDLED_MODEL)
