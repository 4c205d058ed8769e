#include "data/system.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "data/text_util.h"

namespace dspark::data {

CommandResult run_command(const std::vector<std::string>& argv, bool quiet) {
  CommandResult r;
  if (argv.empty()) return r;
  int pipefd[2];
  if (::pipe(pipefd) != 0) fail("cannot create a pipe: ", std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    fail("cannot fork to run ", argv[0], ": ", std::strerror(errno));
  }
  if (pid == 0) {
    ::dup2(pipefd[1], 1);
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    if (quiet) {
      const int devnull = ::open("/dev/null", O_WRONLY);
      if (devnull >= 0) ::dup2(devnull, 2);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(pipefd[1]);
  char buf[1 << 14];
  ssize_t n;
  while ((n = ::read(pipefd[0], buf, sizeof buf)) != 0) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    r.out.append(buf, size_t(n));
  }
  ::close(pipefd[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

PackageInfo query_package(const std::string& name) {
  PackageInfo p;
  p.name = name;
  const auto r = run_command({"dpkg-query", "-W", "-f=${Status}\t${Version}\t${Section}\n", name});
  if (r.status != 0) return p;
  // A multi-arch package may print one line per architecture; the first installed one counts.
  for (const auto line : split_lines(r.out)) {
    const std::string l(line);
    const size_t t1 = l.find('\t'), t2 = l.find('\t', t1 == std::string::npos ? 0 : t1 + 1);
    if (t1 == std::string::npos || t2 == std::string::npos) continue;
    if (l.substr(0, t1) != "install ok installed") continue;
    p.installed = true;
    p.version = l.substr(t1 + 1, t2 - t1 - 1);
    p.section = l.substr(t2 + 1);
    break;
  }
  return p;
}

std::vector<std::string> package_files(const std::string& name) {
  const auto r = run_command({"dpkg-query", "-L", name});
  std::vector<std::string> files;
  if (r.status != 0) return files;
  for (const auto line : split_lines(r.out))
    if (!line.empty() && line[0] == '/') files.emplace_back(line);
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

bool package_installable(const std::string& name) {
  const auto r = run_command({"apt-cache", "policy", name});
  if (r.status != 0) return false;
  const size_t c = r.out.find("Candidate:");
  if (c == std::string::npos) return false;
  const size_t e = r.out.find('\n', c);
  const std::string cand(trim(std::string_view(r.out).substr(c + 10, e == std::string::npos ? std::string::npos : e - c - 10)));
  return !cand.empty() && cand != "(none)";
}

std::string licence_from_copyright(const std::string& text, const std::vector<std::string>& prefer,
                                   bool documentation, const std::string& where) {
  // DEP-5 stanzas: "Files:" (possibly continued on indented lines) then "License:".
  std::vector<std::pair<std::string, std::string>> stanzas;  // files, licence
  std::string files;
  bool in_files = false;
  for (const auto raw : split_lines(text)) {
    const std::string_view line = raw;
    if (starts_with(line, "Files:")) {
      files = std::string(trim(line.substr(6)));
      in_files = true;
    } else if (in_files && !line.empty() && (line[0] == ' ' || line[0] == '\t')) {
      files += " " + std::string(trim(line));
    } else if (starts_with(line, "License:")) {
      in_files = false;
      const std::string lic(trim(line.substr(8)));
      if (!lic.empty()) stanzas.emplace_back(files, lic);
      files.clear();
    } else {
      in_files = false;
      if (line.empty()) files.clear();
    }
  }
  for (const auto& p : prefer)
    for (const auto& [f, lic] : stanzas)
      if (f.find(p) != std::string::npos) return lic;
  if (documentation) {
    const size_t g = std::min(text.find("GNU Free Documentation License"), text.find("GFDL"));
    if (g != std::string::npos) {
      const std::string tail = text.substr(g, 300);
      for (const char* v : {"1.3", "1.2", "1.1"})
        if (tail.find(v) != std::string::npos) return std::string("GFDL-") + v + "+";
      return "GFDL";
    }
  }
  for (const auto& [f, lic] : stanzas)
    if (f == "*") return lic;
  if (!stanzas.empty()) return stanzas.front().second;
  // Free-form copyright files.
  const size_t gpl = text.find("GNU General Public License");
  if (gpl != std::string::npos) {
    const std::string tail = text.substr(gpl, 400);
    for (const char* v : {"3", "2", "1"}) {
      if (tail.find(std::string("version ") + v) != std::string::npos) {
        const bool later = tail.find("any later version") != std::string::npos;
        return std::string("GPL-") + v + (later ? "+" : "");
      }
    }
    return "GPL";
  }
  if (lower_ascii(text).find("public domain") != std::string::npos) return "public domain";
  return "see " + where;
}

std::string package_licence(const std::string& name, const std::vector<std::string>& prefer, bool documentation) {
  const std::string path = "/usr/share/doc/" + name + "/copyright";
  std::ifstream in(path);
  if (!in) return "unknown (no " + path + ")";
  std::stringstream ss;
  ss << in.rdbuf();
  return licence_from_copyright(ss.str(), prefer, documentation, path);
}

}  // namespace dspark::data
