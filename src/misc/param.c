/* railnet params: typed, range-checked and logged reads of the declared variables. */
#include "param.h"
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "testing.h"

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

/* Fills p's cache; what to say about it is logged by the caller, outside the lock. */
typedef enum { SAY_NOTHING, SAY_SET, SAY_NOT_INT, SAY_RANGE } paramNews;

static paramNews paramLoad(const railnetParam* p, const char** rawOut, int64_t* parsed) {
  railnetParamCache* c = p->cache;
  railnetParamSource src = RAILNET_SRC_DEFAULT;
  const char* raw = railnetEnvGet(p->name, &src);
  *rawOut = raw;
  c->malformed = 0;
  c->source = RAILNET_SRC_DEFAULT;
  if (p->type == RAILNET_PARAM_STR) {
    c->str = raw != NULL ? raw : p->defStr;
    c->source = raw != NULL ? src : RAILNET_SRC_DEFAULT;
    return raw != NULL ? SAY_SET : SAY_NOTHING;
  }
  c->value = p->def;
  if (raw == NULL) return SAY_NOTHING;
  c->source = src; /* where the (possibly bad) text came from, until it is found bad */
  if (parseInt(raw, parsed) != 0) {
    c->malformed = 1;
    return SAY_NOT_INT;
  }
  if (*parsed < p->min || *parsed > p->max) {
    c->malformed = 1;
    return SAY_RANGE;
  }
  c->value = *parsed;
  return SAY_SET;
}

static void paramReport(const railnetParam* p, paramNews news, const char* raw, int64_t v, railnetParamSource src) {
  const char* from = railnetParamSourceName(src);
  switch (news) {
    case SAY_NOTHING: break;
    case SAY_SET:
      if (p->type == RAILNET_PARAM_STR) INFO(NCCL_ENV, "%s set by %s to %s", p->name, from, raw);
      else INFO(NCCL_ENV, "%s set by %s to %" PRId64, p->name, from, v);
      break;
    case SAY_NOT_INT:
      WARN("Invalid value '%s' for %s (from %s): not an integer; using the default %" PRId64
           ". Fix: unset %s or set it to an integer in [%" PRId64 ", %" PRId64 "]",
           raw, p->name, from, p->def, p->name, p->min, p->max);
      break;
    case SAY_RANGE:
      WARN("Invalid value %" PRId64 " for %s (from %s): outside [%" PRId64 ", %" PRId64
           "]; using the default %" PRId64,
           v, p->name, from, p->min, p->max, p->def);
      break;
  }
}

static void paramEnsure(const railnetParam* p) {
  railnetParamCache* c = p->cache;
  if (__atomic_load_n(&c->loaded, __ATOMIC_ACQUIRE)) return;
  paramNews news = SAY_NOTHING;
  const char* raw = NULL;
  int64_t v = 0;
  railnetParamSource src = RAILNET_SRC_DEFAULT;
  pthread_mutex_lock(&paramLock);
  if (!c->loaded) {
    news = paramLoad(p, &raw, &v);
    src = c->source;
    if (c->malformed) c->source = RAILNET_SRC_DEFAULT; /* the default is what is used */
    __atomic_store_n(&c->loaded, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&paramLock);
  paramReport(p, news, raw, v, src);
}

int64_t railnetParamInt(const railnetParam* p) {
  paramEnsure(p);
  return p->cache->value;
}

const char* railnetParamStr(const railnetParam* p) {
  paramEnsure(p);
  return p->cache->str;
}

railnetParamSource railnetParamSourceOf(const railnetParam* p) {
  paramEnsure(p);
  return p->cache->source;
}

int railnetParamMalformed(const railnetParam* p) {
  paramEnsure(p);
  return p->cache->malformed;
}

railnetParamVerdict railnetParamJudge(const railnetParam* p, char* note, size_t size) {
  if (size) note[0] = '\0';
  paramEnsure(p);
  if (p->cache->malformed) {
    railnetParamSource src;
    const char* raw = railnetEnvGet(p->name, &src);
    snprintf(note, size, "%s='%s' (%s) is not an integer in [%" PRId64 ", %" PRId64 "]: the default %" PRId64
             " is used instead", p->name, raw ? raw : "", railnetParamSourceName(src), p->min, p->max, p->def);
    return RAILNET_PARAM_ADJUSTED;
  }
  if (p->check == NULL || p->cache->source == RAILNET_SRC_DEFAULT) return RAILNET_PARAM_TAKEN;
  return p->check(p->cache->str, p->cache->value, note, size);
}

/* A name that no table declares is a railnet bug: every such read WARNs and reads as unset,
 * so that the bug cannot go unnoticed in tests. */
static const railnetParam* findDeclared(const char* name) {
  const railnetParam* p = railnetParamFind(name);
  if (p == NULL) WARN("railnet reads %s, which no param table declares (a railnet bug: please report it)",
                      name ? name : "(null)");
  return p;
}

int64_t railnetParamIntByName(const char* name) {
  const railnetParam* p = findDeclared(name);
  return p != NULL && p->type == RAILNET_PARAM_INT ? railnetParamInt(p) : 0;
}

const char* railnetParamStrByName(const char* name) {
  const railnetParam* p = findDeclared(name);
  return p != NULL && p->type == RAILNET_PARAM_STR ? railnetParamStr(p) : NULL;
}

const char* railnetParamRaw(const char* name, railnetParamSource* src) {
  if (src) *src = RAILNET_SRC_DEFAULT;
  if (findDeclared(name) == NULL) return NULL;
  return railnetEnvGet(name, src);
}

void railnetParamReset(void) {
  railnetEnvReset();
  pthread_mutex_lock(&paramLock);
  for (int t = 0; t < railnetParamTableCount(); t++) {
    const railnetParamTable* tab = railnetParamTableAt(t);
    for (int i = 0; i < tab->count; i++) __atomic_store_n(&tab->params[i].cache->loaded, 0, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&paramLock);
}
