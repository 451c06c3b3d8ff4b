#!/usr/bin/env bash
# Creates .venv (if needed) and installs specserve into it. Usage: scripts/setup.sh [EXTRAS]
# torch is installed first and pinned: a bare "torch" requirement would pull a multi-GB CUDA build.
# SPECSERVE_TORCH_INDEX (e.g. https://download.pytorch.org/whl/cpu) installs it from that index instead.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "torch==2.13.0" ${SPECSERVE_TORCH_INDEX:+--index-url "$SPECSERVE_TORCH_INDEX"}
if [ -n "$extras" ]; then
    .venv/bin/python -m pip install --quiet -e ".[$extras]"
else
    .venv/bin/python -m pip install --quiet -e .
fi
