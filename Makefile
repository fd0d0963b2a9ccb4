# mocoplug: two commands on a fresh machine (see README.md).
#   make demo   set up (if needed), then pretrain MoCo v2 on the embedded digits
#   make demo-detection   the same digits as scenes: MoCo v2, then detectors
#   make test   set up (if needed), then run the test suite
#   make test-ops MMCV_WHEEL=...   the served mmcv kernels against compiled
#               mmcv (a wheel of it), in .venv-ops (CI runs it)
#   make setup-mim   .venv-mim: mocoplug as `mim` reads it (make test-mim
#               checks mim train/test/run; CI runs it)
#   make lint   flake8, isort and yapf as configured in setup.cfg (CI runs it)
# The set-up installs mmcv-lite (nothing to compile): with it mocoplug serves
# the ops mmdet's detectors call through torchvision. `make setup-full` swaps
# in mmcv with its compiled ops, for other mmcv ops (a wheel from
# PIP_FIND_LINKS or the cache, else a one-time compile, with CUDA where nvcc
# is found). See tools/setup_env.sh.
VENV ?= .venv
PYTHON := $(VENV)/bin/python
export MOCOPLUG_VENV := $(abspath $(VENV))

.PHONY: setup setup-full setup-mim demo demo-detection test test-ops test-mim \
	lint clean

LINT_PATHS := mocoplug mocoplug_site tests tools configs setup.py

setup:
	bash tools/setup_env.sh

setup-full:
	bash tools/setup_env.sh --with-ops

demo: setup
	$(PYTHON) tools/demo.py

demo-detection: setup
	$(PYTHON) tools/demo_detection.py

# on every core (pytest-xdist; tests/conftest.py shares the cores' threads
# among the workers)
test: setup
	$(PYTHON) -m pytest -n auto tests

# tests/compat/test_mmcv_ops.py with a compiled mmcv: OPS_VENV holds only the
# wheel (its site-packages come first) and reads VENV's packages through a
# .pth file (nothing big installed twice)
OPS_VENV ?= .venv-ops
MMCV_WHEEL ?=
test-ops: setup
	@test -f "$(MMCV_WHEEL)" || { echo "test-ops: set MMCV_WHEEL to a" \
	  "compiled mmcv wheel (mmcv-lite's has no ops)"; exit 2; }
	rm -rf $(OPS_VENV)
	$(PYTHON) -m venv --without-pip $(OPS_VENV)
	$(PYTHON) -c "import sysconfig as s, sys; p = s.get_path('purelib'); \
	  ops = p.replace(sys.prefix, '$(abspath $(OPS_VENV))'); \
	  open(ops + '/base-venv.pth', 'w').write( \
	  f'import site; site.addsitedir({p!r})\n')"
	$(PYTHON) -m pip --python $(OPS_VENV)/bin/python install -q --no-deps \
	  --no-index "$(MMCV_WHEEL)"
	$(OPS_VENV)/bin/python -c "import mmcv._ext as e; \
	  assert type(e).__name__ != 'ServedOps', 'mmcv._ext is not compiled'"
	$(OPS_VENV)/bin/python -m pytest -rs tests/compat/test_mmcv_ops.py

# mim (openmim 0.3.9) reads tools/ and configs/ from
# site-packages/mocoplug/.mim, which the editable install of `setup` does not
# have. MIM_VENV holds a regular install of this checkout (a wheel built from
# a copy of it: building in place would replace the editable install's .mim
# links) and openmim, and reads VENV's packages through a .pth file, as
# test-ops does. openmim's declared dependency opendatalab (it pins an old
# setuptools) is never imported by mim's commands: --no-deps, then what mim
# imports.
MIM_VENV ?= .venv-mim
MIM_BUILD := build/mim
setup-mim: setup
	rm -rf $(MIM_VENV) $(MIM_BUILD)
	$(PYTHON) -m venv --without-pip $(MIM_VENV)
	$(PYTHON) -c "import sysconfig as s, sys; p = s.get_path('purelib'); \
	  mim = p.replace(sys.prefix, '$(abspath $(MIM_VENV))'); \
	  open(mim + '/zz-base-venv.pth', 'w').write( \
	  f'import site; site.addsitedir({p!r})\n')"
	$(PYTHON) -c "import shutil; shutil.copytree('.', '$(MIM_BUILD)/src', \
	  ignore=shutil.ignore_patterns('.git', '.venv*', 'work_dirs', 'data', \
	  '.mim', '__pycache__', '*.egg-info', 'build', 'dist'))"
	$(PYTHON) -m pip wheel -q --no-deps --no-build-isolation \
	  -w $(MIM_BUILD) $(MIM_BUILD)/src
	$(PYTHON) -m pip --python $(MIM_VENV)/bin/python install -q --no-deps \
	  $(MIM_BUILD)/mocoplug-*.whl openmim==0.3.9
	$(PYTHON) -m pip --python $(MIM_VENV)/bin/python install -q \
	  click colorama model-index pandas requests rich tabulate
	@echo "setup-mim: $(MIM_VENV)/bin/mim train mocoplug CONFIG ..."

# `mim train/test/run mocoplug` through MIM_VENV (tests/tools/test_mim.py)
test-mim: setup-mim
	MOCOPLUG_MIM_VENV=$(abspath $(MIM_VENV)) $(PYTHON) -m pytest -rs \
	  tests/tools/test_mim.py

# the checks of OpenMMLab's pre-commit; `isort LINT_PATHS` and `yapf -r -i
# LINT_PATHS` fix what they report
lint:
	$(PYTHON) -m flake8 $(LINT_PATHS)
	$(PYTHON) -m isort --check-only --diff $(LINT_PATHS)
	$(PYTHON) -m yapf -r -d $(LINT_PATHS)

clean:
	rm -rf work_dirs .pytest_cache

# First contact with a GPU (CPU toy sizes without one): the device tests
# (`pytest -m device`), the MoCo v2 R50 config (AMP, bf16, channels_last),
# exact resume, benchmarks, the GPU decode, mmdet's zoo, and with 2+ GPUs
# the multi-GPU runs under torchrun; one JSON report (see tools/gpu_check.py;
# PYTHON=python3 without .venv).
.PHONY: gpu-check
gpu-check:
	$(PYTHON) tools/gpu_check.py
