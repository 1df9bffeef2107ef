# The two commands that matter: `make demo` and `make test`. Both set everything up on a fresh machine
# (virtual environment, Python dependencies, release build of the Rust extension).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.deps-stamp
SRC    := $(shell find crates python -type f \( -name '*.rs' -o -name '*.py' -o -name '*.pyi' -o -name 'Cargo.toml' \) 2>/dev/null)

.PHONY: demo test build test-rust test-python loom stubtest lint bench bench-quick clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "maturin>=1.5,<2" "pytest>=8" "pytest-timeout>=2.3" "hypothesis>=6.100" \
	    "numpy>=1.26" "mypy>=1.10" "rich>=13" "matplotlib>=3.8" "pyzmq>=26"
	touch $@

# Release build by default: lwmq.build_profile tells which one is installed.
$(VENV)/.build-stamp: $(STAMP) $(SRC) Cargo.toml pyproject.toml
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --quiet
	touch $@

build: $(VENV)/.build-stamp

# The Spark extra (pyspark with its sql extra: pyarrow, pandas); Spark needs Java 17+ on the machine.
SPARK_STAMP := $(VENV)/.spark-stamp
$(SPARK_STAMP): $(STAMP) pyproject.toml
	@java -XX:-UsePerfData -version >/dev/null 2>&1 || { echo "Spark needs Java 17 or newer (java not found)"; exit 1; }
	$(PY) -m pip install --quiet "pyspark[sql]>=4.2" "pandas<3"
	touch $@

demo: build $(SPARK_STAMP)
	$(PY) -m lwmq demo

test: build lint test-rust loom stubtest test-python

test-rust:
	cargo test -p lwmq-core --quiet

lint:
	cargo clippy --workspace --all-targets --quiet -- -D warnings

# Model-checks the lock-free ring and wake-up protocol (separate target dir: --cfg loom rebuilds everything).
loom:
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p lwmq-core --test loom --release --quiet

stubtest: build
	$(PY) -m mypy.stubtest lwmq._core --allowlist tests/stubtest-allowlist.txt

test-python: build $(SPARK_STAMP)
	$(PY) -m pytest -q

# Benchmarks: lwmq and its peers (pyzmq, iceoryx2, multiprocessing.Pipe, AF_UNIX SEQPACKET) in one run.
BENCH_STAMP := $(VENV)/.bench-stamp
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet "pyzmq>=26" "iceoryx2==0.10.0" "matplotlib>=3.8"
	touch $@

bench: build $(BENCH_STAMP)
	$(PY) -m lwmq bench

bench-quick: build $(BENCH_STAMP)
	$(PY) -m lwmq bench --quick

clean:
	rm -rf $(VENV) target
