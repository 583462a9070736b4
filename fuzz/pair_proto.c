/* The pair protocol of railnet-diag --serve/--pair (pairproto.h): bytes a peer sends, as one
 * message (header + payload). railnetPairDecode must refuse or accept without reading past
 * the input; an accepted message must encode back to the very same bytes (every field is
 * checked on the way in, so nothing is lost or invented), and decoding the header alone
 * must agree with the whole. The input is copied to an exact-size buffer so that ASan sees
 * any read beyond it. */
#include "fuzz_common.h"
#include "pairproto.h"

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzSetup();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint8_t* buf = (uint8_t*)malloc(size ? size : 1);
  if (buf == NULL) abort();
  memcpy(buf, data, size);
  railnetPairMsg m;
  char why[128] = "";
  ncclResult_t r = railnetPairDecode(buf, size, &m, why);
  if (r != ncclSuccess) {
    FUZZ_CHECK(r == ncclInvalidArgument && why[0] != '\0', "decode gave %d, why '%s'", (int)r, why);
    FUZZ_CHECK(m.u.any == NULL && m.count == 0, "a refused message left records");
    free(buf);
    return 0;
  }
  uint16_t type;
  uint32_t count, length;
  FUZZ_CHECK(railnetPairDecodeHeader(buf, size, &type, &count, &length, why) == ncclSuccess, "header: %s", why);
  FUZZ_CHECK(type == m.type && count == m.count && length + RAILNET_PAIR_HDR_SIZE == size, "header disagrees");
  uint8_t* again = NULL;
  size_t againLen = 0;
  FUZZ_CHECK(railnetPairEncode(m.type, m.u.any, m.count, &again, &againLen) == ncclSuccess, "re-encode failed");
  FUZZ_CHECK(againLen == size && memcmp(again, buf, size) == 0, "re-encoded %zu bytes differ from the %zu read",
             againLen, size);
  free(again);
  railnetPairFree(&m);
  free(buf);
  return 0;
}
