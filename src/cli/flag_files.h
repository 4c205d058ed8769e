// Output files named by a flag (bench serve's --json and --plot, bench spec's --plot): refused
// before a run that may take many minutes, written at its end; errors name the flag.
#pragma once

#include <string>

namespace dspark {

// Refuses, naming the flag, a path that cannot be written (a directory, a missing folder); leaves
// no file behind where there was none.
void check_writable(const std::string& path, const std::string& flag);
// Writes `text` to `path`, replacing it.
void write_file(const std::string& path, const std::string& text, const std::string& flag);

}  // namespace dspark
