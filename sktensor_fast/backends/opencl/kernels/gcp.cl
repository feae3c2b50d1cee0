/* Generalized CP on an OpenCL device: the kernels of a step (the sampled gradient, its loss,
 * the optimisers' fused update), built for the fit's rank where the backend compiles ranks
 * in; the kernels that take no rank are in gcp_setup.cl.
 *
 * The host prepends a header that defines VAL_T, IDX_T, NMODES, FACTOR_PARAMS, FACTOR_ARRAY,
 * GRAD_PARAMS ("__global VAL_T* G0, ..., G{NMODES-1}"), GRAD_ARRAY and USE_FP64 (see cp.cl).
 *
 * Every arithmetic expression below is written in the order of the CPU kernels of
 * backends/cpu/_gcp.pyx, and contraction of a*b + c into fused multiply-adds is off (as it is
 * there), so that for the same sample the two backends form the same sums.
 *
 * Random numbers: the counter-based generator of sktf_rng.h, the same functions as the CPU
 * kernels; a sample depends on (K, j) only, never on which work-item draws it.
 *
 * Sampling: the samplers of sktf_gcp_sample.h, the same functions as the CPU kernels, with
 * their parameter array `sp` (SKTF_GCP_* indices, set up by backends/opencl/gcp_ops.py).
 */
#pragma OPENCL FP_CONTRACT OFF

/* the losses f(x, m) and df/dm, the counter-based generator, the samplers and the optimiser
 * steps, written once for every device (sktensor_fast/include) */
#include "sktf_losses.h"
#include "sktf_rng.h"
#include "sktf_gcp_sample.h"
#include "sktf_optim.h"

#define GCP_NO_KEY 0xFFFFFFFFFFFFFFFFUL

/* FIXED_RANK (set by the host where the backend compiles the rank in, as for the lanes
 * MTTKRP): the kernels' rank a constant, their loops over columns unrolled and the rows'
 * offsets shifts; the argument is then the same number (the program is built per rank) */
#ifdef FIXED_RANK
#define GCP_RANK(arg) FIXED_RANK
#else
#define GCP_RANK(arg) (arg)
#endif

/* -------------------------------------------------------------------- sampled gradient */
/* One step's gradient, for every active mode k:
 *
 *   gcp_draw_terms   draw sample j (as gcp_draw of gcp_setup.cl), its model value m, the
 *                    weighted derivative y = w (f'(x, m) - corr f'(0, m)) and, when
 *                    want_loss, the weighted loss;
 *                    (gcp_terms does the same from a materialised sample);
 *   gcp_sort_count   before each pass of the sort below: the digits of each tile counted;
 *   gcp_sort_scan    before each pass of the sort below: the digit counts of the tiles turned
 *                    into where each tile's samples of each digit go (prefix sums over tiles);
 *   gcp_sort_pass    one pass of a stable least-significant-digit radix sort of the samples by
 *                    their row of mode k (all active modes in one launch), GCP_SORT_BITS bits
 *                    at most per pass: the samples of a row end up together, in increasing
 *                    sample order;
 *   gcp_run_sums     one work-item per (four columns, segment of consecutive positions) adds
 *   gcp_run_join     the contributions of the segment's runs of equal rows in increasing sample
 *                    order (the CPU kernel's order within a segment), and the pieces of the
 *                    runs that span segments are then added in segment order (no atomics,
 *                    the same sums on every device and in every run);
 *   gcp_scatter_atomic  instead of the two above (opt-in, backend option gcp_reduction=
 *                    'atomic'): every contribution added into its row with an atomic
 *                    compare-and-swap loop; the order of the additions is the device's
 *                    schedule, so the result is not bitwise reproducible.
 *
 * The sort's digit counts live in one table `cnt` of npass regions of NMODES * ntiles *
 * GCP_SORT_BINS ints: counts[pass][k][digit][tile], the samples of tile `tile` (of GCP_TILE
 * consecutive positions of the pass's input) whose digit is `digit` (the tiles of a digit
 * side by side: the scan reads each work-item's run of tiles from consecutive words).
 * gcp_sort_count writes region p (every entry of it) before pass p, and gcp_sort_scan turns
 * it into prefix sums over the tiles before the pass reads it: no entry is carried from one
 * step to the next, so the table needs no clearing. */

#define GCP_SORT_BINS (1 << GCP_SORT_BITS)
#define GCP_TILE (GCP_SORT_WG * GCP_SORT_PER)
/* one padding word every 32 (local memory banks) */
#define GCP_PAD(i) ((i) + ((i) >> 5))
#define GCP_TILE_PAD (GCP_PAD(GCP_TILE - 1) + 1)
/* the per-work-item digit counts of gcp_sort_pass (16 bits each, in [digit][work-item] order)
 * for the 2^lb digits of a pass (lb: the mode's bits per pass, at least 1), two padding
 * entries after every 2^lb: in the scan, work-item t reads the run of 2^lb entries from
 * t * 2^lb on, and without the padding all the work-items of a warp would read the same bank
 * at every step (a 32-way conflict; on an H100 that scan was nearly all of a sort pass's
 * time).  A mode sorted by fewer bits than GCP_SORT_BITS per pass zeroes and scans only its
 * digits' part of the table. */
#define GCP_LC(c, lb) ((c) + 2 * ((c) >> (lb)))
#define GCP_LCNT_SIZE (GCP_SORT_BINS * GCP_SORT_WG + 2 * GCP_SORT_WG)
/* sorted positions whose rows and contributions gcp_run_sums reads before adding them (set
 * by the host: RUN_AHEAD of backends/opencl/gcp_ops.py) */
#ifndef GCP_RUN_AHEAD
#define GCP_RUN_AHEAD 1
#endif

#ifdef USE_FP64
typedef double4 gcp_val4;
#else
typedef float4 gcp_val4;
#endif

/* the weighted derivative (into *y) and weighted loss (into *f, when want_loss) of a sample
 * of value x, weight w and correction flag corr whose model value is m (built-in losses) */
inline void gcp_loss_terms(const VAL_T m, const int code, const VAL_T param, const VAL_T x,
                           const VAL_T w, const int corr, const int want_loss, VAL_T* y,
                           VAL_T* f)
{
    VAL_T yv = sktf_loss_deriv(code, param, x, m);
    if (corr) yv = yv - sktf_loss_deriv(code, param, 0, m);
    *y = w * yv;
    if (want_loss) {
        VAL_T fv = sktf_loss_value(code, param, x, m);
        if (corr) fv = fv - sktf_loss_value(code, param, 0, m);
        *f = w * fv;
    }
}

/* model value, weighted derivative (into *y) and weighted loss (into *f, when want_loss) of
 * one sample; the products in the order of the CPU kernel */
inline VAL_T gcp_sample_terms(const long* ij, const int R, const int code, const VAL_T param,
                              __global const VAL_T* lam, __global const VAL_T* const* F,
                              const VAL_T x, const VAL_T w, const int corr, const int want_loss,
                              VAL_T* y, VAL_T* f)
{
    VAL_T m = 0;
    if (R % 4 == 0) {
        /* the rows four columns at a time (one load of four for a work-item's four columns
         * instead of four: a row starts on a multiple of four entries, and buffers on the
         * device's base alignment, at least 128 bytes); the same products, added to m in
         * the same order */
        for (int r = 0; r < R; r += 4) {
            gcp_val4 s = (gcp_val4) (1);
            for (int k = NMODES - 1; k >= 1; --k)
                s = s * *(__global const gcp_val4*) (F[k] + ij[k] * R + r);
            const gcp_val4 p = *(__global const gcp_val4*) (lam + r)
                * *(__global const gcp_val4*) (F[0] + ij[0] * R + r) * s;
            m = m + p.s0;
            m = m + p.s1;
            m = m + p.s2;
            m = m + p.s3;
        }
    } else {
        for (int r = 0; r < R; ++r) {
            VAL_T s = 1;
            for (int k = NMODES - 1; k >= 1; --k) s = s * F[k][ij[k] * R + r];
            m = m + lam[r] * F[0][ij[0] * R + r] * s;
        }
    }
    if (code >= 0) gcp_loss_terms(m, code, param, x, w, corr, want_loss, y, f);
    return m;
}

/* Per sample j < ns: the model value m (to m_out) and, for a built-in loss (code >= 0), y
 * (and the loss when want_loss) of a materialised sample.  (The path of user-defined
 * losses, whose y the host computes.) */
__kernel void gcp_terms(const long ns, const int R_arg, const int code, const VAL_T param,
                        __global const VAL_T* lam, FACTOR_PARAMS,
                        __global const IDX_T* ssubs, __global const VAL_T* sx,
                        __global const VAL_T* sw, __global const char* scorr,
                        const int want_loss,
                        __global VAL_T* m_out, __global VAL_T* y_out, __global VAL_T* f_out)
{
    const int R = GCP_RANK(R_arg);
    FACTOR_ARRAY
    const long j = get_global_id(0);
    if (j >= ns) return;
    long ij[NMODES];
    for (int k = 0; k < NMODES; ++k) ij[k] = ssubs[j * NMODES + k];
    VAL_T y = 0, f = 0;
    m_out[j] = gcp_sample_terms(ij, R, code, param, lam, F, sx[j], sw[j], scorr[j], want_loss,
                                &y, &f);
    if (code >= 0) {
        y_out[j] = y;
        if (want_loss) f_out[j] = f;
    }
}

/* gcp_draw then gcp_terms in one kernel (built-in losses): the sample's coordinates and y go
 * to memory, its value and weights do not.
 *
 * GCP_DRAW_LANES (set by the host where the rank is compiled in, a multiple of four and at
 * most GCP_DRAW_MAX_RANK): the work-group's GCP_DRAW_WG samples drawn one per work-item,
 * their coordinates kept in local memory; then their model values' products formed by
 * R / 4 work-items per sample, each reading four consecutive columns of the sample's rows
 * (consecutive work-items read a row's consecutive bytes, where one work-item per sample
 * reads 32 rows at once a quarter at a time), the products kept in local memory; then each
 * work-item adds its sample's products in column order.  The same products and sums as the
 * path of one work-item per sample, so the same bits. */
#ifdef GCP_DRAW_LANES
#define GCP_LP_STRIDE (FIXED_RANK + 1)   /* a sample's products, one padding entry (banks) */
__kernel __attribute__((reqd_work_group_size(GCP_DRAW_WG, 1, 1)))
void gcp_draw_terms(const ulong key, const long ns, __global const long* sp,
                    __global const long* shape, __global const long* strides,
                    __global const IDX_T* subs, __global const VAL_T* vals,
                    __global const long* lin, __global const long* bucket,
                    __global const IDX_T* zsubs, const VAL_T wp, const VAL_T wq,
                    const int R_arg, const int code, const VAL_T param,
                    __global const VAL_T* lam, FACTOR_PARAMS,
                    const int want_loss,
                    __global IDX_T* out_subs, __global VAL_T* y_out,
                    __global VAL_T* f_out)
{
    const int R = FIXED_RANK;
    FACTOR_ARRAY
    __local IDX_T lij[GCP_DRAW_WG * NMODES];
    __local VAL_T lp[GCP_DRAW_WG * GCP_LP_STRIDE];
    const int t = (int) get_local_id(0);
    const long j = get_global_id(0);
    const long base = j - t;
    const int here = (int) min((long) GCP_DRAW_WG, ns - base);
    long ij[NMODES];
    VAL_T x = 0, w = 0;
    int corr = 0;
    if (j < ns) {
        const sktf_gcp_sampler S = sktf_gcp_sampler_make(sp, NMODES, shape, strides, subs,
                                                         vals, lin, bucket, zsubs, wp, wq);
        x = sktf_gcp_sample(&S, key, j, ij, &w, &corr);
        for (int k = 0; k < NMODES; ++k) {
            out_subs[j * NMODES + k] = (IDX_T) ij[k];
            lij[t * NMODES + k] = (IDX_T) ij[k];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#define GCP_DRAW_L (FIXED_RANK / 4)
#pragma unroll
    for (int i = 0; i < GCP_DRAW_L; ++i) {
        const int u = i * GCP_DRAW_WG + t;
        const int s = u / GCP_DRAW_L, r = (u - s * GCP_DRAW_L) * 4;
        if (s < here) {
            gcp_val4 q = (gcp_val4) (1);
            for (int k = NMODES - 1; k >= 1; --k)
                q = q * *(__global const gcp_val4*) (F[k] + (long) lij[s * NMODES + k] * R + r);
            const gcp_val4 p = *(__global const gcp_val4*) (lam + r)
                * *(__global const gcp_val4*) (F[0] + (long) lij[s * NMODES] * R + r) * q;
            __local VAL_T* o = lp + s * GCP_LP_STRIDE + r;
            o[0] = p.s0;
            o[1] = p.s1;
            o[2] = p.s2;
            o[3] = p.s3;
        }
    }
#undef GCP_DRAW_L
    barrier(CLK_LOCAL_MEM_FENCE);
    if (j >= ns) return;
    VAL_T m = 0;
    for (int r = 0; r < R; ++r) m = m + lp[t * GCP_LP_STRIDE + r];
    VAL_T y = 0, f = 0;
    if (code >= 0) gcp_loss_terms(m, code, param, x, w, corr, want_loss, &y, &f);
    y_out[j] = y;
    if (want_loss) f_out[j] = f;
}
#else
__kernel void gcp_draw_terms(const ulong key, const long ns, __global const long* sp,
                             __global const long* shape, __global const long* strides,
                             __global const IDX_T* subs, __global const VAL_T* vals,
                             __global const long* lin, __global const long* bucket,
                             __global const IDX_T* zsubs, const VAL_T wp, const VAL_T wq,
                             const int R_arg, const int code, const VAL_T param,
                             __global const VAL_T* lam, FACTOR_PARAMS,
                             const int want_loss,
                             __global IDX_T* out_subs, __global VAL_T* y_out,
                             __global VAL_T* f_out)
{
    const int R = GCP_RANK(R_arg);
    FACTOR_ARRAY
    const long j = get_global_id(0);
    if (j >= ns) return;
    const sktf_gcp_sampler S = sktf_gcp_sampler_make(sp, NMODES, shape, strides, subs, vals,
                                                     lin, bucket, zsubs, wp, wq);
    long ij[NMODES];
    VAL_T w = 0;
    int corr = 0;
    const VAL_T x = sktf_gcp_sample(&S, key, j, ij, &w, &corr);
    for (int k = 0; k < NMODES; ++k) out_subs[j * NMODES + k] = (IDX_T) ij[k];
    VAL_T y = 0, f = 0;
    gcp_sample_terms(ij, R, code, param, lam, F, x, w, corr, want_loss, &y, &f);
    y_out[j] = y;
    if (want_loss) f_out[j] = f;
}
#endif

/* exclusive prefix sum over the work-group (of n work-items) of `value`; `sums`: n ints of
 * local memory (every work-item calls it) */
inline int gcp_group_scan(const int value, __local int* sums, const int n)
{
    const int t = (int) get_local_id(0);
    sums[t] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 1; s < n; s <<= 1) {
        const int add = t >= s ? sums[t - s] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        sums[t] += add;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return sums[t] - value;
}

/* Before pass `pass` of the row sort: work-group (digit d, k) turns the counts of digit d
 * in the tiles of mode k (counts[pass][k][d][tile]) into their exclusive prefix sums over the
 * tiles, in place, and writes their total to tot[k][d]: where the pass puts each tile's
 * samples of digit d, relative to the first of them.  Integer sums: the same on every device. */
__kernel __attribute__((reqd_work_group_size(GCP_SCAN_WG, 1, 1)))
void gcp_sort_scan(const int ntiles, const int pass, __global const int* active,
                   __global int* cnt, __global int* tot)
{
    __local int sums[GCP_SCAN_WG];
    const int k = (int) get_global_id(1);
    if (!active[k]) return;
    const int t = (int) get_local_id(0);
    const int d = (int) get_group_id(0);
    const long region = (long) NMODES * ntiles * GCP_SORT_BINS;
    __global int* ck = cnt + pass * region + ((long) k * GCP_SORT_BINS + d) * ntiles;
    const int per = (ntiles + GCP_SCAN_WG - 1) / GCP_SCAN_WG;
    const int u0 = min(t * per, ntiles), u1 = min(u0 + per, ntiles);
    int run = 0;
    for (int u = u0; u < u1; ++u) run += ck[u];
    int acc = gcp_group_scan(run, sums, GCP_SCAN_WG);
    if (t == GCP_SCAN_WG - 1) tot[k * GCP_SORT_BINS + d] = acc + run;
    for (int u = u0; u < u1; ++u) {
        const int c = ck[u];
        ck[u] = acc;
        acc += c;
    }
}

/* Before pass `pass` of the row sort: work-group (tile, k) counts the digits of the pass in
 * the tile's samples (local atomics) and writes the counts of every digit, zeros included,
 * to counts[pass][k][digit][tile]: a store per digit and tile, where a global atomic per
 * sample (in the draw and in the pass before) made about 1.4 million a pass at 460,000
 * samples (integer counts: the same whatever the order of the increments). */
__kernel __attribute__((reqd_work_group_size(GCP_SORT_WG, 1, 1)))
void gcp_sort_count(const long ns, const int ntiles, const int pass,
                    __global const int* active, __global const int* dbits,
                    __global const IDX_T* ssubs, __global const int* row_in,
                    __global int* cnt)
{
    __local int h[GCP_SORT_BINS];
    const int k = (int) get_global_id(1);
    if (!active[k]) return;
    const int t = (int) get_local_id(0);
    const int tile = (int) get_group_id(0);
    const long base = (long) tile * GCP_TILE;
    const int m = (int) min((long) GCP_TILE, ns - base);
    const int nb = dbits[k];
    const int shift = pass * nb;
    const int mask = (1 << nb) - 1;
    for (int d = t; d < GCP_SORT_BINS; d += GCP_SORT_WG) h[d] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = 0; r < GCP_SORT_PER; ++r) {
        const int i = r * GCP_SORT_WG + t;
        if (i < m) {
            const int row = pass == 0 ? (int) ssubs[(base + i) * NMODES + k]
                                      : row_in[(long) k * ns + base + i];
            atomic_inc(h + ((row >> shift) & mask));
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const long region = (long) NMODES * ntiles * GCP_SORT_BINS;
    __global int* ck = cnt + pass * region + (long) k * ntiles * GCP_SORT_BINS;
    for (int d = t; d < GCP_SORT_BINS; d += GCP_SORT_WG) ck[(long) d * ntiles + tile] = h[d];
}

/* Pass `pass` of the row sort: work-group (tile, k) orders the tile's GCP_TILE samples by
 * the digit of bits pass * dbits[k] .. (pass + 1) * dbits[k] - 1 of their row (stably: the
 * work-item t holds GCP_SORT_PER consecutive samples and ranks them after those of the
 * work-items before it), and writes them where the counts put them: after every sample of a
 * smaller digit and after the samples of its digit in the tiles before.  Pass 0 reads the
 * rows from the sample's coordinates (positions = sample numbers); the others the previous
 * pass's (row, sample) pairs. */
__kernel __attribute__((reqd_work_group_size(GCP_SORT_WG, 1, 1)))
void gcp_sort_pass(const long ns, const int ntiles, const int pass,
                   __global const int* active, __global const int* dbits,
                   __global const IDX_T* ssubs, __global const int* row_in,
                   __global const int* idx_in, __global int* row_out, __global int* idx_out,
                   __global const int* cnt, __global const int* tot)
{
    __local int lrow[GCP_TILE_PAD];
    __local int lidx[GCP_TILE_PAD];
    __local uint lcntw[GCP_LCNT_SIZE / 2];     /* [digit][work-item], padded, two per word */
    __local ushort* lcnt = (__local ushort*) lcntw;
    __local int sums[GCP_SORT_WG];
    __local int start[GCP_SORT_BINS];
    __local int dest[GCP_SORT_BINS];
    const int k = (int) get_global_id(1);
    if (!active[k]) return;
    const int t = (int) get_local_id(0);
    const int tile = (int) get_group_id(0);
    const long base = (long) tile * GCP_TILE;
    const int m = (int) min((long) GCP_TILE, ns - base);
    const int nb = dbits[k];
    const int shift = pass * nb;
    const int mask = (1 << nb) - 1;
    const int lb = max(nb, 1), nbin = 1 << lb;     /* the digits of this mode's passes */
    const long region = (long) NMODES * ntiles * GCP_SORT_BINS;
    __global const int* ck = cnt + pass * region + (long) k * ntiles * GCP_SORT_BINS;
    const long mo = (long) k * ns;

    for (int r = 0; r < GCP_SORT_PER; ++r) {
        const int i = r * GCP_SORT_WG + t;
        if (i < m) {
            if (pass == 0) {
                lrow[GCP_PAD(i)] = (int) ssubs[(base + i) * NMODES + k];
                lidx[GCP_PAD(i)] = (int) (base + i);
            } else {
                lrow[GCP_PAD(i)] = row_in[mo + base + i];
                lidx[GCP_PAD(i)] = idx_in[mo + base + i];
            }
        }
    }
    for (int e = t; e < nbin * GCP_SORT_WG / 2 + GCP_SORT_WG; e += GCP_SORT_WG) lcntw[e] = 0;
    /* the samples of each digit in the tiles before this one (dest) and in all (start), from
     * gcp_sort_scan */
    for (int d = t; d < nbin; d += GCP_SORT_WG) {
        dest[d] = ck[(long) d * ntiles + tile];
        start[d] = tot[k * GCP_SORT_BINS + d];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    {   /* dest[d] += the samples of the smaller digits (work-item t: a run of digits) */
        const int per = (nbin + GCP_SORT_WG - 1) / GCP_SORT_WG;
        const int d0 = min(t * per, nbin), d1 = min(d0 + per, nbin);
        int run = 0;
        for (int d = d0; d < d1; ++d) run += start[d];
        int acc = gcp_group_scan(run, sums, GCP_SORT_WG);
        for (int d = d0; d < d1; ++d) {
            dest[d] += acc;
            acc += start[d];
        }
    }

    int pr[GCP_SORT_PER];
    int pi[GCP_SORT_PER];
    for (int j = 0; j < GCP_SORT_PER; ++j) {
        const int i = t * GCP_SORT_PER + j;
        pr[j] = i < m ? lrow[GCP_PAD(i)] : 0;
        pi[j] = i < m ? lidx[GCP_PAD(i)] : 0;
        if (i < m) {
            const int c = GCP_LC(((pr[j] >> shift) & mask) * GCP_SORT_WG + t, lb);
            lcnt[c] = (ushort) (lcnt[c] + 1);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    {   /* exclusive prefix sum of lcnt in its [digit][work-item] order: work-item t takes
         * the nbin entries from t * nbin on (an even number of them, from a word boundary: a
         * word at a time where the device is little-endian) */
        int run = 0;
#ifdef __ENDIAN_LITTLE__
        __local uint* cw = lcntw + GCP_LC(t * nbin, lb) / 2;
        for (int e = 0; e < nbin / 2; ++e) {
            const uint v = cw[e];
            run += (int) (v & 0xFFFFu) + (int) (v >> 16);
        }
        int acc = gcp_group_scan(run, sums, GCP_SORT_WG);
        for (int e = 0; e < nbin / 2; ++e) {
            const uint v = cw[e];
            const uint lo = (uint) acc;
            acc += (int) (v & 0xFFFFu);
            cw[e] = lo | ((uint) acc << 16);
            acc += (int) (v >> 16);
        }
#else
        for (int e = 0; e < nbin; ++e) run += lcnt[GCP_LC(t * nbin + e, lb)];
        int acc = gcp_group_scan(run, sums, GCP_SORT_WG);
        for (int e = 0; e < nbin; ++e) {
            const int c = lcnt[GCP_LC(t * nbin + e, lb)];
            lcnt[GCP_LC(t * nbin + e, lb)] = (ushort) acc;
            acc += c;
        }
#endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int d = t; d < nbin; d += GCP_SORT_WG) start[d] = lcnt[GCP_LC(d * GCP_SORT_WG, lb)];
    barrier(CLK_LOCAL_MEM_FENCE);
    /* the tile ordered by digit, in local memory */
    for (int j = 0; j < GCP_SORT_PER; ++j) {
        const int i = t * GCP_SORT_PER + j;
        if (i < m) {
            const int c = GCP_LC(((pr[j] >> shift) & mask) * GCP_SORT_WG + t, lb);
            const int p = lcnt[c];
            lcnt[c] = (ushort) (p + 1);
            lrow[GCP_PAD(p)] = pr[j];
            lidx[GCP_PAD(p)] = pi[j];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = 0; r < GCP_SORT_PER; ++r) {
        const int i = r * GCP_SORT_WG + t;
        if (i < m) {
            const int row = lrow[GCP_PAD(i)];
            const int d = (row >> shift) & mask;
            const long g = (long) dest[d] + (i - start[d]);
            row_out[mo + g] = row;
            idx_out[mo + g] = lidx[GCP_PAD(i)];
        }
    }
}

/* The contribution to column r of its row of mode k of a sample with coordinates ij and
 * weighted derivative yj: ((yj lam[r]) prod_{l<k} A_l[i_l, r]) * (prod_{l>k} A_l[i_l, r],
 * from the last mode down), the CPU kernel's products.  ij is read by the caller (the
 * pipelined gcp_run_sums reads it a position ahead). */
inline VAL_T gcp_contribution_at(const IDX_T* ij, const VAL_T yj, const int k, const int r,
                                 const int R, __global const VAL_T* lam,
                                 __global const VAL_T* const* F)
{
    VAL_T pre = yj * lam[r];
    /* loops over every mode (constant bounds, unrolled): F indexed by constants stays in
     * registers, where bounds of k would leave it in memory and read it at every product */
#pragma unroll
    for (int l = 0; l < NMODES; ++l)
        if (l < k) pre = pre * F[l][(long) ij[l] * R + r];
    VAL_T suf = 1;
#pragma unroll
    for (int l = NMODES - 1; l >= 0; --l)
        if (l > k) suf = suf * F[l][(long) ij[l] * R + r];
    return pre * suf;
}

/* gcp_contribution_at for columns r0 .. r0 + 3 (those below R; the others 0): the same
 * products per column, the rows read four entries at a time where R is a multiple of four (a
 * row then starts on a multiple of four entries, a buffer on the device's base alignment) */
inline gcp_val4 gcp_contribution4_at(const IDX_T* ij, const VAL_T yj, const int k,
                                     const int r0, const int R, __global const VAL_T* lam,
                                     __global const VAL_T* const* F)
{
    if (R % 4 == 0) {
        gcp_val4 pre = (gcp_val4) (yj) * *(__global const gcp_val4*) (lam + r0);
#pragma unroll
        for (int l = 0; l < NMODES; ++l)
            if (l < k) pre = pre * *(__global const gcp_val4*) (F[l] + (long) ij[l] * R + r0);
        gcp_val4 suf = (gcp_val4) (1);
#pragma unroll
        for (int l = NMODES - 1; l >= 0; --l)
            if (l > k) suf = suf * *(__global const gcp_val4*) (F[l] + (long) ij[l] * R + r0);
        return pre * suf;
    }
    VAL_T v[4];
    for (int e = 0; e < 4; ++e)
        v[e] = r0 + e < R ? gcp_contribution_at(ij, yj, k, r0 + e, R, lam, F) : 0;
    return vload4(0, v);
}

/* the coordinates of sample j (for the *_at functions above) */
inline void gcp_coords(const long j, __global const IDX_T* ssubs, IDX_T* ij)
{
    for (int l = 0; l < NMODES; ++l) ij[l] = ssubs[j * NMODES + l];
}

/* p[0 .. min(n, 4) - 1] = the first entries of v (one store of four where n >= 4 and the row
 * length R is a multiple of four, as gcp_contribution4's loads) */
inline void gcp_store4(__global VAL_T* p, const gcp_val4 v, const int n)
{
    if (n >= 4 && ((n & 3) == 0)) {
        *(__global gcp_val4*) p = v;
        return;
    }
    p[0] = v.s0;
    if (n > 1) p[1] = v.s1;
    if (n > 2) p[2] = v.s2;
    if (n > 3) p[3] = v.s3;
}

/* Gradient rows of every active mode from the sorted (row, sample) pairs, in segments of
 * `seg` consecutive positions: work-item (q, s, k) adds the contributions of every run of
 * equal rows in segment s, in increasing sample order, into columns 4q .. 4q + 3 (each
 * column's own sum; four at a time for the loads).  A run that lies in the
 * segment is written to its row; the part of a run that goes on in the next segment is kept
 * in `part` (tail, when the run started in this segment; head, when it came from the one
 * before) for gcp_run_join, which adds the pieces in segment order: a row with many samples
 * is summed by many work-items, not in one chain.  Runs within a segment are summed in the
 * CPU kernel's order; a run over several segments as its pieces' sum (the same on every
 * device and in every run).  Rows without samples are not written (the host zeroes the
 * gradients first).  part holds [k][head 0 / tail 1][segment][column].  The segment where a
 * run that came from before ends writes its number to ends[roff[k] + row] (work-item q = 0),
 * where gcp_run_join finds it. */
__kernel void gcp_run_sums(const long ns, const int R_arg, __global const VAL_T* lam,
                           FACTOR_PARAMS, __global const IDX_T* ssubs, __global const VAL_T* y,
                           __global const int* rows, __global const int* idx,
                           __global const int* active, const int seg, __global VAL_T* part,
                           __global int* ends, __global const long* roff, GRAD_PARAMS)
{
    const int R = GCP_RANK(R_arg);
    FACTOR_ARRAY
    GRAD_ARRAY
    const int r0 = 4 * (int) get_global_id(0);
    const long s = get_global_id(1);
    const int k = get_global_id(2);
    const long nseg = (ns + seg - 1) / seg;
    if (r0 >= R || s >= nseg || !active[k]) return;
    __global const int* kr = rows + k * ns;
    __global const int* ki = idx + k * ns;
    __global VAL_T* heads = part + (2L * k) * nseg * R + r0;
    __global VAL_T* tails = part + (2L * k + 1) * nseg * R + r0;
    const long a = s * seg, b = min(ns, a + seg);
    int cur = kr[a];
    int head = a > 0 && kr[a - 1] == cur;       /* the run at a came from before */
    gcp_val4 acc = 0;
#ifdef GCP_RUN_PIPE
    /* a pipeline over the positions: at position q the factor rows of q are read, the
     * coordinates and y of sample q + 1 and the row and sample number of q + 2 (each
     * already known), so a position waits for one gather, not for three in a chain */
    IDX_T ij1[NMODES];
    VAL_T y1 = 0;
    int row1 = cur;
    {
        const long j = ki[a];
        gcp_coords(j, ssubs, ij1);
        y1 = y[j];
    }
    int row2 = a + 1 < b ? kr[a + 1] : 0;
    long j2 = a + 1 < b ? ki[a + 1] : 0;
    for (long q = a; q < b; ++q) {
        IDX_T ijn[NMODES];
        VAL_T yn = 0;
        const int rown = row2;
        if (q + 1 < b) {
            gcp_coords(j2, ssubs, ijn);
            yn = y[j2];
        } else {
            for (int l = 0; l < NMODES; ++l) ijn[l] = 0;
        }
        if (q + 2 < b) {
            row2 = kr[q + 2];
            j2 = ki[q + 2];
        }
        const gcp_val4 c = gcp_contribution4_at(ij1, y1, k, r0, R, lam, F);
        if (row1 != cur) {                      /* the run of cur ended inside the segment */
            if (head) {
                gcp_store4(heads + s * R, acc, R - r0);         /* head: came from before */
                if (r0 == 0) ends[roff[k] + cur] = (int) s;
            } else
                gcp_store4(G[k] + (long) cur * R + r0, acc, R - r0);
            head = 0;
            cur = row1;
            acc = 0;
        }
        acc = acc + c;
        row1 = rown;
        for (int l = 0; l < NMODES; ++l) ij1[l] = ijn[l];
        y1 = yn;
    }
#else
    /* GCP_RUN_AHEAD positions at a time: their rows and contributions are read first (the
     * gathers of a block in flight together), then added in order */
    for (long q0 = a; q0 < b; q0 += GCP_RUN_AHEAD) {
        int rw[GCP_RUN_AHEAD];
        gcp_val4 c[GCP_RUN_AHEAD];
        for (int u = 0; u < GCP_RUN_AHEAD; ++u) {
            const long q = q0 + u;
            rw[u] = q < b ? kr[q] : 0;
            if (q < b) {
                const long j = ki[q];
                IDX_T ij[NMODES];
                gcp_coords(j, ssubs, ij);
                c[u] = gcp_contribution4_at(ij, y[j], k, r0, R, lam, F);
            } else {
                c[u] = 0;
            }
        }
        for (int u = 0; u < GCP_RUN_AHEAD && q0 + u < b; ++u) {
            if (rw[u] != cur) {                 /* the run of cur ended inside the segment */
                if (head) {
                    gcp_store4(heads + s * R, acc, R - r0);     /* head: came from before */
                    if (r0 == 0) ends[roff[k] + cur] = (int) s;
                } else
                    gcp_store4(G[k] + (long) cur * R + r0, acc, R - r0);
                head = 0;
                cur = rw[u];
                acc = 0;
            }
            acc = acc + c[u];
        }
    }
#endif
    if (head) {
        gcp_store4(heads + s * R, acc, R - r0);
        if (r0 == 0 && (b == ns || kr[b] != cur)) ends[roff[k] + cur] = (int) s;
    } else if (b < ns && kr[b] == cur)
        gcp_store4(tails + s * R, acc, R - r0);                 /* tail: goes on */
    else
        gcp_store4(G[k] + (long) cur * R + r0, acc, R - r0);
}

/* The rows of the runs that go on past their segment: work-item (q, s, k), where segment s's
 * last run started in it and goes on, adds its tail and the heads of the segments after it,
 * in order, and writes the row's columns 4q .. 4q + 3 (each column's own sum, four at a time
 * for the loads, as gcp_run_sums). */
__kernel void gcp_run_join(const long ns, const int R_arg, __global const int* rows,
                           __global const int* active, const int seg,
                           __global const VAL_T* part, __global const int* ends,
                           __global const long* roff, GRAD_PARAMS)
{
    const int R = GCP_RANK(R_arg);
    GRAD_ARRAY
    const int r0 = 4 * (int) get_global_id(0);
    const long s = get_global_id(1);
    const int k = get_global_id(2);
    const long nseg = (ns + seg - 1) / seg;
    if (r0 >= R || s >= nseg || !active[k]) return;
    __global const int* kr = rows + k * ns;
    const long a = s * seg, b = min(ns, a + seg);
    if (b >= ns) return;
    const int row = kr[b - 1];
    if (kr[b] != row) return;                               /* the last run ends here */
    if (kr[a] == row && a > 0 && kr[a - 1] == row) return;  /* it began before: not ours */
    /* its pieces are the heads of segments s + 1 .. last, where last is the segment in which
     * it ends (written by gcp_run_sums) */
    const long last = ends[roff[k] + row];
    __global const VAL_T* heads = part + (2L * k) * nseg * R + r0;
    __global const VAL_T* tail = part + ((2L * k + 1) * nseg + s) * R + r0;
    const int n = min(4, R - r0);
    gcp_val4 acc;
    if (R % 4 == 0) {
        acc = *(__global const gcp_val4*) tail;
        for (long t = s + 1; t <= last; ++t)
            acc = acc + *(__global const gcp_val4*) (heads + t * R);
    } else {
        VAL_T v[4] = {0, 0, 0, 0};
        for (int e = 0; e < n; ++e) {
            VAL_T c = tail[e];
            for (long t = s + 1; t <= last; ++t) c = c + heads[t * R + e];
            v[e] = c;
        }
        acc = vload4(0, v);
    }
    gcp_store4(G[k] + (long) row * R + r0, acc, R - r0);
}

#ifdef GCP_ATOMIC_SCATTER
#if defined(GCP_PTX_ATOMIC)
/* *p += v with the hardware's floating-point reduction (NVIDIA devices, through PTX) */
inline void gcp_atomic_add(__global VAL_T* p, const VAL_T v)
{
#ifdef USE_FP64
    asm volatile("red.global.add.f64 [%0], %1;" :: "l"(p), "d"(v) : "memory");
#else
    asm volatile("red.global.add.f32 [%0], %1;" :: "l"(p), "f"(v) : "memory");
#endif
}
#elif defined(USE_FP64)
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
/* *p += v, atomically: a compare-and-swap loop on the 64-bit word */
inline void gcp_atomic_add(__global VAL_T* p, const VAL_T v)
{
    volatile __global long* a = (volatile __global long*) p;
    long seen = *a, old;
    do {
        old = seen;
        seen = atom_cmpxchg(a, old, as_long(as_double(old) + v));
    } while (seen != old);
}
#else
inline void gcp_atomic_add(__global VAL_T* p, const VAL_T v)
{
    volatile __global int* a = (volatile __global int*) p;
    int seen = *a, old;
    do {
        old = seen;
        seen = atomic_cmpxchg(a, old, as_int(as_float(old) + v));
    } while (seen != old);
}
#endif

/* Work-item (r, j, k) adds the contribution of sample j to column r of its row of mode k
 * (the gradients start at zero).  Not bitwise reproducible: the additions into a row happen
 * in the order the device schedules them.  One column per work-item: a warp's additions go to
 * consecutive entries of a row (16 work-items of one sample at R = 16); four columns per
 * work-item, all modes in one, made a step 0.428 instead of 0.357 ms on an H100 at NELL-2's
 * size (76.9M nonzeros, the scatter 0.318 ms of it). */
__kernel void gcp_scatter_atomic(const long ns, const int R_arg, __global const VAL_T* lam,
                                 FACTOR_PARAMS, __global const IDX_T* ssubs,
                                 __global const VAL_T* y, __global const int* active,
                                 GRAD_PARAMS)
{
    const int R = GCP_RANK(R_arg);
    FACTOR_ARRAY
    GRAD_ARRAY
    const int r = get_global_id(0);
    const long j = get_global_id(1);
    const int k = get_global_id(2);
    if (r >= R || j >= ns || !active[k]) return;
    const long row = ssubs[j * NMODES + k];
    IDX_T ij[NMODES];
    gcp_coords(j, ssubs, ij);
    gcp_atomic_add(G[k] + row * R + r, gcp_contribution_at(ij, y[j], k, r, R, lam, F));
}
#endif

/* --------------------------------------------------------------------------- loss sums */
/* Per sample: w (f(x, m) - corr f(0, m)) with m formed as the CPU's loss sum forms it
 * (lam[r] times the rows of modes 0, 1, ...); for a user-defined loss (code < 0) only m. */
__kernel void gcp_sample_loss(const long ns, const int R_arg, const int code, const VAL_T param,
                              __global const VAL_T* lam, FACTOR_PARAMS,
                              __global const IDX_T* ssubs, __global const VAL_T* sx,
                              __global const VAL_T* sw, __global const char* scorr,
                              __global VAL_T* m_out, __global VAL_T* f_out)
{
    const int R = GCP_RANK(R_arg);
    FACTOR_ARRAY
    const long j = get_global_id(0);
    if (j >= ns) return;
    __global const IDX_T* ij = ssubs + j * NMODES;
    VAL_T m = 0;
    for (int r = 0; r < R; ++r) {
        VAL_T prod = lam[r];
        for (int k = 0; k < NMODES; ++k) prod = prod * F[k][(long)ij[k] * R + r];
        m = m + prod;
    }
    m_out[j] = m;
    if (code >= 0) {
        VAL_T f = sktf_loss_value(code, param, sx[j], m);
        if (scorr[j]) f = f - sktf_loss_value(code, param, 0, m);
        f_out[j] = sw[j] * f;
    }
}

/* -------------------------------------------------------------------- optimiser steps */
/* The step of update rule `rule` (0: SGD, 1: AdaGrad, 2: Adam) on entry i of one factor u
 * with coefficients c (those of the rule, in the order of gcp_sgd / gcp_adagrad / gcp_adam):
 * the gradient is read from g, and the entry of the other gradient buffer h (the next step's)
 * is zeroed. */
inline void gcp_update_entry(const int rule, __global const VAL_T* c, const VAL_T lower,
                             const long i, __global VAL_T* u, __global const VAL_T* g,
                             __global VAL_T* h, __global VAL_T* m1, __global VAL_T* m2)
{
    const VAL_T gi = g[i];
    if (rule == 2) {
        VAL_T mi = m1[i], vi = m2[i];
        u[i] = sktf_adam_entry(u[i], gi, &mi, &vi, c[0], c[1], c[2], c[3], lower);
        m1[i] = mi;
        m2[i] = vi;
    } else if (rule == 1) {
        VAL_T si = m1[i];
        u[i] = sktf_adagrad_entry(u[i], gi, &si, c[0], c[1], lower);
        m1[i] = si;
    } else {
        u[i] = sktf_sgd_entry(u[i], gi, c[0], lower);
    }
    h[i] = 0;
}

/* gcp_update_entry on every entry of every active factor in one launch, coefficients
 * coef[4 s ..]: factor k's entries are work-items offs[k] .. offs[k] + sizes[k] - 1, offs[k]
 * a multiple of the work-group size, so that a work-group holds one factor (UPDATE_SWITCH
 * calls gcp_update_entry with factor k's arrays, a branch every work-item of the group
 * takes alike). */
__kernel void gcp_update_all(const long total, __global const long* offs,
                             __global const long* sizes, __global const int* active,
                             const int rule, __global const VAL_T* coef, const int s,
                             const VAL_T lower, UPDATE_PARAMS)
{
    const long e = get_global_id(0);
    if (e >= total) return;
    int k = 0;
    while (k + 1 < NMODES && e >= offs[k + 1]) ++k;
    const long i = e - offs[k];
    if (!active[k] || i >= sizes[k]) return;
    __global const VAL_T* c = coef + 4 * (long) s;
    UPDATE_SWITCH
}
