#include "core/flags.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace dspark {

Args& Args::flag(const std::string& name, const std::string& help, bool takes_value,
                 const std::string& default_value) {
  if (!specs_.count(name)) order_.push_back(name);
  specs_[name] = Spec{help, takes_value, default_value};
  return *this;
}

void Args::parse(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) fail("unexpected argument '", a, "' (flags start with --)");
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    auto it = specs_.find(name);
    if (it == specs_.end()) fail("unknown flag --", name, " (see --help)");
    if (it->second.takes_value) {
      if (!inline_value) {
        if (i + 1 >= argc) fail("flag --", name, " needs a value");
        value = argv[++i];
      }
      values_[name] = value;
      all_values_[name].push_back(value);
    } else {
      if (inline_value) fail("flag --", name, " takes no value");
      values_[name] = "1";
    }
  }
}

bool Args::parse(int argc, char** argv, const std::string& command, const std::string& summary) {
  parse(argc, argv);
  if (!help_) return true;
  std::fputs(usage(command, summary).c_str(), stdout);
  return false;
}

namespace {

std::string commands_usage(const std::string& program, std::span<const Subcommand> commands) {
  size_t width = 0;
  for (const Subcommand& c : commands) width = std::max(width, std::string(c.name).size());
  std::string out = "usage: " + program + " <command> [flags]   (" + program +
                    " <command> --help for its flags)\n\ncommands:\n";
  for (const Subcommand& c : commands) {
    out += "  " + std::string(c.name) + std::string(width + 2 - std::string(c.name).size(), ' ');
    for (const char* p = c.summary; *p; ++p)
      out += *p == '\n' ? "\n" + std::string(width + 4, ' ') : std::string(1, *p);
    out += "\n";
  }
  return out;
}

}  // namespace

int run_subcommand(const std::string& program, std::span<const Subcommand> commands, int argc,
                   char** argv) {
  const std::string usage = commands_usage(program, commands);
  if (argc < 1) {
    std::fputs(usage.c_str(), stderr);
    return 2;
  }
  const std::string name = argv[0];
  if (name == "--help" || name == "-h" || name == "help") {
    std::fputs(usage.c_str(), stdout);
    return 0;
  }
  for (const Subcommand& c : commands)
    if (name == c.name) return c.run(argc - 1, argv + 1);
  fail("unknown command '", name, "'\n\n", usage);
}

int run_program(const std::string& program, std::span<const Subcommand> commands, int argc,
                char** argv, std::string (*describe)(const std::exception&)) {
  const std::string where = argc > 1 ? program + " " + argv[1] : program;
  try {
    return run_subcommand(program, commands, argc - 1, argv + 1);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", where.c_str(), e.what());
  } catch (const std::exception& e) {
    const std::string label = describe ? describe(e) : "";
    std::fprintf(stderr, "%s: %s\n", where.c_str(),
                 (label.empty() ? "internal error: " + std::string(e.what()) : label).c_str());
  }
  return 1;
}

std::string Args::usage(const std::string& command, const std::string& summary) const {
  std::ostringstream os;
  os << "usage: dspark " << command << " [flags]\n\n" << summary << "\n\nflags:\n";
  for (const auto& n : order_) {
    const Spec& s = specs_.at(n);
    std::string lhs = "  --" + n + (s.takes_value ? " VALUE" : "");
    os << lhs;
    if (lhs.size() < 28) os << std::string(28 - lhs.size(), ' ');
    else os << "\n" << std::string(28, ' ');
    os << s.help;
    if (!s.default_value.empty()) os << " (default: " << s.default_value << ")";
    os << "\n";
  }
  return os.str();
}

bool Args::has(const std::string& name) const {
  if (values_.count(name)) return true;
  auto it = specs_.find(name);
  return it != specs_.end() && !it->second.default_value.empty();
}

bool Args::on(const std::string& name) const { return values_.count(name) != 0; }

std::optional<std::string> Args::opt(const std::string& name) const {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  if (auto it = specs_.find(name); it != specs_.end() && !it->second.default_value.empty())
    return it->second.default_value;
  return std::nullopt;
}

std::string Args::str(const std::string& name) const {
  auto v = opt(name);
  if (!v) fail("missing required flag --", name);
  return *v;
}

namespace {

// Parses a whole decimal integer; false when it is not one or does not fit in int64.
bool parse_int64(const std::string& v, int64_t& out) {
  if (v.empty() || std::isspace(static_cast<unsigned char>(v[0]))) return false;
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (*end || errno == ERANGE) return false;
  out = x;
  return true;
}

}  // namespace

int64_t Args::integer(const std::string& name, int64_t min, int64_t max) const {
  const std::string v = str(name);
  int64_t x = 0;
  if (!parse_int64(v, x)) fail("flag --", name, " expects an integer from ", min, " to ", max, ", got '", v, "'");
  if (x < min || x > max) fail("flag --", name, " must be from ", min, " to ", max, ", got ", v);
  return x;
}

double Args::number(const std::string& name, double min, double max) const {
  const std::string v = str(name);
  char* end = nullptr;
  const double x = v.empty() || std::isspace(static_cast<unsigned char>(v[0])) ? 0.0 : std::strtod(v.c_str(), &end);
  if (v.empty() || !end || *end || !std::isfinite(x))
    fail("flag --", name, " expects a finite number from ", min, " to ", max, ", got '", v, "'");
  if (x < min || x > max) fail("flag --", name, " must be from ", min, " to ", max, ", got ", v);
  return x;
}

std::vector<int> Args::int_list(const std::string& name, int min, int max) const {
  const std::string s = str(name);
  std::vector<int> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    const std::string item = s.substr(start, comma - start);
    int64_t x = 0;
    if (!parse_int64(item, x) || x < min || x > max)
      fail("flag --", name, " expects integers from ", min, " to ", max, " separated by commas, got '", s, "'");
    out.push_back(int(x));
    start = comma + 1;
  }
  return out;
}

}  // namespace dspark

namespace dspark {
std::vector<std::string> Args::list(const std::string& name) const {
  auto it = all_values_.find(name);
  return it == all_values_.end() ? std::vector<std::string>{} : it->second;
}
}  // namespace dspark
