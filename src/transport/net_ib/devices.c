/*
 * The IB transport's device tables and what every other part reads with them: the sysfs
 * root (and a line of a file under it) and the fatal-event check (devices.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "devices.h"
#include "param.h"

enum { P_ASYNC_EVENTS, P_SYSFS };
static const railnetParam ibDevicesParams[] = {
    [P_ASYNC_EVENTS] = RAILNET_PARAM_INT_DEF("NCCL_IB_RETURN_ASYNC_EVENTS", 1, 0, 1,
                                             "A fatal asynchronous event makes the device's comms fail"),
    [P_SYSFS] = RAILNET_PARAM_STR_DEF("SYSFS_PATH", "/sys",
                                      "Root of sysfs (libibverbs' convention); tests point it at a tree of their own"),
};
RAILNET_PARAM_TABLE("net_ib/devices", ibDevicesParams);

int ncclNIbDevs = -1;
int ncclNMergedIbDevs = -1;
struct ncclIbDev ncclIbDevs[MAX_IB_DEVS];
struct ncclIbMergedDev ncclIbMergedDevs[MAX_IB_VDEVS];
char ncclIbIfName[MAX_IF_NAME_SIZE + 1];
union ncclSocketAddress ncclIbIfAddr;
int ncclIbRelaxedOrderingEnabled = 0;
int64_t ncclIbArThreshold = 8192;

pthread_mutex_t ncclIbLock = PTHREAD_MUTEX_INITIALIZER;

const char* railnetIbSysfsRoot(void) {
  static _Thread_local char root[PATH_MAX];
  const char* s = railnetParamStr(&ibDevicesParams[P_SYSFS]);
  if (s == NULL || s[0] == '\0') s = "/sys";
  size_t n = strlen(s);
  while (n > 1 && s[n - 1] == '/') n--;
  snprintf(root, sizeof(root), "%.*s", (int)n, s);
  return root;
}

int railnetIbSysfsLine(char* buf, size_t size, const char* fmt, ...) {
  char rel[PATH_MAX], path[PATH_MAX * 2];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(rel, sizeof(rel), fmt, ap);
  va_end(ap);
  if (size > 0) buf[0] = '\0';
  if (n < 0 || n >= (int)sizeof(rel) || size < 2) return ENAMETOOLONG;
  snprintf(path, sizeof(path), "%s/%s", railnetIbSysfsRoot(), rel);
  FILE* f = fopen(path, "r");
  if (f == NULL) return errno ? errno : ENOENT;
  char* line = fgets(buf, (int)size, f);
  int err = ferror(f) ? (errno ? errno : EIO) : EINVAL;
  fclose(f);
  if (line == NULL) {
    buf[0] = '\0';
    return err;
  }
  buf[strcspn(buf, "\n")] = '\0';
  return 0;
}

ncclResult_t ncclIbStatsCheckFatalCount(struct ncclIbStats* stats, const char* funcName) {
  if (railnetParamInt(&ibDevicesParams[P_ASYNC_EVENTS]) &&
      __atomic_load_n(&stats->fatalErrorCount, __ATOMIC_RELAXED) != 0) {
    WARN("communicator encountered a fatal error (detected in %s)", funcName);
    return ncclSystemError;
  }
  return ncclSuccess;
}
