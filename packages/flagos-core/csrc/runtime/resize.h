#pragma once

#include <c10/core/Storage.h>

namespace flagos {
// Grows or shrinks a flagos storage through the flagos allocator, keeping its bytes.
void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes);
bool in_forked_child();
}  // namespace flagos
