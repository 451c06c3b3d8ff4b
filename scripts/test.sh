#!/usr/bin/env bash
# Set up with the test dependencies, then run the whole test suite (-m "": every marker, also
# slow/server/train, which a plain `pytest` leaves out). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
.venv/bin/python -m pytest -m "" "$@"
