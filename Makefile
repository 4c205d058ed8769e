# dspark: the two entry points are `make demo` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc)
# The embedded default model (issue 3 commits models/demo); until then a random model is made.
DEMO_MODEL ?= $(if $(wildcard models/demo/config.json),models/demo,$(BUILD)/demo-model)
DEMO_PROMPT ?= Write a Python function that returns the n-th Fibonacci number.

.PHONY: all deps build test demo clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

$(BUILD)/demo-model/config.json: | build
	$(BUILD)/dspark model init --shape tiny-qwen3 --out $(BUILD)/demo-model --std 0.3

demo: build $(if $(wildcard models/demo/config.json),,$(BUILD)/demo-model/config.json)
	$(BUILD)/dspark generate --model $(DEMO_MODEL) --chat --prompt "$(DEMO_PROMPT)" --max-tokens 128

clean:
	rm -rf $(BUILD)
