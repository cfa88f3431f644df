#include "capture/twin_allocator_hooks.h"

#include <mutex>

namespace flagos {
namespace capture {
namespace {

std::mutex g_mutex;
TwinAllocatorHooks& hooks() {
  static auto* h = new TwinAllocatorHooks();  // never destroyed: may hold Python callables
  return *h;
}

template <class Member>
void call(Member member, c10::DeviceIndex device, c10::MempoolId_t pool) {
  std::function<void(c10::DeviceIndex, c10::MempoolId_t)> f;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    f = hooks().*member;
  }
  if (f) f(device, pool);
}

}  // namespace

void set_twin_allocator_hooks(TwinAllocatorHooks h) {
  std::lock_guard<std::mutex> lock(g_mutex);
  hooks() = std::move(h);
}

void twin_begin_allocate(c10::DeviceIndex device, c10::MempoolId_t pool) {
  call(&TwinAllocatorHooks::begin_allocate, device, pool);
}
void twin_end_allocate(c10::DeviceIndex device, c10::MempoolId_t pool) {
  call(&TwinAllocatorHooks::end_allocate, device, pool);
}
void twin_release(c10::DeviceIndex device, c10::MempoolId_t pool) {
  call(&TwinAllocatorHooks::release, device, pool);
}

}  // namespace capture
}  // namespace flagos
