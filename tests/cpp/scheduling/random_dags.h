#pragma once
// Generators of random DAGs (nodes in topological order) for tests and the benchmark.
#include <algorithm>
#include <random>

#include "csrc/scheduling/dag.h"

namespace nimble::scheduling::testing {

// Each node links to a few random earlier nodes.
inline Dag random_sparse(int n, int max_in, std::mt19937& rng) {
  Dag dag{n, {}};
  for (int v = 1; v < n; ++v) {
    const int k = static_cast<int>(rng() % (max_in + 1));
    for (int i = 0; i < k; ++i) dag.edges.emplace_back(static_cast<int>(rng() % v), v);
  }
  return dag;
}

// Layers of `width` nodes; each node depends on 1..3 nodes of the previous layer and,
// now and then, on a node further back (a skip connection).
inline Dag random_layered(int n, int width, std::mt19937& rng) {
  Dag dag{n, {}};
  for (int v = width; v < n; ++v) {
    const int layer_start = (v / width - 1) * width;
    const int k = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < k; ++i)
      dag.edges.emplace_back(layer_start + static_cast<int>(rng() % width), v);
    if (rng() % 8 == 0 && layer_start > 0)
      dag.edges.emplace_back(static_cast<int>(rng() % layer_start), v);
  }
  return dag;
}

// Inception-like: blocks of parallel branches (chains of random length) between a fork
// and a join node.
inline Dag random_series_parallel(int blocks, std::mt19937& rng) {
  Dag dag{1, {}};
  int fork = 0;
  for (int b = 0; b < blocks; ++b) {
    const int branches = 1 + static_cast<int>(rng() % 4);
    std::vector<int> ends;
    for (int br = 0; br < branches; ++br) {
      int prev = fork;
      const int len = 1 + static_cast<int>(rng() % 3);
      for (int i = 0; i < len; ++i) {
        dag.edges.emplace_back(prev, dag.num_nodes);
        prev = dag.num_nodes++;
      }
      ends.push_back(prev);
    }
    const int join = dag.num_nodes++;
    for (int e : ends) dag.edges.emplace_back(e, join);
    if (rng() % 3 == 0) dag.edges.emplace_back(fork, join);  // a residual edge (redundant)
    fork = join;
  }
  return dag;
}

}  // namespace nimble::scheduling::testing
