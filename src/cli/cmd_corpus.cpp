// dspark corpus: build the training corpus from Debian-shipped text (filled in by the corpus work).
#include "cli/commands.h"
#include "core/error.h"

namespace dspark {
int cmd_corpus(int, char**) { fail("dspark corpus is not built yet"); }
}  // namespace dspark
