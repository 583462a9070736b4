/*
 * railnet params: NCCL_* variables with NCCL's lookup order.
 *   1. the process environment,
 *   2. NCCL_CONF_FILE if set, else ~/.nccl.conf,
 *   3. /etc/nccl.conf (RAILNET_SYSTEM_CONF overrides this path, for tests and packaging).
 * Each module declares its params in one table with RAILNET_PARAM_TABLE; the tables are
 * collected in a linker section so that railnet-diag --params lists every one of them.
 */
#ifndef RAILNET_PARAM_H
#define RAILNET_PARAM_H
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

typedef struct railnetParam {
  const char* name;     /* NCCL_IB_TIMEOUT */
  railnetParamType type;
  int64_t def;          /* default of an INT param */
  int64_t min, max;     /* accepted range of an INT param (inclusive) */
  const char* defStr;   /* default of a STR param (may be NULL: unset) */
  const char* doc;      /* one line */
  /* cache, filled at first use */
  int loaded;           /* set (atomically) once value/str/source are valid */
  int64_t value;
  const char* str;
  railnetParamSource source;
  int malformed;
} railnetParam;

typedef struct {
  const char* module;
  railnetParam* params;
  int count;
} railnetParamTable;

#define RAILNET_PARAM_INT_DEF(NAME, DEF, MIN, MAX, DOC) \
  { (NAME), RAILNET_PARAM_INT, (DEF), (MIN), (MAX), NULL, (DOC), 0, 0, NULL, RAILNET_SRC_DEFAULT, 0 }
#define RAILNET_PARAM_STR_DEF(NAME, DEF, DOC) \
  { (NAME), RAILNET_PARAM_STR, 0, 0, 0, (DEF), (DOC), 0, 0, NULL, RAILNET_SRC_DEFAULT, 0 }

/* Register a module's table (an array of railnetParam) for enumeration. */
#define RAILNET_PARAM_TABLE(MODULE, ARRAY)                                            \
  static const railnetParamTable railnetParamTable_##ARRAY                             \
      __attribute__((used, section("railnet_ptab"), aligned(sizeof(void*)))) = {      \
          (MODULE), (ARRAY), (int)(sizeof(ARRAY) / sizeof((ARRAY)[0]))}

int64_t railnetParamInt(railnetParam* p);
/* NULL when unset and without default. */
const char* railnetParamStr(railnetParam* p);
railnetParamSource railnetParamSourceOf(railnetParam* p);
const char* railnetParamSourceName(railnetParamSource src);

/* Raw lookup of any NAME in the same order (env, user file, system file). */
const char* railnetGetEnv(const char* name, railnetParamSource* src);

/* Iterate over every registered table. */
int railnetParamTableCount(void);
const railnetParamTable* railnetParamTableAt(int i);

/* Drop the conf-file cache and every param's cached value (tests only). */
void railnetParamReset(void);

#ifdef __cplusplus
}
#endif
#endif
