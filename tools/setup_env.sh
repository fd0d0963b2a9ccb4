#!/usr/bin/env bash
# Set up mocoplug's tested stack in a virtual environment (default: ./.venv).
#
# Idempotent: a second run checks a stamp and the installed stack and exits in
# seconds. Steps:
#   1. create the venv with Python 3.11 (override with PYTHON=/path/to/python);
#   2. install build tools (setuptools>=77.0.3,<82: torch 2.14.1 asks for
#      >=77.0.3 and mmcv 2.1.0's setup.py imports pkg_resources, gone in 82);
#   3. install torch/torchvision/mmengine and the test tools, pinned;
#   4. install mmcv 2.1.0 WITH ops: from a wheel if pip finds one (your
#      PIP_FIND_LINKS and the cache below), else download its sdist, raise the
#      C++ standard to c++20 (required by torch >= 2.10 headers), build it
#      with ninja (MAX_JOBS parallel jobs), printing its progress, and keep
#      the wheel in the cache so the next set-up is instant;
#   5. install mmpretrain/mmdet, then mocoplug itself in editable mode.
#
# Environment knobs:
#   PYTHON            interpreter to create the venv with (default python3.11)
#   MOCOPLUG_VENV     venv location (default <repo>/.venv)
#   MOCOPLUG_CACHE    wheel cache (default ${XDG_CACHE_HOME:-~/.cache}/mocoplug)
#   PIP_FIND_LINKS    extra folders/URLs with wheels (e.g. a prebuilt mmcv)
#   MAX_JOBS          parallel compile jobs for mmcv (default: nproc; each
#                     compiler process takes about 0.6 GiB)
#
# Output: one line per step (and the compile's progress); what pip and the
# compiler print goes to log files under $MOCOPLUG_CACHE/logs, whose tail is
# shown when a step fails.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${MOCOPLUG_VENV:-$ROOT/.venv}
CACHE=${MOCOPLUG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mocoplug}
WHEELS=$CACHE/wheels
LOGS=$CACHE/logs
MMCV_VERSION=2.1.0
STAMP=$VENV/.mocoplug-setup-stamp

say() { printf '[setup] %s\n' "$*"; }
fail() {
  printf '[setup] FAILED: %s\n' "$1" >&2
  printf '[setup] to retry: %s\n' "$2" >&2
  exit 1
}

# run_logged LOG CMD...: run CMD with its output in LOG; on failure show the
# end of LOG (the full log stays) and return CMD's status.
run_logged() {
  local log=$1 status=0
  shift
  mkdir -p "$(dirname "$log")"
  "$@" >"$log" 2>&1 || status=$?
  if ((status != 0)); then
    printf '[setup] ---- last 40 lines of %s ----\n' "$log" >&2
    # pip's notes about this machine's missing local index folders are noise.
    grep -v "^WARNING: Location '.*' is ignored" "$log" | tail -n 40 >&2
    printf '[setup] ---- full log: %s ----\n' "$log" >&2
  fi
  return $status
}

# The stamp covers everything that decides what gets installed.
stamp_of() {
  cat "$ROOT"/requirements/*.txt "$ROOT/setup.py" "$ROOT/tools/setup_env.sh" \
    | sha256sum | cut -d' ' -f1
}

stack_ok() {
  "$VENV/bin/python" - <<'EOF' >/dev/null 2>&1
import mmcv, mmengine, mmpretrain, mmdet, torch, torchvision  # noqa: F401
from mmcv.ops import nms  # noqa: F401  (ops were compiled in)
import mocoplug  # noqa: F401
assert mmcv.__version__ == '2.1.0'
EOF
}

if [[ -f $STAMP && "$(cat "$STAMP")" == "$(stamp_of)" ]] && stack_ok; then
  say "environment in $VENV is up to date (delete $STAMP to force a re-install)"
  exit 0
fi

# ---------------------------------------------------------------- 1. venv
if [[ ! -x $VENV/bin/python ]]; then
  PY=${PYTHON:-}
  if [[ -z $PY ]]; then
    for cand in python3.11 python3; do
      if command -v "$cand" >/dev/null 2>&1; then PY=$(command -v "$cand"); break; fi
    done
  fi
  [[ -n $PY ]] || fail "no Python found" "install Python 3.11 and run: PYTHON=/path/to/python3.11 $0"
  ver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [[ $ver != 3.11 ]]; then
    say "WARNING: $PY is Python $ver; the tested stack is Python 3.11 (set PYTHON=... to choose)"
  fi
  say "1/5 creating virtual environment $VENV with $PY (Python $ver)"
  "$PY" -m venv "$VENV" || fail "could not create $VENV" "rm -rf '$VENV' && $0"
else
  say "1/5 virtual environment $VENV exists"
fi
VPY=$VENV/bin/python
PIP=("$VPY" -m pip install --disable-pip-version-check)

# ---------------------------------------------------------------- 2. build tools
say "2/5 build tools (pip, setuptools>=77.0.3,<82, wheel, ninja)"
# ninja lets torch's extension builder compile mmcv's ops in parallel
# (MAX_JOBS) and report [done/total]; without it they compile one by one.
run_logged "$LOGS/2-build-tools.log" "${PIP[@]}" --upgrade pip "setuptools>=77.0.3,<82" wheel ninja \
  || fail "installing build tools" "$0 (check your network / pip index)"

# ---------------------------------------------------------------- 3. torch & co
say "3/5 torch, torchvision, mmengine and test tools (pinned; torch is large, this can take minutes)"
run_logged "$LOGS/3-torch.log" "${PIP[@]}" \
  -c "$ROOT/requirements/tested.txt" \
  torch torchvision mmengine -r "$ROOT/requirements/tests.txt" "setuptools>=77.0.3,<82" \
  || fail "installing torch/torchvision/mmengine" "$0"

# ---------------------------------------------------------------- 4. mmcv with ops
mmcv_ok() {
  "$VPY" -c "import mmcv, sys; from mmcv.ops import nms, RoIAlign; sys.exit(mmcv.__version__ != '$MMCV_VERSION')" \
    >/dev/null 2>&1
}
if mmcv_ok; then
  say "4/5 mmcv $MMCV_VERSION with ops already installed"
else
  mkdir -p "$WHEELS"
  say "4/5 mmcv $MMCV_VERSION with ops: looking for a wheel (cache $WHEELS${PIP_FIND_LINKS:+, PIP_FIND_LINKS=$PIP_FIND_LINKS})"
  # PIP_FIND_LINKS holds whitespace-separated locations; our cache is added to them.
  if PIP_FIND_LINKS="$WHEELS ${PIP_FIND_LINKS:-}" "${PIP[@]}" -q --only-binary mmcv \
       --no-build-isolation -c "$ROOT/requirements/tested.txt" "mmcv==$MMCV_VERSION" 2>/dev/null \
     && mmcv_ok; then
    say "    installed mmcv from a prebuilt wheel"
  else
    say "    no usable wheel: building mmcv $MMCV_VERSION from source with ops (about 15 min on 2 cores)"
    build=$(mktemp -d)
    trap 'rm -rf "$build"' EXIT
    run_logged "$LOGS/4-mmcv-download.log" "$VPY" -m pip download --no-deps --no-binary mmcv \
      --no-build-isolation "mmcv==$MMCV_VERSION" -d "$build" \
      || fail "downloading the mmcv $MMCV_VERSION source" "$0 (needs access to your pip index)"
    tar -xzf "$build"/mmcv-"$MMCV_VERSION".tar.gz -C "$build"
    src=$build/mmcv-$MMCV_VERSION
    # torch >= 2.10 headers need C++20; mmcv 2.1.0 hard-codes c++14/c++17.
    sed -i "s/'-std=c++14'/'-std=c++20'/g; s/'-std=c++17'/'-std=c++20'/g" "$src/setup.py"
    grep -q "c++20" "$src/setup.py" || fail "patching mmcv's C++ standard" "report this: mmcv's setup.py changed"
    jobs=${MAX_JOBS:-$(nproc)}
    log=$LOGS/4-mmcv-build.log
    mkdir -p "$LOGS"
    say "    compiling with $jobs parallel jobs; compiler log: $log"
    # pip -v passes ninja's "[done/total] c++ ..." lines through to the log;
    # the loop below turns them into a progress line every 30 s.
    MMCV_WITH_OPS=1 MAX_JOBS=$jobs \
      "$VPY" -m pip wheel -v --no-build-isolation --no-deps -w "$WHEELS" "$src" \
      >"$log" 2>&1 &
    pid=$!
    start=$SECONDS
    while kill -0 "$pid" 2>/dev/null; do
      sleep 5
      if (((SECONDS - start) % 30 < 5)) && kill -0 "$pid" 2>/dev/null; then
        done_total=$(grep -oE '^ *\[[0-9]+/[0-9]+\]' "$log" | tail -n 1 | tr -d '[] ' || true)
        elapsed=$(printf '%d:%02d' $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)))
        if [[ -n $done_total ]]; then
          say "    compiled ${done_total%/*} of ${done_total#*/} source files ($elapsed)"
        else
          say "    compiling ($elapsed, $(grep -cE '(^| )(c\+\+|g\+\+|gcc) ' "$log") compiler calls so far)"
        fi
      fi
    done
    if ! wait "$pid"; then
      printf '[setup] ---- last 40 lines of %s ----\n' "$log" >&2
      tail -n 40 "$log" >&2
      printf '[setup] ---- full compiler log: %s ----\n' "$log" >&2
      fail "compiling mmcv (errors above; the full log is $log)" \
        "$0 (the build restarts; MAX_JOBS=1 uses less memory)"
    fi
    say "    compiled in $(printf '%d:%02d' $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)))"
    "${PIP[@]}" -q --no-build-isolation -c "$ROOT/requirements/tested.txt" \
      "$WHEELS"/mmcv-"$MMCV_VERSION"-*.whl || fail "installing the built mmcv wheel" "$0"
    mmcv_ok || fail "mmcv was built but its ops do not load" "rm -rf '$WHEELS'/mmcv-* && $0"
    say "    built and cached $(ls "$WHEELS"/mmcv-"$MMCV_VERSION"-*.whl)"
  fi
fi

# ---------------------------------------------------------------- 5. OpenMMLab & mocoplug
say "5/5 mmpretrain, mmdet and mocoplug (editable)"
run_logged "$LOGS/5-openmmlab.log" "${PIP[@]}" --no-build-isolation -c "$ROOT/requirements/tested.txt" mmpretrain mmdet \
  || fail "installing mmpretrain/mmdet" "$0"
run_logged "$LOGS/5-mocoplug.log" "${PIP[@]}" --no-build-isolation --no-deps -e "$ROOT" \
  || fail "installing mocoplug in editable mode" "$0"

stack_ok || fail "the installed stack does not import (run $VPY -c 'import mocoplug')" "rm -f '$STAMP' && $0"
stamp_of >"$STAMP"
say "done: $("$VPY" -c 'import torch, mmcv, mmengine, mmpretrain, mmdet; print(f"torch {torch.__version__}, mmcv {mmcv.__version__}, mmengine {mmengine.__version__}, mmpretrain {mmpretrain.__version__}, mmdet {mmdet.__version__}")')"
