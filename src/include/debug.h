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

#ifdef __cplusplus
}
#endif

#define WARN(...) railnetDebugLog(NCCL_LOG_WARN, NCCL_ALL, __FILE__, __LINE__, __VA_ARGS__)
#define INFO(FLAGS, ...) railnetDebugLog(NCCL_LOG_INFO, (FLAGS), __func__, __LINE__, __VA_ARGS__)
#define TRACE(FLAGS, ...) railnetDebugLog(NCCL_LOG_TRACE, (FLAGS), __func__, __LINE__, __VA_ARGS__)

#endif
