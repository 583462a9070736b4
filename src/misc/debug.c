/* railnet logging in NCCL's format, or through the logger NCCL hands to init. */
#include "debug.h"
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "env.h"
#include "testing.h"

enum { P_DEBUG, P_SUBSYS, P_FILE };
static const railnetParam debugParams[] = {
    [P_DEBUG] = RAILNET_PARAM_STR_DEF("NCCL_DEBUG", NULL,
                                      "Log level when railnet runs outside NCCL: VERSION, WARN, INFO, TRACE "
                                      "(inside NCCL, NCCL's logger decides)"),
    [P_SUBSYS] = RAILNET_PARAM_STR_DEF("NCCL_DEBUG_SUBSYS", "INIT,BOOTSTRAP,ENV",
                                       "Subsystems of INFO/TRACE lines: NET, ENV, INIT, ... or ALL; '^' excludes"),
    [P_FILE] = RAILNET_PARAM_STR_DEF("NCCL_DEBUG_FILE", NULL,
                                     "Log to this file instead of stdout (%h: host name, %p: pid)"),
};
RAILNET_PARAM_TABLE("debug", debugParams);

static ncclDebugLogger_t ncclLogger;
static pthread_mutex_t debugLock = PTHREAD_MUTEX_INITIALIZER;
static int debugLoaded;
static ncclDebugLogLevel debugLevel = NCCL_LOG_NONE;
static unsigned long debugMask = NCCL_INIT | NCCL_BOOTSTRAP | NCCL_ENV;
static FILE* debugFile;
static char hostName[256];
static struct timespec debugEpoch;

void railnetSetLogger(ncclDebugLogger_t logger) { __atomic_store_n(&ncclLogger, logger, __ATOMIC_RELEASE); }
ncclDebugLogger_t railnetGetLogger(void) { return __atomic_load_n(&ncclLogger, __ATOMIC_ACQUIRE); }

ncclDebugLogLevel railnetParseLevel(const char* s) {
  if (s == NULL) return NCCL_LOG_NONE;
  static const struct { const char* name; ncclDebugLogLevel level; } levels[] = {
      {"VERSION", NCCL_LOG_VERSION}, {"WARN", NCCL_LOG_WARN}, {"INFO", NCCL_LOG_INFO},
      {"ABORT", NCCL_LOG_ABORT},     {"TRACE", NCCL_LOG_TRACE}};
  for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
    if (strcasecmp(s, levels[i].name) == 0) return levels[i].level;
  return NCCL_LOG_NONE;
}

static const struct { const char* name; unsigned long bit; } subsysNames[] = {
    {"INIT", NCCL_INIT},     {"COLL", NCCL_COLL},         {"P2P", NCCL_P2P},
    {"SHM", NCCL_SHM},       {"NET", NCCL_NET},           {"GRAPH", NCCL_GRAPH},
    {"TUNING", NCCL_TUNING}, {"ENV", NCCL_ENV},           {"ALLOC", NCCL_ALLOC},
    {"CALL", NCCL_CALL},     {"PROXY", NCCL_PROXY},       {"NVLS", NCCL_NVLS},
    {"BOOTSTRAP", NCCL_BOOTSTRAP}, {"REG", NCCL_REG},     {"PROFILE", NCCL_PROFILE},
    {"RAS", NCCL_RAS},       {"DESTROY", NCCL_DESTROY},   {"ALLOC_HOST", NCCL_ALLOC_HOST},
    {"ALL", (unsigned long)NCCL_ALL}};

/* "A,B" selects A and B; "^A,B" selects everything but A and B (NCCL's rule). */
unsigned long railnetParseSubsys(const char* spec) {
  if (spec == NULL) return NCCL_INIT | NCCL_BOOTSTRAP | NCCL_ENV;
  int invert = 0;
  while (*spec == ' ') spec++;
  if (*spec == '^') {
    invert = 1;
    spec++;
  }
  unsigned long mask = 0;
  char buf[512];
  snprintf(buf, sizeof(buf), "%s", spec);
  char* save = NULL;
  for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ') tok++;
    char* end = tok + strlen(tok);
    while (end > tok && end[-1] == ' ') *--end = '\0';
    for (size_t i = 0; i < sizeof(subsysNames) / sizeof(subsysNames[0]); i++)
      if (strcasecmp(tok, subsysNames[i].name) == 0) mask |= subsysNames[i].bit;
  }
  return invert ? ~mask : mask;
}

void railnetExpandDebugFile(const char* pattern, char* out, size_t outlen) {
  if (outlen == 0) return;
  size_t o = 0;
  char host[256];
  if (gethostname(host, sizeof(host)) != 0) snprintf(host, sizeof(host), "unknown");
  host[sizeof(host) - 1] = '\0';
  char* dot = strchr(host, '.');
  if (dot) *dot = '\0'; /* the short name, as NCCL's log lines use */
  for (const char* p = pattern; *p && o + 1 < outlen; p++) {
    if (*p != '%') {
      out[o++] = *p;
      continue;
    }
    char piece[300];
    p++;
    if (*p == 'h') snprintf(piece, sizeof(piece), "%s", host);
    else if (*p == 'p') snprintf(piece, sizeof(piece), "%d", (int)getpid());
    else if (*p == '%') snprintf(piece, sizeof(piece), "%%");
    else if (*p == '\0') { snprintf(piece, sizeof(piece), "%%"); p--; }
    else snprintf(piece, sizeof(piece), "%%%c", *p);
    for (const char* q = piece; *q && o + 1 < outlen; q++) out[o++] = *q;
  }
  out[o] = '\0';
}

static void debugLoad(void) {
  /* Raw reads through the layer below: the param layer logs, and logging is being set up. */
  debugLevel = railnetParseLevel(railnetEnvGet(debugParams[P_DEBUG].name, NULL));
  debugMask = railnetParseSubsys(railnetEnvGet(debugParams[P_SUBSYS].name, NULL));
  if (gethostname(hostName, sizeof(hostName)) != 0) snprintf(hostName, sizeof(hostName), "unknown");
  hostName[sizeof(hostName) - 1] = '\0';
  char* dot = strchr(hostName, '.');
  if (dot) *dot = '\0';
  clock_gettime(CLOCK_MONOTONIC, &debugEpoch);
  const char* fileSpec = railnetEnvGet(debugParams[P_FILE].name, NULL);
  if (debugLevel > NCCL_LOG_VERSION && fileSpec != NULL && fileSpec[0] != '\0') {
    char path[PATH_MAX];
    railnetExpandDebugFile(fileSpec, path, sizeof(path));
    FILE* f = fopen(path, "w");
    if (f != NULL) {
      setlinebuf(f);
      debugFile = f;
    } else {
      fprintf(stderr, "%s:%d:%d [0] NCCL WARN railnet: cannot open NCCL_DEBUG_FILE %s: %s; logging to stdout\n",
              hostName, (int)getpid(), (int)syscall(SYS_gettid), path, strerror(errno));
    }
  }
}

static void debugEnsure(void) {
  if (__atomic_load_n(&debugLoaded, __ATOMIC_ACQUIRE)) return;
  pthread_mutex_lock(&debugLock);
  if (!debugLoaded) {
    debugLoad();
    __atomic_store_n(&debugLoaded, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&debugLock);
}

void railnetDebugReset(void) {
  pthread_mutex_lock(&debugLock);
  if (debugFile != NULL) fclose(debugFile);
  debugFile = NULL;
  __atomic_store_n(&debugLoaded, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&debugLock);
}

int railnetDebugEnabled(ncclDebugLogLevel level, unsigned long flags) {
  debugEnsure();
  if (level > debugLevel) return 0;
  if (level == NCCL_LOG_INFO || level == NCCL_LOG_TRACE) return (flags & debugMask) != 0;
  return 1;
}

/* What the settings layer found wrong in a conf file, logged now that logging works. */
void railnetDebugFlushEnv(void) {
  char msg[512];
  const char* file = NULL;
  int line = 0;
  while (railnetEnvTakeComplaint(msg, sizeof(msg), &file, &line))
    railnetDebugLog(NCCL_LOG_WARN, NCCL_ALL, file, line, "%s", msg);
}

static unsigned long warnCount;
unsigned long railnetDebugWarnCount(void) { return __atomic_load_n(&warnCount, __ATOMIC_RELAXED); }

ncclDebugLogger_t railnetDebugLogger(ncclDebugLogLevel level) {
  ncclDebugLogger_t logger = railnetGetLogger();
  if (logger == NULL) return NULL;
  if (level == NCCL_LOG_WARN) __atomic_add_fetch(&warnCount, 1, __ATOMIC_RELAXED);
  railnetDebugFlushEnv();
  return logger;
}

void railnetDebugLog(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                     const char* fmt, ...) {
  if (level == NCCL_LOG_WARN) __atomic_add_fetch(&warnCount, 1, __ATOMIC_RELAXED);
  ncclDebugLogger_t logger = railnetGetLogger();
  /* standalone, a message that is not shown is not formatted (this sets logging up, and may
   * read conf files) */
  int enabled = logger != NULL || railnetDebugEnabled(level, flags);
  railnetDebugFlushEnv();
  if (!enabled) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (logger != NULL) {
    logger(level, flags, file, line, "%s", msg);
    return;
  }

  char out[2400];
  int pid = (int)getpid(), tid = (int)syscall(SYS_gettid);
  const char* base = file ? strrchr(file, '/') : NULL;
  base = base ? base + 1 : (file ? file : "?");
  if (level == NCCL_LOG_WARN) {
    snprintf(out, sizeof(out), "%s:%d:%d [0] %s:%d NCCL WARN %s\n", hostName, pid, tid, base, line, msg);
  } else if (level == NCCL_LOG_TRACE) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double ms = (now.tv_sec - debugEpoch.tv_sec) * 1e3 + (now.tv_nsec - debugEpoch.tv_nsec) / 1e6;
    snprintf(out, sizeof(out), "%s:%d:%d [0] %f %s:%d NCCL TRACE %s\n", hostName, pid, tid, ms, base, line, msg);
  } else {
    snprintf(out, sizeof(out), "%s:%d:%d [0] NCCL INFO %s\n", hostName, pid, tid, msg);
  }
  FILE* f = debugFile ? debugFile : stdout;
  fputs(out, f);
  fflush(f);
}
