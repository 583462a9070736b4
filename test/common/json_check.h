// Checking the tools' --json output with a real JSON parser (Python's json module), and
// reading values out of it, in the tools tests of the unit and netns tiers.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string>

// Writes content to a new temporary file; returns its path ("" on failure).
inline std::string jsonCheckTempFile(const std::string& content) {
  char path[] = "/tmp/railnet-json-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return "";
  size_t off = 0;
  while (off < content.size()) {
    ssize_t w = write(fd, content.data() + off, content.size() - off);
    if (w <= 0) break;
    off += (size_t)w;
  }
  close(fd);
  return path;
}

// Runs the Python program on doc (parsed into d first); returns what it printed (stdout
// and stderr). Both go through files, so neither needs any quoting.
inline std::string pythonOnJson(const std::string& doc, const std::string& program) {
  std::string docPath = jsonCheckTempFile(doc);
  std::string pyPath = jsonCheckTempFile("import json, sys\nd = json.load(open(sys.argv[1], encoding='utf-8'))\n" +
                                         program + "\n");
  if (docPath.empty() || pyPath.empty()) return "mkstemp failed";
  std::string out;
  FILE* p = popen(("python3 " + pyPath + " " + docPath + " 2>&1").c_str(), "r");
  if (p != nullptr) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    pclose(p);
  }
  unlink(docPath.c_str());
  unlink(pyPath.c_str());
  return out;
}

// "" when doc is one valid JSON document (an object), else the parser's complaint.
inline std::string jsonProblem(const std::string& doc) {
  std::string out = pythonOnJson(doc, "assert isinstance(d, dict), 'not an object'\nprint('JSON-OK')");
  return out == "JSON-OK\n" ? "" : out;
}
