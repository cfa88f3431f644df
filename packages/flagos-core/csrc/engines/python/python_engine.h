// The Python engines: PYTHON providers (a Python callable serves the op, with the GIL) and
// FOREIGN providers (a Python kernel library's kernels, FlagGems', run on twin aliases).
// python_bridge.h holds every call from the router into Python; foreign_kernels.h the
// foreign-kernel engine.
#pragma once

#include "engines/python/foreign_kernels.h"
#include "engines/python/python_bridge.h"
