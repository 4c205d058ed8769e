// GNU info manuals (/usr/share/info/*.info*.gz): nodes turned into plain-text documents.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dspark::data {

struct InfoNode {
  std::string node;  // node name, e.g. "Invoking sed"
  std::string text;  // cleaned body
};

// Splits an info file (all of a split manual's parts concatenated) into nodes and cleans them:
// header line, menus, index nodes and licence nodes dropped; "*note X::" cross references turned
// into "see X"; heading underlines removed. Nodes with under `min_bytes` of text are dropped.
// `title` (optional) receives the manual's title (the Top node's heading).
std::vector<InfoNode> parse_info_manual(std::string_view info_text, std::string* title = nullptr,
                                        size_t min_bytes = 200);

// The manual name of an info file path: "/usr/share/info/find.info-2.gz" -> "find"; and its
// part number (0 for the main file) so parts can be read in order.
std::string info_manual_name(const std::string& path, int* part = nullptr);

}  // namespace dspark::data
