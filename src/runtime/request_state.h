// The engine's state of one request, shared by its three parts: the request scheduler (queues,
// KV room, the step's plan), the model runner (drafts, the forward pass, verification) and the
// output processor (text, stops, outputs, metrics). Engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "runtime/held_rows.h"
#include "runtime/request.h"
#include "spec_decode/drafter.h"
#include "tokenizer/tokenizer.h"

namespace dspark {

// A drafter version in use: the current one and older ones that running requests still draft
// with (a hot reload; freed when their last request ends).
struct DrafterVersion {
  std::unique_ptr<Drafter> own;
  Drafter* d = nullptr;
  int version = 1;
  int users = 0;  // requests that hold it
};

struct RequestState {
  RequestState(uint64_t h, EngineRequest r, OutputFn fn, const Tokenizer& tok)
      : handle(h),
        req(std::move(r)),
        on_output(std::move(fn)),
        stops(req.params.stop_strings),
        decoder(tok, true) {}
  ~RequestState() {
    if (dv) --dv->users;
  }
  RequestState(const RequestState&) = delete;
  RequestState& operator=(const RequestState&) = delete;

  uint64_t handle;
  EngineRequest req;
  OutputFn on_output;
  int max_tokens = 0;               // output budget
  std::vector<int32_t> out_tokens;  // generated so far
  int kv_seq = -1, draft_seq = -1;
  DrafterVersion* dv = nullptr;  // the drafter it was first admitted with (kept over preemption)
  int computed = 0;              // positions whose KV (and drafter context) exist
  // Prompt positions the prefix cache held at first admission (-1: not yet).
  int cached_tokens = -1;
  int target_len = 0;  // positions to prefill before decoding
  bool decoding = false;
  bool abort_requested = false;
  bool finished = false;
  bool aborted = false;  // finished with "abort"
  int32_t anchor = -1;   // the last emitted token, not yet in the KV cache
  double arrival = 0, scheduled = -1, first_token = -1, last_emit = -1;
  StopStringFilter stops;
  StreamDecoder decoder;
  RequestOutput pending;
  bool has_pending = false;
  // This step's plan: up to `want` drafts and `chunk` prompt tokens (the request scheduler), the
  // drafts verified (the verification-length policy) and the first output row (the model runner).
  int want = 0, verify_len = 0, chunk = 0, out_row = 0;
  Draft draft;
  Rng draft_rng;
  // GenerateParams::logits_params when it asks for anything (else null): holds the emitted tokens.
  std::unique_ptr<LogitsProcessor> processor;
  // Rows the drafter has not been given yet: committed tokens from position held_pos on, and
  // (when the drafter reads target features) their feature rows, held_width floats each.
  // held_last: how many of them the last step added.
  std::vector<int32_t> committed;
  HeldRows held_feats;
  int held_pos = 0, held_width = 0, held_last = 0;
  // Export (EngineRequest::export_hidden): the export layers of positions 0 .. export_rows - 1.
  std::string export_bytes;
  int export_rows = 0;
  // GenerateParams::prompt_logprobs: prompt tokens 1 .. prompt_lp.size() scored so far, handed
  // out (prompt_lp_sent) with the first output.
  Logprobs prompt_lp;
  bool prompt_lp_sent = false;

  // Whether this step's prefill rows need logits: the prompt is scored and not all of it yet.
  bool scores_prompt() const {
    return req.params.prompt_logprobs >= 0 && !prompt_lp_sent &&
           int(prompt_lp.size()) < prompt_len() - 1;
  }

  int prompt_len() const { return int(req.prompt.size()); }
  int anchor_pos() const { return prompt_len() + int(out_tokens.size()) - 1; }
  int32_t token_at(int pos) const {
    return pos < prompt_len() ? req.prompt[size_t(pos)] : out_tokens[size_t(pos - prompt_len())];
  }
};

using RequestQueue = std::vector<std::unique_ptr<RequestState>>;

}  // namespace dspark
