/*
 * The --json writer of railnet-diag and railnet-perf: one JSON document on stdout, written
 * as the tool goes. Objects and arrays nest; the writer places the commas and escapes every
 * string (quotes, backslashes, control characters; bytes that are not UTF-8 become U+FFFD),
 * so that any name a device, interface or plugin path carries stays valid JSON.
 * Every call is a no-op while jsonMode is 0, so text and JSON output share one code path.
 */
#ifndef RAILNET_TOOLS_COMMON_JSON_H_
#define RAILNET_TOOLS_COMMON_JSON_H_

extern int jsonMode; /* 1: write JSON; 0: every call below does nothing */

/* Opens an object ('{') or array ('[') under key (NULL inside an array or at the top). */
void jOpen(const char* key, char c);
/* An array whose elements each start on a line of their own (",\n " between them): the
 * rows of railnet-perf's results, which line-oriented readers take one per line. */
void jOpenRows(const char* key);
void jClose(char c);
void jStr(const char* key, const char* val); /* NULL: null */
void jInt(const char* key, long long v);
void jNum(const char* key, double v);                  /* %g; NaN and infinities: null */
void jFixed(const char* key, double v, int decimals);  /* %.<decimals>f; NaN and infinities: null */
void jBool(const char* key, int v);

#endif
