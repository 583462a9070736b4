/*
 * railnet params: typed, checked and logged reads of the variables declared with env.h's
 * tables (RAILNET_PARAM_INT_DEF / RAILNET_PARAM_STR_DEF / RAILNET_PARAM_TABLE). The first read
 * of a param logs where its value came from (INFO ENV) or, for a malformed value, a WARN with
 * the accepted range; the value is cached. Every table feeds railnet-diag --params.
 * Code outside env.c and param.c reads settings only through these functions.
 */
#ifndef RAILNET_PARAM_H
#define RAILNET_PARAM_H
#include <stdint.h>
#include "env.h"

#ifdef __cplusplus
extern "C" {
#endif

/* By declaration (a table entry). */
int64_t railnetParamInt(const railnetParam* p);
/* NULL when unset and without default. */
const char* railnetParamStr(const railnetParam* p);
railnetParamSource railnetParamSourceOf(const railnetParam* p);
/* Was the value set but unusable (not an integer, out of range)? The default is used then. */
int railnetParamMalformed(const railnetParam* p);

/* What the module does with p's value: RAILNET_PARAM_ADJUSTED for a malformed one (the
 * default replaces it) or one the module's check narrows, RAILNET_PARAM_REFUSED for one the
 * module refuses (its init fails); note says what, in a sentence. Logs nothing. */
railnetParamVerdict railnetParamJudge(const railnetParam* p, char* note, size_t size);

/* By name, for a declared variable (a name nobody declared WARNs once and reads as unset). */
int64_t railnetParamIntByName(const char* name);
const char* railnetParamStrByName(const char* name);
/* The text of a declared variable as it was set (no default), and where it came from. */
const char* railnetParamRaw(const char* name, railnetParamSource* src);

#ifdef __cplusplus
}
#endif
#endif
