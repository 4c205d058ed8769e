# dspark: the two entry points are `make demo` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc)
# The embedded default model: models/demo (a random model is made if it is missing).
DEMO_MODEL ?= $(if $(wildcard models/demo/config.json),models/demo,$(BUILD)/demo-model)
DEMO_PROMPT ?= Tom has 15 apples and gives 6 to Ana. How many apples does Tom have left?

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

# What the demo target is, said first: the demo shows speed with identical output, not answers.
DEMO_WHAT = $(if $(wildcard models/demo/config.json),the demo target is a 22M-parameter Qwen3-style model trained on 2 CPU cores: its answers are often wrong; what the demo shows is speed with identical output,no models/demo: a random model (its text is noise); what the demo shows is speed with identical output)
DEMO_DRAFTER ?= models/demo-dspark
# Out-of-domain prompts for the demo's last line: the repository's own small set, written for the
# demo (9 categories: math, code, writing, chat, summarization, extraction, translation, qa,
# reasoning). Spec-Bench or MT-Bench run the same way with DEMO_OOD_PROMPTS=path/to/question.jsonl
# (docs/performance.md, "Prompt sets", says where to get them).
DEMO_OOD_PROMPTS ?= bench/prompts/demo.jsonl
DEMO_OOD_PER_CATEGORY ?= 2
# The drafter's weights in int8 where the CPU has AVX512-BF16 (the kernels that read them); the
# target stays bf16, so the output is the same (docs/speculative.md, "int8 drafter weights").
comma := ,
DEMO_DRAFT_QUANT ?= $(if $(shell grep -m1 -ow avx512_bf16 /proc/cpuinfo 2>/dev/null),$(comma) "quantization": "int8")
DEMO_SPEC_FIELDS = "model": "$(DEMO_DRAFTER)", "method": "dspark", "num_speculative_tokens": 8, "draft_sample_method": "probabilistic", "rejection_sample_method": "block"$(DEMO_DRAFT_QUANT)
DEMO_SPEC = {$(DEMO_SPEC_FIELDS)}
DEMO_SPEC_SCHED = {$(DEMO_SPEC_FIELDS), "enable_adaptive_verification": true}
# The long-context line: one prompt of the 4k bucket of scripts/make_long_prompts.py, twice the
# demo target's trained length, on the target with YaRN. DEMO_LONG_BUCKET=16k runs a 16K-token
# prompt instead (about a minute on 2 cores: both runs prefill it); 30k also exists.
DEMO_LONG_BUCKET ?= 4k
DEMO_LONG_YARN = {"rope_scaling": {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 2048}}

# The demo target answers a prompt; with the committed DSpark drafter it then answers again with
# speculative decoding, and benchmarks plain against speculative decoding on held-out math prompts:
# full 8-token blocks, then with the hardware-aware prefix length policy choosing each round's length;
# then with that policy on prompts out of the drafter's math domain (DEMO_OOD_PROMPTS); then the
# target quantized to Q4_K on load, on the math prompts; last, one long prompt.
demo: build $(if $(wildcard models/demo/config.json),,$(BUILD)/demo-model/config.json)
	@echo "== $(DEMO_WHAT) =="
	$(BUILD)/dspark generate --model $(DEMO_MODEL) --chat --prompt "$(DEMO_PROMPT)" --max-tokens 128
ifneq ($(wildcard $(DEMO_DRAFTER)/config.json),)
	@echo; echo "== the same with DSpark speculative decoding =="
	$(BUILD)/dspark generate --model $(DEMO_MODEL) --chat --prompt "$(DEMO_PROMPT)" --max-tokens 128 \
	  --speculative-config '$(DEMO_SPEC)'
	@echo; echo "== plain vs DSpark on held-out math prompts (single stream, bf16) =="
	$(BUILD)/dspark bench spec --model $(DEMO_MODEL) --speculative-config '$(DEMO_SPEC)' \
	  --prompts $(DEMO_DRAFTER)/math_prompts.jsonl --max-tokens 128
	@echo; echo "== the same with the prefix length policy (enable_adaptive_verification) =="
	$(BUILD)/dspark bench spec --model $(DEMO_MODEL) --speculative-config '$(DEMO_SPEC_SCHED)' \
	  --prompts $(DEMO_DRAFTER)/math_prompts.jsonl --max-tokens 128
	@echo; echo "== out of domain: $(DEMO_OOD_PROMPTS), $(DEMO_OOD_PER_CATEGORY) prompts of each category, with the prefix length policy =="
	$(BUILD)/dspark bench spec --model $(DEMO_MODEL) --speculative-config '$(DEMO_SPEC_SCHED)' \
	  --prompts $(DEMO_OOD_PROMPTS) --per-category $(DEMO_OOD_PER_CATEGORY) --max-tokens 64
	@echo; echo "== the target quantized to Q4_K on load (quantized kernels), held-out math prompts, full blocks: compare with bf16 above =="
	$(BUILD)/dspark bench spec --model $(DEMO_MODEL) --quantization q4_k --speculative-config '$(DEMO_SPEC)' \
	  --prompts $(DEMO_DRAFTER)/math_prompts.jsonl --max-tokens 128
	@echo; echo "== long context: a Debian document of about $(DEMO_LONG_BUCKET) tokens and a task about it (scripts/make_long_prompts.py), the target stretched from 2,048 to 32,768 positions with YaRN x16, full blocks; the drafter attends to its last 1,024 =="
	@if python3 scripts/make_long_prompts.py --model $(DEMO_MODEL) --dspark $(BUILD)/dspark --buckets $(DEMO_LONG_BUCKET) \
	  --per-bucket 1 --out $(BUILD)/demo_long_prompts.jsonl && test -s $(BUILD)/demo_long_prompts.jsonl; then \
	  $(BUILD)/dspark bench spec --model $(DEMO_MODEL) --hf-overrides '$(DEMO_LONG_YARN)' --speculative-config '$(DEMO_SPEC)' \
	    --prompts $(BUILD)/demo_long_prompts.jsonl --max-tokens 64; \
	else echo "long-context line skipped: no prompt file (the reason is above)"; fi
endif

clean:
	rm -rf $(BUILD)
