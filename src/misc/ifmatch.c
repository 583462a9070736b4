/*
 * The interface-list syntax of NCCL_SOCKET_IFNAME and NCCL_IB_HCA:
 *   [^][=]entry[,entry...]      entry: name[:port] (port only where the caller allows it)
 * Entries are name prefixes; '=' asks for exact names; '^' inverts the selection. Spaces
 * around the modifiers and entries are ignored, empty entries are skipped (as NCCL's
 * strtok does). An empty list selects everything ('^' with an empty list: nothing), as
 * NCCL's matchIfList does.
 * Stricter than NCCL where NCCL silently misreads: too many entries, names too long for
 * the table, spaces inside names and non-numeric / out-of-range ports are refused with a
 * WARN naming the whole value.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include "core.h"
#include "socket.h"

#define IFMATCH_MAX_PORT 255 /* IB port numbers are 8 bits; 0 is not an HCA port */

static const char* skipSpaces(const char* p, const char* end) {
  while (p < end && isspace((unsigned char)*p)) p++;
  return p;
}

static const char* trimEnd(const char* begin, const char* end) {
  while (end > begin && isspace((unsigned char)end[-1])) end--;
  return end;
}

/* Parses the port field [p, end) (already trimmed, not empty). */
static ncclResult_t parsePort(const char* spec, const char* p, const char* end, int* port) {
  long v = 0;
  int len = (int)(end - p);
  for (const char* c = p; c < end; c++) {
    if (*c == ':') {
      WARN("NET : interface list \"%s\": entry with more than one ':' field (\"%.*s\"); only name:port is "
           "supported",
           spec, len, p);
      return ncclInvalidArgument;
    }
    if (!isdigit((unsigned char)*c)) {
      WARN("NET : interface list \"%s\": port \"%.*s\" is not a number", spec, len, p);
      return ncclInvalidArgument;
    }
    v = v * 10 + (*c - '0');
    if (v > IFMATCH_MAX_PORT) break;
  }
  if (v < 1 || v > IFMATCH_MAX_PORT) {
    WARN("NET : interface list \"%s\": port \"%.*s\" out of range (1..%d)", spec, len, p, IFMATCH_MAX_PORT);
    return ncclInvalidArgument;
  }
  *port = (int)v;
  return ncclSuccess;
}

/* Adds the entry [b, e) (trimmed, not empty) to list. */
static ncclResult_t addEntry(const char* spec, const char* b, const char* e, int allowPort, railnetIfList* list) {
  const char* nameEnd = e;
  const char* colon = NULL;
  if (allowPort) {
    colon = memchr(b, ':', (size_t)(e - b));
    if (colon) nameEnd = trimEnd(b, colon);
  }
  int nameLen = (int)(nameEnd - b);
  if (nameLen == 0) {
    WARN("NET : interface list \"%s\": entry \"%.*s\" has no name", spec, (int)(e - b), b);
    return ncclInvalidArgument;
  }
  if (nameLen >= (int)sizeof(list->entries[0].name)) {
    WARN("NET : interface list \"%s\": name \"%.*s\" is longer than %d characters", spec, nameLen, b,
         (int)sizeof(list->entries[0].name) - 1);
    return ncclInvalidArgument;
  }
  for (const char* c = b; c < nameEnd; c++) {
    if (isspace((unsigned char)*c) || !isprint((unsigned char)*c)) {
      WARN("NET : interface list \"%s\": name \"%.*s\" contains a space or control character", spec, nameLen, b);
      return ncclInvalidArgument;
    }
  }
  if (list->count == RAILNET_IFLIST_MAX) {
    WARN("NET : interface list \"%s\" has more than %d entries", spec, RAILNET_IFLIST_MAX);
    return ncclInvalidArgument;
  }
  railnetIfEntry* ent = &list->entries[list->count];
  memcpy(ent->name, b, (size_t)nameLen);
  ent->name[nameLen] = '\0';
  ent->port = -1;
  if (colon) {
    const char* pb = skipSpaces(colon + 1, e);
    if (pb < e) NCCLCHECK(parsePort(spec, pb, e, &ent->port)); /* "mlx5_0:" means any port, as in NCCL */
  }
  list->count++;
  return ncclSuccess;
}

ncclResult_t railnetIfListParse(const char* spec, int allowPort, railnetIfList* list) {
  if (list == NULL) return ncclInvalidArgument;
  memset(list, 0, sizeof(*list));
  if (spec == NULL) return ncclSuccess;
  const char* end = spec + strlen(spec);
  const char* p = skipSpaces(spec, end);
  if (p < end && *p == '^') {
    list->exclude = 1;
    p = skipSpaces(p + 1, end);
  }
  if (p < end && *p == '=') {
    list->exact = 1;
    p = skipSpaces(p + 1, end);
  }
  while (p < end) {
    const char* comma = memchr(p, ',', (size_t)(end - p));
    const char* stop = comma ? comma : end;
    const char* b = skipSpaces(p, stop);
    const char* e = trimEnd(b, stop);
    if (b < e) {
      ncclResult_t res = addEntry(spec, b, e, allowPort, list);
      if (res != ncclSuccess) {
        memset(list, 0, sizeof(*list));
        return res;
      }
    }
    p = comma ? comma + 1 : end;
  }
  return ncclSuccess;
}

int railnetIfListNamesNothing(const char* spec) {
  if (spec == NULL) return 0;
  for (const char* c = spec; *c; c++)
    if (*c != '^' && *c != '=' && *c != ',' && !isspace((unsigned char)*c)) return 0;
  return 1;
}

static int entryMatches(const railnetIfEntry* ent, int exact, const char* name, int port) {
  int nameOk = exact ? strcmp(name, ent->name) == 0 : strncmp(name, ent->name, strlen(ent->name)) == 0;
  int portOk = ent->port == -1 || port == -1 || ent->port == port;
  return nameOk && portOk;
}

int railnetIfListSelects(const railnetIfList* list, const char* name, int port) {
  if (name == NULL) return 0;
  if (list == NULL) return 1;
  int hit = list->count == 0;
  for (int i = 0; i < list->count && !hit; i++) hit = entryMatches(&list->entries[i], list->exact, name, port);
  return hit ^ (list->exclude ? 1 : 0);
}
