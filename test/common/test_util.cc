#include "test_util.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <mutex>

static std::mutex logMu;

std::vector<LogCapture::Line>& LogCapture::lines() {
  static std::vector<Line> l;
  return l;
}

void LogCapture::logger(ncclDebugLogLevel level, unsigned long flags, const char*, int, const char* fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> g(logMu);
  lines().push_back({(int)level, flags, buf});
}

bool LogCapture::contains(const std::string& needle, int level) {
  std::lock_guard<std::mutex> g(logMu);
  for (auto& l : lines())
    if ((level < 0 || l.level == level) && l.msg.find(needle) != std::string::npos) return true;
  return false;
}

std::string LogCapture::all() {
  std::lock_guard<std::mutex> g(logMu);
  std::string s;
  for (auto& l : lines()) s += "[" + std::to_string(l.level) + "] " + l.msg + "\n";
  return s;
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/railnet-test-XXXXXX";
  char* d = mkdtemp(tmpl);
  if (d) path_ = d;
}

TempDir::~TempDir() {
  if (!path_.empty()) {
    std::string cmd = "rm -rf '" + path_ + "'";
    if (system(cmd.c_str()) != 0) fprintf(stderr, "could not remove %s\n", path_.c_str());
  }
}

std::string TempDir::write(const std::string& rel, const std::string& content) const {
  std::string full = path_ + "/" + rel;
  for (size_t pos = path_.size() + 1; (pos = full.find('/', pos)) != std::string::npos; pos++)
    mkdir(full.substr(0, pos).c_str(), 0755);
  FILE* f = fopen(full.c_str(), "w");
  if (f) {
    fwrite(content.data(), 1, content.size(), f);
    fclose(f);
  }
  return full;
}
