/*
 * cuda_check.h - the check macro for the CUDA runtime's error domain, which
 * common/cuda.cu, the kernels and the HBM tier share (.cu files only: it
 * needs the CUDA headers; C code uses common/cuda.h).  It converts a
 * cudaError_t into a negative errno, puts the call, cudaGetErrorString()
 * and file:line in the detail message, clears CUDA's sticky last error,
 * and jumps to the cleanup label.
 */
#ifndef TIER_COMMON_CUDA_CHECK_H
#define TIER_COMMON_CUDA_CHECK_H

#include <cuda_runtime_api.h>
#include <errno.h>

#include "common/error.h"

static inline int ts_cuda_errno(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorInvalidDevice:
		return -ENODEV;
	case cudaErrorInvalidValue:
		return -EINVAL;
	default:
		return -EIO;
	}
}

#define TIER_CUDA_CHECK_GOTO(call, rc, label)                                  \
	do {                                                                    \
		cudaError_t ts_cu_e_ = (call);                                \
		if (ts_cu_e_ != cudaSuccess) {                                \
			(void)cudaGetLastError();                               \
			(rc) = ts_err(ts_cuda_errno(ts_cu_e_),            \
					"%s: %s (%s:%d)", #call,                \
					cudaGetErrorString(ts_cu_e_),         \
					__FILE__, __LINE__);                    \
			goto label;                                             \
		}                                                               \
	} while (0)

#endif
