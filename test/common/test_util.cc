#include "test_util.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <mutex>
#include <sstream>

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
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  std::lock_guard<std::mutex> g(logMu);
  lines().push_back({(int)level, flags, buf, ts.tv_sec * 1000000000LL + ts.tv_nsec});
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

std::string lineStarting(const std::string& s, const std::string& prefix) {
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) return line;
  return "";
}

int freeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd >= 0 && bind(fd, (struct sockaddr*)&a, sizeof(a)) == 0 && getsockname(fd, (struct sockaddr*)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

std::string readFile(const std::string& path) {
  std::string s;
  FILE* f = fopen(path.c_str(), "r");
  if (!f) return s;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  fclose(f);
  return s;
}

ToolRun shellRun(const std::string& cmd) {
  ToolRun r;
  FILE* p = popen(("( " + cmd + " ) 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  if (WIFEXITED(st)) r.status = WEXITSTATUS(st);
  return r;
}

std::vector<std::string> linesWith(const std::string& s, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line))
    if (has(line, needle)) out.push_back(line);
  return out;
}

std::string lineWith(const std::string& s, const std::string& a, const std::string& b) {
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line))
    if (has(line, a) && has(line, b)) return line;
  return "";
}

std::string lineAfter(const std::string& s, const std::string& a, const std::string& b) {
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line))
    if (has(line, a) && has(line, b)) return std::getline(in, line) ? line : "";
  return "";
}

std::vector<std::string> envWords(const char* name) {
  std::vector<std::string> out;
  const char* v = getenv(name);
  std::istringstream in(v ? v : "");
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}
