/* sktensor_fast: the counter-based random generator of GCP's samplers.
 *
 * The one definition of the generator: the CPU sampler (backends/cpu/_gcp.pyx), the OpenCL
 * sampler (backends/opencl/kernels/gcp.cl) and the Python side (step keys, the distributed
 * sampler; through _native/_numerics.pyx) all call these functions, so every device draws the
 * same samples.
 *
 * The c-th 64-bit word of sample j at step key K is mix(mix(K ^ (j + 1) PHI) + (c + 1) PHI),
 * with splitmix64's finaliser mix and its constant PHI: a sample depends on (K, j) only, never
 * on which thread or work-item draws it.  The key of step s of a run seeded with S is
 * mix(mix(S + PHI) ^ (s C + 1)).  A uniform integer below n is the high word of the 128-bit
 * product r n.
 */
#ifndef SKTF_RNG_H
#define SKTF_RNG_H

#include "sktf_platform.h"

#define SKTF_PHI SKTF_U64(0x9E3779B97F4A7C15)

/* splitmix64's finaliser */
SKTF_INLINE sktf_u64 sktf_mix64(sktf_u64 z)
{
    z = (z ^ (z >> 30)) * SKTF_U64(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * SKTF_U64(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* key of step `step` of a run seeded with `seed` */
SKTF_INLINE sktf_u64 sktf_mix_seed(const sktf_u64 seed, const sktf_u64 step)
{
    return sktf_mix64(sktf_mix64(seed + SKTF_PHI)
                      ^ (step * SKTF_U64(0xD1B54A32D192ED03) + SKTF_U64(1)));
}

/* key of sample j at a step */
SKTF_INLINE sktf_u64 sktf_sample_key(const sktf_u64 key, const sktf_i64 j)
{
    return sktf_mix64(key ^ ((sktf_u64)j * SKTF_PHI + SKTF_PHI));
}

/* c-th random 64-bit word of a sample */
SKTF_INLINE sktf_u64 sktf_rand(const sktf_u64 skey, const sktf_u64 c)
{
    return sktf_mix64(skey + (c + SKTF_U64(1)) * SKTF_PHI);
}

/* uniform integer in [0, n) from a random word (1 <= n < 2^63): the high word of r n */
SKTF_INLINE sktf_i64 sktf_below(const sktf_u64 r, const sktf_i64 n)
{
#if defined(__OPENCL_VERSION__)
    return (sktf_i64)mul_hi(r, (sktf_u64)n);
#elif defined(__SIZEOF_INT128__)
    __extension__ typedef unsigned __int128 sktf_u128;   /* a GCC/Clang extension */
    return (sktf_i64)(((sktf_u128)r * (sktf_u64)n) >> 64);
#else
    /* the same high word from 32-bit halves (compilers without a 128-bit type) */
    const sktf_u64 lo32 = SKTF_U64(0xFFFFFFFF), un = (sktf_u64)n;
    const sktf_u64 rh = r >> 32, rl = r & lo32, nh = un >> 32, nl = un & lo32;
    const sktf_u64 ll = rl * nl, m1 = rh * nl, m2 = rl * nh;
    const sktf_u64 t = (ll >> 32) + (m1 & lo32) + (m2 & lo32);
    return (sktf_i64)(rh * nh + (m1 >> 32) + (m2 >> 32) + (t >> 32));
#endif
}

#endif /* SKTF_RNG_H */
