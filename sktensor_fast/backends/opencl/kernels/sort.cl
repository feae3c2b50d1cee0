/* Stable order of a tensor's nonzeros by one mode: a least-significant-digit radix sort of the
 * mode's int32 coordinates (the keys) that carries the int32 positions of the nonzeros.  The
 * result equals a stable argsort of the keys.  No atomics: every count and position is a sum
 * formed in a fixed order.
 *
 * The host defines RADIX_BITS (bits of a digit), WG (work-items of a group, a power of two) and
 * PER_ITEM (keys per work-item); a group handles a tile of TILE = WG * PER_ITEM consecutive keys.
 * One pass over the digit at bit `shift`:
 *   radix_count    counts[d * ntiles + tile]: the keys of each tile whose digit is d;
 *   scan_blocks /  the exclusive prefix sum of counts, digit-major, so that counts[d, tile] is
 *   scan_add       where the keys of digit d of that tile go in the output;
 *   radix_scatter  each group orders its tile by digit in local memory (stable: work-item t
 *                  ranks its PER_ITEM consecutive keys after those of work-items < t) and
 *                  writes the runs of equal digits to their places, consecutive work-items to
 *                  consecutive addresses.
 * The keys of the first pass are read from the coordinates (key i at keys[i * stride +
 * offset]) and the positions are implicit (i); the last pass writes only the positions. */

#define BINS (1 << RADIX_BITS)
#define TILE (WG * PER_ITEM)
/* one padding word every 32: work-item t reading entry t * PER_ITEM + j of a tile hits
 * distinct local memory banks */
#define PAD(i) ((i) + ((i) >> 5))
#define TILE_PAD (PAD(TILE - 1) + 1)

inline int digit_of(const int key, const int shift)
{
    return (int) (((uint) key >> shift) & (uint) (BINS - 1));
}

/* Exclusive prefix sum over the group of `value` (every work-item calls it); `sums` is WG ints
 * of local memory.  The group's total is left in sums[WG - 1]. */
inline int group_exclusive_scan(const int value, __local int* sums)
{
    const int t = (int) get_local_id(0);
    sums[t] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 1; s < WG; s <<= 1) {
        const int add = t >= s ? sums[t - s] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        sums[t] += add;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return sums[t] - value;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void radix_count(const long n, const int stride, const int offset, const int shift,
                 const int ntiles, __global const int* keys, __global int* counts)
{
    __local ushort cnt[BINS * WG];        /* [digit][work-item] */
    const int t = (int) get_local_id(0);
    const long tile = get_group_id(0);
    const long base = tile * TILE;
    for (int d = 0; d < BINS; ++d) cnt[d * WG + t] = 0;
    for (int r = 0; r < PER_ITEM; ++r) {
        const long i = base + r * WG + t;
        if (i < n) {
            const int c = digit_of(keys[i * stride + offset], shift) * WG + t;
            cnt[c] = (ushort) (cnt[c] + 1);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int d = t; d < BINS; d += WG) {
        int s = 0;
        for (int u = 0; u < WG; ++u) s += cnt[d * WG + u];
        counts[(long) d * ntiles + tile] = s;
    }
}

/* In place: each tile of TILE entries of data[0:n] replaced by its exclusive prefix sum;
 * block_sums[tile] = the tile's total. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void scan_blocks(const long n, __global int* data, __global int* block_sums)
{
    __local int v[TILE_PAD];
    __local int sums[WG];
    const int t = (int) get_local_id(0);
    const long tile = get_group_id(0);
    const long base = tile * TILE;
    for (int r = 0; r < PER_ITEM; ++r) {
        const int i = r * WG + t;
        v[PAD(i)] = base + i < n ? data[base + i] : 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    int run = 0;
    for (int j = 0; j < PER_ITEM; ++j) run += v[PAD(t * PER_ITEM + j)];
    int acc = group_exclusive_scan(run, sums);
    for (int j = 0; j < PER_ITEM; ++j) {
        const int c = v[PAD(t * PER_ITEM + j)];
        v[PAD(t * PER_ITEM + j)] = acc;
        acc += c;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = 0; r < PER_ITEM; ++r) {
        const int i = r * WG + t;
        if (base + i < n) data[base + i] = v[PAD(i)];
    }
    if (t == WG - 1) block_sums[tile] = sums[WG - 1];
}

/* data[i] += offsets[i / TILE] */
__kernel void scan_add(const long n, __global int* data, __global const int* offsets)
{
    const long i = get_global_id(0);
    if (i < n) data[i] += offsets[i / TILE];
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void radix_scatter(const long n, const int stride, const int offset, const int shift,
                   const int ntiles, const int first, const int write_keys,
                   __global const int* keys, __global const int* pos_in,
                   __global const int* offsets, __global int* keys_out, __global int* pos_out)
{
    __local int lk[TILE_PAD];
    __local int lp[TILE_PAD];
    __local ushort cnt[BINS * WG];        /* [digit][work-item], then its prefix sum */
    __local int sums[WG];
    __local int start[BINS];              /* first entry of each digit in the ordered tile */
    __local int dest[BINS];               /* where each digit's keys of the tile go */
    const int t = (int) get_local_id(0);
    const long tile = get_group_id(0);
    const long base = tile * TILE;
    const int m = (int) min((long) TILE, n - base);

#pragma unroll
    for (int r = 0; r < PER_ITEM; ++r) {
        const int i = r * WG + t;
        if (i < m) {
            lk[PAD(i)] = keys[(base + i) * stride + offset];
            lp[PAD(i)] = first ? (int) (base + i) : pos_in[base + i];
        }
    }
    for (int d = 0; d < BINS; ++d) cnt[d * WG + t] = 0;
    for (int d = t; d < BINS; d += WG) dest[d] = offsets[(long) d * ntiles + tile];
    barrier(CLK_LOCAL_MEM_FENCE);

    /* work-item t's keys: entries t * PER_ITEM .. t * PER_ITEM + PER_ITEM - 1 of the tile */
    int pk[PER_ITEM];
    int pp[PER_ITEM];
#pragma unroll
    for (int j = 0; j < PER_ITEM; ++j) {
        const int i = t * PER_ITEM + j;
        pk[j] = i < m ? lk[PAD(i)] : 0;
        pp[j] = i < m ? lp[PAD(i)] : 0;
        if (i < m) {
            const int c = digit_of(pk[j], shift) * WG + t;
            cnt[c] = (ushort) (cnt[c] + 1);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    /* exclusive prefix sum of cnt in its [digit][work-item] order: work-item t sums the BINS
     * consecutive entries t * BINS .. t * BINS + BINS - 1 */
    int run = 0;
    for (int e = 0; e < BINS; ++e) run += cnt[t * BINS + e];
    int acc = group_exclusive_scan(run, sums);
    for (int e = 0; e < BINS; ++e) {
        const int c = cnt[t * BINS + e];
        cnt[t * BINS + e] = (ushort) acc;
        acc += c;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int d = t; d < BINS; d += WG) start[d] = cnt[d * WG];
    barrier(CLK_LOCAL_MEM_FENCE);

    /* the tile ordered by digit, in local memory */
#pragma unroll
    for (int j = 0; j < PER_ITEM; ++j) {
        const int i = t * PER_ITEM + j;
        if (i < m) {
            const int d = digit_of(pk[j], shift);
            const int p = cnt[d * WG + t];
            cnt[d * WG + t] = (ushort) (p + 1);
            lk[PAD(p)] = pk[j];
            lp[PAD(p)] = pp[j];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

#pragma unroll
    for (int r = 0; r < PER_ITEM; ++r) {
        const int i = r * WG + t;
        if (i < m) {
            const int key = lk[PAD(i)];
            const int d = digit_of(key, shift);
            const long g = (long) dest[d] + (i - start[d]);
            if (write_keys) keys_out[g] = key;
            pos_out[g] = lp[PAD(i)];
        }
    }
}

/* out[i] = i: the order of a mode whose coordinates are all equal */
__kernel void order_iota(const long n, __global int* out)
{
    const long i = get_global_id(0);
    if (i < n) out[i] = (int) i;
}
