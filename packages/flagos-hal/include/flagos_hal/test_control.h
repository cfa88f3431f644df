/*
 * The test control of a HAL built on the HAL kit (kit/kit.hpp): fault injection at run
 * time and the count of live streams and events, for tests that fail HAL calls one after
 * another in one process and check that nothing leaked (docs/hal/faults.md).
 *
 * Not part of the HAL ABI: a HAL built on the kit also exports
 *
 *   const flagos_hal_test_control_t* flagos_hal_kit_test_control(void);
 *
 * beside flagos_hal_get_table (its linker version script must list both, as the kit's
 * src/exports.map does). A HAL without it still takes faults from the environment,
 * FLAGOS_<NAME>_FAULT (NAME: the HAL's get_name, upper-case), read once at load.
 */
#ifndef FLAGOS_HAL_TEST_CONTROL_H_
#define FLAGOS_HAL_TEST_CONTROL_H_

#include <stdint.h>

#include "flagos_hal/flagos_hal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flagos_hal_test_control {
  uint32_t struct_size; /* sizeof(flagos_hal_test_control_t) the HAL was built with */
  /* Replace every armed fault with `spec`: "KIND:N,..." (the N-th call of KIND from this
   * call on fails; KIND:1 is the next one) or "KIND:N:lost" (that call fails and every
   * later call of every kind fails too, as on a lost device, until the next arm). "" or
   * NULL disarms. A bad spec returns INVALID_VALUE (the last error message says why) and
   * changes nothing. From the first call on, every call of every kind is counted. */
  flagos_status_t (*arm)(const char* spec);
  /* The calls counted for KIND (since library load when the environment armed faults,
   * else since the first arm); INVALID_VALUE for an unknown kind. */
  flagos_status_t (*calls)(const char* kind, uint64_t* count);
  /* The fault kinds, comma-separated ("malloc,host_malloc,..."). */
  const char* kinds;
  /* Streams (default streams included) and events created and not yet destroyed. */
  flagos_status_t (*live)(uint64_t* streams, uint64_t* events);
} flagos_hal_test_control_t;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLAGOS_HAL_TEST_CONTROL_H_ */
