// What other parts of flagos call of the runtime's own ops (runtime_ops.cpp).
#pragma once

#include <ATen/Tensor.h>

namespace flagos {

// A flagos:`device` tensor of these sizes, strides and dtype from the flagos allocator,
// without going through the dispatcher (what the empty_strided kernel does).
at::Tensor empty_strided_on(c10::IntArrayRef size, c10::IntArrayRef stride, at::ScalarType dtype,
                            c10::DeviceIndex device);

}  // namespace flagos
