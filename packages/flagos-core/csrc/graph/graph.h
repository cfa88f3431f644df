// The HAL graph runtime (flagos_hal.h, ABI 1.1, optional) on flagos tensors: what
// flagos_compile's offload backend loads its compiled regions with.
#pragma once

#include <pybind11/pybind11.h>

namespace flagos {

// flagos._C._graph_formats(device) and flagos._C._Graph (load, describe, execute).
void bind_graph(pybind11::module& m);

}  // namespace flagos
