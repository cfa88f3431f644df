// Calling one named provider from Python (flagos._C._run_provider): what shadow
// verification and the route tuner use to learn what a given provider computes.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

namespace flagos {

// Runs op `op_name` ("aten::mm.out"; "aten::mm" for a default overload) on `args` and
// `kwargs` (as a Python provider receives them) with provider `provider` alone, on flagos
// device `device`. Returns the op's result (a tuple for several), or NotImplemented when
// the provider declined the call. Takes and releases the GIL like any op call.
pybind11::object run_provider_from_python(const std::string& provider, const std::string& op_name,
                                          const pybind11::tuple& args, const pybind11::dict& kwargs,
                                          int device);

}  // namespace flagos
