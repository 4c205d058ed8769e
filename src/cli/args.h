// Args: a small command-line parser for `dspark <command> --flag value ...`.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dspark {

class Args {
 public:
  // Declares a flag before parsing. `takes_value` false makes it a boolean switch.
  Args& flag(const std::string& name, const std::string& help, bool takes_value = true,
             const std::string& default_value = "");
  // Parses argv (after the subcommand name). Unknown flags, missing values and stray
  // positional arguments throw Error naming the flag.
  void parse(int argc, char** argv);

  bool help_requested() const { return help_; }
  std::string usage(const std::string& command, const std::string& summary) const;

  bool has(const std::string& name) const;  // given on the command line (or has a default)
  bool on(const std::string& name) const;   // a boolean switch that was given
  std::string str(const std::string& name) const;  // throws if absent and no default
  std::optional<std::string> opt(const std::string& name) const;
  int64_t integer(const std::string& name) const;  // throws Error naming the flag if not an integer
  double number(const std::string& name) const;
  // Every value of a flag that may be repeated (--stop a --stop b), in order.
  std::vector<std::string> list(const std::string& name) const;

 private:
  struct Spec {
    std::string help;
    bool takes_value;
    std::string default_value;
  };
  std::vector<std::string> order_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> all_values_;
  bool help_ = false;
};

}  // namespace dspark
