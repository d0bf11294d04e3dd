# rayton: two commands on a fresh machine.
#   make serve   set up, generate the example repository, serve it on a local Ray cluster
#   make test    set up and run every test (CI runs this through .ci/run)
#   make test-unit  the fast tests alone (no Ray cluster, no end-to-end suites), timed

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXAMPLES := examples/model_repository
# rayton's host of Triton's C backend API, built with the machine's C compiler (cc); without
# one, set-up goes on and models with C/C++ backends are unavailable, saying why.
NATIVE := repo_adapter/backends/native
NATIVE_HOST := $(NATIVE)/build/libtritonserver.so

.PHONY: setup examples serve test test-unit lint bench bench-cpu clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	# The reference tritonserver (Triton 2.51, Python backend) for conformance tests; its own
	# pins (numpy<2) would clash with ours and the binary needs none of them.
	$(BIN)/pip install --quiet --no-deps "nvidia-pytriton==0.7.0"
	# Its Python-backend stub needs numpy<2 (numpy 1.x ABI): a small environment of its own.
	$(PYTHON) -m venv .venv-reference
	.venv-reference/bin/pip install --quiet "numpy<2" onnxruntime
	# A real Prometheus scrapes /metrics in the tests: Debian's package where apt can install
	# it (as root); elsewhere install it yourself, or that test fails saying so.
	command -v prometheus >/dev/null || ! command -v apt-get >/dev/null || [ "$$(id -u)" != 0 ] \
		|| DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
		|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends prometheus)
	touch $(STAMP)

$(NATIVE_HOST): $(STAMP) $(NATIVE)/rayton_host.c $(NATIVE)/triton_abi.h $(NATIVE)/build.py
	-$(BIN)/python -m repo_adapter.backends.native.build

setup: $(STAMP) $(NATIVE_HOST)

$(EXAMPLES)/.generated: $(STAMP) examples/generate_repository.py examples/builders.py \
		examples/minilm.py examples/text_embedding.py
	$(BIN)/python -m examples.generate_repository --force
	touch $@

examples: $(EXAMPLES)/.generated

serve: setup examples
	$(BIN)/rayton serve --model-repository $(EXAMPLES)

test: setup examples
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

# The fast tests alone: by folder, not the end-to-end, conformance or benchmark suites; by
# marker, no test that starts a Ray cluster (`cluster`) or the reference tritonserver.
UNIT_TESTS := --ignore=tests/e2e --ignore=tests/conformance --ignore=tests/benchmarks \
	-m 'not cluster and not reference'

test-unit: setup
	@echo "$(BIN)/python -m pytest -q $(UNIT_TESTS)"
	@start=$$(date +%s); status=0; $(BIN)/python -m pytest -q $(UNIT_TESTS) || status=$$?; \
	echo "make test-unit: $$(($$(date +%s) - start)) s wall time"; exit $$status

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: examples
	$(BIN)/python -m benchmarks.run

# CPU per request of each process, per system (see BENCHMARKS.md).
bench-cpu: examples
	$(BIN)/python -m benchmarks.cpu_per_request --systems triton,triton-grpc,rayton,rayton-grpc \
		--levels mlp:16,mlp:32,mlp:16:8,mlp:32:8 --client-processes 2

clean:
	rm -rf $(VENV) .venv-reference $(EXAMPLES) examples/images
