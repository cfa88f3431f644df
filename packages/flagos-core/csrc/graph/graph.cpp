// flagos._C._Graph: one compiled graph loaded by the HAL of a flagos device. It executes on
// flagos tensors, on the current flagos stream of that device, so it is ordered with the
// ops before and after it exactly as a kernel is.
#include "graph/graph.h"

#include <pybind11/stl.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/extension.h>

#include <optional>
#include <string>
#include <vector>

#include "runtime/hal.h"
#include "runtime/stream.h"

namespace py = pybind11;

namespace flagos {
namespace {

constexpr auto kFlagos = c10::DeviceType::PrivateUse1;

bool has_graph_runtime(const flagos_hal_table_t& t) {
  return FLAGOS_HAL_HAS(&t, graph_get_formats) && FLAGOS_HAL_HAS(&t, graph_load) &&
         FLAGOS_HAL_HAS(&t, graph_get_info) && FLAGOS_HAL_HAS(&t, graph_get_tensor_info) &&
         FLAGOS_HAL_HAS(&t, graph_execute) && FLAGOS_HAL_HAS(&t, graph_destroy);
}

std::string hal_name(const flagos_hal_table_t& t) {
  const char* name = "?";
  t.get_name(&name);
  return name ? name : "?";
}

// The formats the HAL of flagos:device loads; empty when it has no graph runtime.
std::vector<std::string> graph_formats(int device) {
  const flagos_hal_table_t& t = hal_of(static_cast<c10::DeviceIndex>(device));
  std::vector<std::string> out;
  if (!has_graph_runtime(t)) return out;
  const char* text = nullptr;
  FLAGOS_HAL_CHECK(t, t.graph_get_formats(&text));
  std::string all(text ? text : "");
  for (size_t pos = 0; pos <= all.size();) {
    size_t comma = all.find(',', pos);
    if (comma == std::string::npos) comma = all.size();
    if (comma > pos) out.push_back(all.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

std::optional<at::ScalarType> scalar_type_of(flagos_dtype_t d) {
  switch (d) {
    case FLAGOS_DTYPE_FLOAT32: return at::kFloat;
    case FLAGOS_DTYPE_FLOAT16: return at::kHalf;
    case FLAGOS_DTYPE_BFLOAT16: return at::kBFloat16;
    case FLAGOS_DTYPE_INT64: return at::kLong;
    case FLAGOS_DTYPE_INT32: return at::kInt;
    case FLAGOS_DTYPE_INT8: return at::kChar;
    case FLAGOS_DTYPE_UINT8: return at::kByte;
    case FLAGOS_DTYPE_BOOL: return at::kBool;
  }
  return std::nullopt;
}

struct TensorSpec {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
};

class Graph {
 public:
  Graph(int device, const std::string& format, const py::bytes& artifact)
      : device_(static_cast<c10::DeviceIndex>(device)), table_(&hal_of(device_)) {
    const flagos_hal_table_t& t = *table_;
    TORCH_CHECK(has_graph_runtime(t), "flagos: the HAL '", hal_name(t), "' of flagos:", device,
                " (ABI ", flagos_hal::version_string(t.abi_version),
                ") has no graph runtime: it runs ops, not compiled graphs");
    std::string_view bytes = artifact;
    int local = hal_device(device_).local_index;
    FLAGOS_HAL_CHECK(t, t.graph_load(local, format.c_str(), bytes.data(), bytes.size(), &graph_));
    int n_in = 0, n_out = 0;
    FLAGOS_HAL_CHECK(t, t.graph_get_info(graph_, &n_in, &n_out, &workspace_));
    for (int side = 0; side < 2; ++side) {
      for (int i = 0; i < (side ? n_out : n_in); ++i) {
        flagos_graph_tensor_info_t info{};
        info.struct_size = sizeof info;
        FLAGOS_HAL_CHECK(t, t.graph_get_tensor_info(graph_, side, i, &info));
        auto dtype = scalar_type_of(info.dtype);
        TORCH_CHECK(dtype && info.ndim >= 0 && info.ndim <= FLAGOS_GRAPH_MAX_DIMS, "flagos: HAL '",
                    hal_name(t), "' describes ", side ? "output " : "input ", i, " with dtype ",
                    static_cast<int>(info.dtype), " and rank ", info.ndim, ", which flagos does not know");
        TensorSpec spec{std::string(info.name, strnlen(info.name, sizeof info.name)), *dtype,
                        std::vector<int64_t>(info.shape, info.shape + info.ndim)};
        (side ? outputs_ : inputs_).push_back(std::move(spec));
      }
    }
  }
  ~Graph() {
    if (graph_) table_->graph_destroy(graph_);  // after the queued executions (the ABI's rule)
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const std::vector<TensorSpec>& inputs() const { return inputs_; }
  const std::vector<TensorSpec>& outputs() const { return outputs_; }
  size_t workspace_size() const { return workspace_; }
  int device() const { return device_; }

  void execute(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
               const std::optional<at::Tensor>& workspace) {
    check_side(inputs, inputs_, "input");
    check_side(outputs, outputs_, "output");
    void* ws = nullptr;
    if (workspace_) {
      TORCH_CHECK_VALUE(workspace && on_device(*workspace) && workspace->is_contiguous() &&
                            static_cast<size_t>(workspace->nbytes()) >= workspace_,
                        "flagos graph: needs a contiguous workspace of ", workspace_,
                        " bytes on flagos:", device_);
      ws = workspace->data_ptr();
    }
    std::vector<const void*> in;
    std::vector<void*> out;
    for (const auto& x : inputs) in.push_back(x.data_ptr());
    for (const auto& x : outputs) out.push_back(x.data_ptr());
    flagos_stream_t stream = hal_stream(current_stream(device_));
    FLAGOS_HAL_CHECK(*table_, table_->graph_execute(graph_, in.data(), static_cast<int>(in.size()), out.data(),
                                                    static_cast<int>(out.size()), ws, stream));
  }

 private:
  bool on_device(const at::Tensor& x) const {
    return x.device().type() == kFlagos && x.device().index() == device_;
  }
  void check_side(const std::vector<at::Tensor>& given, const std::vector<TensorSpec>& want,
                  const char* side) const {
    TORCH_CHECK_VALUE(given.size() == want.size(), "flagos graph: ", given.size(), " ", side,
                      "s given, the compiled graph has ", want.size());
    for (size_t i = 0; i < given.size(); ++i) {
      const at::Tensor& x = given[i];
      const TensorSpec& w = want[i];
      TORCH_CHECK_VALUE(on_device(x), "flagos graph: ", side, " ", i, " (", w.name, ") is on ", x.device(),
                        ", the graph was loaded on flagos:", device_);
      TORCH_CHECK_VALUE(x.scalar_type() == w.dtype, "flagos graph: ", side, " ", i, " (", w.name, ") is ",
                        x.scalar_type(), ", the compiled graph expects ", w.dtype);
      TORCH_CHECK_VALUE(x.sizes().vec() == w.shape, "flagos graph: ", side, " ", i, " (", w.name,
                        ") has shape ", x.sizes(), ", the compiled graph expects ", c10::IntArrayRef(w.shape),
                        " (shapes are static: compile again for this shape)");
      TORCH_CHECK_VALUE(x.is_contiguous(), "flagos graph: ", side, " ", i, " (", w.name,
                        ") is not contiguous");
    }
  }

  c10::DeviceIndex device_;
  const flagos_hal_table_t* table_;
  flagos_graph_t graph_ = nullptr;
  size_t workspace_ = 0;
  std::vector<TensorSpec> inputs_, outputs_;
};

py::list describe(const std::vector<TensorSpec>& specs) {
  py::list out;
  for (const auto& s : specs) {
    py::dict d;
    d["name"] = s.name;
    d["dtype"] = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(s.dtype)));
    d["shape"] = py::tuple(py::cast(s.shape));
    out.append(d);
  }
  return out;
}

}  // namespace

void bind_graph(py::module& m) {
  m.def("_graph_formats", &graph_formats, py::arg("device"),
        "Artifact formats the HAL of flagos:device loads ([] when it has no graph runtime).");
  py::class_<Graph>(m, "_Graph", "A compiled graph loaded by the HAL of a flagos device.")
      .def(py::init<int, const std::string&, const py::bytes&>(), py::arg("device"), py::arg("format"),
           py::arg("artifact"))
      .def_property_readonly("device", &Graph::device)
      .def_property_readonly("inputs", [](const Graph& g) { return describe(g.inputs()); })
      .def_property_readonly("outputs", [](const Graph& g) { return describe(g.outputs()); })
      .def_property_readonly("workspace_size", &Graph::workspace_size)
      .def("execute", &Graph::execute, py::arg("inputs"), py::arg("outputs"), py::arg("workspace") = py::none(),
           "Queue one execution on the current flagos stream of the graph's device.");
}

}  // namespace flagos
