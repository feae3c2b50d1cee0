/* sktensor_fast: what differs between the C compiler of the CPU kernels and OpenCL C.
 *
 * The headers of this directory hold the numerics that the CPU kernels (Cython modules of
 * backends/cpu and _native, compiled as C99) and the OpenCL kernels (backends/opencl/kernels,
 * which get these headers pasted in by the host when a program is built) share.  They are
 * written once in the subset of C99 that OpenCL C accepts; the few differences are the macros
 * below:
 *
 *   SKTF_INLINE      a function defined in a header ("static inline" in C, "inline" in OpenCL)
 *   SKTF_GLOBAL      the address space of device arrays (__global in OpenCL, nothing in C)
 *   SKTF_REAL        the floating-point type of the arithmetic: double in C; in OpenCL the
 *                    program's VAL_T (float or double) unless the program defines it first
 *   sktf_u64, sktf_i64   64-bit unsigned and signed integers
 *   SKTF_U64(c)      a 64-bit unsigned constant
 */
#ifndef SKTF_PLATFORM_H
#define SKTF_PLATFORM_H

#ifdef __OPENCL_VERSION__
#define SKTF_INLINE inline
#define SKTF_GLOBAL __global
#ifndef SKTF_REAL
#define SKTF_REAL VAL_T
#endif
typedef ulong sktf_u64;
typedef long sktf_i64;
#define SKTF_U64(c) (c##UL)
#else
#include <stdint.h>
#include <math.h>
#define SKTF_INLINE static inline
#define SKTF_GLOBAL
#ifndef SKTF_REAL
#define SKTF_REAL double
#endif
typedef uint64_t sktf_u64;
typedef int64_t sktf_i64;
#define SKTF_U64(c) UINT64_C(c)
#endif

#endif /* SKTF_PLATFORM_H */
