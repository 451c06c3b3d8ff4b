"""The `specserve` command line as a user runs it: a real subprocess."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*args, env=None):
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run([sys.executable, "-m", "specserve", *args], capture_output=True, text=True,
                          env=full_env, timeout=300)
