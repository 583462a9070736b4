/* The --json writer shared by railnet-diag and railnet-perf (see json.h). */
#include "json.h"
#include <stdio.h>

int jsonMode;

#define MAX_DEPTH 32
static int jDepth;
static int jCount[MAX_DEPTH]; /* members written so far at each depth */
static int jRows[MAX_DEPTH];  /* 1: an array of rows (jOpenRows) */

/* The length of the UTF-8 sequence at s (1..4), 0 when it is not valid UTF-8. */
static int utf8Len(const unsigned char* s) {
  int n;
  unsigned min;
  unsigned cp;
  if (s[0] < 0x80) return 1;
  if ((s[0] & 0xe0) == 0xc0) n = 2, min = 0x80, cp = s[0] & 0x1f;
  else if ((s[0] & 0xf0) == 0xe0) n = 3, min = 0x800, cp = s[0] & 0x0f;
  else if ((s[0] & 0xf8) == 0xf0) n = 4, min = 0x10000, cp = s[0] & 0x07;
  else return 0;
  for (int i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0; /* also stops at the terminating NUL */
    cp = (cp << 6) | (s[i] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

static void jEsc(const char* str) {
  const unsigned char* s = (const unsigned char*)str;
  putchar('"');
  while (*s) {
    unsigned char c = *s;
    int n = utf8Len(s);
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c == '\n') printf("\\n");
    else if (c == '\t') printf("\\t");
    else if (c < 0x20 || c == 0x7f) printf("\\u%04x", c);
    else if (n == 0) printf("\\ufffd");
    else fwrite(s, 1, (size_t)n, stdout);
    s += n ? n : 1;
  }
  putchar('"');
}

static void jKey(const char* key) {
  if (jCount[jDepth]++) printf(jRows[jDepth] ? ",\n " : ",");
  if (key) {
    jEsc(key);
    putchar(':');
  }
}

static void jOpenAs(const char* key, char c, int rows) {
  if (!jsonMode) return;
  jKey(key);
  putchar(c);
  if (jDepth + 1 < MAX_DEPTH) jDepth++;
  jCount[jDepth] = 0;
  jRows[jDepth] = rows;
}
void jOpen(const char* key, char c) { jOpenAs(key, c, 0); }
void jOpenRows(const char* key) { jOpenAs(key, '[', 1); }

void jClose(char c) {
  if (!jsonMode) return;
  putchar(c);
  if (jDepth > 0) jDepth--;
}
void jStr(const char* key, const char* val) {
  if (!jsonMode) return;
  jKey(key);
  if (val) jEsc(val);
  else printf("null");
}
void jInt(const char* key, long long v) {
  if (!jsonMode) return;
  jKey(key);
  printf("%lld", v);
}
/* v - v is 0 for finite v, NaN for NaN and the infinities (no libm in the tools' link). */
static int isFinite(double v) { return v - v == 0; }
void jNum(const char* key, double v) {
  if (!jsonMode) return;
  jKey(key);
  if (isFinite(v)) printf("%g", v);
  else printf("null");
}
void jFixed(const char* key, double v, int decimals) {
  if (!jsonMode) return;
  jKey(key);
  if (isFinite(v)) printf("%.*f", decimals, v);
  else printf("null");
}
void jBool(const char* key, int v) {
  if (!jsonMode) return;
  jKey(key);
  printf(v ? "true" : "false");
}
