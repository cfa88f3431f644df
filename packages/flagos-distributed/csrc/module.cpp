// Python binding: flagos_distributed._C.ProcessGroupFlagOS, a subclass of torch's bound
// torch._C._distributed_c10d.Backend (built with the pybind11 that torch ships, so both
// live in the same pybind11 internals).
#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include <ATen/ops/from_blob.h>

#include "process_group_flagos.h"

namespace py = pybind11;

namespace {

// Holder that drops the last reference without the GIL (a backend's destructor may join
// threads that need it), as torch does for its own backends.
template <typename T>
class NoGilPtr {
 public:
  NoGilPtr() = default;
  NoGilPtr(const NoGilPtr&) = default;
  NoGilPtr(NoGilPtr&&) noexcept = default;
  NoGilPtr& operator=(const NoGilPtr&) = default;
  NoGilPtr& operator=(NoGilPtr&&) noexcept = default;
  /* implicit */ NoGilPtr(c10::intrusive_ptr<T> p) : p_(std::move(p)) {}
  explicit NoGilPtr(T* raw) : p_(c10::intrusive_ptr<T>::unsafe_steal_from_new(raw)) {}
  ~NoGilPtr() {
    if (p_ && PyGILState_Check()) {
      py::gil_scoped_release release;
      p_.reset();
    }
  }
  T& operator*() const noexcept { return *p_; }
  T* operator->() const noexcept { return p_.get(); }
  T* get() const noexcept { return p_.get(); }

 private:
  c10::intrusive_ptr<T> p_;
};

// A torch c10d backend object (ProcessGroupGloo, ProcessGroupNCCL, ...) as an owning
// pointer: the C++ object is shared with its Python wrapper (reference count + 1), so it
// outlives the Python object made in _create. Anything else is a TypeError, never a cast
// of an unrelated object.
c10::intrusive_ptr<c10d::Backend> backendOf(const py::object& o, const char* what) {
  if (o.is_none()) return {};
  const py::object backend = py::module_::import("torch._C._distributed_c10d").attr("Backend");
  if (!py::isinstance(o, backend)) {
    throw py::type_error(c10::str("ProcessGroupFlagOS: ", what,
                                  " must be a torch c10d Backend (ProcessGroupGloo, "
                                  "ProcessGroupNCCL), got ",
                                  py::str(py::type::of(o)).cast<std::string>()));
  }
  auto* b = o.cast<c10d::Backend*>();
  if (!b) throw py::type_error(c10::str("ProcessGroupFlagOS: ", what, " is a null backend"));
  return c10::intrusive_ptr<c10d::Backend>::reclaim_copy(b);
}

// A tensor of `device` over the memory of `t` (same pointer, sizes, strides; keeps `t`
// alive). Used to hand the same buffer to two backends, e.g. a flagos tensor on the CUDA
// HAL as a CUDA tensor for ProcessGroupNCCL (benchmarks/allreduce_bw.py).
at::Tensor viewAs(const at::Tensor& t, const std::string& device) {
  const c10::Device dev(device);
  return at::for_blob(t.data_ptr(), t.sizes())
      .strides(t.strides())
      .options(at::TensorOptions().dtype(t.scalar_type()).device(dev))
      .target_device(dev)
      .context(new at::Tensor(t), [](void* p) { delete static_cast<at::Tensor*>(p); })
      .make_tensor();
}

}  // namespace

PYBIND11_DECLARE_HOLDER_TYPE(T, NoGilPtr<T>, true)

PYBIND11_MODULE(_C, m) {
  using flagos_dist::Config;
  using flagos_dist::Path;
  using flagos_dist::ProcessGroupFlagOS;
  m.doc() = "ProcessGroupFlagOS: the c10d backend of the flagos device";
  m.def("_view_as", &viewAs, py::arg("tensor"), py::arg("device"),
        "A tensor on `device` over the same memory as `tensor` (no copy; keeps it alive).");
  py::object backend = py::module_::import("torch._C._distributed_c10d").attr("Backend");

  py::class_<ProcessGroupFlagOS, NoGilPtr<ProcessGroupFlagOS>>(m, "ProcessGroupFlagOS", backend)
      .def(py::init([](int rank, int size, const py::object& inner, const py::object& checker,
                       const std::string& delegate, const std::string& path, bool check,
                       std::chrono::milliseconds timeout, std::vector<int> native_index) {
             Config c;
             c.delegate = delegate;
             if (path == "host") {
               c.path = Path::kHostZeroCopy;
             } else if (path == "staged") {
               c.path = Path::kHostStaged;
             } else if (path == "cuda") {
               c.path = Path::kCuda;
             } else {
               throw py::value_error("ProcessGroupFlagOS: path must be host, staged or cuda");
             }
             c.check = check;
             c.timeout = timeout;
             c.native_index = std::move(native_index);
             auto in = backendOf(inner, "inner");
             auto chk = backendOf(checker, "checker");
             py::gil_scoped_release release;
             return NoGilPtr<ProcessGroupFlagOS>(c10::make_intrusive<ProcessGroupFlagOS>(
                 rank, size, std::move(in), std::move(chk), std::move(c)));
           }),
           py::arg("rank"), py::arg("size"), py::arg("inner"), py::arg("checker"),
           py::arg("delegate"), py::arg("path"), py::arg("check"), py::arg("timeout"),
           py::arg("native_index"))
      .def_property_readonly("delegate",
                             [](const ProcessGroupFlagOS& pg) { return pg.config().delegate; })
      .def_property_readonly("path",
                             [](const ProcessGroupFlagOS& pg) {
                               switch (pg.config().path) {
                                 case Path::kHostZeroCopy: return "host";
                                 case Path::kHostStaged: return "staged";
                                 case Path::kCuda: return "cuda";
                               }
                               return "?";
                             })
      .def_property("metadata_check",
                    [](const ProcessGroupFlagOS& pg) { return pg.config().check; },
                    [](ProcessGroupFlagOS& pg, bool on) { pg.setMetadataCheck(on); })
      .def_property_readonly("metadata_checks_run", &ProcessGroupFlagOS::checksRun)
      .def_property_readonly("timeout",
                             [](const ProcessGroupFlagOS& pg) { return pg.config().timeout; });
}
