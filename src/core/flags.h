// Args: a small command-line flag parser for `dspark <command> --flag value ...` and
// `dspark-train <command> ...` (in core so that no library depends on the app folder, src/cli).
#pragma once

#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace dspark {

// Common upper bounds for integer flags.
inline constexpr int64_t kFlagIntMax = 2147483647;           // values stored in int
inline constexpr int64_t kFlagInt64Max = 9223372036854775807;  // seeds, counts stored in int64

class Args {
 public:
  // Declares a flag before parsing. `takes_value` false makes it a boolean switch.
  Args& flag(const std::string& name, const std::string& help, bool takes_value = true,
             const std::string& default_value = "");
  // Parses argv (after the subcommand name). Unknown flags, missing values and stray
  // positional arguments throw Error naming the flag.
  void parse(int argc, char** argv);
  // parse() for `dspark <command>`; with --help it prints usage(command, summary) on stdout and
  // returns false: the command is done (exit 0).
  bool parse(int argc, char** argv, const std::string& command, const std::string& summary);

  bool help_requested() const { return help_; }
  std::string usage(const std::string& command, const std::string& summary) const;

  bool has(const std::string& name) const;  // given on the command line (or has a default)
  bool on(const std::string& name) const;   // a boolean switch that was given
  std::string str(const std::string& name) const;  // throws if absent and no default
  std::optional<std::string> opt(const std::string& name) const;
  // An integer flag in [min, max]. Every integer flag is read through here, so a value that is
  // not a decimal integer, overflows, or lies out of range is refused naming the flag and the
  // range (never narrowed: int(integer(...)) is safe for ranges inside int).
  int64_t integer(const std::string& name, int64_t min, int64_t max) const;
  // A finite number in [min, max] (nan and inf are refused, naming the flag).
  double number(const std::string& name, double min, double max) const;
  // A comma-separated list of integers, each in [min, max], at least one.
  std::vector<int> int_list(const std::string& name, int min, int max) const;
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

// One command of a program made of commands (`dspark <command>`, `dspark bench <what>`): its
// name, its line of help (a "\n" continues it on the next line) and its entry point, which gets
// the arguments after its name.
struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

// `program <command> [flags]`: runs the command argv[0] names with the rest of argv. Without one,
// the usage (one line per command) goes to stderr and the status is 2; with --help, -h or help it
// goes to stdout (0); an unknown name is an Error naming it, with the usage.
int run_subcommand(const std::string& program, std::span<const Subcommand> commands, int argc,
                   char** argv);

// main() of a program made of commands (argv[0] is the program's own name): run_subcommand, and
// an exception from a command is printed as "<program> <command>: error: <message>" (Error) or
// "... internal error: ..." (anything else) with status 1. `describe` may label other exception
// types (libtorch's): it returns "" for those it does not know.
int run_program(const std::string& program, std::span<const Subcommand> commands, int argc,
                char** argv, std::string (*describe)(const std::exception&) = nullptr);

}  // namespace dspark
