#!/usr/bin/env bash
# Set up mocoplug's tested stack in a virtual environment (default: ./.venv).
#
#   bash tools/setup_env.sh              pretraining, evaluation, the demo
#   bash tools/setup_env.sh --with-ops   the above and detection, the tests
#
# mmcv comes in two forms of the same version and import name (`mmcv`):
# mmcv-lite, pure Python, a wheel on PyPI, which is all that MoCo
# pretraining, evaluation and the demo use; and mmcv with its compiled ops
# (RoIAlign, nms, ...), which mmdet's detectors need and PyPI has no wheel
# of. The default installs mmcv-lite (no compile); --with-ops swaps in the
# full mmcv (`make setup-full`, and `make test`, whose detection tests need
# the ops). A full mmcv already there is kept in either mode: it is a
# superset of mmcv-lite.
#
# Idempotent: a second run checks a stamp and the installed stack and exits in
# seconds. Steps:
#   1. create the venv with Python 3.11 (override with PYTHON=/path/to/python);
#   2. install build tools (setuptools>=77.0.3,<82: torch 2.14.1 asks for
#      >=77.0.3 and mmcv 2.1.0's setup.py imports pkg_resources, gone in 82);
#   3. install torch/torchvision/mmengine and the test tools, pinned;
#   4. mmcv (version pinned in requirements/tested.txt):
#      default: mmcv-lite from PyPI, unless a full mmcv is installed;
#      --with-ops: mmcv with ops from a wheel if pip finds one (your
#      PIP_FIND_LINKS and the cache below), else download its sdist, raise
#      the C++ standard to c++20 (required by torch >= 2.10 headers), build
#      it with ninja (MAX_JOBS parallel jobs), printing its progress, and
#      keep the wheel in the cache so the next set-up is instant; only then
#      is mmcv-lite uninstalled (the two share their files) and the wheel
#      installed, so a failed build leaves a working mmcv-lite;
#   5. install mmpretrain/mmdet (neither requires mmcv: no mmcv is pulled
#      in), then mocoplug itself in editable mode.
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
STAMP=$VENV/.mocoplug-setup-stamp

WITH_OPS=0
for arg in "$@"; do
  case $arg in
    --with-ops) WITH_OPS=1 ;;
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
if ((WITH_OPS)); then
  SELF="$0 --with-ops"
else
  SELF=$0
fi
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

# stack_ok: the stack imports, mmcv is the pinned version and, with
# --with-ops, its compiled ops load. A full mmcv passes without --with-ops.
stack_ok() {
  MMCV_VERSION=$MMCV_VERSION WITH_OPS=$WITH_OPS "$VENV/bin/python" - <<'EOF' >/dev/null 2>&1
import os
import mmcv, mmengine, mmpretrain, mmdet, torch, torchvision  # noqa: F401
import mocoplug  # noqa: F401
assert mmcv.__version__ == os.environ['MMCV_VERSION']
if os.environ['WITH_OPS'] == '1':
    from mmcv.ops import nms  # noqa: F401  (ops were compiled in)
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
  [[ -n $PY ]] || fail "no Python found" "install Python 3.11 and run: PYTHON=/path/to/python3.11 $SELF"
  ver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [[ $ver != 3.11 ]]; then
    say "WARNING: $PY is Python $ver; the tested stack is Python 3.11 (set PYTHON=... to choose)"
  fi
  say "1/5 creating virtual environment $VENV with $PY (Python $ver)"
  "$PY" -m venv "$VENV" || fail "could not create $VENV" "rm -rf '$VENV' && $SELF"
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
  || fail "installing build tools" "$SELF (check your network / pip index)"

# ---------------------------------------------------------------- 3. torch & co
say "3/5 torch, torchvision, mmengine and test tools (pinned; torch is large, this can take minutes)"
run_logged "$LOGS/3-torch.log" "${PIP[@]}" \
  -c "$ROOT/requirements/tested.txt" \
  torch torchvision mmengine -r "$ROOT/requirements/tests.txt" "setuptools>=77.0.3,<82" \
  || fail "installing torch/torchvision/mmengine" "$SELF"

# ---------------------------------------------------------------- 4. mmcv
# mmcv_dists: the installed distributions that provide the `mmcv` package,
# as "name==version" words (mmcv-full is mmcv 1.x's name).
mmcv_dists() {
  "$VPY" - <<'EOF'
from importlib import metadata
found = []
for name in ('mmcv', 'mmcv-lite', 'mmcv-full'):
    try:
        found.append(f'{name}=={metadata.version(name)}')
    except metadata.PackageNotFoundError:
        pass
print(' '.join(found))
EOF
}
mmcv_imports() {
  "$VPY" -c "import mmcv, sys; sys.exit(mmcv.__version__ != '$MMCV_VERSION')" >/dev/null 2>&1
}
mmcv_ops_load() {
  "$VPY" -c "import mmcv, sys; from mmcv.ops import nms, RoIAlign; sys.exit(mmcv.__version__ != '$MMCV_VERSION')" \
    >/dev/null 2>&1
}
# remove_mmcv LOG: uninstall every distribution of the `mmcv` package. They
# share their files: pip must never install one over the other.
remove_mmcv() {
  local names=() dist
  for dist in $(mmcv_dists); do names+=("${dist%%==*}"); done
  ((${#names[@]} == 0)) && return 0
  say "    uninstalling ${names[*]}"
  run_logged "$1" "$VPY" -m pip uninstall -y "${names[@]}" \
    || fail "uninstalling ${names[*]}" "$SELF"
}
# install_full_mmcv WHEEL: swap the installed mmcv (lite or other) for WHEEL.
install_full_mmcv() {
  remove_mmcv "$LOGS/4-mmcv-uninstall.log"
  run_logged "$LOGS/4-mmcv-install.log" "${PIP[@]}" --no-build-isolation \
    -c "$ROOT/requirements/tested.txt" "$1" \
    || fail "installing $1" "$SELF"
}

dists=$(mmcv_dists)
if ((!WITH_OPS)); then
  if [[ $dists == "mmcv==$MMCV_VERSION" ]] && mmcv_imports; then
    if mmcv_ops_load; then
      say "4/5 mmcv $MMCV_VERSION with ops already installed (a superset of mmcv-lite: kept)"
    else
      say "4/5 mmcv $MMCV_VERSION already installed (kept; its ops do not load, which only detection needs: bash $0 --with-ops rebuilds them)"
    fi
  elif [[ $dists == "mmcv-lite==$MMCV_VERSION" ]] && mmcv_imports; then
    say "4/5 mmcv-lite $MMCV_VERSION already installed"
  else
    say "4/5 mmcv-lite $MMCV_VERSION (pure Python, no compiled ops: enough for pretraining, evaluation and the demo)"
    remove_mmcv "$LOGS/4-mmcv-uninstall.log"
    run_logged "$LOGS/4-mmcv-lite.log" "${PIP[@]}" -c "$ROOT/requirements/tested.txt" \
      "mmcv-lite==$MMCV_VERSION" \
      || fail "installing mmcv-lite $MMCV_VERSION" "$SELF (check your network / pip index)"
    mmcv_imports || fail "mmcv-lite $MMCV_VERSION was installed but does not import" "$SELF"
  fi
elif [[ $dists == "mmcv==$MMCV_VERSION" ]] && mmcv_ops_load; then
  say "4/5 mmcv $MMCV_VERSION with ops already installed"
else
  mkdir -p "$WHEELS" "$LOGS"
  build=$(mktemp -d)
  trap 'rm -rf "$build"' EXIT
  say "4/5 mmcv $MMCV_VERSION with ops${dists:+ (replaces $dists)}: looking for a wheel (cache $WHEELS${PIP_FIND_LINKS:+, PIP_FIND_LINKS=$PIP_FIND_LINKS})"
  # Fetch the wheel first and install it only then: mmcv-lite stays usable
  # until a full mmcv is in hand. PIP_FIND_LINKS holds whitespace-separated
  # locations; our cache is added to them.
  installed=0
  if PIP_FIND_LINKS="$WHEELS ${PIP_FIND_LINKS:-}" "$VPY" -m pip download -q --disable-pip-version-check \
       --no-deps --only-binary mmcv -d "$build/prebuilt" "mmcv==$MMCV_VERSION" \
       >"$LOGS/4-mmcv-wheel.log" 2>&1; then
    wheel=$(ls "$build"/prebuilt/mmcv-"$MMCV_VERSION"-*.whl)
    install_full_mmcv "$wheel"
    if mmcv_ops_load; then
      installed=1
      say "    installed mmcv from a prebuilt wheel ($(basename "$wheel"))"
    else
      say "    the prebuilt $(basename "$wheel") does not load here (built for another torch?)"
    fi
  fi
  if ((!installed)); then
    say "    no usable wheel: building mmcv $MMCV_VERSION from source with ops (about 15 min on 2 cores)"
    run_logged "$LOGS/4-mmcv-download.log" "$VPY" -m pip download --no-deps --no-binary mmcv \
      --no-build-isolation "mmcv==$MMCV_VERSION" -d "$build" \
      || fail "downloading the mmcv $MMCV_VERSION source" "$SELF (needs access to your pip index)"
    tar -xzf "$build"/mmcv-"$MMCV_VERSION".tar.gz -C "$build"
    src=$build/mmcv-$MMCV_VERSION
    # torch >= 2.10 headers need C++20; mmcv 2.1.0 hard-codes c++14/c++17.
    sed -i "s/'-std=c++14'/'-std=c++20'/g; s/'-std=c++17'/'-std=c++20'/g" "$src/setup.py"
    grep -q "c++20" "$src/setup.py" || fail "patching mmcv's C++ standard" "report this: mmcv's setup.py changed"
    jobs=${MAX_JOBS:-$(nproc)}
    log=$LOGS/4-mmcv-build.log
    say "    compiling with $jobs parallel jobs; compiler log: $log"
    # pip -v passes ninja's "[done/total] c++ ..." lines through to the log;
    # the loop below turns them into a progress line every 30 s.
    MMCV_WITH_OPS=1 MAX_JOBS=$jobs \
      "$VPY" -m pip wheel -v --no-build-isolation --no-deps -w "$build/built" "$src" \
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
      fail "compiling mmcv (errors above; the full log is $log; the installed mmcv is unchanged)" \
        "$SELF (the build restarts; MAX_JOBS=1 uses less memory)"
    fi
    say "    compiled in $(printf '%d:%02d' $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)))"
    wheel=$(ls "$build"/built/mmcv-"$MMCV_VERSION"-*.whl)
    install_full_mmcv "$wheel"
    mmcv_ops_load || fail "mmcv was built but its ops do not load" "$SELF"
    # Cached only once its ops are seen to load: the next set-up finds it.
    cp "$wheel" "$WHEELS/"
    say "    built and cached $WHEELS/$(basename "$wheel")"
  fi
fi

# ---------------------------------------------------------------- 5. OpenMMLab & mocoplug
say "5/5 mmpretrain, mmdet and mocoplug (editable)"
run_logged "$LOGS/5-openmmlab.log" "${PIP[@]}" --no-build-isolation -c "$ROOT/requirements/tested.txt" mmpretrain mmdet \
  || fail "installing mmpretrain/mmdet" "$SELF"
run_logged "$LOGS/5-mocoplug.log" "${PIP[@]}" --no-build-isolation --no-deps -e "$ROOT" \
  || fail "installing mocoplug in editable mode" "$SELF"

stack_ok || fail "the installed stack does not import (run $VPY -c 'import mocoplug')" "rm -f '$STAMP' && $SELF"
stamp_of >"$STAMP"
ops=0
if ((WITH_OPS)) || mmcv_ops_load; then ops=1; fi  # stack_ok checked them
if ((ops)); then
  flavour="mmcv $MMCV_VERSION with ops"
elif [[ $(mmcv_dists) == mmcv-lite==* ]]; then
  flavour="mmcv-lite $MMCV_VERSION"
else
  flavour="mmcv $MMCV_VERSION (its ops do not load)"
fi
say "done: $("$VPY" -c 'import torch, mmengine, mmpretrain, mmdet; print(f"torch {torch.__version__}, mmengine {mmengine.__version__}, mmpretrain {mmpretrain.__version__}, mmdet {mmdet.__version__}")'), $flavour"
if ((!ops)); then
  say "detection (configs/detection) needs mmcv's compiled ops: make setup-full (or bash $0 --with-ops) swaps them in"
fi
