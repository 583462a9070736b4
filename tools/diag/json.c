/* railnet-diag --json: a minimal JSON writer. Objects and arrays nest, commas are placed
 * for the caller; every call is a no-op in text mode. */
#include <stdio.h>
#include "diag.h"

int jsonMode;

static int jDepth;
static int jCount[32];

static void jEsc(const char* s) {
  putchar('"');
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c == '\n') printf("\\n");
    else if (c < 0x20) printf("\\u%04x", c);
    else putchar(c);
  }
  putchar('"');
}
static void jKey(const char* key) {
  if (jCount[jDepth]++) putchar(',');
  if (key) {
    jEsc(key);
    putchar(':');
  }
}
void jOpen(const char* key, char c) {
  if (!jsonMode) return;
  jKey(key);
  putchar(c);
  jCount[++jDepth] = 0;
}
void jClose(char c) {
  if (!jsonMode) return;
  putchar(c);
  jDepth--;
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
void jNum(const char* key, double v) {
  if (!jsonMode) return;
  jKey(key);
  printf("%g", v);
}
void jBool(const char* key, int v) {
  if (!jsonMode) return;
  jKey(key);
  printf(v ? "true" : "false");
}
