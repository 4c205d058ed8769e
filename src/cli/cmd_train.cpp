// dspark train: training lives in its own binary (dspark-train, linked with libtorch) so the
// inference engine never links libtorch; this command runs it with the same arguments.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"

namespace dspark {

int cmd_train(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path trainer = self.parent_path() / "dspark-train";
  if (ec || !fs::exists(trainer))
    fail("the trainer binary dspark-train is not next to dspark (", trainer.string(),
         "); build it with libtorch (make build)");
  std::vector<char*> args;
  std::string name = trainer.string();
  args.push_back(name.data());
  for (int i = 0; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  ::execv(name.c_str(), args.data());
  fail("cannot run ", name, ": ", std::strerror(errno));
}

}  // namespace dspark
