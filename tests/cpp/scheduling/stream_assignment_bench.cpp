// Time to compute a schedule (stream assignment + folding) for large random layered
// DAGs, with the breakdown and both matchings. Usage: stream_assignment_bench [runs]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "random_dags.h"
#include "csrc/scheduling/bipartite_matching.h"
#include "csrc/scheduling/stream_assignment.h"
#include "csrc/scheduling/transitive_reduction.h"

using namespace nimble::scheduling;

namespace {

double median_ms(int runs, const std::function<void()>& f) {
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 5;
  std::printf("%8s %8s %8s | %10s %10s %10s %10s | %12s\n", "ops", "edges", "meg", "reduce_ms",
              "match_ms", "fold_ms", "total_ms", "boost_match");
  for (int n : {1000, 10000, 50000}) {
    std::mt19937 rng(n);
    const Dag dag = testing::random_layered(n, 16, rng);
    const auto meg = transitive_reduction(dag);
    const double reduce = median_ms(runs, [&] { transitive_reduction(dag); });
    const double match = median_ms(runs, [&] { maximum_bipartite_matching(n, n, meg); });
    const StreamAssignment a = assign_streams(dag);
    const double fold = median_ms(runs, [&] { fold_streams(dag, a, 2); });
    const double total = median_ms(runs, [&] { fold_streams(dag, assign_streams(dag), 2); });
    char boost[32] = "skipped";
    if (n <= 10000) {
      std::snprintf(boost, sizeof boost, "%.1f ms", median_ms(std::max(1, runs / 2), [&] {
                      maximum_bipartite_matching_boost(n, n, meg);
                    }));
    }
    std::printf("%8d %8zu %8zu | %10.2f %10.2f %10.2f %10.2f | %12s\n", n, dag.edges.size(),
                meg.size(), reduce, match, fold, total, boost);
  }
  return 0;
}
