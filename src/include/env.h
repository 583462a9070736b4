/*
 * The bottom of railnet's settings: every variable railnet reads is declared here (name,
 * type, default, range, one line of doc) in a per-module table, and its text is found in
 * NCCL's order:
 *   1. the process environment,
 *   2. NCCL_CONF_FILE if set, else ~/.nccl.conf,
 *   3. /etc/nccl.conf (RAILNET_SYSTEM_CONF overrides this path, for tests and packaging).
 * This layer logs nothing: it sits below the logger (debug.c), which reads NCCL_DEBUG* through
 * it. What it has to complain about (a malformed conf line) is kept until the logger takes it
 * (railnetEnvTakeComplaint). Typed, checked and logged reads are param.h's, one layer up.
 */
#ifndef RAILNET_ENV_H
#define RAILNET_ENV_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { RAILNET_PARAM_INT = 0, RAILNET_PARAM_STR = 1 } railnetParamType;
typedef enum {
  RAILNET_SRC_DEFAULT = 0,
  RAILNET_SRC_ENV = 1,
  RAILNET_SRC_USER_FILE = 2,
  RAILNET_SRC_SYSTEM_FILE = 3
} railnetParamSource;

/* What a param's first read found; owned by param.c, reset with the conf files. */
typedef struct railnetParamCache {
  int loaded; /* set (atomically) once the other fields are valid */
  int64_t value;
  const char* str;
  railnetParamSource source;
  int malformed;
} railnetParamCache;

/* What the module that reads a param does with a value that parses (the type and range are
 * checked before): takes it, adjusts it (note says to what) or refuses it (note says what
 * fails). The module's own rule: the module runs it where it uses the value, and
 * railnet-diag runs it through railnetParamJudge (param.h), so both say the same. */
typedef enum { RAILNET_PARAM_TAKEN = 0, RAILNET_PARAM_ADJUSTED = 1, RAILNET_PARAM_REFUSED = 2 } railnetParamVerdict;
typedef railnetParamVerdict (*railnetParamCheck)(const char* str, int64_t value, char* note, size_t size);

/* One variable's declaration. Tables of these are const; the cache lives beside them. */
typedef struct railnetParam {
  const char* name;     /* NCCL_IB_TIMEOUT */
  railnetParamType type;
  int64_t def;          /* default of an INT param */
  int64_t min, max;     /* accepted range of an INT param (inclusive) */
  const char* defStr;   /* default of a STR param (may be NULL: unset) */
  const char* doc;      /* one line */
  railnetParamCache* cache;
  railnetParamCheck check; /* the module's rule beyond the range; NULL: none */
} railnetParam;

typedef struct {
  const char* module;
  const railnetParam* params;
  int count;
} railnetParamTable;

/* Declarations for C tables (each entry gets its own static cache). */
#define RAILNET_PARAM_INT_CHECKED(NAME, DEF, MIN, MAX, CHECK, DOC)                                  \
  { (NAME), RAILNET_PARAM_INT, (DEF), (MIN), (MAX), NULL, (DOC),                                      \
    &(railnetParamCache){0, 0, NULL, RAILNET_SRC_DEFAULT, 0}, (CHECK) }
#define RAILNET_PARAM_STR_CHECKED(NAME, DEF, CHECK, DOC) \
  { (NAME), RAILNET_PARAM_STR, 0, 0, 0, (DEF), (DOC), &(railnetParamCache){0, 0, NULL, RAILNET_SRC_DEFAULT, 0}, (CHECK) }
#define RAILNET_PARAM_INT_DEF(NAME, DEF, MIN, MAX, DOC) RAILNET_PARAM_INT_CHECKED(NAME, DEF, MIN, MAX, NULL, DOC)
#define RAILNET_PARAM_STR_DEF(NAME, DEF, DOC) RAILNET_PARAM_STR_CHECKED(NAME, DEF, NULL, DOC)

/* Register a module's table (a const array of railnetParam) for enumeration. */
#define RAILNET_PARAM_TABLE(MODULE, ARRAY)                                            \
  static const railnetParamTable railnetParamTable_##ARRAY                             \
      __attribute__((used, section("railnet_ptab"), aligned(sizeof(void*)))) = {      \
          (MODULE), (ARRAY), (int)(sizeof(ARRAY) / sizeof((ARRAY)[0]))}

/* Every registered table, and the declaration of NAME (NULL when NAME is not declared). */
int railnetParamTableCount(void);
const railnetParamTable* railnetParamTableAt(int i);
const railnetParam* railnetParamFind(const char* name);

/* The text of NAME as found (environment, user file, system file), or NULL; *src says
 * where. Raw: no parsing, no logging. param.h's railnetParamRaw is the checked form. */
const char* railnetEnvGet(const char* name, railnetParamSource* src);
const char* railnetParamSourceName(railnetParamSource src);

/* Takes the oldest complaint about a conf file ("path:line: what"), with the place in
 * railnet's source that made it; 0 when there is none. Cheap when there is none. */
int railnetEnvTakeComplaint(char* msg, size_t len, const char** file, int* line);

#ifdef __cplusplus
}
#endif
#endif
