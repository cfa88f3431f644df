// Python bindings the wrapper code of torch.compile'd graphs on flagos calls.
#pragma once

#include <pybind11/pybind11.h>

namespace flagos {

void bind_compiled_code_helpers(pybind11::module& m);

}  // namespace flagos
