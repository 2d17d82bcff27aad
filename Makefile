# d5 — the two commands: `make demo` and `make test`. Both create .venv and install what they need.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.d5-installed
FASHION_MNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
PYTEST_ARGS ?=
comma := ,
space := $(subst ,, )

.PHONY: demo test install data bench conformance public-models fuzz clean

# ONE pip resolve with every extra, constrained (numpy<2 for MXNet, the on-disk CPU torch): a second,
# separate `pip install` could upgrade numpy and break MXNet. Re-run when the packaging or C++ changes
# (the editable install rebuilds the d5._C extension).
$(STAMP): pyproject.toml setup.py constraints.txt $(wildcard csrc/*.cpp csrc/kernels/*.cpp csrc/kernels/*.h csrc/include/d5/*.h)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install -c constraints.txt -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)

# Debian's dataset-fashion-mnist (the official idx.gz files) when apt is usable and the data is absent.
data:
	@if [ -f $(FASHION_MNIST) ] || [ -f "$${D5_DATA_DIR:-$$HOME/.cache/d5}/fashion_mnist/train-images-idx3-ubyte.gz" ]; then \
	  echo "Fashion-MNIST: present"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 || \
	  (apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1) || \
	  echo "warning: could not install dataset-fashion-mnist; d5 will try to download Fashion-MNIST"; \
	else \
	  echo "note: Fashion-MNIST not found and apt is not usable; d5 will try to download it"; \
	fi

demo: $(STAMP) data
	$(PY) recipes/fashion_mnist_lenet.py

# Every framework d5 has a package for must be installed and import: a missing one fails the run instead of
# silently dropping out of the contract suite (tests/frameworks/test_required.py).
IMPLEMENTED_FRAMEWORKS := $(subst $(space),$(comma),$(sort $(notdir $(patsubst %/,%,$(dir $(wildcard d5/frameworks/*/__init__.py))))))

test: $(STAMP) data
	D5_REQUIRE_FRAMEWORKS=$(IMPLEMENTED_FRAMEWORKS) $(PY) -m pytest -q -n 2 $(PYTEST_ARGS)

# ONNX's own backend test suite on each framework: per-case report + summary line (own operators, with fallback).
conformance: $(STAMP)
	$(PY) -m d5.bench.conformance --output results/conformance.json --markdown results/conformance.md
	$(PY) -m d5.bench.conformance --framework pytorch --output results/conformance-pytorch.json \
	  --markdown results/conformance-pytorch.md
	$(PY) -m d5.bench.conformance --framework tensorflow --output results/conformance-tensorflow.json \
	  --markdown results/conformance-tensorflow.md
	$(PY) -m d5.bench.conformance --framework mxnet --output results/conformance-mxnet.json \
	  --markdown results/conformance-mxnet.md

# Every public architecture of tests/frameworks/pytorch/public_models.py exported from torch to ONNX and
# trained through d5's PyTorch, TensorFlow and MXNet frameworks (make test runs a representative few); the table (PyTorch)
# goes to results/public_models.md.
public-models: $(STAMP)
	D5_ALL_PUBLIC_MODELS=1 $(PY) -m pytest -q -p no:cacheprovider tests/frameworks/pytorch/test_public_models.py \
	  tests/frameworks/tensorflow/test_public_models.py tests/frameworks/mxnet/test_public_models.py
	$(PY) benchmarks/public_models.py

# The long adversarial campaign of tests/fuzz/ (make test runs a fast subset): every case runs in a worker
# subprocess, so a crash or a hang is a counted outcome; exits 1 on any crash, hang, raw exception or wrong result.
fuzz: $(STAMP)
	$(PY) tests/fuzz/run_fuzz.py --examples 5000 --json results/fuzz.json

bench: $(STAMP) data
	$(PY) benchmarks/lenet_epoch.py
	$(PY) benchmarks/onnx_models.py
	$(PY) benchmarks/batch1_latency.py
	$(PY) benchmarks/nms.py
	$(PY) benchmarks/frameworks.py
	$(PY) benchmarks/framework_table.py
	$(PY) benchmarks/data_pipeline.py
	$(PY) benchmarks/training_overhead.py
	$(PY) benchmarks/sweep_overhead.py
	$(PY) benchmarks/harness_overhead.py
	$(PY) benchmarks/custom_ops.py
	$(PY) benchmarks/ops.py
	$(PY) benchmarks/distributed.py
	$(PY) benchmarks/distributed_ddp.py
	$(PY) benchmarks/data_parallel_overlap.py
	$(PY) benchmarks/distributed_schemes.py

clean:
	rm -rf build *.egg-info d5/_C*.so .pytest_cache
