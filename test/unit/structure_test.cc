// The tree's structure, checked on every run: one way to read a setting (no getenv outside
// the settings layer), small files and functions, and dependencies that run one way
// (measured on the built objects: which file defines what another one uses).
#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include "test_util.h"

namespace {

const int kMaxFileLines = 800;
const int kMaxFunctionLines = 100;

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Every file under dir (relative to the repository root) whose name ends in one of exts.
void listFiles(const std::string& dir, const std::vector<std::string>& exts, std::vector<std::string>* out) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string path = dir + "/" + name;
    struct stat st;
    if (stat(path.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      listFiles(path, exts, out);
      continue;
    }
    for (auto& x : exts)
      if (endsWith(name, x)) out->push_back(path);
  }
  closedir(d);
}

std::vector<std::string> readLines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  std::string l;
  while (std::getline(f, l)) lines.push_back(l);
  return lines;
}

std::vector<std::string> codeFiles() {
  std::vector<std::string> files;
  for (const char* dir : {"src", "tools", "ext-net", "include"}) listFiles(dir, {".c", ".h"}, &files);
  return files;
}

// Removes comments and the contents of string and character literals from one line;
// *inComment carries a block comment over to the next line.
std::string stripLine(const std::string& line, bool* inComment) {
  std::string out;
  for (size_t i = 0; i < line.size(); i++) {
    if (*inComment) {
      if (line.compare(i, 2, "*/") == 0) {
        *inComment = false;
        i++;
      }
      continue;
    }
    if (line.compare(i, 2, "/*") == 0) {
      *inComment = true;
      i++;
      continue;
    }
    if (line.compare(i, 2, "//") == 0) break;
    char c = line[i];
    if (c == '"' || c == '\'') {
      out += c;
      for (i++; i < line.size() && line[i] != c; i++)
        if (line[i] == '\\') i++;
      out += c;
      continue;
    }
    out += c;
  }
  return out;
}

struct Function {
  std::string file;
  int line, length;
};

// Function bodies: a brace opened at depth 0 after a ')' (not an initializer's "= {"),
// up to the brace that closes it. Preprocessor lines are skipped.
std::vector<Function> functionsIn(const std::string& path) {
  std::vector<Function> fns;
  std::vector<std::string> lines = readLines(path);
  bool inComment = false, continued = false;
  int depth = 0, start = -1;
  std::string before;  // code at depth 0 since the last ';' or '}'
  for (size_t n = 0; n < lines.size(); n++) {
    std::string code = stripLine(lines[n], &inComment);
    size_t first = code.find_first_not_of(" \t");
    bool directive = continued || (first != std::string::npos && code[first] == '#');
    continued = !lines[n].empty() && lines[n].back() == '\\' && directive;
    if (directive) continue;
    for (char c : code) {
      if (c == '{') {
        if (depth == 0) {
          size_t close = before.rfind(')');
          bool init = before.find('=') != std::string::npos;
          if (close != std::string::npos && !init && before.find_first_not_of(" \t\n", close + 1) == std::string::npos)
            start = (int)n;
        }
        depth++;
      } else if (c == '}') {
        depth--;
        if (depth == 0) {
          if (start >= 0) fns.push_back({path, start + 1, (int)n - start + 1});
          start = -1;
          before.clear();
        }
      } else if (depth == 0) {
        if (c == ';') before.clear();
        else before += c;
      }
    }
    if (depth == 0) before += '\n';
  }
  return fns;
}

TEST(Structure, NoGetenvOutsideTheSettingsLayer) {
  std::regex call("\\b(secure_)?getenv\\s*\\(");
  std::vector<std::string> files = codeFiles();
  ASSERT_GT(files.size(), 20u) << "run from the repository root";
  for (auto& path : files) {
    if (path == "src/misc/env.c") continue;
    bool inComment = false;
    std::vector<std::string> lines = readLines(path);
    for (size_t n = 0; n < lines.size(); n++)
      EXPECT_FALSE(std::regex_search(stripLine(lines[n], &inComment), call))
          << path << ":" << n + 1 << " reads the environment itself: declare the variable in a param table "
          << "and read it through param.h (" << lines[n] << ")";
  }
}

// The tools see the library through its headers in src/include and include/ (railnet-diag's
// RDMA facts through ib_explain.h): no transport internals, no test seams.
TEST(Structure, ToolsIncludeNoTransportInternalsNorTestSeams) {
  std::regex inc("^\\s*#\\s*include\\s*\"([^\"]*)\"");
  std::vector<std::string> files;
  listFiles("tools", {".c", ".h"}, &files);
  ASSERT_GT(files.size(), 10u) << "run from the repository root";
  for (auto& path : files) {
    std::vector<std::string> lines = readLines(path);
    for (size_t n = 0; n < lines.size(); n++) {
      std::smatch m;
      if (!std::regex_search(lines[n], m, inc)) continue;
      std::string h = m[1];
      EXPECT_TRUE(h.find("transport/") == std::string::npos && h.find("net_ib") == std::string::npos)
          << path << ":" << n + 1 << " includes " << h << ": ask the library through a header of src/include "
          << "(RDMA ports, GIDs, GPUDirect: ib_explain.h)";
      EXPECT_NE(h, "testing.h") << path << ":" << n + 1 << " includes the test seams";
    }
  }
}

// Calls f(path, line number, the line without comments and literals, the line) for every line
// of the .c and .h files under dir (relative to the repository root).
void forEachCodeLine(const std::string& dir, const std::function<void(const std::string&, size_t, const std::string&,
                                                                      const std::string&)>& f) {
  std::vector<std::string> files;
  listFiles(dir, {".c", ".h"}, &files);
  ASSERT_GT(files.size(), 20u) << "run from the repository root";
  for (auto& path : files) {
    bool inComment = false;
    std::vector<std::string> lines = readLines(path);
    for (size_t n = 0; n < lines.size(); n++) f(path, n + 1, stripLine(lines[n], &inComment), lines[n]);
  }
}

// Every wr_id and immediate layout of the IB data path lives in net_ib/wrid.h, with its
// encode and decode functions: no other file takes a wr_id apart with bit operations, nor
// defines a wr_id or immediate flag of its own.
TEST(Structure, WrIdAndImmediateLayoutsLiveInWridH) {
  std::regex bitOp("\\bwr_id\\s*(&|\\||>>|<<|%)[^&|]|\\bwr_id\\s*=\\s*(\\(uint64_t\\)|RAILNET_IB_|\\w+\\s*[|&])|"
                    "[^&|][&|]\\s*\\w+(->|\\.)wr_id\\b|\\bimm\\w*\\s*(>>|<<|&\\s*0x)");
  std::regex flagDef("#\\s*define\\s+RAILNET_IB_(EAGER_(IMM|WR|RTS|RTS_SMALL|MARK|CLOSE|COPY|FO_WR|FO_BITS|FOLD_SHIFT)|"
                     "FO_(READ|PROBE|ALIVE|CTS_REWRITE)|EAGER_FO_MASK|WRID_\\w+)\\b");
  int flagsInWridH = 0;
  forEachCodeLine("src/transport/net_ib", [&](const std::string& path, size_t n, const std::string& code,
                                              const std::string& line) {
    if (endsWith(path, "/wrid.h")) {
      flagsInWridH += std::regex_search(code, flagDef);
      return;
    }
    EXPECT_FALSE(std::regex_search(code, bitOp))
        << path << ":" << n << " builds or takes apart a wr_id itself: use wrid.h's functions (" << line << ")";
    EXPECT_FALSE(std::regex_search(code, flagDef))
        << path << ":" << n << " defines a wr_id or immediate flag: it belongs in wrid.h (" << line << ")";
  });
  EXPECT_GE(flagsInWridH, 15) << "wrid.h no longer defines the flags this test looks for: update its list";
}

// A QP's send-queue credits (ncclIbQp.sqPosted) change in one module: qp.h's credit
// functions. Every other file asks them (railnetIbQpRoom) or tells them (Posted, Retired).
TEST(Structure, SendQueueCreditsChangeInTheQpModuleOnly) {
  std::regex named("\\bsqPosted\\b");
  int inQpH = 0;
  forEachCodeLine("src", [&](const std::string& path, size_t n, const std::string& code, const std::string& line) {
    if (!std::regex_search(code, named)) return;
    if (path == "src/transport/net_ib/qp.h") {
      inQpH++;
      return;
    }
    bool declaration = path == "src/transport/net_ib/comm.h" && code.find("int sqPosted;") != std::string::npos;
    EXPECT_TRUE(declaration) << path << ":" << n << " touches a QP's send-queue credits itself: use qp.h's "
                             << "railnetIbQpRoom / Posted / Retired (" << line << ")";
  });
  EXPECT_GE(inQpH, 3) << "qp.h no longer holds the credit functions";
}

// Which QPs of a comm are gone (ncclIbQp.gone) is the QP set's (qp.h, qp.c): failover, the
// eager files and the data path ask railnetIbQpGone / Live / DevInUse and change it through
// railnetIbQpSetGone / SetLive only.
TEST(Structure, TheGoneQpsAreTheQpSetsOwn) {
  std::regex named("(\\.|->)gone\\b");
  int inQp = 0;
  forEachCodeLine("src", [&](const std::string& path, size_t n, const std::string& code, const std::string& line) {
    if (!std::regex_search(code, named)) return;
    if (path == "src/transport/net_ib/qp.h" || path == "src/transport/net_ib/qp.c") {
      inQp++;
      return;
    }
    EXPECT_TRUE(path.find("/net_ib/") == std::string::npos)
        << path << ":" << n << " reads or writes whether a QP is gone: use qp.h's QP set (" << line << ")";
  });
  EXPECT_GE(inQp, 5) << "qp.h and qp.c no longer hold the QP set";
}

// Port failover's state (struct railnetIbFailover) is read and written by the files of
// net_ib/resilience/ only; the rest of the data path goes through failover.h's hooks
// (resilience/failover_hooks.c). The eager state (struct railnetIbEager) is net_ib/eager/'s
// in the same way, and opaque outside it: its definition, eager_state.h, is included by no
// other file.
TEST(Structure, FailoverAndEagerStateAreTouchedByTheirOwnFilesOnly) {
  std::regex foField("\\bfo\\s*->"), eagerField("\\beager\\s*->");
  std::regex includesState("^\\s*#\\s*include\\s*\"([^\"]*/)?eager_state\\.h\"");
  int inOwners = 0, eagerStructs = 0;
  forEachCodeLine("src", [&](const std::string& path, size_t n, const std::string& code, const std::string& line) {
    bool own = path.find("/net_ib/resilience/") != std::string::npos, hit = std::regex_search(code, foField);
    inOwners += own && hit;
    EXPECT_TRUE(own || !hit) << path << ":" << n << " reads or writes the failover struct: add or use a hook "
                             << "of resilience/failover.h (" << line << ")";
    bool eagerOwn = path.find("/net_ib/eager/") != std::string::npos;
    EXPECT_TRUE(eagerOwn || !std::regex_search(code, eagerField))
        << path << ":" << n << " reads or writes the eager struct: add or use a function of eager/eager.h (" << line
        << ")";
    EXPECT_TRUE(eagerOwn || !std::regex_search(line, includesState))
        << path << ":" << n << " includes the eager state: it is opaque outside eager/ (" << line << ")";
    eagerStructs += code.find("struct railnetIbEager {") != std::string::npos;
  });
  EXPECT_GT(inOwners, 50) << "the failover files no longer use the struct through 'fo->': update this test";
  EXPECT_EQ(eagerStructs, 1) << "struct railnetIbEager is defined once, in eager/eager_state.h";
}

TEST(Structure, FilesAreSmall) {
  for (auto& path : codeFiles()) {
    if (path.rfind("ext-net/include/", 0) == 0) continue;  // the ABI structs, one per version
    size_t n = readLines(path).size();
    EXPECT_LE(n, (size_t)kMaxFileLines) << path << " has " << n << " lines: split it by concern";
  }
}

TEST(Structure, FunctionsAreShort) {
  size_t seen = 0;
  for (auto& path : codeFiles()) {
    if (!endsWith(path, ".c")) continue;
    for (auto& f : functionsIn(path)) {
      seen++;
      EXPECT_LE(f.length, kMaxFunctionLines) << f.file << ":" << f.line << " is a function of " << f.length << " lines";
    }
  }
  EXPECT_GT(seen, 300u) << "the function finder found too few functions to be right";
}

// The checker itself, on a made-up file.
TEST(Structure, FunctionFinderCountsBodies) {
  TempDir dir;
  std::string path = dir.write("f.c",
                               "#define M(x) do { \\\n  x; } while (0)\n"
                               "static const int table[] = {\n  1, 2,\n};\n"
                               "struct s { int a; };\n"
                               "int f(int a,\n      int b) {\n  if (a) {\n    return \"}\"[0];\n  }\n  return b; /* } */\n}\n"
                               "void g(void) { }\n");
  std::vector<Function> fns = functionsIn(path);
  ASSERT_EQ(fns.size(), 2u);
  EXPECT_EQ(fns[0].line, 8);
  EXPECT_EQ(fns[0].length, 6);
  EXPECT_EQ(fns[1].length, 1);
}

// Symbols each object defines and uses, from nm.
struct ObjSymbols {
  std::set<std::string> defined, used;
};

std::map<std::string, ObjSymbols> objectSymbols(const std::string& build) {
  std::map<std::string, ObjSymbols> objs;
  std::vector<std::string> files;
  for (const char* dir : {"/obj/src", "/obj/ext-net", "/obj/tools"}) listFiles(build + dir, {".o"}, &files);
  for (auto& o : files) {
    FILE* p = popen(("nm " + o).c_str(), "r");
    if (p == nullptr) continue;
    char line[1024];
    ObjSymbols& s = objs[o.substr(build.size() + 5)];  // "src/misc/env.o"
    while (fgets(line, sizeof(line), p)) {
      std::istringstream in(line);
      std::vector<std::string> w;
      std::string t;
      while (in >> t) w.push_back(t);
      if (w.size() == 2 && w[0] == "U") s.used.insert(w[1]);
      else if (w.size() == 3 && std::string("TDBRGS").find(w[1]) != std::string::npos) s.defined.insert(w[2]);
    }
    pclose(p);
  }
  return objs;
}

bool startsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// The layers, bottom up: the socket/verbs/settings layer, the transports, the plugin's
// adapters, the tools' libraries (tools/common, tools/diaglib), the tools.
int layerOf(const std::string& obj) {
  if (startsWith(obj, "src/misc/")) return 0;
  if (startsWith(obj, "src/transport/")) return 1;
  if (startsWith(obj, "ext-net/")) return 2;
  if (startsWith(obj, "tools/common/") || startsWith(obj, "tools/diaglib/")) return 3;
  return 4;
}

// The program an object of the top layer belongs to ("tools/diag/"), "" below it: two
// programs are linked apart, so a name both define is no dependency between them.
std::string programOf(const std::string& obj) {
  if (layerOf(obj) < 4) return "";
  size_t slash = obj.find('/', obj.find('/') + 1);
  return obj.substr(0, slash + 1);
}

// a -> b when a uses something b defines (one symbol that shows it).
typedef std::map<std::string, std::map<std::string, std::string>> DepGraph;

DepGraph dependencyGraph(const std::map<std::string, ObjSymbols>& objs) {
  DepGraph deps;
  for (auto& a : objs)
    for (auto& b : objs) {
      if (a.first == b.first) continue;
      std::string pa = programOf(a.first), pb = programOf(b.first);
      if (!pa.empty() && !pb.empty() && pa != pb) continue;
      for (auto& sym : a.second.used)
        if (b.second.defined.count(sym)) {
          deps[a.first][b.first] = sym;
          break;
        }
    }
  return deps;
}

// The strongly connected components of more than one object (Tarjan): each is a cycle, of
// any length, of objects that depend on each other.
struct CycleFinder {
  const DepGraph& g;
  std::map<std::string, int> index, low;
  std::vector<std::string> stack;
  std::set<std::string> onStack;
  std::vector<std::vector<std::string>> cycles;
  int next = 0;
  explicit CycleFinder(const DepGraph& graph) : g(graph) {}
  void visit(const std::string& v) {
    index[v] = low[v] = next++;
    stack.push_back(v);
    onStack.insert(v);
    auto it = g.find(v);
    if (it != g.end())
      for (auto& e : it->second) {
        const std::string& w = e.first;
        if (!index.count(w)) {
          visit(w);
          low[v] = std::min(low[v], low[w]);
        } else if (onStack.count(w)) {
          low[v] = std::min(low[v], index[w]);
        }
      }
    if (low[v] != index[v]) return;
    std::vector<std::string> scc;
    std::string w;
    do {
      w = stack.back();
      stack.pop_back();
      onStack.erase(w);
      scc.push_back(w);
    } while (w != v);
    if (scc.size() > 1) cycles.push_back(scc);
  }
  std::vector<std::vector<std::string>> run(const std::vector<std::string>& nodes) {
    for (auto& v : nodes)
      if (!index.count(v)) visit(v);
    return cycles;
  }
};

std::vector<std::vector<std::string>> cyclesOf(const DepGraph& g, const std::vector<std::string>& nodes) {
  CycleFinder f(g);
  return f.run(nodes);
}

// One cycle, each object followed by the symbol that ties it to the next.
std::string describeCycle(const DepGraph& g, const std::vector<std::string>& scc) {
  std::set<std::string> in(scc.begin(), scc.end());
  std::string out, v = scc[0];
  std::set<std::string> seen;
  while (!seen.count(v)) {
    seen.insert(v);
    auto& edges = g.at(v);
    std::string nextV;
    for (auto& e : edges)
      if (in.count(e.first)) {
        nextV = e.first;
        out += v + " -(" + e.second + ")-> ";
        break;
      }
    v = nextV;
  }
  return out + v;
}

TEST(Structure, DependenciesRunOneWay) {
  const char* build = getenv("RAILNET_BUILD");
  std::string dir = build ? build : "build";
  std::map<std::string, ObjSymbols> objs = objectSymbols(dir);
  if (objs.size() < 10) RAILNET_SKIP("no library objects under " + dir + "/obj (set RAILNET_BUILD)");
  size_t tools = 0;
  for (auto& o : objs) tools += startsWith(o.first, "tools/");
  EXPECT_GT(tools, 20u) << "the tools' objects are missing under " << dir << "/obj/tools: build them (make tools)";
  DepGraph deps = dependencyGraph(objs);
  for (auto& a : deps)
    for (auto& b : a.second)
      EXPECT_LE(layerOf(b.first), layerOf(a.first))
          << a.first << " calls up into " << b.first << " (" << b.second << "): a lower layer never calls up";
  std::vector<std::string> nodes;
  for (auto& o : objs) nodes.push_back(o.first);
  for (auto& c : cyclesOf(deps, nodes))
    ADD_FAILURE() << c.size() << " objects depend on each other in a cycle: " << describeCycle(deps, c)
                  << ": move what they share into a file below them";
}

// The IB transport's features in folders (net_ib/resilience/, net_ib/eager/) are modules:
// with each folder taken as one node, the dependencies still have no cycle (nothing a folder
// calls calls back into it, however long the way round), and the folders keep their order:
// eager may call resilience (through its hooks), resilience never calls eager.
std::string folderOf(const std::string& obj) {
  const std::string ib = "src/transport/net_ib/";
  if (!startsWith(obj, ib)) return obj;
  size_t slash = obj.find('/', ib.size());
  return slash == std::string::npos ? obj : obj.substr(0, slash + 1);
}

DepGraph foldedGraph(const DepGraph& deps) {
  DepGraph g;
  for (auto& a : deps)
    for (auto& b : a.second) {
      std::string fa = folderOf(a.first), fb = folderOf(b.first);
      if (fa != fb && !g[fa].count(fb)) g[fa][fb] = a.first + " uses " + b.second + " of " + b.first;
    }
  return g;
}

TEST(Structure, TheIbFoldersAreModulesInOrder) {
  const char* build = getenv("RAILNET_BUILD");
  std::string dir = build ? build : "build";
  std::map<std::string, ObjSymbols> objs = objectSymbols(dir);
  if (objs.size() < 10) RAILNET_SKIP("no library objects under " + dir + "/obj (set RAILNET_BUILD)");
  const std::string res = "src/transport/net_ib/resilience/", eager = "src/transport/net_ib/eager/";
  std::set<std::string> nodes;
  int inRes = 0, inEager = 0;
  for (auto& o : objs) {
    nodes.insert(folderOf(o.first));
    inRes += folderOf(o.first) == res;
    inEager += folderOf(o.first) == eager;
  }
  EXPECT_GE(inRes, 5) << "port failover's files are no longer in " << res;
  EXPECT_GE(inEager, 3) << "the eager files are no longer in " << eager;
  DepGraph g = foldedGraph(dependencyGraph(objs));
  for (auto& c : cyclesOf(g, std::vector<std::string>(nodes.begin(), nodes.end())))
    ADD_FAILURE() << "a folder of net_ib is called back by what it calls: " << describeCycle(g, c)
                  << ": move what they share below the folder, or hand the folder a function at its setup";
  if (g.count(res) && g[res].count(eager)) ADD_FAILURE() << "resilience/ calls up into eager/: " << g[res][eager];
}

// The folding itself: a folder's files become one node, so a way out of it and back is a
// cycle even when no file of it calls the file that calls it.
TEST(Structure, FoldingFindsACycleThroughAFolder) {
  DepGraph deps;
  deps["src/transport/net_ib/resilience/a.o"]["src/transport/net_ib/poll.o"] = "poll";
  deps["src/transport/net_ib/poll.o"]["src/transport/net_ib/resilience/b.o"] = "hook";
  deps["src/transport/net_ib/post.o"]["src/transport/net_ib/qp.o"] = "qp";
  EXPECT_TRUE(cyclesOf(deps, {"src/transport/net_ib/resilience/a.o", "src/transport/net_ib/poll.o",
                              "src/transport/net_ib/resilience/b.o"}).empty());
  DepGraph g = foldedGraph(deps);
  std::vector<std::vector<std::string>> cycles =
      cyclesOf(g, {"src/transport/net_ib/resilience/", "src/transport/net_ib/poll.o", "src/transport/net_ib/post.o"});
  ASSERT_EQ(cycles.size(), 1u);
  EXPECT_EQ(std::set<std::string>(cycles[0].begin(), cycles[0].end()),
            (std::set<std::string>{"src/transport/net_ib/resilience/", "src/transport/net_ib/poll.o"}));
}

// The cycle finder itself, on a made-up graph: a cycle of three, a pair, and a chain.
TEST(Structure, CycleFinderFindsCyclesOfAnyLength) {
  DepGraph g;
  g["a"]["b"] = "fb";
  g["b"]["c"] = "fc";
  g["c"]["a"] = "fa";
  g["d"]["e"] = "fe";
  g["e"]["d"] = "fd";
  g["f"]["g"] = "fg";
  g["c"]["f"] = "ff";
  std::vector<std::vector<std::string>> cycles = cyclesOf(g, {"a", "b", "c", "d", "e", "f", "g"});
  ASSERT_EQ(cycles.size(), 2u);
  std::set<std::set<std::string>> got;
  for (auto& c : cycles) got.insert(std::set<std::string>(c.begin(), c.end()));
  EXPECT_TRUE(got.count({"a", "b", "c"}));
  EXPECT_TRUE(got.count({"d", "e"}));
  std::string d = describeCycle(g, {"a", "b", "c"});
  EXPECT_EQ(d, "a -(fb)-> b -(fc)-> c -(fa)-> a");
}

}  // namespace
