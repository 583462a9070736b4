/* railnet-diag's output: text lines, section headers, and the findings (every problem and
 * warning with its cause and fix), printed inline and gathered for --json. */
#include <stdarg.h>
#include <stdio.h>
#include "diag.h"

int sfmt(char* buf, size_t size, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, size, fmt, ap);
  va_end(ap);
  return n;
}

static int nProblems, nWarnings;

/* Findings are printed inline in text mode and gathered for the JSON "findings" array. */
#define MAX_FINDINGS 256
static struct {
  const char* section;
  int problem; /* 1 problem, 0 warning */
  char cause[512];
  char fix[512];
} findings[MAX_FINDINGS];
static int nFindings;
static const char* curSection = "";

void finding(int problem, const char* fix, const char* fmt, ...) {
  char cause[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cause, sizeof(cause), fmt, ap);
  va_end(ap);
  if (problem) nProblems++;
  else nWarnings++;
  if (!jsonMode) printf("  %s: %s. Fix: %s\n", problem ? "PROBLEM" : "WARNING", cause, fix);
  if (nFindings < MAX_FINDINGS) {
    findings[nFindings].section = curSection;
    findings[nFindings].problem = problem;
    sfmt(findings[nFindings].cause, sizeof(findings[nFindings].cause), "%s", cause);
    sfmt(findings[nFindings].fix, sizeof(findings[nFindings].fix), "%s", fix);
    nFindings++;
  }
}

void text(const char* fmt, ...) {
  if (jsonMode) return;
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
}

static int sectionOpen;
void sectionEnd(void) {
  if (sectionOpen) jClose('}');
  sectionOpen = 0;
}
void section(const char* key, const char* title) {
  sectionEnd();
  curSection = key;
  text("\n== %s\n", title);
  jOpen(key, '{');
  sectionOpen = 1;
}
void sectionName(const char* key) { curSection = key; }

/* Closes the document main opened: the findings, their counts, then the summary line. */
int reportFindings(int watch) {
  jOpen("findings", '[');
  for (int i = 0; i < nFindings; i++) {
    jOpen(NULL, '{');
    jStr("section", findings[i].section);
    jStr("severity", findings[i].problem ? "problem" : "warning");
    jStr("cause", findings[i].cause);
    jStr("fix", findings[i].fix);
    jClose('}');
  }
  jClose(']');
  jInt("problems", nProblems);
  jInt("warnings", nWarnings);
  jClose('}');
  if (jsonMode) putchar('\n');
  text("%s%d problem(s), %d warning(s)\n", watch > 0 ? "" : "\n", nProblems, nWarnings);
  return nProblems ? 1 : 0;
}
