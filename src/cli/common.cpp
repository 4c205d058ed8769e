#include "cli/common.h"

#include "core/error.h"
#include "core/thread_pool.h"

namespace dspark {

void add_runtime_flags(Args& args) {
  args.flag("dtype", "weight precision: bf16 or f32 (f32 makes speculative greedy exact)", true, "bf16");
  args.flag("threads", "compute threads (0: all cores)", true, "0");
}

DType apply_runtime_flags(const Args& args) {
  auto dt = dtype_from_flag(args.str("dtype"));
  if (!dt) fail("flag --dtype must be bf16 or f32, got '", args.str("dtype"), "'");
  const int64_t threads = args.integer("threads");
  if (threads < 0 || threads > 1024) fail("flag --threads must be between 0 and 1024");
  set_num_threads(int(threads));
  return *dt;
}

}  // namespace dspark
