#pragma once

#include <ATen/Tensor.h>

namespace flagos {
// aten::_copy_from(self, dst, non_blocking): copies self into dst; one side is flagos.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst);
// Bytes [first, last) of its storage that `t`'s elements touch, as offsets.
std::pair<size_t, size_t> byte_span(const at::Tensor& t);
// A CPU tensor holding the values of flagos tensor `src` (same geometry), read via the HAL.
at::Tensor read_for_host(const at::Tensor& src);
// While the current stream of dst's device captures a graph: records a copy of `value`
// (CPU, dst's dtype and number of elements) into contiguous flagos tensor `dst`, from
// pinned memory the graph keeps, so every replay writes the same constant.
void copy_constant_in_capture(const at::Tensor& value, const at::Tensor& dst);
}  // namespace flagos
