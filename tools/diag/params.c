/* The params section: every param railnet registers, with its value, default, source
 * (environment, user conf file, system conf file, default) and doc. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "diag.h"
#include "param.h"

/* Every registered param, or (all == 0) only those not at their default. */
void sectionParams(int all) {
  section("params", all ? "Parameters railnet honours (value, default, source)" : "Settings (params not at their default)");
  jOpen("params", '[');
  int shown = 0;
  for (int t = 0; t < railnetParamTableCount(); t++) {
    const railnetParamTable* tab = railnetParamTableAt(t);
    for (int i = 0; i < tab->count; i++) {
      const railnetParam* p = &tab->params[i];
      char val[256], def[64];
      railnetParamSource src;
      if (p->type == RAILNET_PARAM_INT) {
        sfmt(val, sizeof(val), "%" PRId64, railnetParamInt(p));
        sfmt(def, sizeof(def), "%" PRId64, p->def);
      } else {
        const char* s = railnetParamStr(p);
        sfmt(val, sizeof(val), "%s", s ? s : "(unset)");
        sfmt(def, sizeof(def), "%s", p->defStr ? p->defStr : "(unset)");
      }
      src = railnetParamSourceOf(p);
      if (railnetParamMalformed(p)) {
        const char* raw = railnetParamRaw(p->name, &src);
        char fix[256];
        sfmt(fix, sizeof(fix), "set %s to an integer in [%" PRId64 ", %" PRId64 "] or unset it", p->name, p->min,
                 p->max);
        PROBLEM(fix, "%s='%s' (%s) is invalid: the default %s is used instead", p->name, raw ? raw : "",
                railnetParamSourceName(src), def);
      }
      if (!all && src == RAILNET_SRC_DEFAULT && !railnetParamMalformed(p)) continue;
      shown++;
      jOpen(NULL, '{');
      jStr("name", p->name);
      jStr("module", tab->module);
      jStr("value", strcmp(val, "(unset)") ? val : NULL);
      jStr("default", strcmp(def, "(unset)") ? def : NULL);
      jStr("source", railnetParamSourceName(src));
      jStr("doc", p->doc);
      jClose('}');
      char from[96];
      if (src == RAILNET_SRC_DEFAULT) sfmt(from, sizeof(from), "(default)");
      else sfmt(from, sizeof(from), "(%s; default %s)", railnetParamSourceName(src), def);
      if (all) text("  %-36s %-12s %s\n      %s\n", p->name, val, from, p->doc);
      else text("  %s=%s %s\n", p->name, val, from);
    }
  }
  jClose(']');
  if (!all && shown == 0) text("  every param at its default (railnet-diag --params lists them)\n");
}
