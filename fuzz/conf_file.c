/* Conf files (NCCL_CONF_FILE, ~/.nccl.conf, /etc/nccl.conf): the input is the file. Every
 * registered param is then read through the real lookup (conf entries, integer parsing,
 * range checks); an integer param must end up inside its range or at its default. */
#include <sys/mman.h>
#include <unistd.h>
#include "fuzz_common.h"

static int confFd = -1;

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzSetup();
  confFd = memfd_create("railnet-fuzz-conf", 0);
  if (confFd < 0) {
    perror("memfd_create");
    abort();
  }
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", confFd);
  setenv("NCCL_CONF_FILE", path, 1);
  setenv("RAILNET_SYSTEM_CONF", "/dev/null", 1);
  /* the environment wins over the file: leave every registered name to the file */
  for (int t = 0; t < railnetParamTableCount(); t++) {
    const railnetParamTable* tab = railnetParamTableAt(t);
    for (int i = 0; i < tab->count; i++)
      if (strcmp(tab->params[i].name, "NCCL_DEBUG") != 0 && strcmp(tab->module, "env") != 0)
        unsetenv(tab->params[i].name); /* the "env" table says where the conf files are */
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (ftruncate(confFd, 0) != 0 || pwrite(confFd, data, size, 0) != (ssize_t)size) abort();
  railnetParamReset();
  for (int t = 0; t < railnetParamTableCount(); t++) {
    const railnetParamTable* tab = railnetParamTableAt(t);
    for (int i = 0; i < tab->count; i++) {
      const railnetParam* p = &tab->params[i];
      if (p->type == RAILNET_PARAM_INT) {
        int64_t v = railnetParamInt(p);
        FUZZ_CHECK(v == p->def || (v >= p->min && v <= p->max), "%s = %lld outside [%lld, %lld]", p->name,
                   (long long)v, (long long)p->min, (long long)p->max);
      } else {
        const char* s = railnetParamStr(p);
        railnetParamSource src = railnetParamSourceOf(p);
        if (s != NULL && (src == RAILNET_SRC_USER_FILE || src == RAILNET_SRC_SYSTEM_FILE))
          FUZZ_CHECK(strlen(s) <= size, "%s is longer than the file", p->name);
      }
      (void)railnetParamSourceOf(p);
    }
  }
  /* a name that is no param, and one with odd characters */
  (void)railnetEnvGet("NCCL_FUZZ_UNKNOWN", NULL);
  (void)railnetEnvGet("", NULL);
  railnetDebugFlushEnv(); /* the file's complaints go through the logger */
  return 0;
}
