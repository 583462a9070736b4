// A profiler callback that records the network events a transport reports (NCCL's profiler
// ABI, ext-net/include/railnet_net/profiler_net.h), for the Socket and IB profiler tests.
#pragma once
#include <mutex>
#include <string>
#include <vector>

extern "C" {
#include <railnet_net/net.h>
#include <railnet_net/profiler_net.h>
}

struct ProfEvent {
  void* phandle;
  int64_t pluginId;
  ncclProfilerNetSockDescr_v1_t sd;  // the descriptor, when the plugin id says Socket
  ncclProfilerNetIbDescr_v1_t qd;    // the descriptor, when it says IB
  int stops = 0;                       // stop calls that named this event
};

struct ProfRecorder {
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::vector<ProfEvent>& events() {
    static std::vector<ProfEvent> e;
    return e;
  }
  static int& badCalls() {  // stops of unknown handles, unknown event types
    static int n = 0;
    return n;
  }
  static void clear() {
    std::lock_guard<std::mutex> g(mu());
    events().clear();
    badCalls() = 0;
  }
  // The handle given back for event k is k + 1 (never NULL).
  static ncclResult_t callback(void** eHandle, int type, void* phandle, int64_t pluginId, void* extData) {
    std::lock_guard<std::mutex> g(mu());
    if (type == ncclProfilerNetEventStart) {
      ProfEvent e{};
      e.phandle = phandle;
      e.pluginId = pluginId;
      if ((pluginId & NCCL_PROFILER_NET_TYPE_MASK) == NCCL_PROFILER_NET_TYPE_SOCK)
        e.sd = *(ncclProfilerNetSockDescr_v1_t*)extData;
      else if ((pluginId & NCCL_PROFILER_NET_TYPE_MASK) == NCCL_PROFILER_NET_TYPE_IB)
        e.qd = *(ncclProfilerNetIbDescr_v1_t*)extData;
      else
        badCalls()++;
      events().push_back(e);
      *eHandle = (void*)(uintptr_t)events().size();
      return ncclSuccess;
    }
    if (type == ncclProfilerNetEventStop) {
      size_t k = (size_t)(uintptr_t)*eHandle;
      if (k == 0 || k > events().size()) badCalls()++;
      else events()[k - 1].stops++;
      return ncclSuccess;
    }
    badCalls()++;
    return ncclSuccess;
  }
  // The events under one parent.
  static std::vector<ProfEvent> under(void* phandle) {
    std::lock_guard<std::mutex> g(mu());
    std::vector<ProfEvent> out;
    for (auto& e : events())
      if (e.phandle == phandle) out.push_back(e);
    return out;
  }
  static size_t count() {
    std::lock_guard<std::mutex> g(mu());
    return events().size();
  }
};
