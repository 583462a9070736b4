/* railnet params: environment, then the user conf file, then the system conf file. */
#include "param.h"
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core.h"

/* One NAME=value pair read from a conf file. */
typedef struct {
  char* name;
  char* value;
  railnetParamSource src;
} confEntry;

/* Recursive: a WARN about a conf line may itself look up NCCL_DEBUG. */
static pthread_mutex_t confLock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static int confLoaded;
static confEntry* confEntries;
static int confCount, confCap;

static char* trim(char* s) {
  while (isspace((unsigned char)*s)) s++;
  char* e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
  return s;
}

static void confAdd(const char* name, const char* value, railnetParamSource src) {
  for (int i = 0; i < confCount; i++)
    if (strcmp(confEntries[i].name, name) == 0) return; /* first file read wins */
  if (confCount == confCap) {
    int cap = confCap ? confCap * 2 : 32;
    confEntry* n = realloc(confEntries, cap * sizeof(*n));
    if (n == NULL) return;
    confEntries = n;
    confCap = cap;
  }
  char* nm = strdup(name);
  char* val = strdup(value);
  if (nm == NULL || val == NULL) {
    free(nm);
    free(val);
    return;
  }
  confEntries[confCount++] = (confEntry){nm, val, src};
}

/* Lines are NAME=value; '#' starts a comment; blank lines are skipped. */
static void confReadFile(const char* path, railnetParamSource src) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return;
  char line[4096];
  int lineno = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    lineno++;
    char* hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char* s = trim(line);
    if (*s == '\0') continue;
    char* eq = strchr(s, '=');
    if (eq == NULL) {
      WARN("%s:%d: ignoring line without '=' (expected NAME=value)", path, lineno);
      continue;
    }
    *eq = '\0';
    char* name = trim(s);
    char* value = trim(eq + 1);
    if (*name == '\0') {
      WARN("%s:%d: ignoring line with an empty name", path, lineno);
      continue;
    }
    confAdd(name, value, src);
  }
  fclose(f);
}

static void confLoad(void) {
  const char* userFile = getenv("NCCL_CONF_FILE");
  char path[PATH_MAX];
  if (userFile != NULL && userFile[0] != '\0') {
    confReadFile(userFile, RAILNET_SRC_USER_FILE);
  } else {
    const char* home = getenv("HOME");
    if (home == NULL) {
      struct passwd* pw = getpwuid(getuid());
      home = pw ? pw->pw_dir : NULL;
    }
    if (home != NULL) {
      snprintf(path, sizeof(path), "%s/.nccl.conf", home);
      confReadFile(path, RAILNET_SRC_USER_FILE);
    }
  }
  const char* sys = getenv("RAILNET_SYSTEM_CONF");
  confReadFile(sys && sys[0] ? sys : "/etc/nccl.conf", RAILNET_SRC_SYSTEM_FILE);
}

const char* railnetGetEnv(const char* name, railnetParamSource* src) {
  const char* v = getenv(name);
  if (v != NULL) {
    if (src) *src = RAILNET_SRC_ENV;
    return v;
  }
  pthread_mutex_lock(&confLock);
  if (!confLoaded) {
    confLoaded = 1; /* first, so that a nested lookup does not load again */
    confLoad();
  }
  const char* found = NULL;
  for (int i = 0; i < confCount; i++) {
    if (strcmp(confEntries[i].name, name) == 0) {
      found = confEntries[i].value;
      if (src) *src = confEntries[i].src;
      break;
    }
  }
  pthread_mutex_unlock(&confLock);
  if (found == NULL && src) *src = RAILNET_SRC_DEFAULT;
  return found;
}

static pthread_mutex_t paramLock = PTHREAD_MUTEX_INITIALIZER;

static int parseInt(const char* s, int64_t* out) {
  errno = 0;
  char* end = NULL;
  while (isspace((unsigned char)*s)) s++;
  if (*s == '\0') return -1;
  long long v = strtoll(s, &end, 0);
  if (errno != 0 || end == s) return -1;
  while (isspace((unsigned char)*end)) end++;
  if (*end != '\0') return -1;
  *out = v;
  return 0;
}

static void paramLoad(railnetParam* p) {
  railnetParamSource src = RAILNET_SRC_DEFAULT;
  const char* raw = railnetGetEnv(p->name, &src);
  p->malformed = 0;
  p->source = RAILNET_SRC_DEFAULT;
  if (p->type == RAILNET_PARAM_STR) {
    p->str = p->defStr;
    if (raw != NULL) {
      p->str = raw;
      p->source = src;
      INFO(NCCL_ENV, "%s set by %s to %s", p->name, railnetParamSourceName(src), raw);
    }
    return;
  }
  p->value = p->def;
  if (raw == NULL) return;
  int64_t v;
  if (parseInt(raw, &v) != 0) {
    WARN("Invalid value '%s' for %s (from %s): not an integer; using the default %" PRId64
         ". Fix: unset %s or set it to an integer in [%" PRId64 ", %" PRId64 "]",
         raw, p->name, railnetParamSourceName(src), p->def, p->name, p->min, p->max);
    p->malformed = 1;
    return;
  }
  if (v < p->min || v > p->max) {
    WARN("Invalid value %" PRId64 " for %s (from %s): outside [%" PRId64 ", %" PRId64
         "]; using the default %" PRId64,
         v, p->name, railnetParamSourceName(src), p->min, p->max, p->def);
    p->malformed = 1;
    return;
  }
  p->value = v;
  p->source = src;
  INFO(NCCL_ENV, "%s set by %s to %" PRId64, p->name, railnetParamSourceName(src), v);
}

static void paramEnsure(railnetParam* p) {
  if (__atomic_load_n(&p->loaded, __ATOMIC_ACQUIRE)) return;
  pthread_mutex_lock(&paramLock);
  if (!p->loaded) {
    paramLoad(p);
    __atomic_store_n(&p->loaded, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&paramLock);
}

int64_t railnetParamInt(railnetParam* p) {
  paramEnsure(p);
  return p->value;
}

const char* railnetParamStr(railnetParam* p) {
  paramEnsure(p);
  return p->str;
}

railnetParamSource railnetParamSourceOf(railnetParam* p) {
  paramEnsure(p);
  return p->source;
}

const char* railnetParamSourceName(railnetParamSource src) {
  switch (src) {
    case RAILNET_SRC_ENV: return "environment";
    case RAILNET_SRC_USER_FILE: return "user conf file";
    case RAILNET_SRC_SYSTEM_FILE: return "system conf file";
    default: return "default";
  }
}

/* Tables registered with RAILNET_PARAM_TABLE live between these linker symbols. */
extern const railnetParamTable __start_railnet_ptab[] __attribute__((weak));
extern const railnetParamTable __stop_railnet_ptab[] __attribute__((weak));

int railnetParamTableCount(void) {
  if (__start_railnet_ptab == NULL) return 0;
  return (int)(__stop_railnet_ptab - __start_railnet_ptab);
}

const railnetParamTable* railnetParamTableAt(int i) {
  if (i < 0 || i >= railnetParamTableCount()) return NULL;
  return &__start_railnet_ptab[i];
}

void railnetParamReset(void) {
  pthread_mutex_lock(&confLock);
  for (int i = 0; i < confCount; i++) {
    free(confEntries[i].name);
    free(confEntries[i].value);
  }
  free(confEntries);
  confEntries = NULL;
  confCount = confCap = 0;
  confLoaded = 0;
  pthread_mutex_unlock(&confLock);
  pthread_mutex_lock(&paramLock);
  for (int t = 0; t < railnetParamTableCount(); t++) {
    const railnetParamTable* tab = railnetParamTableAt(t);
    for (int i = 0; i < tab->count; i++) __atomic_store_n(&tab->params[i].loaded, 0, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&paramLock);
}
