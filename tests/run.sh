#!/usr/bin/env bash
# The README's test command: sets up .venv/ if needed, then runs the whole suite.
# Extra arguments go to pytest (for example: bash tests/run.sh -k vtrace).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../launch_programs/ensure_venv.sh"
cd "$repo_root"
exec python -m pytest tests --durations=15 "$@"
