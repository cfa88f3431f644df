// flagos._C's stream-graph bindings: _StreamGraph (torch.flagos.Graph's base) and the
// capture helpers torch.flagos.graphs uses.
#pragma once

#include <pybind11/pybind11.h>

namespace flagos {

void bind_stream_graphs(pybind11::module& m);

}  // namespace flagos
