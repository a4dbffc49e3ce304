#include "csrc/program/dependencies.h"

#include <algorithm>
#include <set>
#include <unordered_map>

namespace nimble {

std::vector<std::pair<int, int>> dependency_edges(const std::vector<StorageAccess>& ops) {
  std::unordered_map<int, int> last_writer;
  std::unordered_map<int, std::vector<int>> readers;  // since the last write
  std::set<std::pair<int, int>> edges;
  for (size_t i = 0; i < ops.size(); ++i) {
    const int op = static_cast<int>(i);
    const StorageAccess& access = ops[i];
    for (int storage : access.reads) {
      auto it = last_writer.find(storage);
      if (it != last_writer.end() && it->second != op) edges.insert({it->second, op});
    }
    for (int storage : access.writes) {
      auto it = last_writer.find(storage);
      if (it != last_writer.end() && it->second != op) edges.insert({it->second, op});
      for (int reader : readers[storage]) {
        if (reader != op) edges.insert({reader, op});
      }
      readers[storage].clear();
      last_writer[storage] = op;
    }
    // An op that writes a storage it reads is that storage's last writer, not a reader.
    for (int storage : access.reads) {
      if (std::find(access.writes.begin(), access.writes.end(), storage) == access.writes.end()) {
        readers[storage].push_back(op);
      }
    }
  }
  return {edges.begin(), edges.end()};
}

}  // namespace nimble
