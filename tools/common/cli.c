/* railnet's tools' command-line conventions (see cli.h). */
#include "cli.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "railnet.h"

static void vUsageError(const char* tool, const char* fmt, va_list ap) {
  fflush(stdout);
  fprintf(stderr, "%s: ", tool);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nTry '%s --help'.\n", tool);
}

int cliUsageError(const char* tool, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vUsageError(tool, fmt, ap);
  va_end(ap);
  return CLI_USAGE_STATUS;
}

void cliUsageExit(const char* tool, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vUsageError(tool, fmt, ap);
  va_end(ap);
  exit(CLI_USAGE_STATUS);
}

int cliVersion(const char* tool) {
  printf("%s %s\n", tool, railnetVersion());
  return 0;
}

int cliOptionError(const char* tool, int c, char** argv) {
  /* A long option is consumed in one step, so argv[optind - 1] is the offending element; a
   * short one may sit inside a cluster (-xv) and is named by optopt. A missing value is
   * always the last element. */
  const char* arg = argv[optind - 1];
  int isLong = arg[0] == '-' && arg[1] == '-';
  if (c == ':') {
    if (isLong) return cliUsageError(tool, "option '%s' needs a value", arg);
    return cliUsageError(tool, "option '-%c' needs a value", optopt);
  }
  if (isLong && (optopt == 0 || strchr(arg, '='))) {
    const char* eq = strchr(arg, '=');
    if (optopt && eq) return cliUsageError(tool, "option '%.*s' takes no value", (int)(eq - arg), arg);
    return cliUsageError(tool, "unknown option '%s'", arg);
  }
  return cliUsageError(tool, "unknown option '-%c'", optopt);
}

int cliNoOperands(const char* tool, int argc, char** argv) {
  if (optind >= argc) return -1;
  return cliUsageError(tool, "unexpected argument '%s'", argv[optind]);
}
