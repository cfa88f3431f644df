// flagos._C: the Python bindings of the device runtime and the dispatcher.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Event.h>
#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "aten/alias.h"
#include "capture/python_bindings.h"
#include "compiled_code.h"
#include "engines/cpu/cpu_engine.h"
#include "engines/external/external_engine.h"
#include "engines/launch/launch_cache.h"
#include "engines/twin/twin_engine.h"
#include "graph/graph.h"
#include "profiler/kineto_plugin.h"
#include "router/dispatcher.h"
#include "router/provider_call.h"
#include "router/routed_as_themselves.h"
#include "runtime/allocator.h"
#include "runtime/device_fault.h"
#include "runtime/generator.h"
#include "runtime/hal.h"
#include "runtime/host_allocator.h"
#include "runtime/stream.h"

namespace py = pybind11;

namespace flagos {
void register_hooks();
bool in_forked_child();
}

namespace {

using flagos::hal_device;

py::dict device_properties(int device) {
  const auto& d = hal_device(device);
  flagos_device_properties_t props{};
  props.struct_size = sizeof(props);
  FLAGOS_HAL_CHECK(*d.lib->table, d.lib->table->get_device_properties(d.local_index, &props));
  flagos_native_device_t native = FLAGOS_NATIVE_NONE;
  FLAGOS_HAL_CHECK(*d.lib->table, d.lib->table->get_native_device(&native));
  py::dict out;
  out["name"] = std::string(props.name);
  out["total_memory"] = props.total_memory;
  out["multi_processor_count"] = props.compute_units;
  out["native_device_index"] = props.native_device_index;
  out["major"] = props.major;
  out["minor"] = props.minor;
  out["hal"] = d.lib->name;
  out["hal_path"] = d.lib->path;
  out["hal_device_index"] = d.local_index;
  const char* natives[] = {"none", "cpu", "cuda"};
  out["native_device"] = std::string(natives[native <= 2 ? native : 0]);
  return out;
}

py::list hal_info() {
  py::list out;
  for (const auto& lib : flagos::loaded_hals()) {
    py::dict h;
    const char* version = "";
    lib.table->get_version(&version);
    int count = 0;
    lib.table->get_device_count(&count);
    h["name"] = lib.name;
    h["path"] = lib.path;
    h["version"] = std::string(version ? version : "");
    h["abi_version"] = flagos_hal::version_string(lib.table->abi_version);
    h["device_count"] = count;
    // The optional extensions it has (all or none of each, flagos_hal.h).
    py::list extensions;
    const flagos_hal_table_t* t = lib.table;
    if (FLAGOS_HAL_HAS(t, graph_destroy)) extensions.append("graph runtime");
    if (FLAGOS_HAL_HAS(t, module_unload)) extensions.append("kernels");
    if (FLAGOS_HAL_HAS(t, replay_destroy)) extensions.append("stream capture");
    if (FLAGOS_HAL_HAS(t, stream_launch_host_task)) extensions.append("host tasks");
    h["extensions"] = extensions;
    out.append(h);
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "flagos device runtime and dispatcher (C++)";
  flagos::register_hooks();
  flagos::register_provider("cpu", flagos::EngineKind::CPU);

  flagos::bind_compiled_code_helpers(m);
  flagos::bind_graph(m);
  flagos::bind_stream_graphs(m);
  m.def("_init_hals", &flagos::init_hals, py::arg("paths"));
  m.def("_hals_initialized", &flagos::hals_initialized);
  m.def("_hal_info", &hal_info);
  // Whether the twin kernels of flagos:d allocate their results in flagos memory (host
  // results on a CPU twin, device results on a device twin), installing what serves them.
  m.def("_device_results", [](int d) {
    auto twin = flagos::twin_device_type(static_cast<c10::DeviceIndex>(d));
    if (!twin) return false;
    return *twin == c10::DeviceType::CPU ? flagos::install_host_results_allocator()
                                         : flagos::device_results_on(*twin);
  }, py::arg("d") = 0);
  // Extension ops ("ns::name") whose twin kernels allocate only through tensor factories:
  // their results are made in flagos memory on a device twin too (engines/twin/twin_call.h).
  // All names are checked before any is declared. An op may be declared before it is
  // defined (it is looked up by name at each call).
  m.def("_allow_device_results", [](const std::vector<std::string>& ops) {
    for (const auto& op : ops) {
      auto sep = op.find("::");
      TORCH_CHECK(sep != std::string::npos && sep > 0 && sep + 2 < op.size() &&
                      op.find('.') == std::string::npos,
                  "flagos: an op is named \"namespace::name\" (every overload), got \"", op, "\"");
    }
    for (const auto& op : ops) flagos::allow_device_results_for(op);
  }, py::arg("ops"));
  m.def("_device_results_allowed", [](const std::string& name, const std::string& overload) {
    auto op = c10::Dispatcher::singleton().findOp({name, overload});
    TORCH_CHECK(op.has_value(), "flagos: no operator ", name, ".", overload);
    return flagos::device_results_allowed(*op);
  }, py::arg("name"), py::arg("overload") = "");
  // The twin device the engines use for a device ("cpu", "cuda" or "none"): the HAL's
  // native device unless FLAGOS_NO_TWIN makes every HAL count as opaque.
  m.def("_twin_device", [](int d) -> std::string {
    auto twin = flagos::twin_device_type(static_cast<c10::DeviceIndex>(d));
    if (!twin) return "none";
    return *twin == c10::DeviceType::CPU ? "cpu" : "cuda";
  });
  m.def("_device_count", [] { return static_cast<int>(flagos::device_count()); });
  m.def("_device_fault", [](int d) { return flagos::device_fault(static_cast<c10::DeviceIndex>(d)); });
  m.def("_current_device", [] { return static_cast<int>(flagos::current_device()); });
  m.def("_set_device", [](int d) { flagos::set_current_device(d); });
  m.def("_device_properties", &device_properties);
  m.def("_synchronize", [](int d) {
    py::gil_scoped_release nogil;
    flagos::synchronize_device(static_cast<c10::DeviceIndex>(d));
  });
  // What a host (C++) kernel of compiled code waits for before it touches flagos:d memory,
  // as the twin engine does before each op: the current stream's queued work. An idle
  // stream, the usual case, is answered without letting go of the GIL.
  m.def("_sync_for_host_access", [](int d) {
    auto device = static_cast<c10::DeviceIndex>(d);
    if (flagos::query_stream(flagos::current_stream(device))) return;
    py::gil_scoped_release nogil;
    flagos::sync_for_host_access(device);
  });
  m.def("_mem_get_info", [](int d) {
    return flagos::device_allocator()->getMemoryInfo(static_cast<c10::DeviceIndex>(d));
  });
  m.def("_memory_stats", [](int d) { return flagos::memory_stats(d); });
  m.def("_empty_cache", [] {
    flagos::device_allocator()->emptyCache();
    flagos::empty_pinned_cache();
  });
  m.def("_reset_peak_memory_stats", [](int d) { flagos::device_allocator()->resetPeakStats(d); });
  m.def("_reset_accumulated_memory_stats",
        [](int d) { flagos::device_allocator()->resetAccumulatedStats(d); });
  m.def("_allocator_passthrough", &flagos::allocator_passthrough);
  m.def("_memory_snapshot", [] {
    py::list out;
    for (const auto& s : flagos::memory_snapshot()) {
      py::dict seg;
      seg["device"] = s.device;
      seg["address"] = s.address;
      seg["total_size"] = s.total_size;
      seg["allocated_size"] = s.allocated_size;
      seg["stream"] = s.stream_id;
      py::list blocks;
      for (const auto& b : s.blocks) {
        py::dict bd;
        bd["size"] = b.first;
        bd["state"] = b.second ? "active_allocated" : "inactive";
        blocks.append(bd);
      }
      seg["blocks"] = blocks;
      out.append(seg);
    }
    return out;
  });
  // engines/twin/default_generator.h; a context manager
  struct DefaultGeneratorLentScope {
    at::Generator lent;
    c10::Device twin;
    std::optional<flagos::DefaultGeneratorLent> lending;
  };
  py::class_<DefaultGeneratorLentScope>(m, "_DefaultGeneratorLent")
      .def(py::init([](py::handle gen, const std::string& type, int index) {
        TORCH_CHECK(THPGenerator_Check(gen.ptr()), "flagos: a torch.Generator is needed");
        c10::Device twin(type);
        if (index >= 0 && !twin.is_cpu()) twin.set_index(static_cast<c10::DeviceIndex>(index));
        return std::unique_ptr<DefaultGeneratorLentScope>(new DefaultGeneratorLentScope{
            reinterpret_cast<THPGenerator*>(gen.ptr())->cdata, twin, std::nullopt});
      }))
      .def("__enter__", [](DefaultGeneratorLentScope& s) -> DefaultGeneratorLentScope& {
        s.lending.emplace(s.lent, s.twin);
        return s;
      }, py::return_value_policy::reference)
      .def("__exit__", [](DefaultGeneratorLentScope& s, py::args) {
        s.lending.reset();
        return false;
      });
  m.def("_default_generator", [](int d) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(flagos::default_generator(d)));
  });
  m.def("_stream_priority_range", [](int d) {
    const auto& hal = flagos::hal_of(d);
    int least = 0, greatest = 0;
    FLAGOS_HAL_CHECK(hal, hal.stream_get_priority_range(&least, &greatest));
    return std::make_pair(least, greatest);
  });
  // torch.Event.elapsed_time insists on the exact type torch.Event; torch.flagos.Event
  // subclasses it, so it times through this instead.
  m.def("_event_elapsed_time", [](py::handle start, py::handle end) {
    TORCH_CHECK(THPEvent_Check(start.ptr()) && THPEvent_Check(end.ptr()),
                "flagos: elapsed_time needs two torch.Event objects");
    auto* a = reinterpret_cast<THPEvent*>(start.ptr());
    auto* b = reinterpret_cast<THPEvent*>(end.ptr());
    TORCH_CHECK(a->event.device_type() == c10::DeviceType::PrivateUse1 &&
                    b->event.device_type() == c10::DeviceType::PrivateUse1,
                "flagos: elapsed_time needs two flagos events");
    py::gil_scoped_release nogil;
    return a->event.elapsedTime(b->event);
  });
  m.def("_in_bad_fork", &flagos::in_forked_child);
  m.def("_is_pinned_ptr",
        [](uintptr_t ptr) { return flagos::is_pinned_ptr(reinterpret_cast<const void*>(ptr)); });
  m.def("_stream_priority", [](int d, int64_t id) {
    return flagos::stream_priority(flagos::make_stream(d, id));
  });

  // Routing.
  m.def("_register_provider", [](const std::string& name, const std::string& kind, py::object fn) {
    flagos::EngineKind k;
    if (kind == "cpu") k = flagos::EngineKind::CPU;
    else if (kind == "twin") k = flagos::EngineKind::TWIN;
    else if (kind == "python") k = flagos::EngineKind::PYTHON;
    else if (kind == "foreign") k = flagos::EngineKind::FOREIGN;
    else if (kind == "external") {
      flagos::register_external_provider_capsule(name, fn.ptr());
      return;
    } else if (kind == "wrapper") {
      TORCH_CHECK(!fn.is_none(), "flagos: a wrapper provider needs a callable");
      flagos::register_wrapper_provider(name, fn.ptr());
      return;
    } else throw std::invalid_argument("flagos: unknown provider engine '" + kind +
                                       "' (expected cpu, twin, python, foreign, external or wrapper)");
    TORCH_CHECK((k != flagos::EngineKind::PYTHON && k != flagos::EngineKind::FOREIGN) ||
                    !fn.is_none(),
                "flagos: a ", kind, " provider needs a callable");
    flagos::register_provider(name, k, fn.is_none() ? nullptr : fn.ptr());
  }, py::arg("name"), py::arg("kind"), py::arg("fn") = py::none());
  m.def("_providers", &flagos::registered_providers);
  m.def("_provider_engines", &flagos::provider_engines);
  m.def("_run_provider", &flagos::run_provider_from_python, py::arg("provider"), py::arg("op"),
        py::arg("args"), py::arg("kwargs"), py::arg("device"));
  m.def("_routed_kernel_ops", &flagos::routed_kernel_ops);
  m.def("_route_ops_as_themselves", &flagos::route_ops_as_themselves);
  m.def("_routed_as_itself", &flagos::routed_as_itself);
  m.def("_profiler_device_activity", &flagos::kineto_plugin_available);
  m.def("_cpu_dtype_gaps", &flagos::cpu_dtype_gap_counts);
  m.def("_set_resolver", [](py::object fn) { flagos::set_resolver(fn.is_none() ? nullptr : fn.ptr()); });
  m.def("_bump_routing_version", &flagos::bump_routing_version);
  m.def("_routing_version", &flagos::routing_version);
  m.def("_routing_stats", &flagos::routing_stats);
  m.def("_reset_routing_stats", &flagos::reset_routing_stats);

  // Kernels through the HAL (engines/launch/hal_kernels.h; flagos/kernels.py).
  flagos::bind_hal_kernels(m);
  flagos::bind_typed_launch(m);
  // The launch cache (engines/launch/launch_cache.h; flagos/launch_cache.py).
  m.def("_launch_cache_register", [](const std::string& op, const std::string& key, py::object fn) {
    flagos::register_launch_cached_op(op, key, flagos::PyObjectRef(fn.ptr()));
  });
  m.def("_launch_cache_hal_device_for", [](const std::string& device) {
    return static_cast<int>(flagos::hal_device_for(c10::Device(device)));
  });
  m.def("_launch_cache_recording", &flagos::launch_recording);
  m.def("_launch_cache_spoil_recording", [](std::optional<std::string> why) {
    // a reason from Python, kept for the process's life (a handful of distinct strings)
    static std::mutex mutex;
    static auto* reasons = new std::set<std::string>();
    const char* kept = nullptr;
    if (why) {
      std::lock_guard<std::mutex> lock(mutex);
      kept = reasons->insert(*why).first->c_str();
    }
    flagos::spoil_launch_recording(kept);
  }, py::arg("why") = py::none());
  m.def("_set_provider_replayable", &flagos::set_provider_replayable);
  m.def("_launch_cache_stats", [] {
    auto s = flagos::launch_cache_stats();
    py::dict d;
    d["relaunched"] = s.relaunched;
    d["python"] = s.python;
    d["kept"] = s.kept;
    d["unkeyed"] = s.unkeyed;
    return d;
  });
  m.def("_launch_cache_not_kept", &flagos::launch_cache_not_kept);
  // without the GIL: a thread keeping a launch may wait for it while holding a cache lock
  m.def("_launch_cache_clear", &flagos::clear_launch_cache, py::call_guard<py::gil_scoped_release>());
  m.def("_launch_cache_set_enabled", &flagos::set_launch_cache_enabled);
  m.def("_launch_cache_enabled", &flagos::launch_cache_enabled);
}
