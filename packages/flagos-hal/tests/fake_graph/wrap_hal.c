/*
 * A HAL that hands out another HAL's table, changed the way a HAL of another build would
 * be (for the tests of HALs with and without a graph runtime):
 *
 *   FLAGOS_WRAP_HAL=PATH        the HAL library wrapped (the sim HAL)
 *   FLAGOS_WRAP_MODE=abi10      the table as a HAL built against ABI 1.0 has it: version
 *                               1.0, struct_size ending after event_elapsed_time, no graph
 *                               runtime
 *   FLAGOS_WRAP_MODE=format     a graph runtime that loads only the format "acme-npu-v9"
 */
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "flagos_hal/flagos_hal.h"

static flagos_hal_table_t g_table;
static const flagos_hal_table_t* g_inner;

static flagos_status_t other_formats(const char** formats) {
  if (!formats) return FLAGOS_ERROR_INVALID_VALUE;
  *formats = "acme-npu-v9";
  return FLAGOS_SUCCESS;
}

static flagos_status_t other_load(int device, const char* format, const void* artifact, size_t size,
                                  flagos_graph_t* graph) {
  (void)device, (void)artifact, (void)size, (void)graph;
  if (!format || strcmp(format, "acme-npu-v9") != 0) return FLAGOS_ERROR_NOT_SUPPORTED;
  return FLAGOS_ERROR_INVALID_VALUE; /* no artifact of it exists in these tests */
}

FLAGOS_HAL_EXPORT flagos_status_t flagos_hal_get_table(uint32_t abi_major, const flagos_hal_table_t** out) {
  if (!out) return FLAGOS_ERROR_INVALID_VALUE;
  if (!g_inner) {
    const char* path = getenv("FLAGOS_WRAP_HAL");
    void* lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    flagos_hal_get_table_fn entry = lib ? (flagos_hal_get_table_fn)dlsym(lib, FLAGOS_HAL_ENTRY_SYMBOL) : NULL;
    if (!entry || entry(abi_major, &g_inner) != FLAGOS_SUCCESS) return FLAGOS_ERROR_NO_DEVICE;
    memcpy(&g_table, g_inner, sizeof g_table);
    const char* mode = getenv("FLAGOS_WRAP_MODE");
    if (mode && strcmp(mode, "abi10") == 0) {
      g_table.abi_version = (1u << 16) | 0u;
      g_table.struct_size = (uint32_t)(offsetof(flagos_hal_table_t, event_elapsed_time) + sizeof(void*));
      /* what lies past struct_size is not the vendor's: make it garbage, never read */
      memset((char*)&g_table + g_table.struct_size, 0xAB, sizeof g_table - g_table.struct_size);
    } else if (mode && strcmp(mode, "format") == 0) {
      g_table.graph_get_formats = other_formats;
      g_table.graph_load = other_load;
    }
  }
  *out = &g_table;
  return FLAGOS_SUCCESS;
}
