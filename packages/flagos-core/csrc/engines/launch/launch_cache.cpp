#include "engines/launch/launch_cache.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "runtime/allocator.h"
#include "runtime/hal.h"
#include "runtime/stream.h"
#include "runtime/twin.h"

namespace flagos {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "parameters narrower than 8 bytes are passed as the low bytes of a 64-bit slot");

constexpr size_t kMaxParams = 64;
constexpr size_t kMaxLaunches = 16;  // of one call

// ---- keys ------------------------------------------------------------------------------

struct Key {
  c10::SmallVector<int64_t, 48> words;
  size_t hash = 0;
  bool operator==(const Key& o) const {
    return hash == o.hash && words.size() == o.words.size() &&
           std::memcmp(words.data(), o.words.data(), words.size() * sizeof(int64_t)) == 0;
  }
};
struct KeyHash {
  size_t operator()(const Key& k) const { return k.hash; }
};

enum Tag : int64_t { kNone = -1, kTensor = -2, kInt = -3, kDouble = -4, kBool = -5, kInts = -6,
                     kUndefined = -7, kString = -8, kTensors = -9 };

bool key_tensor(const at::Tensor& t, Key& k) {
  if (!t.defined()) {
    k.words.push_back(kUndefined);
    return true;
  }
  if (t.layout() != c10::kStrided || t.is_conj() || t.is_neg() || t.is_nested()) return false;
  k.words.push_back(kTensor);
  k.words.push_back(static_cast<int64_t>(t.scalar_type()));
  k.words.push_back(static_cast<int64_t>(t.device().type()) << 8 | (t.device().index() & 0xff));
  k.words.push_back(t.dim());
  for (int64_t s : t.sizes()) k.words.push_back(s);
  for (int64_t s : t.strides()) k.words.push_back(s);
  // what Triton specializes a pointer on: its 16-byte alignment
  k.words.push_back(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0);
  return true;
}

// The call's key, from its `n` arguments at the top of `stack`; false where an argument is
// of a kind not keyed (the call then always runs the Python kernel).
bool make_key(const torch::jit::Stack& stack, size_t n, Key& k) {
  for (size_t i = stack.size() - n; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      if (!key_tensor(v.toTensor(), k)) return false;
    } else if (v.isNone()) {
      k.words.push_back(kNone);
    } else if (v.isInt()) {
      k.words.push_back(kInt);
      k.words.push_back(v.toInt());
    } else if (v.isBool()) {
      k.words.push_back(kBool);
      k.words.push_back(v.toBool());
    } else if (v.isDouble()) {
      double d = v.toDouble();
      int64_t bits;
      std::memcpy(&bits, &d, sizeof bits);
      k.words.push_back(kDouble);
      k.words.push_back(bits);
    } else if (v.isIntList()) {
      auto list = v.toIntList();
      k.words.push_back(kInts);
      k.words.push_back(static_cast<int64_t>(list.size()));
      for (int64_t x : list) k.words.push_back(x);
    } else if (v.isTensorList()) {  // cat's, stack's inputs: each element keyed
      auto list = v.toTensorList();
      k.words.push_back(kTensors);
      k.words.push_back(static_cast<int64_t>(list.size()));
      for (const at::Tensor& t : list)
        if (!key_tensor(t, k)) return false;
    } else if (v.isString()) {  // a mode ("tanh", "mean"): its bytes, 8 a word
      const std::string& str = v.toStringRef();
      k.words.push_back(kString);
      k.words.push_back(static_cast<int64_t>(str.size()));
      for (size_t at = 0; at < str.size(); at += sizeof(int64_t)) {
        int64_t word = 0;
        std::memcpy(&word, str.data() + at, std::min(sizeof(int64_t), str.size() - at));
        k.words.push_back(word);
      }
    } else {
      return false;
    }
  }
  size_t h = k.words.size();
  for (int64_t w : k.words) h ^= std::hash<int64_t>()(w) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  k.hash = h;
  return true;
}

// ---- kept launches ---------------------------------------------------------------------

struct Result {
  std::vector<int64_t> sizes, strides;
  c10::ScalarType dtype;
  c10::Device device;
  bool aligned;  // its pointer was 16-byte aligned (what Triton specialized the kernel on)
};

struct Param {
  enum Kind : uint8_t { kArgPointer, kListPointer, kResultPointer, kTempPointer, kValue } kind;
  uint32_t index;  // argument, result or temporary; a value's size in bytes
  // kValue: the value; kTempPointer: the offset into the temporary; kListPointer: the
  // element of the argument (a list of tensors)
  uint64_t bits;
  // a pointer that is a tensor descriptor's base: the descriptor is passed, encoded anew
  std::shared_ptr<const flagos_tensor_descriptor_info_t> descriptor = nullptr;
};

// One kernel launch of a kept call.
struct KernelRun {
  KernelLaunch hal_kernel;
  PyObjectRef keepalive;
  std::vector<Param> params;
};

// A kept call: its results and temporaries made as recorded, then its launches in order.
struct Launch {
  c10::Device device{c10::kCPU};
  std::vector<Result> results;
  std::vector<size_t> temporaries;  // bytes of each (flagos memory, freed after the launches)
  std::vector<KernelRun> runs;
};

// What record_hal_launch was given, resolved into a Launch once the Python kernel returns,
// and the device memory the kernel allocated meanwhile.
struct RecordedLaunch {
  KernelLaunch hal_kernel;
  PyObjectRef keepalive;
  std::vector<LaunchParam> params;
};
struct Recorded {
  const char* not_kept = nullptr;  // why some of the kernel's work could not be kept
  std::vector<RecordedLaunch> launches;
  AllocationLog allocations;
};
thread_local Recorded* recording = nullptr;

// Why a recorded call was not kept (launch_cache_not_kept), the first reason each call met.
constexpr const char* kDeviceWork =
    "device work besides its launches (an ATen op that computes, a copy or a fill)";
constexpr const char* kTooManyLaunches = "more launches than a call keeps (16)";
constexpr const char* kTooManyParams = "a launch with more parameters than a kept launch takes";
constexpr const char* kOtherStream = "a launch on another stream than the current one";
constexpr const char* kNested = "another launch-cached op ran inside it";
constexpr const char* kNoLaunches = "no launch through the HAL";
constexpr const char* kResultNotFresh =
    "a result that is no fresh tensor (a view, an argument's memory, a larger buffer)";
constexpr const char* kNoResults = "no tensor result";
constexpr const char* kOtherDevice = "a kernel of another device than its results'";
constexpr const char* kUnknownPointer =
    "a pointer to memory that is no argument, result or temporary of the call";
constexpr const char* kAmbiguousPointer = "a pointer to the memory of two of its tensors";
constexpr const char* kUnalignedTemporary = "a temporary not 16-byte aligned";
constexpr const char* kDescriptor = "a tensor descriptor without a base pointer";

std::mutex not_kept_mutex;
std::map<std::string, int64_t>& not_kept_counts() {
  static auto* counts = new std::map<std::string, int64_t>();
  return *counts;
}
void count_not_kept(const char* why) {
  std::lock_guard<std::mutex> lock(not_kept_mutex);
  ++not_kept_counts()[why];
}

void spoil(Recorded* rec, const char* why) {
  if (rec && !rec->not_kept) rec->not_kept = why;
}

}  // namespace

// The kept launches of one op's calls, by key.
struct LaunchTable {
  std::shared_mutex mutex;
  std::unordered_map<Key, std::shared_ptr<const Launch>, KeyHash> launches;
};

namespace {

struct CachedOp {
  CachedOp(c10::OperatorHandle op, c10::DispatchKey key, PyObjectRef kernel)
      : op(std::move(op)), key(key), kernel(std::move(kernel)) {}
  c10::OperatorHandle op;
  c10::DispatchKey key;
  PyObjectRef kernel;
  LaunchTable table;
  std::unique_ptr<torch::Library> library;  // its registration in the op's place
};

// Every table, for clear_launch_cache (the registered ops' and the providers').
std::mutex tables_mutex;
std::vector<std::weak_ptr<LaunchTable>>& provider_tables() {
  static auto* tables = new std::vector<std::weak_ptr<LaunchTable>>();
  return *tables;
}

std::mutex registry_mutex;
std::vector<std::unique_ptr<CachedOp>>& registry() {
  static auto* ops = new std::vector<std::unique_ptr<CachedOp>>();
  return *ops;
}

std::atomic<bool> enabled{[] {
  const char* env = std::getenv("FLAGOS_LAUNCH_CACHE");
  return !(env && std::strcmp(env, "0") == 0);
}()};
std::atomic<int64_t> n_relaunched{0}, n_python{0}, n_kept{0}, n_unkeyed{0};

// Whether a kernel loaded on flagos:`hal_device` may run now for a call whose results are on
// `device`: flagos:`hal_device` itself, or its twin (an op registered for the twin's key,
// run on twin views of flagos memory) while the twin's current stream is the flagos
// device's current one (c10 names an external stream by its native handle, as
// TwinStreamGuard makes it current), so that the launch is ordered as the twin's own.
bool launchable_for(c10::Device device, c10::DeviceIndex hal_device) {
  if (device.type() == c10::DeviceType::PrivateUse1) return device.index() == hal_device;
  auto twin = device_twin(hal_device);
  if (!twin || *twin != device) return false;
  const auto* flagos_impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1);
  auto handle = reinterpret_cast<intptr_t>(flagos_impl->getStreamNativeHandle(current_stream(hal_device)));
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device).id() ==
         static_cast<c10::StreamId>(handle);
}

// The recorded launches' parameters resolved against one call: argument, result and
// temporary pointers; nullopt with `why` set where they cannot be kept.
std::optional<Launch> resolve(const Recorded& rec, const std::vector<c10::IValue>& args,
                              const torch::jit::Stack& stack, size_t num_results, const char*& why) {
  Launch l;
  std::vector<at::Tensor> results;
  for (size_t i = stack.size() - num_results; i < stack.size(); ++i) {
    if (!stack[i].isTensor()) return why = kNoResults, std::nullopt;
    const at::Tensor& r = stack[i].toTensor();
    if (!r.defined() || r.layout() != c10::kStrided || r.storage_offset() != 0 || r.is_conj() ||
        r.is_neg())
      return why = kResultNotFresh, std::nullopt;
    // made as empty_strided makes it: no larger buffer the kernel might address
    if (r.storage().nbytes() != at::detail::computeStorageNbytes(r.sizes(), r.strides(), r.itemsize()))
      return why = kResultNotFresh, std::nullopt;
    auto aliases = [&](const at::Tensor& a) { return a.defined() && a.is_alias_of(r); };
    for (const auto& a : args) {  // a fresh result, not one of the arguments' memory
      if (a.isTensor() && aliases(a.toTensor())) return why = kResultNotFresh, std::nullopt;
      if (a.isTensorList())
        for (const at::Tensor& t : a.toTensorList())
          if (aliases(t)) return why = kResultNotFresh, std::nullopt;
    }
    results.push_back(r);
    l.results.push_back({r.sizes().vec(), r.strides().vec(), r.scalar_type(), r.device(),
                         reinterpret_cast<uintptr_t>(r.data_ptr()) % 16 == 0});
  }
  if (results.empty()) return why = kNoResults, std::nullopt;
  l.device = results.front().device();
  // Temporaries: what the kernel allocated on the device that is no result. Only on flagos
  // tensors, where all of a kernel's device memory comes from the flagos allocator.
  const bool on_flagos = l.device.type() == c10::DeviceType::PrivateUse1;
  std::vector<std::pair<uintptr_t, size_t>> temporaries;
  for (const auto& block : rec.allocations.blocks) {
    bool result = false;
    for (const auto& r : results)
      result = result || reinterpret_cast<uintptr_t>(r.storage().data()) == block.ptr;
    // one on another device would be made on the results' at a relaunch: not a temporary
    if (on_flagos && !result && block.device == l.device.index())
      temporaries.emplace_back(block.ptr, block.bytes);
  }
  std::vector<int64_t> temporary_index(temporaries.size(), -1);
  for (const RecordedLaunch& rl : rec.launches) {
    KernelRun run;
    run.hal_kernel = rl.hal_kernel;
    run.keepalive = rl.keepalive;
    // a HAL kernel belongs to the device its module was loaded on
    if (!launchable_for(l.device, rl.hal_kernel.device)) return why = kOtherDevice, std::nullopt;
    for (const LaunchParam& p : rl.params) {
      if (p.descriptor && p.bits == 0) return why = kDescriptor, std::nullopt;
      if (!p.pointer || p.bits == 0) {
        run.params.push_back({Param::kValue, p.bytes, p.bits});
        continue;
      }
      std::optional<Param> source;
      int matches = 0;
      auto match = [&](const at::Tensor& t, Param::Kind kind, uint32_t index, uint64_t element) {
        if (t.defined() && reinterpret_cast<uintptr_t>(t.data_ptr()) == p.bits) {
          ++matches;
          source = Param{kind, index, element};
        }
      };
      for (size_t i = 0; i < args.size(); ++i) {
        if (args[i].isTensor()) match(args[i].toTensor(), Param::kArgPointer, uint32_t(i), 0);
        if (args[i].isTensorList()) {
          auto list = args[i].toTensorList();
          for (size_t j = 0; j < list.size(); ++j)
            match(list.get(j), Param::kListPointer, uint32_t(i), j);
        }
      }
      for (size_t i = 0; i < results.size(); ++i) match(results[i], Param::kResultPointer, uint32_t(i), 0);
      if (matches == 0 && on_flagos) {
        // inside one temporary (not two: a block freed and taken again within the call)
        for (size_t t = 0; t < temporaries.size(); ++t) {
          auto [ptr, bytes] = temporaries[t];
          if (p.bits < ptr || p.bits >= ptr + std::max<size_t>(bytes, 1)) continue;
          // a relaunch's block may align differently
          if (ptr % 16) return why = kUnalignedTemporary, std::nullopt;
          ++matches;
          if (temporary_index[t] < 0) {
            temporary_index[t] = static_cast<int64_t>(l.temporaries.size());
            l.temporaries.push_back(bytes);
          }
          source = Param{Param::kTempPointer, uint32_t(temporary_index[t]), p.bits - ptr};
        }
      }
      if (matches != 1) return why = matches ? kAmbiguousPointer : kUnknownPointer, std::nullopt;
      source->descriptor = p.descriptor;
      run.params.push_back(*source);
    }
    l.runs.push_back(std::move(run));
  }
  return l;
}

enum class Relaunch { kDone, kNotNow, kFailed };

// Runs the kept launches for the call at the top of `stack`: results and temporaries made,
// kernels launched in order, arguments replaced by the results. Otherwise the stack is
// untouched: kNotNow where they cannot run now, kFailed (with the driver's error in
// `error`) where a launch failed (the results, fresh memory, are dropped; arguments are
// never written).
Relaunch relaunch(const Launch& l, torch::jit::Stack* stack, size_t num_args, std::string& error) {
  for (const KernelRun& run : l.runs)
    if (!launchable_for(l.device, run.hal_kernel.device) || run.params.size() > kMaxParams)
      return Relaunch::kNotNow;
  c10::DeviceGuard guard(l.device);
  std::vector<at::Tensor> results;
  results.reserve(l.results.size());
  for (const Result& r : l.results) {
    results.push_back(at::empty_strided(r.sizes, r.strides, at::TensorOptions().dtype(r.dtype).device(r.device)));
    if (r.aligned && reinterpret_cast<uintptr_t>(results.back().data_ptr()) % 16)
      return Relaunch::kNotNow;  // the kernel was specialized on an aligned result
  }
  // Freed when this returns, after the launches are queued on the current stream: the
  // allocator gives their blocks again only to work queued after them on that stream.
  c10::SmallVector<c10::DataPtr, 4> temporaries;
  for (size_t bytes : l.temporaries) {
    temporaries.push_back(allocate_on_device(l.device.index(), bytes));
    if (reinterpret_cast<uintptr_t>(temporaries.back().get()) % 16) return Relaunch::kNotNow;
  }
  const size_t base = stack->size() - num_args;
  std::vector<TensorDescriptorBytes> descriptors;  // aligned new: a SmallVector grows with malloc
  for (const KernelRun& run : l.runs) {
    uint64_t values[kMaxParams];
    void* ptrs[kMaxParams];
    size_t sizes[kMaxParams];
    size_t n_descriptors = 0;
    for (const Param& p : run.params) n_descriptors += p.descriptor != nullptr;
    descriptors.clear();
    descriptors.reserve(n_descriptors);  // not moved while ptrs point into it
    for (size_t i = 0; i < run.params.size(); ++i) {
      const Param& p = run.params[i];
      sizes[i] = sizeof(void*);
      switch (p.kind) {
        case Param::kArgPointer:
          values[i] = reinterpret_cast<uintptr_t>((*stack)[base + p.index].toTensor().data_ptr());
          break;
        case Param::kListPointer:
          values[i] = reinterpret_cast<uintptr_t>(
              (*stack)[base + p.index].toTensorList().get(p.bits).data_ptr());
          break;
        case Param::kResultPointer:
          values[i] = reinterpret_cast<uintptr_t>(results[p.index].data_ptr());
          break;
        case Param::kTempPointer:
          values[i] = reinterpret_cast<uintptr_t>(temporaries[p.index].get()) + p.bits;
          break;
        case Param::kValue:
          values[i] = p.bits;
          sizes[i] = p.index;  // a value's size in bytes
          break;
      }
      ptrs[i] = &values[i];
      if (p.descriptor) {
        flagos_tensor_descriptor_info_t info = *p.descriptor;
        info.base = values[i];
        TensorDescriptorBytes& bytes = descriptors.emplace_back();
        if (encode_tensor_descriptor(run.hal_kernel.device, info, bytes, &sizes[i], &error) != FLAGOS_SUCCESS)
          return Relaunch::kFailed;
        ptrs[i] = bytes.bytes;
      }
    }
    if (launch_kernel(run.hal_kernel, current_stream(run.hal_kernel.device), ptrs, sizes,
                      static_cast<int>(run.params.size()), &error) != FLAGOS_SUCCESS)
      return Relaunch::kFailed;
  }
  torch::jit::drop(*stack, num_args);
  for (auto& r : results) stack->emplace_back(std::move(r));
  return Relaunch::kDone;
}

// ---- the kernel ------------------------------------------------------------------------

// Device work of a cached op inside another's Python kernel (its own recorded or kept
// launches): the enclosing kernel's recorded launches would not be its whole work.
void invalidate_enclosing_recording() { spoil(recording, kNested); }

// Closes this thread's recording on scope exit, restoring an enclosing one (a cached op
// called from another's Python kernel records its own launch, and the enclosing one is
// then not kept). A call that cannot be kept (not keyed, or the cache disabled) records
// nothing: recording watches its Python kernel for device work and describes each launch.
struct RecordingScope {
  Recorded rec;
  Recorded* previous;
  AllocationLog* previous_log;
  explicit RecordingScope(bool keep)
      : previous(recording), previous_log(set_allocation_log(keep ? &rec.allocations : nullptr)) {
    recording = keep ? &rec : nullptr;
  }
  ~RecordingScope() {
    recording = previous;
    set_allocation_log(previous_log);
    invalidate_enclosing_recording();
  }
};

}  // namespace

bool run_launch_cached(LaunchTable& table, const c10::OperatorHandle& op, torch::jit::Stack* stack,
                       c10::function_ref<bool()> python) {
  const size_t num_args = op.schema().arguments().size();
  const size_t num_results = op.schema().returns().size();
  Key key;
  bool keyed = enabled.load(std::memory_order_relaxed) && make_key(*stack, num_args, key);
  if (keyed) {
    std::shared_ptr<const Launch> kept;
    {
      std::shared_lock<std::shared_mutex> lock(table.mutex);
      auto it = table.launches.find(key);
      if (it != table.launches.end()) kept = it->second;
    }
    if (kept) {
      std::string error;
      switch (relaunch(*kept, stack, num_args, error)) {
        case Relaunch::kDone:
          invalidate_enclosing_recording();
          n_relaunched.fetch_add(1, std::memory_order_relaxed);
          return true;
        case Relaunch::kFailed: {  // dropped; the Python kernel runs (and reports)
          TORCH_WARN("flagos launch cache: a kept launch of ", op.operator_name(),
                     " failed (", error, "); dropped, the call runs its Python kernel");
          std::shared_ptr<const Launch> dropped;
          {
            std::unique_lock<std::shared_mutex> lock(table.mutex);
            auto it = table.launches.find(key);
            if (it != table.launches.end() && it->second == kept) {
              dropped = std::move(it->second);
              table.launches.erase(it);
            }
          }
          break;
        }
        case Relaunch::kNotNow:
          break;
      }
    }
  } else if (enabled.load(std::memory_order_relaxed)) {
    n_unkeyed.fetch_add(1, std::memory_order_relaxed);
  }
  n_python.fetch_add(1, std::memory_order_relaxed);
  std::vector<c10::IValue> args;
  if (keyed) args.assign(stack->end() - num_args, stack->end());
  RecordingScope scope(keyed);
  if (!python()) return false;
  if (!keyed) return true;
  const char* why = scope.rec.not_kept;
  if (!why && scope.rec.launches.empty()) why = kNoLaunches;
  std::optional<Launch> l;
  if (!why) l = resolve(scope.rec, args, *stack, num_results, why);
  if (!l) {
    count_not_kept(why);
    return true;
  }
  // Made and (if another thread kept one first) destroyed outside the lock: a Python
  // reference is released with the GIL, which a thread waiting on the lock may hold.
  std::shared_ptr<const Launch> made = std::make_shared<const Launch>(std::move(*l));
  bool inserted;
  {
    std::unique_lock<std::shared_mutex> lock(table.mutex);
    inserted = table.launches.try_emplace(std::move(key), made).second;
  }
  if (inserted) n_kept.fetch_add(1, std::memory_order_relaxed);
  return true;
}

ProviderLaunches::ProviderLaunches(const std::vector<std::string>& ops) {
  for (const auto& name : ops) {
    auto dot = name.find('.', name.find("::"));
    c10::OperatorName op(name.substr(0, dot), dot == std::string::npos ? "" : name.substr(dot + 1));
    auto table = std::make_shared<LaunchTable>();
    {
      std::lock_guard<std::mutex> lock(tables_mutex);
      provider_tables().push_back(table);
    }
    tables_.emplace(std::move(op), std::move(table));
  }
}

LaunchTable* ProviderLaunches::table(const c10::OperatorHandle& op) const {
  auto it = tables_.find(op.operator_name());
  return it == tables_.end() ? nullptr : it->second.get();
}

namespace {

void cached_kernel(CachedOp* entry, const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  bool ran = run_launch_cached(entry->table, op, stack, [&] {
    return call_python_op_kernel(entry->kernel, op, stack);
  });
  TORCH_CHECK(ran, "flagos launch cache: the kernel of ", op.operator_name(), " declined the call");
}

// The boxed kernel registered in the op's place, bound to its entry.
struct CachedKernel final : c10::OperatorKernel {
  explicit CachedKernel(CachedOp* entry) : entry(entry) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    cached_kernel(entry, op, stack);
  }
  CachedOp* entry;
};

}  // namespace

void register_launch_cached_op(const std::string& op, const std::string& dispatch_key,
                               const PyObjectRef& kernel) {
  auto dot = op.find('.', op.find("::"));
  std::string name = op.substr(0, dot), overload = dot == std::string::npos ? "" : op.substr(dot + 1);
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
  c10::DispatchKey key = c10::parseDispatchKey(dispatch_key);
  TORCH_CHECK(key == c10::DispatchKey::PrivateUse1 || key == c10::DispatchKey::CUDA,
              "flagos launch cache: launches on ", dispatch_key,
              " are not supported (PrivateUse1, or CUDA: a twin with streams)");
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (auto& e : registry())
    TORCH_CHECK(!(e->op == handle && e->key == key), "flagos launch cache: ", op,
                " is registered for ", dispatch_key, " already");
  registry().push_back(std::make_unique<CachedOp>(handle, key, kernel));
  CachedOp* entry = registry().back().get();
  auto ns = name.substr(0, name.find("::"));
  entry->library = std::make_unique<torch::Library>(torch::Library::IMPL, ns, key, __FILE__, __LINE__);
  entry->library->impl(op.substr(op.find("::") + 2).c_str(),
                       torch::CppFunction::makeFromBoxedFunctor(std::make_unique<CachedKernel>(entry)));
}

bool record_hal_launch(const KernelLaunch& launch, std::vector<LaunchParam> params,
                       const PyObjectRef& keepalive, bool on_current_stream) {
  Recorded* rec = recording;
  if (!rec) return false;
  const char* why = rec->launches.size() >= kMaxLaunches ? kTooManyLaunches
                    : params.size() > kMaxParams            ? kTooManyParams
                    : !on_current_stream                    ? kOtherStream
                                                            : nullptr;
  if (why) {
    spoil(rec, why);
    return true;
  }
  RecordedLaunch& l = rec->launches.emplace_back();
  l.hal_kernel = launch;
  l.params = std::move(params);
  l.keepalive = keepalive;
  return true;
}

bool launch_recording() { return recording != nullptr; }

c10::DeviceIndex hal_device_for(c10::Device device) {
  if (device.type() == c10::DeviceType::PrivateUse1) return device.index();
  for (c10::DeviceIndex i = 0; i < device_count(); ++i)
    if (launchable_for(device, i)) return i;
  return -1;
}

void spoil_launch_recording(const char* why) { spoil(recording, why ? why : kDeviceWork); }

std::vector<std::pair<std::string, int64_t>> launch_cache_not_kept() {
  std::lock_guard<std::mutex> lock(not_kept_mutex);
  return {not_kept_counts().begin(), not_kept_counts().end()};
}

std::vector<LaunchParam> launch_params(const std::vector<std::tuple<bool, int, uint64_t>>& params) {
  std::vector<LaunchParam> out;
  out.reserve(params.size());
  for (const auto& [pointer, bytes, bits] : params) {
    TORCH_CHECK(bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8,
                "flagos: a launch parameter of ", bytes, " bytes (1, 2, 4 or 8)");
    out.push_back({pointer, static_cast<uint8_t>(bytes), bits});
  }
  return out;
}

LaunchCacheStats launch_cache_stats() {
  return {n_relaunched.load(), n_python.load(), n_kept.load(), n_unkeyed.load()};
}

void clear_launch_cache() {
  // The kept launches are destroyed after the locks are released (see run_launch_cached).
  std::vector<std::unordered_map<Key, std::shared_ptr<const Launch>, KeyHash>> dropped;
  auto drop = [&](LaunchTable& t) {
    std::unique_lock<std::shared_mutex> l(t.mutex);
    dropped.emplace_back().swap(t.launches);
  };
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    for (auto& e : registry()) drop(e->table);
  }
  std::lock_guard<std::mutex> lock(tables_mutex);
  auto& tables = provider_tables();
  for (auto it = tables.begin(); it != tables.end();) {
    if (auto t = it->lock()) {
      drop(*t);
      ++it;
    } else {
      it = tables.erase(it);
    }
  }
}

void set_launch_cache_enabled(bool on) { enabled.store(on); }
bool launch_cache_enabled() { return enabled.load(); }

}  // namespace flagos
