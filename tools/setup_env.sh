#!/usr/bin/env bash
# Set up mocoplug's tested stack in a virtual environment (default: ./.venv).
#
#   bash tools/setup_env.sh              everything: pretraining, evaluation,
#                                        detection, the demo and the tests
#   bash tools/setup_env.sh --with-ops   the same with mmcv's compiled ops
#
# The default installs mmcv-lite (pure Python; torchvision serves the ops
# mmdet's detectors call). --with-ops (`make setup-full`) installs mmcv with
# its compiled ops: a wheel from PIP_FIND_LINKS or the cache, else built once
# from source (~18 min on 2 cores; CUDA kernels where nvcc is found, else
# CPU-only). A compiled mmcv already there is kept in either mode.
#
# Environment knobs: PYTHON; MOCOPLUG_VENV (venv, default <repo>/.venv);
# MOCOPLUG_CACHE (wheels and logs, default ~/.cache/mocoplug);
# PIP_FIND_LINKS (folders with a prebuilt mmcv wheel); MAX_JOBS (parallel
# compile jobs, default nproc, ~0.6 GiB each). Steps, stamp and logs:
# docs/design_notes.md, "tools/setup_env.sh".
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${MOCOPLUG_VENV:-$ROOT/.venv}
CACHE=${MOCOPLUG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mocoplug}
WHEELS=$CACHE/wheels LOGS=$CACHE/logs STAMP=$VENV/.mocoplug-setup-stamp

WITH_OPS=0 SELF=$0
for arg in "$@"; do
  case $arg in
    --with-ops) WITH_OPS=1 SELF="$0 --with-ops" ;;
    -h | --help)
      sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
      exit 0
      ;;
    *)
      printf '[setup] unknown argument %s (usage: %s [--with-ops])\n' "$arg" "$0" >&2
      exit 2
      ;;
  esac
done
# One pin for both forms of mmcv: the `mmcv==` line of requirements/tested.txt.
MMCV_VERSION=$(sed -n 's/^mmcv==\([0-9][0-9.]*\).*/\1/p' "$ROOT/requirements/tested.txt")

say() { printf '[setup] %s\n' "$*"; }
fail() {
  printf '[setup] FAILED: %s\n' "$1" >&2
  printf '[setup] to retry: %s\n' "$2" >&2
  exit 1
}

[[ -n $MMCV_VERSION ]] || fail "no mmcv==X.Y.Z line in $ROOT/requirements/tested.txt" "restore it"

# run_logged LOG CMD...: run CMD with its output in LOG; on failure show the
# end of LOG (the full log stays) and return CMD's status.
run_logged() {
  local log=$1 status=0
  shift
  mkdir -p "$(dirname "$log")"
  "$@" >"$log" 2>&1 || status=$?
  if ((status != 0)); then
    printf '[setup] ---- last 40 lines of %s ----\n' "$log" >&2
    grep -v "^WARNING: Location '.*' is ignored" "$log" | tail -n 40 >&2
    printf '[setup] ---- full log: %s ----\n' "$log" >&2
  fi
  return $status
}

stamp_of() {
  cat "$ROOT"/requirements/*.txt "$ROOT/setup.py" "$ROOT/tools/setup_env.sh" \
    | sha256sum | cut -d' ' -f1
}

# stack_ok: the stack imports, mmcv is the pinned version, mocoplug-site.pth
# is active and, with --with-ops, its compiled ops load. A full mmcv passes
# without --with-ops.
stack_ok() {
  MMCV_VERSION=$MMCV_VERSION WITH_OPS=$WITH_OPS "$VENV/bin/python" - <<'EOF' >/dev/null 2>&1
import os, sys
assert 'mocoplug_site' in sys.modules  # mocoplug-site.pth ran
import mmcv, mmengine, mmpretrain, mmdet, torch, torchvision  # noqa: F401
if os.environ['WITH_OPS'] == '1':
    import mmcv._ext  # compiled, not served by mocoplug
    assert type(mmcv._ext).__name__ != 'ServedOps'
import mocoplug  # noqa: F401
assert mmcv.__version__ == os.environ['MMCV_VERSION']
EOF
}

if [[ -f $STAMP && "$(cat "$STAMP")" == "$(stamp_of)" ]] && stack_ok; then
  say "environment in $VENV is up to date (delete $STAMP to force a re-install)"
  exit 0
fi

if [[ ! -x $VENV/bin/python ]]; then
  PY=${PYTHON:-$(command -v python3.11 || command -v python3 || true)}
  [[ -n $PY ]] || fail "no Python found" "install Python 3.11 and run: PYTHON=/path/to/python3.11 $SELF"
  ver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  [[ $ver == 3.11 ]] || say "WARNING: $PY is Python $ver; the tested stack is Python 3.11 (set PYTHON=... to choose)"
  say "1/5 creating virtual environment $VENV with $PY (Python $ver)"
  "$PY" -m venv "$VENV" || fail "could not create $VENV" "rm -rf '$VENV' && $SELF"
else
  say "1/5 virtual environment $VENV exists"
fi
VPY=$VENV/bin/python
PIP=("$VPY" -m pip install --disable-pip-version-check)

say "2/5 build tools (pip, setuptools>=77.0.3,<82, wheel, ninja)"
run_logged "$LOGS/2-build-tools.log" "${PIP[@]}" --upgrade pip "setuptools>=77.0.3,<82" wheel ninja \
  || fail "installing build tools" "$SELF (check your network / pip index)"

say "3/5 torch, torchvision, mmengine and test tools (pinned; torch is large, this can take minutes)"
run_logged "$LOGS/3-torch.log" "${PIP[@]}" -c "$ROOT/requirements/tested.txt" \
  torch torchvision mmengine -r "$ROOT/requirements/tests.txt" "setuptools>=77.0.3,<82" \
  || fail "installing torch/torchvision/mmengine" "$SELF"

# mmcv_dists: the installed distributions of the `mmcv` package, as
# "name==version" words (mmcv-full is mmcv 1.x's name).
mmcv_dists() {
  "$VPY" -c "
from importlib import metadata
for name in ('mmcv', 'mmcv-lite', 'mmcv-full'):
    try:
        print(f'{name}=={metadata.version(name)}', end=' ')
    except metadata.PackageNotFoundError:
        pass"
}
# mmcv_ops: the CUDA version the installed mmcv's ops were compiled with
# ('not available': CPU only); fails where they do not load.
mmcv_ops() {
  "$VPY" -c "import mmcv, mmcv._ext as e, sys; assert mmcv.__version__ == '$MMCV_VERSION'; assert type(e).__name__ != 'ServedOps'; print(e.get_compiling_cuda_version())" 2>/dev/null
}
# remove_mmcv: uninstall every distribution of the `mmcv` package.
remove_mmcv() {
  local names=() dist
  for dist in $(mmcv_dists); do names+=("${dist%%==*}"); done
  ((${#names[@]} == 0)) && return 0
  run_logged "$LOGS/4-mmcv-uninstall.log" "$VPY" -m pip uninstall -y "${names[@]}" \
    || fail "uninstalling ${names[*]}" "$SELF"
}

dists=$(mmcv_dists)
if ops=$(mmcv_ops); then
  say "4/5 mmcv $MMCV_VERSION with compiled ops already installed (CUDA: $ops)"
elif ((!WITH_OPS)); then
  if [[ $dists == "mmcv-lite==$MMCV_VERSION " ]]; then
    say "4/5 mmcv-lite $MMCV_VERSION already installed"
  else
    say "4/5 mmcv-lite $MMCV_VERSION (pure Python; mocoplug serves the detectors' ops with torchvision)"
    remove_mmcv
    run_logged "$LOGS/4-mmcv-lite.log" "${PIP[@]}" -c "$ROOT/requirements/tested.txt" "mmcv-lite==$MMCV_VERSION" \
      || fail "installing mmcv-lite $MMCV_VERSION" "$SELF (check your network / pip index)"
  fi
else
  if command -v nvcc >/dev/null 2>&1 || [[ -x ${CUDA_HOME:-/usr/local/cuda}/bin/nvcc ]]; then
    flavour=cuda force_cuda=1
  else
    flavour=cpu force_cuda=0
  fi
  mkdir -p "$WHEELS/$flavour" "$LOGS"
  build=$(mktemp -d)
  trap 'rm -rf "$build"' EXIT
  say "4/5 mmcv $MMCV_VERSION with compiled ops ($flavour): looking for a wheel in $WHEELS/$flavour${PIP_FIND_LINKS:+ $PIP_FIND_LINKS}"
  if PIP_FIND_LINKS="$WHEELS/$flavour ${PIP_FIND_LINKS:-}" "$VPY" -m pip download -q \
       --disable-pip-version-check --no-deps --only-binary mmcv -d "$build/built" \
       "mmcv==$MMCV_VERSION" >"$LOGS/4-mmcv-wheel.log" 2>&1; then
    say "    found $(basename "$build"/built/*.whl)"
  else
    if ((force_cuda)); then
      say "    no wheel: building from source with the CUDA kernels (nvcc found; FORCE_CUDA=1)"
    else
      say "    no wheel: building from source, CPU-ONLY (no nvcc found): on a GPU its ops stop a detector; mmcv-lite's served ops run on CUDA"
    fi
    run_logged "$LOGS/4-mmcv-download.log" "$VPY" -m pip download --no-deps --no-binary mmcv \
      --no-build-isolation "mmcv==$MMCV_VERSION" -d "$build" \
      || fail "downloading the mmcv $MMCV_VERSION source" "$SELF (needs access to your pip index)"
    tar -xzf "$build"/mmcv-"$MMCV_VERSION".tar.gz -C "$build"
    src=$build/mmcv-$MMCV_VERSION
    sed -i "s/'-std=c++14'/'-std=c++20'/g; s/'-std=c++17'/'-std=c++20'/g" "$src/setup.py"
    log=$LOGS/4-mmcv-build.log
    say "    compiling with ${MAX_JOBS:-$(nproc)} parallel jobs; log: $log"
    MMCV_WITH_OPS=1 FORCE_CUDA=$force_cuda MAX_JOBS=${MAX_JOBS:-$(nproc)} \
      "$VPY" -m pip wheel -v --no-build-isolation --no-deps -w "$build/built" "$src" >"$log" 2>&1 &
    pid=$! start=$SECONDS
    while kill -0 "$pid" 2>/dev/null; do  # ninja's [done/total] every 30 s
      sleep 30
      say "    compiled $(grep -oE '^ *\[[0-9]+/[0-9]+\]' "$log" | tail -n 1 | tr -d '[] ' || true) source files ($(((SECONDS - start) / 60)) min)"
    done
    wait "$pid" || { tail -n 40 "$log" >&2; fail "compiling mmcv (full log: $log; the installed mmcv is unchanged)" "$SELF (MAX_JOBS=1 uses less memory)"; }
  fi
  wheel=$(ls "$build"/built/mmcv-"$MMCV_VERSION"-*.whl)
  remove_mmcv
  run_logged "$LOGS/4-mmcv-install.log" "${PIP[@]}" --no-build-isolation \
    -c "$ROOT/requirements/tested.txt" "$wheel" || fail "installing $wheel" "$SELF"
  ops=$(mmcv_ops) || fail "$(basename "$wheel") was installed but its ops do not load (built for another torch?)" "$SELF"
  if [[ $ops == "not available" ]]; then
    flavour=cpu
    say "    NOTE: this mmcv's ops are CPU-only: a detector on CUDA stops before training and names the fixes"
  fi
  mkdir -p "$WHEELS/$flavour" && cp -n "$wheel" "$WHEELS/$flavour/" || true
fi

say "5/5 mmpretrain, mmdet and mocoplug (editable)"
run_logged "$LOGS/5-openmmlab.log" "${PIP[@]}" --no-build-isolation -c "$ROOT/requirements/tested.txt" mmpretrain mmdet \
  || fail "installing mmpretrain/mmdet" "$SELF"
run_logged "$LOGS/5-mocoplug.log" "${PIP[@]}" --no-build-isolation --no-deps -e "$ROOT" \
  || fail "installing mocoplug in editable mode" "$SELF"

stack_ok || fail "the installed stack does not import (run $VPY -c 'import mocoplug')" "rm -f '$STAMP' && $SELF"
stamp_of >"$STAMP"
if ops=$(mmcv_ops); then
  flavour="mmcv $MMCV_VERSION with compiled ops (CUDA: $ops)"
else
  flavour="mmcv-lite $MMCV_VERSION (detection ops served by torchvision)"
fi
say "done: $("$VPY" -c 'import torch, mmengine, mmpretrain, mmdet; print(f"torch {torch.__version__}, mmengine {mmengine.__version__}, mmpretrain {mmpretrain.__version__}, mmdet {mmdet.__version__}")'), $flavour"
