// dspark tokenizer: train a byte-level BPE tokenizer (filled in by the tokenizer-training work).
#include "cli/commands.h"
#include "core/error.h"

namespace dspark {
int cmd_tokenizer(int, char**) { fail("dspark tokenizer is not built yet"); }
}  // namespace dspark
