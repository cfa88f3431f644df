// flagos_ops_native._engine: the `native` provider's engine. Python reads the manifests
// and binds ops here (open_library, bind); the flagos dispatcher then calls run() for
// every op whose chain reaches `native`, in C++, without the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <ATen/ops/add.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "binding.h"
#include "flagos/provider_engine.h"

namespace py = pybind11;

namespace flagos_native {
namespace {

struct Table {
  std::shared_mutex mu;
  std::vector<std::shared_ptr<Library>> libraries;
  // "aten::add.out" -> its bindings, in the order the manifests were bound: a call tries
  // them in turn (a library declining a call hands it to the next one, then to the next
  // provider of the chain).
  std::unordered_map<std::string, std::vector<std::shared_ptr<const Binding>>> by_name;
  // Forms made at first call; bindings are kept alive by `retired` after a clear().
  using Forms = std::vector<Form>;
  std::unordered_map<const c10::OperatorName*, std::unique_ptr<Forms>> forms;
  std::vector<std::shared_ptr<const Binding>> retired;
  uint64_t generation = 1;
};
Table& table() {
  static auto* t = new Table;  // leaked: queued kernels may outlive static destruction
  return *t;
}

std::string full_name(const c10::OperatorHandle& op) {
  const auto& n = op.operator_name();
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

// The forms of `op` (one per binding), or nullptr when nothing is bound to it. A per-thread cache in front of
// the table keeps the lock off the hot path; clear() bumps the generation to drop it.
const Table::Forms* forms_of(const c10::OperatorHandle& op) {
  const c10::OperatorName* key = &op.operator_name();
  struct Entry {
    const c10::OperatorName* key = nullptr;
    const Table::Forms* form = nullptr;
    uint64_t generation = 0;
  };
  thread_local std::array<Entry, 64> cache{};
  Table& t = table();
  auto& e = cache[(reinterpret_cast<uintptr_t>(key) >> 4) % cache.size()];
  uint64_t gen = __atomic_load_n(&t.generation, __ATOMIC_ACQUIRE);
  if (e.key == key && e.generation == gen) return e.form;
  const Table::Forms* form = nullptr;
  {
    std::unique_lock<std::shared_mutex> lock(t.mu);
    auto it = t.forms.find(key);
    if (it != t.forms.end()) {
      form = it->second.get();
    } else {
      auto b = t.by_name.find(full_name(op));
      if (b != t.by_name.end()) {
        auto f = std::make_unique<Table::Forms>();
        for (const auto& binding : b->second) f->push_back(make_form(op, binding.get()));
        form = f.get();
        t.forms[key] = std::move(f);
      } else {
        t.forms[key] = nullptr;
      }
    }
    gen = t.generation;
  }
  e = {key, form, gen};
  return form;
}

bool run(void*, const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex device) {
  const Table::Forms* forms = forms_of(op);
  if (!forms) return false;
  // A vendor library works on the current device (cuBLAS makes its handle there): the
  // call's, whichever flagos device the thread had current. Set and put back only when it
  // differs (a guard would set the device again on exit at every call).
  struct OnDevice {
    const c10::impl::DeviceGuardImplInterface* impl =
        c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1);
    c10::Device call, was;
    explicit OnDevice(c10::DeviceIndex d)
        : call(c10::DeviceType::PrivateUse1, d), was(impl->exchangeDevice(call)) {}
    ~OnDevice() {
      if (was != call) impl->uncheckedSetDevice(was);
    }
  } on_device(device);
  for (const Form& form : *forms) {
    if (run_convention(form, op, stack, device)) return true;
  }
  return false;
}

// Drops the forms (they are made again at next call); a call on another thread may be
// using one, so they are kept, as are replaced bindings. Under table().mu.
void retire_forms_locked() {
  static auto* old_forms = new std::vector<std::unique_ptr<Table::Forms>>();
  for (auto& kv : table().forms) {
    if (kv.second) old_forms->push_back(std::move(kv.second));
  }
  table().forms.clear();
}

flagos_provider_engine_t g_engine{sizeof(flagos_provider_engine_t), FLAGOS_PROVIDER_ENGINE_VERSION,
                                  &run, nullptr};

// Opens a library; returns its index for bind().
int open(const std::string& path, const std::string& version_symbol, uint32_t min_version,
         uint32_t max_version, const std::string& error_symbol, const std::string& version_style) {
  auto lib = open_library(path, version_symbol, min_version, max_version, error_symbol,
                          version_style);
  std::unique_lock<std::shared_mutex> lock(table().mu);
  table().libraries.push_back(lib);
  return int(table().libraries.size() - 1);
}

// Binds `ops` (full overload names) to `convention` with, per dtype code (0 float32,
// 1 float16, 2 bfloat16, 3 int64, 4 int32, 6 float64), the plan and execute symbols. Returns the symbols not found;
// then nothing is bound (a half-resolved op is never called).
// `helpers`: library-level symbols the convention calls (cublas_gemm: handle creation);
// `one_phase`: the kernel is one call (no execute symbol).
std::vector<std::string> bind(int library, const std::string& convention,
                              const std::map<int, std::pair<std::string, std::string>>& symbols,
                              const std::vector<std::string>& ops,
                              const std::vector<std::string>& helpers, bool one_phase) {
  Convention conv;
  if (!parse_convention(convention, &conv)) {
    throw std::invalid_argument("unknown calling convention '" + convention + "'");
  }
  std::shared_ptr<Library> lib;
  {
    std::shared_lock<std::shared_mutex> lock(table().mu);
    lib = table().libraries.at(size_t(library));
  }
  auto binding = std::make_shared<Binding>();
  binding->convention = conv;
  binding->library = lib;
  std::vector<std::string> missing;
  for (const auto& [code, names] : symbols) {
    if (code < 0 || code >= kDtypes) throw std::invalid_argument("bad dtype code");
    Kernel k;
    k.plan = find_symbol(*lib, names.first);
    if (!k.plan) missing.push_back(names.first);
    if (!one_phase) {
      k.execute = reinterpret_cast<flagos_native_execute_fn>(find_symbol(*lib, names.second));
      if (!k.execute) missing.push_back(names.second);
    }
    binding->kernels[size_t(code)] = k;
  }
  binding->one_phase = one_phase;
  for (const auto& name : helpers) {
    void* p = find_symbol(*lib, name);
    if (!p) missing.push_back(name);
    binding->helpers.push_back(p);
  }
  if (!missing.empty()) return missing;
  std::unique_lock<std::shared_mutex> lock(table().mu);
  for (const auto& op : ops) {
    auto& list = table().by_name[op];
    for (auto& b : list) {  // a library bound again for this op replaces its binding
      if (b->library == lib) table().retired.push_back(b);
    }
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](const auto& b) { return b->library == lib; }),
               list.end());
    list.push_back(binding);
  }
  retire_forms_locked();
  __atomic_add_fetch(&table().generation, 1, __ATOMIC_ACQ_REL);
  return {};
}

void clear() {
  std::unique_lock<std::shared_mutex> lock(table().mu);
  for (auto& kv : table().by_name) {
    for (auto& b : kv.second) table().retired.push_back(b);
  }
  table().by_name.clear();
  retire_forms_locked();
  __atomic_add_fetch(&table().generation, 1, __ATOMIC_ACQ_REL);
}

std::vector<std::string> bound_ops() {
  std::shared_lock<std::shared_mutex> lock(table().mu);
  std::vector<std::string> out;
  for (const auto& kv : table().by_name) out.push_back(kv.first);
  return out;
}

// For the benchmark: `iters` direct calls of a binary-convention kernel of `library`
// (plan, then execute on the current flagos stream), the host nanoseconds per call.
double time_direct_binary(int library, const std::string& plan_symbol,
                          const std::string& execute_symbol, const at::Tensor& a,
                          const at::Tensor& b, const at::Tensor& out, int iters) {
  std::shared_ptr<Library> lib;
  {
    std::shared_lock<std::shared_mutex> lock(table().mu);
    lib = table().libraries.at(size_t(library));
  }
  auto plan = reinterpret_cast<flagos_native_binary_fn>(find_symbol(*lib, plan_symbol));
  auto exec = reinterpret_cast<flagos_native_execute_fn>(find_symbol(*lib, execute_symbol));
  TORCH_CHECK(plan && exec, "symbols not found");
  auto fill = [](const at::Tensor& t) {
    flagos_native_tensor_t d{};
    d.data = const_cast<void*>(t.const_data_ptr());
    d.dtype = FLAGOS_NATIVE_FLOAT32;
    d.ndim = int32_t(t.dim());
    for (int64_t i = 0; i < t.dim(); ++i) {
      d.sizes[i] = t.size(i);
      d.strides[i] = t.stride(i);
    }
    return d;
  };
  auto da = fill(a), db = fill(b), dout = fill(out);
  auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1);
  void* stream = impl->getStreamNativeHandle(impl->getStream(out.device()));
  py::gil_scoped_release nogil;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    uint64_t ws = 0;
    flagos_native_executor_t* ex = nullptr;
    TORCH_CHECK(plan(&da, &db, 1.0, &dout, &ws, &ex) == 0, lib->error_text());
    TORCH_CHECK(exec(nullptr, 0, ex, stream) == 0, lib->error_text());
  }
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / iters;
}

// For the benchmark: `iters` calls of at::add_out from C++ (the dispatcher, the flagos
// route and this engine, without Python), the host nanoseconds per call.
double time_dispatch_add_out(const at::Tensor& a, const at::Tensor& b, at::Tensor out, int iters) {
  py::gil_scoped_release nogil;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) at::add_out(out, a, b);
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / iters;
}

// For the benchmark: `iters` calls of the engine alone on a boxed aten::add.out (the stack
// built as the dispatcher's fallback receives it), the host nanoseconds per call: what the
// native engine costs, without torch's dispatcher and flagos' route.
double time_engine_add_out(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
                           int iters) {
  const auto& op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::add", "out");
  py::gil_scoped_release nogil;
  torch::jit::Stack stack;
  stack.reserve(4);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    stack.clear();
    stack.emplace_back(a);
    stack.emplace_back(b);
    stack.emplace_back(c10::Scalar(1));
    stack.emplace_back(out);
    TORCH_CHECK(run(nullptr, op, &stack, out.device().index()), "native declined add.out");
  }
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / iters;
}

}  // namespace
}  // namespace flagos_native

PYBIND11_MODULE(_engine, m) {
  using namespace flagos_native;
  m.doc() = "The native provider's C++ engine (see flagos_ops_native).";
  m.def("open_library", &open, py::arg("path"), py::arg("version_symbol"), py::arg("min_version"),
        py::arg("max_version"), py::arg("error_symbol") = "", py::arg("version_style") = "uint32");
  m.def("library_version", [](int library) {
    std::shared_lock<std::shared_mutex> lock(table().mu);
    return table().libraries.at(size_t(library))->version;
  });
  m.def("bind", &bind, py::arg("library"), py::arg("convention"), py::arg("symbols"),
        py::arg("ops"), py::arg("helpers") = std::vector<std::string>(),
        py::arg("one_phase") = false);
  m.def("clear", &clear);
  m.def("bound_ops", &bound_ops);
  m.def("engine_capsule", [] {
    return py::capsule(static_cast<void*>(&g_engine), FLAGOS_PROVIDER_ENGINE_CAPSULE);
  });
  m.def("time_direct_binary", &time_direct_binary);
  m.def("time_dispatch_add_out", &time_dispatch_add_out);
  m.def("time_engine_add_out", &time_engine_add_out);
}
