/*
 * man-params: fills a man page template from `railnet-diag --params --json` on stdin.
 *   railnet-diag --params --json | man-params TEMPLATE > PAGE
 * In TEMPLATE, @VERSION@ becomes the version railnet-diag reports, @DATE@ the day of
 * SOURCE_DATE_EPOCH (else today), and a line that is just
 *   .\" @PARAMS@
 * becomes one .TP entry per declared variable (name, default, doc), grouped by module in
 * the order of the tables. The variables' section of railnet(7) is made this way at build
 * time, so that it lists exactly what the param tables declare.
 * A small JSON reader is enough: railnet-diag writes the input; anything unexpected is an
 * error (exit 1), never a page with a part missing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;
typedef struct jval {
  jtype t;
  char* s;            /* J_STR: the decoded text; J_NUM, J_BOOL: the literal */
  char** keys;        /* J_OBJ: key i of member i */
  struct jval** kids; /* J_ARR, J_OBJ: the members */
  int n;
} jval;

static const char* in;
/* the input and what it parses to live until exit (reachable: not leaks to LeakSanitizer
 * in a SANITIZE=address build) */
static char* text;
static const jval* doc;
static const char* progname = "man-params";

static void die(const char* what) {
  fprintf(stderr, "%s: %s\n", progname, what);
  exit(1);
}

static void* xalloc(size_t n) {
  void* p = calloc(1, n ? n : 1);
  if (p == NULL) die("out of memory");
  return p;
}

static void skipSpace(void) {
  while (*in == ' ' || *in == '\t' || *in == '\n' || *in == '\r') in++;
}

/* A JSON string at *in (after the quote), decoded; \uXXXX below 0x80 only (the doc strings
 * are ASCII), others are written as UTF-8. */
static char* parseString(void) {
  size_t cap = 64, len = 0;
  char* out = xalloc(cap);
  for (;;) {
    unsigned c = (unsigned char)*in++;
    if (c == 0) die("unterminated string");
    if (c == '"') break;
    if (c == '\\') {
      c = (unsigned char)*in++;
      switch (c) {
        case 'n': c = '\n'; break;
        case 't': c = '\t'; break;
        case 'r': c = '\r'; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case '"': case '\\': case '/': break;
        case 'u': {
          char hex[5] = {0};
          for (int i = 0; i < 4; i++) {
            if (!in[i]) die("bad \\u escape");
            hex[i] = in[i];
          }
          in += 4;
          c = (unsigned)strtoul(hex, NULL, 16);
          break;
        }
        default: die("bad escape in a string");
      }
    }
    char buf[3];
    int nb = 1;
    if (c < 0x80) buf[0] = (char)c;
    else if (c < 0x800) { buf[0] = (char)(0xc0 | (c >> 6)); buf[1] = (char)(0x80 | (c & 0x3f)); nb = 2; }
    else { buf[0] = '?'; }
    if (len + nb + 1 > cap) { cap *= 2; out = realloc(out, cap); if (!out) die("out of memory"); }
    memcpy(out + len, buf, nb);
    len += nb;
  }
  out[len] = 0;
  return out;
}

static jval* parseValue(int depth) {
  if (depth > 32) die("input nested too deeply");
  skipSpace();
  jval* v = xalloc(sizeof(*v));
  if (*in == '"') {
    in++;
    v->t = J_STR;
    v->s = parseString();
  } else if (*in == '{' || *in == '[') {
    int obj = *in++ == '{';
    v->t = obj ? J_OBJ : J_ARR;
    skipSpace();
    char close = obj ? '}' : ']';
    if (*in == close) { in++; return v; }
    for (;;) {
      v->kids = realloc(v->kids, sizeof(*v->kids) * (v->n + 1));
      v->keys = realloc(v->keys, sizeof(*v->keys) * (v->n + 1));
      if (!v->kids || !v->keys) die("out of memory");
      v->keys[v->n] = NULL;
      if (obj) {
        skipSpace();
        if (*in++ != '"') die("expected a key");
        v->keys[v->n] = parseString();
        skipSpace();
        if (*in++ != ':') die("expected ':'");
      }
      v->kids[v->n++] = parseValue(depth + 1);
      skipSpace();
      if (*in == ',') { in++; continue; }
      if (*in++ != close) die("expected ',' or the end of an object or array");
      break;
    }
  } else if (!strncmp(in, "null", 4)) {
    in += 4;
    v->t = J_NULL;
  } else if (!strncmp(in, "true", 4) || !strncmp(in, "false", 5)) {
    v->t = J_BOOL;
    v->s = strdup(*in == 't' ? "true" : "false");
    in += *in == 't' ? 4 : 5;
  } else if (*in == '-' || (*in >= '0' && *in <= '9')) {
    const char* start = in;
    while (*in && strchr("+-.eE0123456789", *in)) in++;
    v->t = J_NUM;
    v->s = strndup(start, (size_t)(in - start));
  } else {
    die("unexpected character in the input");
  }
  return v;
}

static const jval* member(const jval* obj, const char* key) {
  if (obj == NULL || obj->t != J_OBJ) return NULL;
  for (int i = 0; i < obj->n; i++)
    if (!strcmp(obj->keys[i], key)) return obj->kids[i];
  return NULL;
}

/* Text for a roff text line: backslashes escaped, a leading '.' or '\'' neutralised, and a
 * '-' that starts a word (an option, a negative number) written as a minus sign. */
static void roff(FILE* f, const char* s, int lineStart) {
  for (const char* p = s; *p; p++) {
    if (lineStart && (*p == '.' || *p == '\'')) fputs("\\&", f);
    lineStart = 0;
    if (*p == '\\') fputs("\\e", f);
    else if (*p == '-' && (p == s || strchr(" (/=,'", p[-1]))) fputs("\\-", f);
    else if (*p == '\n') { fputc(' ', f); }
    else fputc(*p, f);
  }
}

static void writeParams(FILE* f, const jval* list) {
  const char* module = NULL;
  for (int i = 0; i < list->n; i++) {
    const jval* p = list->kids[i];
    const jval* name = member(p, "name");
    const jval* mod = member(p, "module");
    const jval* def = member(p, "default");
    const jval* doc = member(p, "doc");
    if (!name || name->t != J_STR || !mod || mod->t != J_STR || !def || !doc || doc->t != J_STR)
      die("a param without name, module, default or doc");
    if (module == NULL || strcmp(module, mod->s)) {
      module = mod->s;
      fputs(".SS \"", f);
      roff(f, module, 0);
      fputs("\"\n", f);
    }
    fputs(".TP\n.B ", f);
    roff(f, name->s, 0);
    fputc('\n', f);
    roff(f, doc->s, 1);
    size_t dl = strlen(doc->s);
    fputs(dl && doc->s[dl - 1] == '.' ? "\n" : ".\n", f);
    if (def->t == J_NULL) {
      fputs("Default: unset.\n", f);
    } else {
      fputs("Default: \\fB", f);
      roff(f, def->s, 0);
      fputs("\\fR.\n", f);
    }
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: railnet-diag --params --json | %s TEMPLATE > PAGE\n", progname);
    return 2;
  }
  size_t cap = 1 << 16, len = 0, got;
  text = xalloc(cap);
  while ((got = fread(text + len, 1, cap - len - 1, stdin)) > 0) {
    len += got;
    if (len + 1 == cap) { cap *= 2; text = realloc(text, cap); if (!text) die("out of memory"); }
  }
  text[len] = 0;
  in = text;
  doc = parseValue(0);
  skipSpace();
  if (*in) die("trailing text after the JSON document");
  const jval* version = member(doc, "version");
  const jval* list = member(member(doc, "params"), "params");
  if (!version || version->t != J_STR || !list || list->t != J_ARR || list->n == 0)
    die("input is not railnet-diag --params --json (no version or no params)");

  FILE* t = fopen(argv[1], "r");
  if (t == NULL) { perror(argv[1]); return 1; }
  /* @DATE@: the day of SOURCE_DATE_EPOCH (reproducible builds; dpkg-buildpackage sets it
   * from debian/changelog), else today */
  char date[32];
  const char* sde = getenv("SOURCE_DATE_EPOCH");
  time_t when = sde && *sde ? (time_t)strtoll(sde, NULL, 10) : time(NULL);
  struct tm tmv;
  if (!gmtime_r(&when, &tmv) || !strftime(date, sizeof(date), "%Y-%m-%d", &tmv)) die("bad SOURCE_DATE_EPOCH");
  char line[4096];
  while (fgets(line, sizeof(line), t)) {
    if (!strcmp(line, ".\\\" @PARAMS@\n")) {
      writeParams(stdout, list);
      continue;
    }
    for (char* p = line; *p; p++) {
      if (!strncmp(p, "@VERSION@", 9)) {
        fputs(version->s, stdout);
        p += 8;
      } else if (!strncmp(p, "@DATE@", 6)) {
        fputs(date, stdout);
        p += 5;
      } else {
        fputc(*p, stdout);
      }
    }
  }
  fclose(t);
  /* a template without the marker (the tools' pages) takes only @VERSION@ and @DATE@ */
  if (ferror(stdout) || fflush(stdout)) die("cannot write the page");
  return 0;
}
