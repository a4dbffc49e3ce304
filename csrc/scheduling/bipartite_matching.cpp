#include "csrc/scheduling/bipartite_matching.h"

#include <cstddef>
#include <limits>
#include <queue>
#include <stdexcept>

namespace nimble::scheduling {

namespace {

class HopcroftKarp {
 public:
  HopcroftKarp(int left, int right, const std::vector<std::pair<int, int>>& edges,
               const std::vector<std::pair<int, int>>& preferred)
      : adj_(left), match_left_(left, -1), match_right_(right, -1), dist_(left), next_edge_(left) {
    for (const auto& [l, r] : edges) adj_[l].push_back(r);
    for (const auto& [l, r] : preferred) {
      if (match_left_[l] >= 0 || match_right_[r] >= 0)
        throw std::invalid_argument("preferred edges share a vertex: not a matching");
      match_left_[l] = r;
      match_right_[r] = l;
    }
  }

  std::vector<int> solve() {
    while (bfs()) {
      for (size_t u = 0; u < adj_.size(); ++u) next_edge_[u] = 0;
      for (int u = 0; u < static_cast<int>(adj_.size()); ++u) {
        if (match_left_[u] < 0) dfs(u);
      }
    }
    return match_left_;
  }

 private:
  static constexpr int kInf = std::numeric_limits<int>::max();

  // Layers free left vertices at distance 0; true if some augmenting path exists.
  bool bfs() {
    std::queue<int> queue;
    for (int u = 0; u < static_cast<int>(adj_.size()); ++u) {
      dist_[u] = match_left_[u] < 0 ? 0 : kInf;
      if (dist_[u] == 0) queue.push(u);
    }
    bool found = false;
    while (!queue.empty()) {
      const int u = queue.front();
      queue.pop();
      for (int r : adj_[u]) {
        const int w = match_right_[r];
        if (w < 0) {
          found = true;
        } else if (dist_[w] == kInf) {
          dist_[w] = dist_[u] + 1;
          queue.push(w);
        }
      }
    }
    return found;
  }

  // Iterative DFS along the layers, so deep graphs cannot overflow the call stack.
  bool dfs(int root) {
    std::vector<int> path = {root};
    while (!path.empty()) {
      const int u = path.back();
      bool advanced = false;
      while (next_edge_[u] < adj_[u].size()) {
        const int r = adj_[u][next_edge_[u]];
        const int w = match_right_[r];
        if (w < 0) {
          // Augment along the path: each left vertex on it takes its current edge.
          for (int i = static_cast<int>(path.size()) - 1; i >= 0; --i) {
            const int pu = path[i];
            const int pr = adj_[pu][next_edge_[pu]];
            match_right_[pr] = pu;
            match_left_[pu] = pr;
          }
          return true;
        }
        if (dist_[w] == dist_[u] + 1) {
          path.push_back(w);
          advanced = true;
          break;
        }
        ++next_edge_[u];
      }
      if (!advanced) {
        dist_[u] = kInf;  // dead end for this phase
        path.pop_back();
        if (!path.empty()) ++next_edge_[path.back()];
      }
    }
    return false;
  }

  std::vector<std::vector<int>> adj_;
  std::vector<int> match_left_, match_right_, dist_;
  std::vector<size_t> next_edge_;
};

}  // namespace

std::vector<int> maximum_bipartite_matching(int left, int right,
                                            const std::vector<std::pair<int, int>>& edges,
                                            const std::vector<std::pair<int, int>>& preferred) {
  return HopcroftKarp(left, right, edges, preferred).solve();
}

}  // namespace nimble::scheduling

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/max_cardinality_matching.hpp>

namespace nimble::scheduling {

std::vector<int> maximum_bipartite_matching_boost(int left, int right,
                                                  const std::vector<std::pair<int, int>>& edges) {
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS>;
  Graph graph(left + right);
  for (const auto& [l, r] : edges) boost::add_edge(l, left + r, graph);
  std::vector<boost::graph_traits<Graph>::vertex_descriptor> mate(left + right);
  boost::edmonds_maximum_cardinality_matching(graph, &mate[0]);
  std::vector<int> match(left, -1);
  const auto none = boost::graph_traits<Graph>::null_vertex();
  for (int l = 0; l < left; ++l) {
    if (mate[l] != none) match[l] = static_cast<int>(mate[l]) - left;
  }
  return match;
}

}  // namespace nimble::scheduling
