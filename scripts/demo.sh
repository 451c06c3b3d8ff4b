#!/usr/bin/env bash
# Set up, then run the demo: baseline vs speculative generation on the bundled model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/specserve demo "$@"
