/* railnet-diag --pair's progress line: one line on standard error, rewritten in place, when
 * it is a terminal and the output is text (pair.h). Below every other file of the pair check. */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
#include "diag.h"
#include "pair.h"

int pairProgressOff;
static int progressOn = -1;
void pairProgress(const char* fmt, ...) {
  if (progressOn < 0) progressOn = !jsonMode && !pairProgressOff && isatty(STDERR_FILENO);
  if (!progressOn) return;
  if (fmt == NULL) {
    fprintf(stderr, "\r\033[K");
    return;
  }
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  fprintf(stderr, "\r\033[K%s", line);
  fflush(stderr);
}
