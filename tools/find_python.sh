# shellcheck shell=bash
# Sourced by tools/dist_train.sh, tools/dist_test.sh and tools/slurm_train.sh:
# the Python that runs mocoplug, so that they work in a new shell as typed.
#   1. $PYTHON, when it is set;
#   2. `python` on PATH, when it has torch and mmengine (an activated venv or
#      conda environment);
#   3. the project's environment made by `make demo` / tools/setup_env.sh:
#      $MOCOPLUG_VENV, by default .venv in the project's root.
# Otherwise it stops and says what to do.

# find_python ROOT: print the Python to use (a notice on stderr for 3.)
find_python() {
  local root=$1
  local venv=${MOCOPLUG_VENV:-$root/.venv}
  if [ -n "${PYTHON:-}" ]; then
    echo "$PYTHON"
    return 0
  fi
  if command -v python >/dev/null 2>&1 && python -c '
import importlib.util, sys
sys.exit(not all(importlib.util.find_spec(m) for m in ("torch", "mmengine")))
' 2>/dev/null; then
    echo python
    return 0
  fi
  if [ -x "$venv/bin/python" ]; then
    echo "using $venv/bin/python (set PYTHON to choose another)" >&2
    echo "$venv/bin/python"
    return 0
  fi
  echo "error: no Python with torch and mmengine: \`python\` on PATH lacks" \
    "them and $venv/bin/python does not exist. Run \`make demo\` (or" \
    "tools/setup_env.sh) in $root to create it, activate the environment" \
    "you installed mocoplug in, or set PYTHON=/path/to/python." >&2
  return 1
}
