// Pinned host memory over HAL host_malloc, cached by size; a block used by an
// asynchronous copy is reused only after that copy has finished.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Stream.h>

namespace flagos {

c10::Allocator* pinned_host_allocator();
bool is_pinned_ptr(const void* ptr);
// An async copy on `stream` reads or writes the pinned block holding `ptr`.
void record_pinned_use(const void* ptr, const c10::Stream& stream);
void empty_pinned_cache();

}  // namespace flagos
