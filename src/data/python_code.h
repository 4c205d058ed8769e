// Python source helpers for the code domain: which standard-library files to keep, and the
// top-level functions with docstrings that the instruction domain turns into tasks.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dspark::data {

struct PyFunction {
  std::string name;
  std::string params;   // what stands between the parentheses, whitespace collapsed
  std::string summary;  // the docstring's first paragraph (or first sentence if it is long)
  std::string header;   // decorators, the def line(s) and the docstring, as in the source
  std::string body;     // the lines after the docstring
  std::string source;   // header + body
};

// Top-level (column 0) functions with a docstring and a body of 1..max_lines lines, whose name
// does not start with '_'. Malformed or unusual shapes are skipped, never an error.
std::vector<PyFunction> extract_python_functions(std::string_view source, int max_lines = 60,
                                                 size_t max_bytes = 4000);

// True for files the code domain leaves out: tests, generated tables (encodings made by
// gencodec.py, pydoc topics, sysconfig data) and files over `max_bytes`.
bool skip_python_file(const std::string& path, std::string_view text, size_t max_bytes = 256 * 1024);

}  // namespace dspark::data
