#include "capture/python_bindings.h"

#include <pybind11/stl.h>

#include "capture/capture_state.h"
#include "capture/stream_graph.h"
#include "capture/twin_allocator_hooks.h"
#include "router/dispatcher.h"
#include "runtime/hal.h"

namespace py = pybind11;

namespace flagos {
namespace {

// A Python callable as a twin allocator hook: called with the GIL, as (device, (a, b)); a
// copy of the hook copies a shared pointer only, so no GIL is needed to pass it around.
std::function<void(c10::DeviceIndex, c10::MempoolId_t)> python_hook(py::object f) {
  if (f.is_none()) return nullptr;
  std::shared_ptr<py::object> held(new py::object(std::move(f)), [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
  return [held](c10::DeviceIndex device, c10::MempoolId_t pool) {
    if (!Py_IsInitialized()) return;  // a graph outliving the interpreter
    py::gil_scoped_acquire gil;
    (*held)(int(device), std::make_pair(pool.first, pool.second));
  };
}

}  // namespace

void bind_stream_graphs(py::module& m) {
  // The GIL is released around calls that may wait for the device or run the allocator.
  // Dropped without the GIL: releasing a graph waits for its queued replays, whose work
  // may need the GIL to finish.
  struct ReleaseWithoutGil {
    void operator()(StreamGraph* g) const {
      py::gil_scoped_release no_gil;
      delete g;
    }
  };
  py::class_<StreamGraph, std::unique_ptr<StreamGraph, ReleaseWithoutGil>>(m, "_StreamGraph")
      .def(py::init<bool>(), py::arg("keep_graph") = false)
      .def(
          "capture_begin",
          [](StreamGraph& g, std::optional<std::pair<uint64_t, uint64_t>> pool,
             const std::string& mode) {
            c10::MempoolId_t id = pool ? c10::MempoolId_t{pool->first, pool->second}
                                       : c10::MempoolId_t{0, 0};
            py::gil_scoped_release no_gil;
            g.capture_begin(id, mode);
          },
          py::arg("pool") = py::none(), py::arg("capture_error_mode") = "default")
      .def("capture_end", &StreamGraph::capture_end, py::call_guard<py::gil_scoped_release>())
      .def("instantiate", &StreamGraph::instantiate, py::call_guard<py::gil_scoped_release>())
      .def("replay", &StreamGraph::replay, py::call_guard<py::gil_scoped_release>())
      .def("reset", &StreamGraph::reset, py::call_guard<py::gil_scoped_release>())
      .def("pool", [](const StreamGraph& g) {
        auto id = g.pool();
        return std::make_pair(id.first, id.second);
      })
      .def("enable_debug_mode", &StreamGraph::enable_debug_mode)
      .def("debug_dump", &StreamGraph::debug_dump, py::arg("path"));
  m.def("_graph_pool_handle", [] {
    auto id = graph_pool_handle();
    return std::make_pair(id.first, id.second);
  });
  m.def("_is_current_stream_capturing", [](int device) {
    return capture::current_stream_capturing(static_cast<c10::DeviceIndex>(device));
  });
  m.def("_register_graph_impl", &register_with_torch);
  m.def(
      "_set_twin_allocator_hooks",
      [](py::object begin_allocate, py::object end_allocate, py::object release) {
        capture::set_twin_allocator_hooks({python_hook(std::move(begin_allocate)),
                                           python_hook(std::move(end_allocate)),
                                           python_hook(std::move(release))});
      },
      py::arg("begin_allocate"), py::arg("end_allocate"), py::arg("release"));
  m.def("_set_provider_capture_safe", &set_provider_capture_safe, py::arg("name"), py::arg("safe"));
  m.def("_provider_capture_safe", &provider_capture_safe, py::arg("name"));
  m.def("_provider_captures_random_ops", &provider_captures_random_ops, py::arg("name"),
        py::arg("device"));
}

}  // namespace flagos
