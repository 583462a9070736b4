// The tree's structure, checked on every run: one way to read a setting (no getenv outside
// the settings layer), small files and functions, and dependencies that run one way
// (measured on the built objects: which file defines what another one uses).
#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>
#include <fstream>
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
  for (const char* dir : {"/obj/src", "/obj/ext-net"}) listFiles(build + dir, {".o"}, &files);
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

int layerOf(const std::string& obj) {
  if (obj.rfind("src/misc/", 0) == 0) return 0;
  if (obj.rfind("src/transport/", 0) == 0) return 1;
  return 2;  // ext-net: the plugin's adapters
}

TEST(Structure, DependenciesRunOneWay) {
  const char* build = getenv("RAILNET_BUILD");
  std::string dir = build ? build : "build";
  std::map<std::string, ObjSymbols> objs = objectSymbols(dir);
  if (objs.size() < 10) RAILNET_SKIP("no library objects under " + dir + "/obj (set RAILNET_BUILD)");
  std::map<std::string, std::set<std::string>> deps;  // a uses something b defines
  for (auto& a : objs)
    for (auto& b : objs) {
      if (a.first == b.first) continue;
      for (auto& sym : a.second.used)
        if (b.second.defined.count(sym)) {
          deps[a.first].insert(b.first);
          EXPECT_LE(layerOf(b.first), layerOf(a.first))
              << a.first << " calls up into " << b.first << " (" << sym << "): a lower layer never calls up";
          break;
        }
    }
  for (auto& a : deps)
    for (auto& b : a.second)
      if (a.first < b && deps[b].count(a.first))
        ADD_FAILURE() << a.first << " and " << b << " depend on each other: move what both need below them";
}

}  // namespace
