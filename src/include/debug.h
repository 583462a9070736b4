/* railnet logging: NCCL's format standalone, NCCL's logger when loaded as a plugin. */
#ifndef RAILNET_DEBUG_H
#define RAILNET_DEBUG_H
#include <stddef.h>
#include <railnet_net/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Route every message through NCCL's logger (NULL returns to standalone output). */
void railnetSetLogger(ncclDebugLogger_t logger);
ncclDebugLogger_t railnetGetLogger(void);

void railnetDebugLog(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                     const char* fmt, ...) __attribute__((format(printf, 5, 6)));

/* Would a message of this level and subsystem be printed standalone? */
int railnetDebugEnabled(ncclDebugLogLevel level, unsigned long flags);
/* How many WARNs railnet has said so far (through the logger or on its own). */
unsigned long railnetDebugWarnCount(void);

/* Parse an NCCL_DEBUG_SUBSYS value ("INIT,NET", "^ENV", "ALL") into a mask. */
unsigned long railnetParseSubsys(const char* spec);
/* Parse an NCCL_DEBUG value; unknown text gives NCCL_LOG_NONE. */
ncclDebugLogLevel railnetParseLevel(const char* spec);
/* Expand %h (hostname) and %p (pid) in an NCCL_DEBUG_FILE pattern. */
void railnetExpandDebugFile(const char* pattern, char* out, size_t outlen);

/* Log, as WARNs, what the settings layer (env.h) found wrong in conf files so far. */
void railnetDebugFlushEnv(void);

/* The logger a message of this level goes to (NULL: railnet prints it, railnetDebugLog), after
 * what the settings layer found wrong, with a WARN counted. The macros below hand such a logger
 * the format and its arguments: NCCL's formats only what its NCCL_DEBUG level shows, so the
 * INFO lines of a comm's setup cost no formatting when they are not shown. */
ncclDebugLogger_t railnetDebugLogger(ncclDebugLogLevel level);

#ifdef __cplusplus
}
#endif

#define RAILNET_LOG_AT(LEVEL, FLAGS, WHERE, ...)                                             \
  do {                                                                                      \
    ncclDebugLogger_t railnetLog_ = railnetDebugLogger(LEVEL);                              \
    if (railnetLog_ != NULL) railnetLog_((LEVEL), (FLAGS), (WHERE), __LINE__, __VA_ARGS__); \
    else railnetDebugLog((LEVEL), (FLAGS), (WHERE), __LINE__, __VA_ARGS__);                 \
  } while (0)
#define WARN(...) RAILNET_LOG_AT(NCCL_LOG_WARN, NCCL_ALL, __FILE__, __VA_ARGS__)
#define INFO(FLAGS, ...) RAILNET_LOG_AT(NCCL_LOG_INFO, (FLAGS), __func__, __VA_ARGS__)
#define TRACE(FLAGS, ...) RAILNET_LOG_AT(NCCL_LOG_TRACE, (FLAGS), __func__, __VA_ARGS__)

#endif
