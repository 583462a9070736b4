// Helpers shared by railnet's GoogleTest suites.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>
#include <string>
#include <vector>

extern "C" {
#include "debug.h"
#include "param.h"
#include "testing.h"
}

// A test that needs something absent prints "SKIP: <reason>" and is counted as skipped.
#define RAILNET_SKIP(reason)                                   \
  do {                                                         \
    std::string r_ = (reason);                                 \
    printf("SKIP: %s\n", r_.c_str());                          \
    GTEST_SKIP() << r_;                                        \
  } while (0)

// Sets environment variables for one test and restores them (and railnet's caches) after.
class ScopedEnv {
 public:
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->had) setenv(it->name.c_str(), it->value.c_str(), 1);
      else unsetenv(it->name.c_str());
    }
    railnetParamReset();
    railnetDebugReset();
  }
  void set(const char* name, const char* value) {
    save(name);
    if (value) setenv(name, value, 1);
    else unsetenv(name);
    railnetParamReset();
    railnetDebugReset();
  }
  void unset(const char* name) { set(name, nullptr); }

 private:
  struct Saved { std::string name, value; bool had; };
  void save(const char* name) {
    const char* v = getenv(name);
    saved_.push_back({name, v ? v : "", v != nullptr});
  }
  std::vector<Saved> saved_;
};

// Collects messages railnet sends to an NCCL-style logger.
struct LogCapture {
  struct Line { int level; unsigned long flags; std::string msg; long long ns; /* CLOCK_MONOTONIC when logged */ };
  static std::vector<Line>& lines();
  static void logger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...);
  static bool contains(const std::string& needle, int level = -1);
  static std::string all();
  LogCapture() { lines().clear(); railnetSetLogger(logger); }
  ~LogCapture() { railnetSetLogger(nullptr); }
};

// A fresh temporary directory, removed with its contents at the end of the test.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string write(const std::string& rel, const std::string& content) const;

 private:
  std::string path_;
};

// Text helpers of the tests that read what a program printed or a file holds.
inline bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }
// The first line of s that starts with prefix ("" if none).
std::string lineStarting(const std::string& s, const std::string& prefix);
// The first line of s that contains both a and b ("" if none), and the line after it.
std::string lineWith(const std::string& s, const std::string& a, const std::string& b);
std::string lineAfter(const std::string& s, const std::string& a, const std::string& b);
// The words of environment variable NAME (none when it is unset).
std::vector<std::string> envWords(const char* name);
// The lines of s that contain needle.
std::vector<std::string> linesWith(const std::string& s, const std::string& needle);
// The whole file ("" when it cannot be read).
std::string readFile(const std::string& path);

// A TCP port of 127.0.0.1 that nothing listens on now (bound to port 0, then released).
int freeLoopbackPort();

// A shell command run as a user runs it: /bin/sh -c "( cmd ) 2>&1".
struct ToolRun {
  int status = -1;  // exit status, -1 if it did not exit
  std::string out;  // stdout and stderr
};
ToolRun shellRun(const std::string& cmd);

// One row of the fault matrix that make test prints (test/run-tests.sh collects the rows
// of every tier): transport, case, outcome, seconds from the fault to the outcome.
// Call it after the case's checks: a case whose checks failed shows FAILED, not the outcome
// it was meant to reach.
inline void faultMatrixRow(const char* transport, const std::string& name, const std::string& outcome, double secs) {
  std::string o = ::testing::Test::HasFailure() ? "FAILED (expected: " + outcome + ")" : outcome;
  printf("FAULT-MATRIX | %-6s | %-40s | %-52s | %5.1f s\n", transport, name.c_str(), o.c_str(), secs);
  fflush(stdout);
}
