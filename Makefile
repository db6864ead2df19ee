# The README's commands. Each target creates .venv and installs the project when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
OUT := out

.PHONY: run test bench fuzz lint proto clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

## run: convert every sample into out/ (Chrome traces and Chakra sets)
run: $(STAMP)
	$(BIN)/python -m converters.samples $(OUT)

## test: the whole test suite
test: $(STAMP)
	$(BIN)/python -m pytest

## bench: speed and memory against chakra_converter, printed as ratios
bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

## proto: regenerate converters/_proto/et_def_pb2.py from schemas/et_def.proto
# grpcio-tools 1.74.0 bundles the protoc of protobuf 6.31.1, the version mlc-chakra 1.0.0 was built with.
PROTO_VENV := $(VENV)-proto
proto:
	$(PYTHON) -m venv $(PROTO_VENV)
	$(PROTO_VENV)/bin/pip install --quiet 'grpcio-tools==1.74.0'
	$(PROTO_VENV)/bin/python -m grpc_tools.protoc --proto_path=schemas --python_out=converters/_proto --pyi_out=converters/_proto schemas/et_def.proto

clean:
	rm -rf $(VENV) $(PROTO_VENV) $(OUT) .pytest_cache
