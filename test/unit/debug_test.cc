// Logging: NCCL_DEBUG, NCCL_DEBUG_SUBSYS (with ^), NCCL_DEBUG_FILE (%h, %p), the NCCL logger.
#include <cstdarg>
#include "test_util.h"
#include <fstream>
#include <regex>
#include <sstream>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" {
#include "core.h"
}

namespace {

std::string shortHost() {
  char h[256] = {0};
  gethostname(h, sizeof(h) - 1);
  std::string s = h;
  return s.substr(0, s.find('.'));
}

TEST(Debug, ParseSubsys) {
  EXPECT_EQ(railnetParseSubsys("INIT,NET"), (unsigned long)(NCCL_INIT | NCCL_NET));
  EXPECT_EQ(railnetParseSubsys("net , env"), (unsigned long)(NCCL_NET | NCCL_ENV));
  EXPECT_EQ(railnetParseSubsys("^NET"), ~(unsigned long)NCCL_NET);
  EXPECT_EQ(railnetParseSubsys("ALL"), (unsigned long)NCCL_ALL);
  EXPECT_EQ(railnetParseSubsys("^ALL"), 0ul);
  EXPECT_EQ(railnetParseSubsys(nullptr), (unsigned long)(NCCL_INIT | NCCL_BOOTSTRAP | NCCL_ENV));
  EXPECT_EQ(railnetParseSubsys("BOGUS"), 0ul);
}

TEST(Debug, ParseLevel) {
  EXPECT_EQ(railnetParseLevel("INFO"), NCCL_LOG_INFO);
  EXPECT_EQ(railnetParseLevel("warn"), NCCL_LOG_WARN);
  EXPECT_EQ(railnetParseLevel("TRACE"), NCCL_LOG_TRACE);
  EXPECT_EQ(railnetParseLevel("VERSION"), NCCL_LOG_VERSION);
  EXPECT_EQ(railnetParseLevel("nonsense"), NCCL_LOG_NONE);
  EXPECT_EQ(railnetParseLevel(nullptr), NCCL_LOG_NONE);
}

TEST(Debug, ExpandDebugFile) {
  char out[512];
  railnetExpandDebugFile("/tmp/nccl.%h.%p.log", out, sizeof(out));
  std::string want = "/tmp/nccl." + shortHost() + "." + std::to_string(getpid()) + ".log";
  EXPECT_EQ(std::string(out), want);
  railnetExpandDebugFile("a%%b%q%", out, sizeof(out));
  EXPECT_EQ(std::string(out), "a%b%q%");
  char tiny[4];
  railnetExpandDebugFile("%h%h%h", tiny, sizeof(tiny));
  EXPECT_EQ(strlen(tiny), 3u);
}

TEST(Debug, SubsysFilterAndFileInNcclFormat) {
  ScopedEnv env;
  TempDir dir;
  env.set("NCCL_DEBUG", "INFO");
  env.set("NCCL_DEBUG_SUBSYS", "^NET");
  env.set("NCCL_DEBUG_FILE", (dir.path() + "/log.%h.%p").c_str());
  INFO(NCCL_NET, "net message %d", 1);
  INFO(NCCL_INIT, "init message %d", 2);
  WARN("warn message %d", 3);
  railnetDebugReset();  // closes the file
  std::string path = dir.path() + "/log." + shortHost() + "." + std::to_string(getpid());
  std::string text = readFile(path);
  EXPECT_EQ(text.find("net message"), std::string::npos) << text;
  std::regex info("(^|\n)" + shortHost() + ":" + std::to_string(getpid()) + ":[0-9]+ \\[0\\] NCCL INFO init message 2\n");
  EXPECT_TRUE(std::regex_search(text, info)) << text;
  std::regex warn(":[0-9]+ \\[0\\] debug_test.cc:[0-9]+ NCCL WARN warn message 3\n");
  EXPECT_TRUE(std::regex_search(text, warn)) << text;
}

TEST(Debug, LevelWarnHidesInfo) {
  ScopedEnv env;
  TempDir dir;
  env.set("NCCL_DEBUG", "WARN");
  env.set("NCCL_DEBUG_SUBSYS", "ALL");
  env.set("NCCL_DEBUG_FILE", (dir.path() + "/log").c_str());
  INFO(NCCL_INIT, "hidden info");
  WARN("shown warn");
  railnetDebugReset();
  std::string text = readFile(dir.path() + "/log");
  EXPECT_EQ(text.find("hidden info"), std::string::npos);
  EXPECT_NE(text.find("shown warn"), std::string::npos);
}

TEST(Debug, ForwardsToNcclLogger) {
  ScopedEnv env;
  env.unset("NCCL_DEBUG");  // NCCL's logger filters, not railnet
  LogCapture log;
  INFO(NCCL_NET, "forwarded %s", "info");
  WARN("forwarded warn");
  ASSERT_EQ(LogCapture::lines().size(), 2u);
  EXPECT_EQ(LogCapture::lines()[0].level, NCCL_LOG_INFO);
  EXPECT_EQ(LogCapture::lines()[0].flags, (unsigned long)NCCL_NET);
  EXPECT_EQ(LogCapture::lines()[0].msg, "forwarded info");
  EXPECT_EQ(LogCapture::lines()[1].level, NCCL_LOG_WARN);
}

// With NCCL's logger, a message's format and arguments go to it as they are: NCCL formats only
// the lines its NCCL_DEBUG level shows. railnet used to format every line first (the INFO lines
// of each comm's setup, shown or not) and hand over "%s" and the text.
static std::string loggedFmt, loggedMsg;
static void formatKeepingLogger(ncclDebugLogLevel, unsigned long, const char*, int, const char* fmt, ...) {
  loggedFmt = fmt;
  char b[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b, sizeof(b), fmt, ap);
  va_end(ap);
  loggedMsg = b;
}

TEST(Debug, TheLoggerGetsTheFormatNotAFormattedLine) {
  ncclDebugLogger_t old = railnetGetLogger();
  railnetSetLogger(formatKeepingLogger);
  unsigned long warns = railnetDebugWarnCount();
  INFO(NCCL_NET, "comm with %s: %d QPs", "peer", 2);
  EXPECT_EQ(loggedFmt, "comm with %s: %d QPs");
  EXPECT_EQ(loggedMsg, "comm with peer: 2 QPs");
  WARN("a warning, %d", 7);
  EXPECT_EQ(loggedFmt, "a warning, %d");
  EXPECT_EQ(loggedMsg, "a warning, 7");
  EXPECT_EQ(railnetDebugWarnCount(), warns + 1);
  railnetSetLogger(old);
}

// The first thing the process does is log, and the conf file has a malformed line: loading
// NCCL_DEBUG reads the conf file, whose complaint is itself a WARN. That must not re-enter
// the logger while it is being set up (it used to block on the logger's own lock forever).
// The complaint still reaches the log, once the logger is up.
TEST(Debug, FirstLogWithBadConfFileDoesNotDeadlock) {
  TempDir dir;
  std::string conf = dir.write("nccl.conf", "NCCL_DEBUG=WARN\nthis line has no equals sign\n");
  std::string logPath = dir.path() + "/log";
  fflush(nullptr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    unsetenv("NCCL_DEBUG");
    setenv("NCCL_CONF_FILE", conf.c_str(), 1);
    setenv("NCCL_DEBUG_FILE", logPath.c_str(), 1);
    railnetSetLogger(nullptr);
    railnetParamReset();
    railnetDebugReset();
    WARN("first line of the process");
    railnetDebugReset();  // closes the file
    _exit(0);
  }
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 1000 && !exited; i++) {  // at most 10 s
    exited = waitpid(pid, &status, WNOHANG) == pid;
    if (!exited) usleep(10000);
  }
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  ASSERT_TRUE(exited) << "the first log line with a malformed conf file did not return within 10 s (deadlock)";
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  std::string text = readFile(logPath);
  EXPECT_NE(text.find("NCCL WARN first line of the process"), std::string::npos) << text;
  EXPECT_NE(text.find(conf + ":2: ignoring line without '='"), std::string::npos) << text;
}

}  // namespace
