/* The params section: every param railnet registers, with its value, default, source
 * (environment, user conf file, system conf file, default) and doc. */
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "diag.h"
#include "param.h"

/* What the module reading p does with its value (its own parser, range and check,
 * railnetParamJudge): a PROBLEM when the value set is not the value that runs (a malformed
 * one is replaced by the default, one above a limit is cut) or when the module refuses it.
 * Returns "taken", "adjusted" or "refused". */
static const char* judgeParam(const railnetParam* p) {
  char note[512], fix[320];
  railnetParamVerdict v = railnetParamJudge(p, note, sizeof(note));
  if (v == RAILNET_PARAM_TAKEN) return "taken";
  if (railnetParamMalformed(p))
    sfmt(fix, sizeof(fix), "set %s to an integer in [%" PRId64 ", %" PRId64 "] or unset it", p->name, p->min, p->max);
  else if (v == RAILNET_PARAM_ADJUSTED)
    sfmt(fix, sizeof(fix), "set %s within the limit (or unset it): the value set is not the one that runs", p->name);
  else
    sfmt(fix, sizeof(fix), "set %s to a value it takes (railnet-diag --params: its doc) or unset it", p->name);
  PROBLEM(fix, "%s", note);
  return v == RAILNET_PARAM_ADJUSTED ? "adjusted" : "refused";
}

/* HOME is listed only where it moves ~/.nccl.conf away from the passwd entry's home. */
static int homeIsDefault(const railnetParam* p, const char* val) {
  if (strcmp(p->name, "HOME")) return 0;
  struct passwd* pw = getpwuid(getuid());
  return pw && pw->pw_dir && !strcmp(pw->pw_dir, val);
}

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
      const char* verdict = judgeParam(p);
      if (railnetParamMalformed(p)) railnetParamRaw(p->name, &src);
      if (!all && (src == RAILNET_SRC_DEFAULT || homeIsDefault(p, val)) && !railnetParamMalformed(p)) continue;
      shown++;
      jOpen(NULL, '{');
      jStr("name", p->name);
      jStr("module", tab->module);
      jStr("value", strcmp(val, "(unset)") ? val : NULL);
      jStr("default", strcmp(def, "(unset)") ? def : NULL);
      jStr("source", railnetParamSourceName(src));
      jStr("doc", p->doc);
      jStr("verdict", verdict);
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
