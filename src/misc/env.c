/* railnet settings, bottom layer: the environment and the conf files. Logs nothing. */
#include "env.h"
#include <ctype.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The variables that say where the conf files are: read from the environment only. */
enum { P_CONF_FILE, P_SYSTEM_CONF, P_HOME };
static const railnetParam envParams[] = {
    [P_CONF_FILE] = RAILNET_PARAM_STR_DEF("NCCL_CONF_FILE", NULL,
                                          "User conf file of NAME=value lines, instead of ~/.nccl.conf "
                                          "(environment only)"),
    [P_SYSTEM_CONF] = RAILNET_PARAM_STR_DEF("RAILNET_SYSTEM_CONF", "/etc/nccl.conf",
                                            "System conf file, read after the user's (environment only)"),
    [P_HOME] = RAILNET_PARAM_STR_DEF("HOME", NULL,
                                     "Where ~/.nccl.conf is looked for; the passwd entry's home when unset "
                                     "(environment only)"),
};
RAILNET_PARAM_TABLE("env", envParams);

/* One NAME=value pair read from a conf file. */
typedef struct {
  char* name;
  char* value;
  railnetParamSource src;
} confEntry;

static pthread_mutex_t confLock = PTHREAD_MUTEX_INITIALIZER;
static int confLoaded;
static confEntry* confEntries;
static int confCount, confCap;

/* Complaints wait here for the logger (debug.c), which sits above this layer. */
#define COMPLAINT_MAX 16
typedef struct {
  char msg[512];
  int line;
} complaint;
static complaint complaints[COMPLAINT_MAX];
static int complaintHead, complaintCount; /* under confLock */
static int complaintsPending;              /* atomic copy of complaintCount */

static void complain(int srcLine, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void complain(int srcLine, const char* fmt, ...) {
  if (complaintCount == COMPLAINT_MAX) return; /* the first ones say enough */
  complaint* c = &complaints[(complaintHead + complaintCount) % COMPLAINT_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
  va_end(ap);
  c->line = srcLine;
  complaintCount++;
  __atomic_store_n(&complaintsPending, complaintCount, __ATOMIC_RELEASE);
}

int railnetEnvTakeComplaint(char* msg, size_t len, const char** file, int* line) {
  if (__atomic_load_n(&complaintsPending, __ATOMIC_ACQUIRE) == 0) return 0;
  int got = 0;
  pthread_mutex_lock(&confLock);
  if (complaintCount > 0) {
    complaint* c = &complaints[complaintHead];
    snprintf(msg, len, "%s", c->msg);
    if (file) *file = __FILE__;
    if (line) *line = c->line;
    complaintHead = (complaintHead + 1) % COMPLAINT_MAX;
    complaintCount--;
    __atomic_store_n(&complaintsPending, complaintCount, __ATOMIC_RELEASE);
    got = 1;
  }
  pthread_mutex_unlock(&confLock);
  return got;
}

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
      complain(__LINE__, "%s:%d: ignoring line without '=' (expected NAME=value)", path, lineno);
      continue;
    }
    *eq = '\0';
    char* name = trim(s);
    char* value = trim(eq + 1);
    if (*name == '\0') {
      complain(__LINE__, "%s:%d: ignoring line with an empty name", path, lineno);
      continue;
    }
    confAdd(name, value, src);
  }
  fclose(f);
}

/* The conf-file variables themselves come from the environment only. */
static const char* envOnly(int p) {
  const char* v = getenv(envParams[p].name);
  return v != NULL && v[0] != '\0' ? v : envParams[p].defStr;
}

static void confLoad(void) {
  const char* userFile = envOnly(P_CONF_FILE);
  if (userFile != NULL) {
    confReadFile(userFile, RAILNET_SRC_USER_FILE);
  } else {
    const char* home = envOnly(P_HOME);
    if (home == NULL) {
      struct passwd* pw = getpwuid(getuid());
      home = pw ? pw->pw_dir : NULL;
    }
    if (home != NULL) {
      char path[PATH_MAX];
      snprintf(path, sizeof(path), "%s/.nccl.conf", home);
      confReadFile(path, RAILNET_SRC_USER_FILE);
    }
  }
  confReadFile(envOnly(P_SYSTEM_CONF), RAILNET_SRC_SYSTEM_FILE);
}

const char* railnetEnvGet(const char* name, railnetParamSource* src) {
  const char* v = getenv(name);
  if (v != NULL) {
    if (src) *src = RAILNET_SRC_ENV;
    return v;
  }
  pthread_mutex_lock(&confLock);
  if (!confLoaded) {
    confLoaded = 1;
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

const railnetParam* railnetParamFind(const char* name) {
  if (name == NULL) return NULL;
  for (int t = 0; t < railnetParamTableCount(); t++) {
    const railnetParamTable* tab = railnetParamTableAt(t);
    for (int i = 0; i < tab->count; i++)
      if (strcmp(tab->params[i].name, name) == 0) return &tab->params[i];
  }
  return NULL;
}

/* Tests (testing.h): forget the conf files, so that the next lookup reads them again. */
void railnetEnvReset(void) {
  pthread_mutex_lock(&confLock);
  for (int i = 0; i < confCount; i++) {
    free(confEntries[i].name);
    free(confEntries[i].value);
  }
  free(confEntries);
  confEntries = NULL;
  confCount = confCap = 0;
  confLoaded = 0;
  complaintHead = complaintCount = 0;
  __atomic_store_n(&complaintsPending, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&confLock);
}
