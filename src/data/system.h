// Debian package queries for the corpus builder (dpkg-query, apt-cache) and running helpers.
#pragma once

#include <string>
#include <vector>

namespace dspark::data {

struct CommandResult {
  int status = -1;  // exit status, or -1 when the command could not run
  std::string out;  // standard output
};
// Runs `argv` (no shell) and captures its standard output; standard error passes through unless
// `quiet`.
CommandResult run_command(const std::vector<std::string>& argv, bool quiet = true);

struct PackageInfo {
  std::string name;
  bool installed = false;
  std::string version;  // installed version, empty when not installed
  std::string section;  // e.g. "utils", "non-free/doc"
};
PackageInfo query_package(const std::string& name);
// Files the installed package owns (dpkg -L), sorted; empty when not installed.
std::vector<std::string> package_files(const std::string& name);
// True when apt knows an installable version of the package.
bool package_installable(const std::string& name);

// The licence /usr/share/doc/PKG/copyright states for the files we read: the License of the
// first DEP-5 stanza whose Files field contains one of `prefer` (in that order); else, when
// `documentation`, a GNU Free Documentation License named in the text; else the License of
// "Files: *"; else a GPL or public-domain statement in a free-form file; else a pointer to it.
std::string package_licence(const std::string& name, const std::vector<std::string>& prefer,
                            bool documentation);
// Same, reading the copyright text from `copyright_text` (`where` names it in the fallback).
std::string licence_from_copyright(const std::string& copyright_text, const std::vector<std::string>& prefer,
                                   bool documentation, const std::string& where);

}  // namespace dspark::data
