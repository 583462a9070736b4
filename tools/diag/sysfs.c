/* The files railnet-diag reads: sysfs under $SYSFS_PATH (default /sys), as libibverbs and
 * railnet's IB transport do, and /proc. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "diag.h"

char sysfsRoot[PATH_MAX] = "/sys";

int readLine(const char* path, char* buf, size_t size) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return -1;
  char* r = fgets(buf, (int)size, f);
  fclose(f);
  if (r == NULL) return -1;
  buf[strcspn(buf, "\n")] = '\0';
  return 0;
}
int readSys(char* buf, size_t size, const char* fmt, ...) {
  char rel[PATH_MAX], path[PATH_MAX + 64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rel, sizeof(rel), fmt, ap);
  va_end(ap);
  sfmt(path, sizeof(path), "%s/%s", sysfsRoot, rel);
  return readLine(path, buf, size);
}
