// Flags and set-up shared by the commands that run a model.
#pragma once

#include <memory>
#include <string>

#include "cli/args.h"
#include "model/model.h"

namespace dspark {

// Declares --dtype and --threads.
void add_runtime_flags(Args& args);
// Applies --threads and returns the weight dtype chosen by --dtype.
DType apply_runtime_flags(const Args& args);

}  // namespace dspark
