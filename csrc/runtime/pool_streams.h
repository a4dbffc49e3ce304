#pragma once
// Which streams a graph backend issues its plan on: torch's pool streams, never streams of
// its own. Pool streams live as long as the process. A tensor the caching allocator saw used
// on a stream (recordStream) may outlive the executor that used it, and freeing it records
// an event on that stream: on a stream the executor had destroyed, the process aborted in
// ~TensorImpl (issue 45). The pool hands its streams out round-robin to everyone in the
// process, so draws may repeat; repeats are skipped so that the plan's streams run side by
// side. Torch-free, so that the choice is tested without a device.
#include <algorithm>
#include <vector>

namespace nimble {

// `count` streams from `take(stream_index)`, each unlike the ones before it when the pool
// gives one within `pool_size` draws; else the last draw is kept (still correct: one stream
// runs its ops in the plan's topological issue order, it only loses concurrency).
template <typename Stream, typename Take>
std::vector<Stream> take_distinct_streams(int count, int pool_size, const Take& take) {
  std::vector<Stream> streams;
  streams.reserve(static_cast<size_t>(std::max(count, 0)));
  for (int s = 0; s < count; ++s) {
    Stream stream = take(s);
    for (int draw = 1;
         draw < pool_size && std::find(streams.begin(), streams.end(), stream) != streams.end();
         ++draw)
      stream = take(s);
    streams.push_back(stream);
  }
  return streams;
}

}  // namespace nimble
