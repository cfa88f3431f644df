// Raising a HAL failure whose status was already taken (a query that may answer NOT_READY,
// a call whose result needed cleaning up first), naming the HAL function.
#pragma once

#include "runtime/hal.h"

// Raises for status `st` (not SUCCESS) of the HAL function named `name` ("event_query").
#define FLAGOS_HAL_RAISE(hal, st, name) \
  ::flagos::throw_hal_error((hal), (st), (name), __FILE__, __LINE__)
