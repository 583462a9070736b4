// A small fake verbs world for the IB unit tests: HCAs with ports, port attributes and GID
// tables (with types), served through ibvwrap's injected symbol table. Each test file that
// includes this gets its own copy (everything is in an anonymous namespace).
#pragma once
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

extern "C" {
#include "core.h"
#include "ibvwrap.h"
}

namespace {

struct FakeGid {
  std::string text;  // "" = empty slot
  int version = 2;   // 0 IB, 1 RoCE v1, 2 RoCE v2
};

struct FakePort {
  struct ibv_port_attr attr;
  std::vector<FakeGid> gids;  // index = GID index; resized to gid_tbl_len
};

struct FakeHca {
  std::string name;
  struct ibv_device dev;
  struct ibv_context ctx;
  struct ibv_device_attr attr;
  std::vector<FakePort> ports;  // ports[0] is port 1
  bool openFails = false;
  int opens = 0, closes = 0;
};

struct FakeWorld {
  std::deque<FakeHca> hcas;
  int gidTableCalls = 0, queryGidCalls = 0;
  std::mutex evLock;
  std::deque<struct ibv_async_event> events;
  int acks = 0;
};
FakeWorld* world;

union ibv_gid gidFromText(const std::string& s) {
  union ibv_gid g;
  memset(&g, 0, sizeof(g));
  if (!s.empty()) inet_pton(AF_INET6, s.c_str(), g.raw);
  return g;
}

FakeHca* hcaOfDevice(struct ibv_device* d) {
  for (auto& h : world->hcas)
    if (&h.dev == d) return &h;
  return nullptr;
}
FakeHca* hcaOfContext(struct ibv_context* c) {
  for (auto& h : world->hcas)
    if (&h.ctx == c) return &h;
  return nullptr;
}

struct ibv_device** fkGetDeviceList(int* n) {
  *n = (int)world->hcas.size();
  auto** list = new struct ibv_device*[world->hcas.size() + 1];
  int i = 0;
  for (auto& h : world->hcas) list[i++] = &h.dev;
  list[i] = nullptr;
  return list;
}
void fkFreeDeviceList(struct ibv_device** l) { delete[] l; }
const char* fkGetDeviceName(struct ibv_device* d) {
  FakeHca* h = hcaOfDevice(d);
  return h ? h->name.c_str() : nullptr;
}
struct ibv_context* fkOpenDevice(struct ibv_device* d) {
  FakeHca* h = hcaOfDevice(d);
  if (!h || h->openFails) {
    errno = ENODEV;
    return nullptr;
  }
  h->opens++;
  return &h->ctx;
}
int fkCloseDevice(struct ibv_context* c) {
  FakeHca* h = hcaOfContext(c);
  if (h) h->closes++;
  return 0;
}
int fkQueryDevice(struct ibv_context* c, struct ibv_device_attr* a) {
  FakeHca* h = hcaOfContext(c);
  if (!h) return EINVAL;
  *a = h->attr;
  return 0;
}
int fkQueryPort(struct ibv_context* c, uint8_t port, struct ibv_port_attr* a) {
  FakeHca* h = hcaOfContext(c);
  if (!h || port < 1 || (size_t)port > h->ports.size()) return EINVAL;
  *a = h->ports[port - 1].attr;
  return 0;
}
int fkQueryGid(struct ibv_context* c, uint8_t port, int index, union ibv_gid* gid) {
  world->queryGidCalls++;
  FakeHca* h = hcaOfContext(c);
  if (!h || port < 1 || (size_t)port > h->ports.size()) return EINVAL;
  auto& p = h->ports[port - 1];
  if (index < 0 || index >= (int)p.attr.gid_tbl_len) return EINVAL;
  *gid = gidFromText(index < (int)p.gids.size() ? p.gids[index].text : "");
  return 0;  // an empty slot reads as the zero GID, as rdma-core answers
}
ssize_t fkQueryGidTable(struct ibv_context* c, struct ibv_gid_entry* e, size_t max, uint32_t, size_t) {
  world->gidTableCalls++;
  FakeHca* h = hcaOfContext(c);
  if (!h) {
    errno = EINVAL;
    return -1;
  }
  size_t n = 0;
  for (size_t p = 0; p < h->ports.size(); p++) {
    auto& port = h->ports[p];
    for (size_t i = 0; i < port.gids.size() && (int)i < (int)port.attr.gid_tbl_len; i++) {
      if (port.gids[i].text.empty()) continue;
      if (n >= max) {
        errno = EINVAL;
        return -1;
      }
      memset(&e[n], 0, sizeof(e[n]));
      e[n].gid = gidFromText(port.gids[i].text);
      e[n].gid_index = (uint32_t)i;
      e[n].port_num = (uint32_t)(p + 1);
      e[n].gid_type = port.gids[i].version == 1   ? IBV_GID_TYPE_ROCE_V1
                      : port.gids[i].version == 2 ? IBV_GID_TYPE_ROCE_V2
                                                  : IBV_GID_TYPE_IB;
      n++;
    }
  }
  return (ssize_t)n;
}
int fkForkInit(void) { return 0; }
struct ibv_pd fkPd;
struct ibv_pd* fkAllocPd(struct ibv_context*) { return &fkPd; }
int fkDeallocPd(struct ibv_pd*) { return 0; }
[[maybe_unused]] struct ibv_mr* fkRegMrIova2(struct ibv_pd*, void*, size_t, uint64_t, unsigned int) {
  errno = EINVAL;
  return nullptr;
}
// One event per byte written to the context's async_fd (a pipe the test made).
int fkGetAsyncEvent(struct ibv_context* c, struct ibv_async_event* ev) {
  char byte;
  if (c->async_fd >= 0 && read(c->async_fd, &byte, 1) != 1) {
    errno = EIO;
    return -1;
  }
  std::lock_guard<std::mutex> g(world->evLock);
  if (world->events.empty()) {
    errno = EAGAIN;
    return -1;
  }
  *ev = world->events.front();
  world->events.pop_front();
  return 0;
}
void fkAckAsyncEvent(struct ibv_async_event*) {
  std::lock_guard<std::mutex> g(world->evLock);
  world->acks++;
}
const char* fkEventTypeStr(enum ibv_event_type t) {
  switch (t) {
    case IBV_EVENT_PORT_ERR: return "port error";
    case IBV_EVENT_PORT_ACTIVE: return "port active";
    case IBV_EVENT_DEVICE_FATAL: return "local catastrophic error";
    default: return "other event";
  }
}

struct railnetIbvSymbols fakeVerbs(bool withGidTable) {
  struct railnetIbvSymbols t;
  memset(&t, 0, sizeof(t));
  t.get_device_list = fkGetDeviceList;
  t.free_device_list = fkFreeDeviceList;
  t.get_device_name = fkGetDeviceName;
  t.open_device = fkOpenDevice;
  t.close_device = fkCloseDevice;
  t.query_device = fkQueryDevice;
  t.query_port = fkQueryPort;
  t.query_gid = fkQueryGid;
  t.fork_init = fkForkInit;
  t.alloc_pd = fkAllocPd;
  t.dealloc_pd = fkDeallocPd;
  t.get_async_event = fkGetAsyncEvent;
  t.ack_async_event = fkAckAsyncEvent;
  t.event_type_str = fkEventTypeStr;
  if (withGidTable) t.query_gid_table = fkQueryGidTable;
  return t;
}

// An HCA with nPorts ports, all ACTIVE with the given link layer, 4x EDR, 16 GID slots.
FakeHca& addHca(const std::string& name, int nPorts, uint8_t link, uint64_t guid = 0x1234) {
  world->hcas.emplace_back();
  FakeHca& h = world->hcas.back();
  h.name = name;
  memset(&h.dev, 0, sizeof(h.dev));
  snprintf(h.dev.name, sizeof(h.dev.name), "%s", name.c_str());
  snprintf(h.dev.dev_name, sizeof(h.dev.dev_name), "uverbs%d", (int)world->hcas.size() - 1);
  memset(&h.ctx, 0, sizeof(h.ctx));
  h.ctx.device = &h.dev;
  h.ctx.async_fd = -1;
  memset(&h.attr, 0, sizeof(h.attr));
  h.attr.phys_port_cnt = (uint8_t)nPorts;
  h.attr.sys_image_guid = guid;
  h.attr.max_qp = 131072;
  for (int p = 0; p < nPorts; p++) {
    FakePort port;
    memset(&port.attr, 0, sizeof(port.attr));
    port.attr.state = IBV_PORT_ACTIVE;
    port.attr.link_layer = link;
    port.attr.active_speed = 32;  // EDR
    port.attr.active_width = 2;   // 4x
    port.attr.active_mtu = IBV_MTU_4096;
    port.attr.gid_tbl_len = 16;
    port.gids.resize(16);
    h.ports.push_back(port);
  }
  return h;
}

}  // namespace
