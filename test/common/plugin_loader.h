// Loads a net plugin the way NCCL's loader does (NCCL_NET_PLUGIN naming rule), on the
// tools' C loader (tools/common/plugin_load.h, whose functions this header brings in too).
#pragma once
#include <string>
#include "../../tools/common/plugin_load.h"

// NCCL_NET_PLUGIN=<name>: NCCL tries "libnccl-net-<name>.so", then <name> itself.
std::string ncclPluginLibName(const std::string& name);
// dlopen() of the plugin from the build tree (build/lib, next to this test binary's dir);
// returns the handle or nullptr with *err set.
void* loadPluginFromBuild(const std::string& name, std::string* err);
// The build tree's lib directory (…/build/lib).
std::string buildLibDir();
// The build tree's program `tool` (…/build/bin/tool).
std::string buildTool(const std::string& tool);
