#include "engines/twin/host_results.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/Storage.h>
#include <c10/util/SmallVector.h>

#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "aten/result_adoption.h"
#include "runtime/allocator.h"
#include "runtime/hal.h"

namespace flagos {
namespace {

// The flagos allocations handed out as CPU memory, by address. ideep allocates through
// raw_allocate, which needs the context to be the data pointer, so the flagos DataPtr
// (whose context is its block) waits here until the CPU side frees or adopt takes it.
//
// While a scope is active they wait in a small per-thread list, without a lock: a kernel's
// results and temporaries are freed or adopted by the thread that runs it, inside the
// scope. What is still there when the outermost scope ends (a result something else
// holds), or does not fit in the list, moves to the shared map, where any thread finds it.
// Should another thread free one while it is in its owner's list (nothing in torch does,
// but nothing forbids it), the address is noted as an orphan and the owner frees the
// block when its scope ends.
struct Pending {
  void* ptr;
  c10::DataPtr flagos;
};
constexpr size_t kLocal = 8;
// Set when this thread's ThreadState is destroyed, at thread exit: other thread_locals'
// destructors (the alias cache's) may still free host results after it. Trivially
// destructible, so it stays readable until the thread is gone.
thread_local bool t_state_gone = false;
// The scope's device and the list in one thread_local (each lookup of one from a shared
// library is a call).
struct ThreadState {
  c10::DeviceIndex device = -1;  // the active scope's device, -1 outside scopes
  c10::SmallVector<Pending, kLocal> local;
  ~ThreadState() { t_state_gone = true; }
};
thread_local ThreadState t_state;

std::mutex g_mutex;
std::unordered_map<void*, c10::DataPtr>& shared() {
  static auto* m = new std::unordered_map<void*, c10::DataPtr>();  // leaked: used at exit
  return *m;
}

// Addresses freed on the CPU side by a thread that did not find them (see above).
std::unordered_set<void*>& orphans() {
  static auto* s = new std::unordered_set<void*>();  // leaked, as shared()
  return *s;
}

void to_shared(Pending&& p) {
  c10::DataPtr released;  // freed after the lock: the flagos allocator takes its own
  std::lock_guard<std::mutex> lock(g_mutex);
  if (orphans().erase(p.ptr)) {
    released = std::move(p.flagos);
  } else {
    shared().emplace(p.ptr, std::move(p.flagos));
  }
}

// `ptr` was freed on the CPU side and is in another thread's list, or was moved from it
// to the shared map since this thread looked.
void free_elsewhere(void* ptr) {
  c10::DataPtr released;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = shared().find(ptr);
  if (it == shared().end()) {
    orphans().insert(ptr);
    return;
  }
  released = std::move(it->second);
  shared().erase(it);
}

c10::Allocator* g_base = nullptr;  // the CPU allocator outside scopes

std::optional<c10::DataPtr> take(void* ptr) {
  if (!t_state_gone) {
    auto& local = t_state.local;
    for (size_t i = local.size(); i-- > 0;) {  // newest first: results are taken soon
      if (local[i].ptr == ptr) {
        c10::DataPtr dp = std::move(local[i].flagos);
        local.erase(local.begin() + i);
        return dp;
      }
    }
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = shared().find(ptr);
  if (it == shared().end()) return std::nullopt;
  c10::DataPtr dp = std::move(it->second);
  shared().erase(it);
  return dp;
}

void delete_host_result(void* ptr) {
  if (!take(ptr)) free_elsewhere(ptr);  // a taken DataPtr frees the block as it goes
}

// The raw deleter serves every raw CPU allocation (ideep's), flagos-backed or not.
void raw_delete(void* ptr) {
  if (take(ptr)) return;
  if (device_of_pointer(ptr)) {
    free_elsewhere(ptr);
  } else {
    g_base->raw_deleter()(ptr);
  }
}

class HostResultsAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    ThreadState& st = t_state;
    if (st.device < 0 || n == 0) return g_base->allocate(n);
    // Kernels also allocate temporaries here (a sum's upcast copy): where flagos memory
    // is short they take CPU memory, as they would without the scope, rather than fail.
    c10::DataPtr flagos = try_allocate_on_device(st.device, n);
    if (!flagos) return g_base->allocate(n);
    void* ptr = flagos.get();
    if (st.local.size() == kLocal) {
      to_shared(std::move(st.local.front()));
      st.local.erase(st.local.begin());
    }
    st.local.push_back(Pending{ptr, std::move(flagos)});
    return c10::DataPtr(ptr, ptr, &delete_host_result, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &raw_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    g_base->copy_data(dest, src, count);
  }
};

}  // namespace

bool install_host_results_allocator() {
  static const bool installed = [] {
    static HostResultsAllocator alloc;
    g_base = c10::GetCPUAllocator();
    // Priority above the default CPU allocator's (0); an allocator registered with a
    // higher one (a profiler's) wins, and results are then copied.
    c10::SetCPUAllocator(&alloc, /*priority=*/1);
    return c10::GetCPUAllocator() == &alloc;
  }();
  return installed;
}

HostResultsOnFlagos::HostResultsOnFlagos(c10::DeviceIndex device) : previous_(t_state.device) {
  t_state.device = device;
}

HostResultsOnFlagos::~HostResultsOnFlagos() {
  ThreadState& st = t_state;
  st.device = previous_;
  if (previous_ >= 0) return;  // an outer scope is still active on this thread
  for (auto& p : st.local) to_shared(std::move(p));
  st.local.clear();
}

std::optional<at::Tensor> adopt_as_flagos(const at::Tensor& t, c10::DeviceIndex device) {
  if (!result_is_adoptable(t)) return std::nullopt;
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  const c10::DataPtr& cpu = impl->data_ptr();
  if (cpu.get_deleter() != &delete_host_result) return std::nullopt;
  auto flagos = take(cpu.get());
  if (!flagos) return std::nullopt;
  // The storage itself becomes flagos storage (its device is its DataPtr's): the CPU
  // DataPtr lets go of the bytes without freeing them, the flagos DataPtr owns them now.
  impl->set_data_ptr(std::move(*flagos)).release_context();
  become_flagos_tensor(t, device);
  return t;
}

}  // namespace flagos
