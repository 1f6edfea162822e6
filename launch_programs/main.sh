#!/usr/bin/env bash
# The README's main job: sets up .venv/ if needed, then runs the main program.
# Extra arguments go to it (bash launch_programs/main.sh --help).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/ensure_venv.sh"
cd "$repo_root"
exec python -m launch_programs.main "$@"
