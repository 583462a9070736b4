/* NCCL_DEBUG_SUBSYS, NCCL_DEBUG and NCCL_DEBUG_FILE patterns: railnetParseSubsys,
 * railnetParseLevel, railnetExpandDebugFile (byte 0 = output buffer size). */
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzSetup();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  size_t outlen = data[0];
  char* s = fuzzString(data + 1, size - 1);
  unsigned long mask = railnetParseSubsys(s);
  if (strcmp(s, "NET") == 0) FUZZ_CHECK(mask == NCCL_NET, "NET gives 0x%lx", mask);
  ncclDebugLogLevel lvl = railnetParseLevel(s);
  FUZZ_CHECK(lvl >= NCCL_LOG_NONE && lvl <= NCCL_LOG_TRACE, "level %d", (int)lvl);
  /* exactly outlen bytes, so ASan sees a write past the end */
  char* out = (char*)malloc(outlen ? outlen : 1);
  railnetExpandDebugFile(s, out, outlen);
  if (outlen > 0) FUZZ_CHECK(memchr(out, '\0', outlen) != NULL, "output not terminated within %zu bytes", outlen);
  free(out);
  free(s);
  return 0;
}
