/*
 * The text of each flagos_status_t, for HAL implementations: a vendor's
 * get_error_string can answer from here for the ABI's own codes. Header-only.
 */
#ifndef FLAGOS_HAL_STATUS_TEXT_H_
#define FLAGOS_HAL_STATUS_TEXT_H_

#include "flagos_hal/flagos_hal.h"

static inline const char* flagos_status_text(flagos_status_t status) {
  switch (status) {
    case FLAGOS_SUCCESS: return "success";
    case FLAGOS_ERROR_INVALID_VALUE: return "invalid value";
    case FLAGOS_ERROR_INVALID_DEVICE: return "invalid device";
    case FLAGOS_ERROR_OUT_OF_MEMORY: return "out of memory";
    case FLAGOS_ERROR_NOT_READY: return "not ready";
    case FLAGOS_ERROR_INVALID_HANDLE: return "invalid handle";
    case FLAGOS_ERROR_NOT_SUPPORTED: return "not supported";
    case FLAGOS_ERROR_NO_DEVICE: return "no device";
    case FLAGOS_ERROR_DEVICE_FAULT: return "device fault";
    case FLAGOS_ERROR_VERSION_MISMATCH: return "ABI version mismatch";
    default: return "unknown error";
  }
}

#endif /* FLAGOS_HAL_STATUS_TEXT_H_ */
