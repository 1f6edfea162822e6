# Sourced by the README's two commands: makes .venv/ on Python 3.10 with the
# pinned stack of setup.py, once. A second call finds the stamp and installs
# nothing; editing setup.py changes the stamp and reinstalls.
#
# Why Python 3.10: dm-launchpad publishes wheels for CPython <= 3.10 only, and
# the whole stack is tied to its TF 2.8 ABI (README, "Why Python 3.10").

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo_root/.venv"

_is_python310() {
  [ -n "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 10))' 2>/dev/null
}

_find_python310() {
  local candidate
  for candidate in "$(command -v python3.10 2>/dev/null)" "$(command -v python3 2>/dev/null)"; do
    if _is_python310 "$candidate"; then echo "$candidate"; return 0; fi
  done
  if command -v pyenv >/dev/null 2>&1; then
    for candidate in $(ls -d "$(pyenv root)"/versions/3.10.* 2>/dev/null | sort -V -r); do
      if _is_python310 "$candidate/bin/python"; then echo "$candidate/bin/python"; return 0; fi
    done
  fi
  return 1
}

_stack_stamp() {
  cat "$repo_root/setup.py" "$repo_root/launch_programs/ensure_venv.sh" | sha256sum | cut -d' ' -f1
}

if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.stack-stamp" 2>/dev/null)" = "$(_stack_stamp)" ]; then
  :  # reuse: nothing to install
else
  if ! _is_python310 "$venv/bin/python"; then
    python310="$(_find_python310)" || {
      echo "error: Python 3.10 is required and none was found on PATH or under pyenv." >&2
      echo "  dm-launchpad ships wheels only for CPython <= 3.10, and the stack is tied to TF 2.8." >&2
      echo "  Install it, then rerun: 'pyenv install 3.10.13', or your system's python3.10 with venv" >&2
      echo "  (Debian/Ubuntu: apt-get install python3.10 python3.10-venv)." >&2
      return 1 2>/dev/null || exit 1
    }
    rm -rf "$venv"
    echo "[setup] creating .venv with $python310" >&2
    "$python310" -m venv "$venv" || { return 1 2>/dev/null || exit 1; }
  fi
  echo "[setup] installing the pinned stack into .venv (about 2 minutes, once)" >&2
  start=$SECONDS
  # The stack is pinned exactly, so pip has nothing to resolve. PIP_CONSTRAINT is
  # cleared: a machine-wide constraints file is for other projects' packages.
  if PIP_CONSTRAINT= "$venv/bin/python" -m pip install -q --disable-pip-version-check \
       -e "$repo_root" 2> >(grep -v "^WARNING: Location" >&2); then
    _stack_stamp > "$venv/.stack-stamp"
    echo "[setup] installed in $((SECONDS - start)) s" >&2
  else
    echo "error: installing the pinned stack failed (see above)." >&2
    return 1 2>/dev/null || exit 1
  fi
fi

export PATH="$venv/bin:$PATH"
# TF's C++ banner and per-op logging drown the programs' own progress lines.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# Feature-only control tasks need no renderer; without this dm_control probes GLFW/X11.
export MUJOCO_GL="${MUJOCO_GL:-disable}"
