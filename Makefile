# The README's commands. Each target creates .venv and installs the project when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
OUT := out

.PHONY: run test bench fuzz fuzz-ci proto samples-chakra clean astra-check
# The package's modules compiled ahead (only those changed since: quick). Under
# PYTHONDONTWRITEBYTECODE=1, which some images set (this project's machine does), Python never
# writes them itself, and every command compiled each module it imports again: 0.1 s of the
# 0.33 s a `stats` of a small set took, for each of `make run`'s 35 commands.
COMPILE := $(BIN)/python -m compileall -q converters

# setup.py builds the C modules (_head.c, _loop.c, _stats.c, _pftrace.c, and _spans.h two share) in place: a change to any installs again
$(STAMP): pyproject.toml setup.py converters/_proto/_head.c converters/scheduler/_loop.c converters/_stats.c converters/writers/_pftrace.c converters/_spans.h
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

## run: convert every sample into out/ (Chrome traces and Chakra sets)
run: $(STAMP)
	$(COMPILE)
	$(BIN)/python -m converters.samples $(OUT)

## test: the whole test suite
test: $(STAMP)
	$(COMPILE)
	$(BIN)/python -m pytest

## astra-check: every Chakra set `make run` writes, through both ASTRA-sim builds in ../shared/astra-sim
astra-check: run
	$(BIN)/python tests/astra_check.py $(OUT)

## bench: speed and memory against chakra_converter, printed as ratios; then the scheduler's growth
bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[cluster]'  # benchmark 7 compares 1 and 2 Dask workers
	$(COMPILE)  # as an installed package runs (pip compiles a wheel's modules when it installs it)
	$(BIN)/python benchmarks/run.py
	$(BIN)/python benchmarks/bench_scheduler.py --python-loop --stats-nodes
	$(BIN)/python benchmarks/bench_kineto.py
	$(BIN)/python benchmarks/bench_megatron_read.py

## proto: regenerate converters/_proto/et_def_pb2.py from schemas/et_def.proto
# grpcio-tools 1.74.0 bundles the protoc of protobuf 6.31.1, the version mlc-chakra 1.0.0 was built with.
PROTO_VENV := $(VENV)-proto
proto:
	$(PYTHON) -m venv $(PROTO_VENV)
	$(PROTO_VENV)/bin/pip install --quiet 'grpcio-tools==1.74.0'
	$(PROTO_VENV)/bin/python -m grpc_tools.protoc --proto_path=schemas --python_out=converters/_proto --pyi_out=converters/_proto schemas/et_def.proto

## samples-chakra: remake samples/chakra_data and samples/chakra_model with the reference converter
# (4 ranks, 1 pass) from the two small ASTRA-sim text workloads beside them.
samples-chakra: $(STAMP)
	rm -rf samples/chakra_data samples/chakra_model
	mkdir -p samples/chakra_data samples/chakra_model
	$(BIN)/chakra_converter --log-filename /dev/null Text --input samples/chakra_data_workload.txt \
		--output samples/chakra_data/workload --num-npus 4 --num-passes 1
	$(BIN)/chakra_converter --log-filename /dev/null Text --input samples/chakra_model_workload.txt \
		--output samples/chakra_model/workload --num-npus 4 --num-passes 1

clean:
	rm -rf $(VENV) $(PROTO_VENV) $(OUT) .pytest_cache

## fuzz: every input format's reader and builder under atheris, FUZZ_SECONDS each (default 600),
## FUZZ_JOBS at a time; prints edges covered, executions and crashes per format
FUZZ_SECONDS ?= 600
FUZZ_JOBS ?= 1
FUZZ_ARGS ?=
fuzz: $(STAMP)
	$(BIN)/pip install --quiet 'atheris>=2.3'
	$(BIN)/python fuzz/run.py --seconds $(FUZZ_SECONDS) --jobs $(FUZZ_JOBS) $(FUZZ_ARGS)

## fuzz-ci: 20 s per format; fails on a crash, a hang, or a harness that stopped instrumenting
fuzz-ci:
	$(MAKE) fuzz FUZZ_SECONDS=20 FUZZ_ARGS=--min-edges=100
