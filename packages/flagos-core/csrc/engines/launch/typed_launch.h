// Launches of one compiled kernel from Python with its parameters converted in C++: the
// kinds of its parameters are fixed once (from the kernel's signature), and each launch
// turns the Python values straight into parameter slots, with no per-launch list of
// tuples. The launch path of flagos.triton_driver, where the host cost of each Triton
// launch is the cost of a small op.
#pragma once

#include <pybind11/pybind11.h>

namespace flagos {

// flagos._C._TypedLauncher.
void bind_typed_launch(pybind11::module& m);

}  // namespace flagos
