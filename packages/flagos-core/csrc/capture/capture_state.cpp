#include "capture/capture_state.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "runtime/stream.h"

namespace flagos {
namespace capture {

namespace detail {
std::atomic<int> g_underway{0};
}  // namespace detail

namespace {
std::mutex g_mutex;
std::vector<c10::Stream>& capturing_streams() {
  static auto* streams = new std::vector<c10::Stream>();  // leaked: ops may run at exit
  return *streams;
}
std::vector<std::pair<c10::Stream, c10::DataPtr>>& kept() {
  static auto* kept = new std::vector<std::pair<c10::Stream, c10::DataPtr>>();
  return *kept;
}
}  // namespace

void begin(const c10::Stream& stream) {
  std::lock_guard<std::mutex> lock(g_mutex);
  capturing_streams().push_back(stream);
  detail::g_underway.fetch_add(1, std::memory_order_relaxed);
}

void end(const c10::Stream& stream) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& streams = capturing_streams();
  auto it = std::find(streams.begin(), streams.end(), stream);
  if (it == streams.end()) return;
  streams.erase(it);
  detail::g_underway.fetch_sub(1, std::memory_order_relaxed);
}

void keep_alive(const c10::Stream& stream, c10::DataPtr&& memory) {
  std::lock_guard<std::mutex> lock(g_mutex);
  kept().emplace_back(stream, std::move(memory));
}

std::vector<c10::DataPtr> take_kept(const c10::Stream& stream) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<c10::DataPtr> out;
  auto& all = kept();
  for (auto it = all.begin(); it != all.end();) {
    if (it->first == stream) {
      out.push_back(std::move(it->second));
      it = all.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

bool detail::is_capturing_slow(const c10::Stream& stream) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto& streams = capturing_streams();
  return std::find(streams.begin(), streams.end(), stream) != streams.end();
}

bool detail::current_stream_capturing_slow(c10::DeviceIndex device) {
  return is_capturing_slow(current_stream(device));
}

bool detail::device_capturing_slow(c10::DeviceIndex device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto& streams = capturing_streams();
  return std::any_of(streams.begin(), streams.end(),
                     [&](const c10::Stream& s) { return s.device_index() == device; });
}

void refuse(const std::string& what, c10::DeviceIndex device) {
  TORCH_CHECK(false, "flagos: ", what, " cannot be captured: the current stream of flagos:",
              int(device), " is capturing a graph, and a graph replays only work queued on "
              "the stream. Run it before or after the capture, or route the op to a "
              "capture-safe provider (flagos.routing.explain(op) says which are).");
}

}  // namespace capture
}  // namespace flagos
