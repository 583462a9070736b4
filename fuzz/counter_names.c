/* Counter names a driver or sysfs hands railnet-diag (ethtool -S, hw_counters/):
 * railnetCounterClassify and railnetCongestionSum. Input: lines of "name" (any bytes but
 * '\n'); each line's value is its line number times 1000, so the sums are known. */
#include "ethtool.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzSetup();
  return 0;
}

#define MAX_STATS 64

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  char* text = fuzzString(data, size);
  railnetStat stats[MAX_STATS];
  int n = 0;
  uint64_t classified = 0;
  for (char* line = text; line && n < MAX_STATS;) {
    char* nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    railnetCtrClass c = railnetCounterClassify(line);
    FUZZ_CHECK(c.kind >= RAILNET_CTR_OTHER && c.kind < RAILNET_CTR_KINDS, "kind %d", (int)c.kind);
    FUZZ_CHECK(c.dir >= RAILNET_DIR_NONE && c.dir <= RAILNET_DIR_TX, "dir %d", c.dir);
    FUZZ_CHECK(c.prio >= -1 && c.prio < RAILNET_PRIOS, "prio %d", c.prio);
    if (c.kind == RAILNET_CTR_OTHER) FUZZ_CHECK(c.dir == RAILNET_DIR_NONE && c.prio == -1, "other with dir/prio");
    FUZZ_CHECK(railnetCtrKindName(c.kind) != NULL, "no kind name");
    size_t len = strlen(line);
    if (len >= sizeof(stats[n].name)) len = sizeof(stats[n].name) - 1;
    memcpy(stats[n].name, line, len);
    stats[n].name[len] = '\0';
    stats[n].value = (uint64_t)(n + 1) * 1000;
    if (railnetCounterClassify(stats[n].name).kind != RAILNET_CTR_OTHER) classified += stats[n].value;
    n++;
    line = nl ? nl + 1 : NULL;
  }
  railnetCongestion sum;
  railnetCongestionSum(stats, n, &sum);
  uint64_t total = 0;
  int have = 0;
  for (int k = RAILNET_CTR_OTHER + 1; k < RAILNET_CTR_KINDS; k++) {
    have += sum.have[k];
    FUZZ_CHECK(sum.havePort[k] <= sum.have[k], "kind %d: %d port-wide of %d", k, sum.havePort[k], sum.have[k]);
    for (int d = 0; d < 3; d++) {
      total += sum.port[k][d];
      for (int p = 0; p < RAILNET_PRIOS; p++) total += sum.prio[k][d][p];
    }
  }
  FUZZ_CHECK(total == classified, "sums %llu, classified %llu", (unsigned long long)total,
             (unsigned long long)classified);
  FUZZ_CHECK(have <= n, "%d counted of %d", have, n);
  FUZZ_CHECK(railnetCongestionTotal(&sum, RAILNET_CTR_OTHER) == 0, "OTHER has a total");
  free(text);
  return 0;
}
