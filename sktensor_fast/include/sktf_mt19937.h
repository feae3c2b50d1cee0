/* sktensor_fast: MT19937's uniform doubles, in bulk, bit for bit those of NumPy's
 * RandomState.random_sample.
 *
 * The state is NumPy's legacy one (``RandomState.get_state()``): 624 words and a position; a
 * position of 624 means the words must be regenerated before the next output.  A double takes
 * two outputs a, b: ((a >> 5) 2^26 + (b >> 6)) / 2^53, the 53-bit construction of the
 * generator's reference code (genrand_res53), which NumPy uses.  NumPy calls the generator once
 * per output through a function pointer; here the outputs of a regenerated block are tempered
 * and paired in one loop that the compiler vectorises.  Host code only.
 */
#ifndef SKTF_MT19937_H
#define SKTF_MT19937_H

#include <stdint.h>

#define SKTF_MT_N 624
#define SKTF_MT_M 397
#define SKTF_MT_UPPER 0x80000000u
#define SKTF_MT_LOWER 0x7fffffffu
#define SKTF_MT_MATRIX 0x9908b0dfu

/* the next 624 words of the state (the reference code's regeneration) */
static inline void sktf_mt_twist(uint32_t *key)
{
    int i;
    uint32_t y;
    for (i = 0; i < SKTF_MT_N - SKTF_MT_M; i++) {
        y = (key[i] & SKTF_MT_UPPER) | (key[i + 1] & SKTF_MT_LOWER);
        key[i] = key[i + SKTF_MT_M] ^ (y >> 1) ^ ((0u - (y & 1u)) & SKTF_MT_MATRIX);
    }
    for (; i < SKTF_MT_N - 1; i++) {
        y = (key[i] & SKTF_MT_UPPER) | (key[i + 1] & SKTF_MT_LOWER);
        key[i] = key[i + SKTF_MT_M - SKTF_MT_N] ^ (y >> 1) ^ ((0u - (y & 1u)) & SKTF_MT_MATRIX);
    }
    y = (key[SKTF_MT_N - 1] & SKTF_MT_UPPER) | (key[0] & SKTF_MT_LOWER);
    key[SKTF_MT_N - 1] = key[SKTF_MT_M - 1] ^ (y >> 1) ^ ((0u - (y & 1u)) & SKTF_MT_MATRIX);
}

static inline uint32_t sktf_mt_temper(uint32_t y)
{
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

static inline double sktf_mt_double(uint32_t a, uint32_t b)
{
    return ((double) (a >> 5) * 67108864.0 + (double) (b >> 6)) / 9007199254740992.0;
}

/* out[0 .. n) = the next n doubles of the state (key, *pos); *pos is advanced */
static inline void sktf_mt_random_sample(uint32_t *key, int *pos, double *out, int64_t n)
{
    int64_t k = 0, j, pairs;
    int p = *pos;
    uint32_t a;
    while (k < n) {
        if (p >= SKTF_MT_N) {
            sktf_mt_twist(key);
            p = 0;
        }
        pairs = (SKTF_MT_N - p) / 2;
        if (pairs > n - k)
            pairs = n - k;
        {
            const uint32_t *w = key + p;
            double *o = out + k;
            for (j = 0; j < pairs; j++)
                o[j] = sktf_mt_double(sktf_mt_temper(w[2 * j]), sktf_mt_temper(w[2 * j + 1]));
        }
        k += pairs;
        p += (int) (2 * pairs);
        if (k < n && p == SKTF_MT_N - 1) {
            /* a pair across a regeneration: its first output is the block's last word */
            a = sktf_mt_temper(key[p]);
            sktf_mt_twist(key);
            out[k++] = sktf_mt_double(a, sktf_mt_temper(key[0]));
            p = 1;
        }
    }
    *pos = p;
}

#endif
