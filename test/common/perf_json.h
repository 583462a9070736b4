// Reading railnet-perf's --json output in tests (tools tests of the netns and soft-RoCE tiers).
// The output is one object per line inside its arrays; these helpers read that text form.
#pragma once
#include <stdlib.h>
#include <sstream>
#include <string>
#include <vector>

// The number after "key": in s, from position `from` on (-1 when absent).
inline long long jsonNum(const std::string& s, const std::string& key, size_t from = 0) {
  size_t p = s.find("\"" + key + "\":", from);
  return p == std::string::npos ? -1 : strtoll(s.c_str() + p + key.size() + 3, nullptr, 10);
}
// The string after "key":" in obj ("" when absent).
inline std::string jsonStr(const std::string& obj, const std::string& key) {
  size_t p = obj.find("\"" + key + "\":\"");
  if (p == std::string::npos) return "";
  p += key.size() + 4;
  return obj.substr(p, obj.find('"', p) - p);
}
// The rows of the "results" (client) or "received" (server) array: one object per line.
inline std::vector<std::string> jsonRows(const std::string& out) {
  std::vector<std::string> rows;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    size_t b = line.rfind("{\"test\":");
    if (b != std::string::npos) rows.push_back(line.substr(b, line.find('}', b) - b + 1));
  }
  return rows;
}
