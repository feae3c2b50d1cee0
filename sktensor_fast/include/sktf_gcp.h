/* sktensor_fast: pieces of GCP's CPU kernels (backends/cpu/_gcp.pyx): the optimiser steps on
 * chunks of entries and a sample's contribution to a gradient row (plain C loops that the
 * compiler vectorises), the OpenMP helpers of the multi-threaded gradient (claims of its
 * chunks, the team's size, a barrier), and the flags and the short sleep of the thread that
 * draws the samples of serial steps ahead.  The samplers are in sktf_gcp_sample.h. */
#ifndef SKTF_GCP_H
#define SKTF_GCP_H

#include <stdint.h>
/* The serial and the parallel gradient must round identically: no fused multiply-add
   contraction of a*b + c (GCC contracts across statements by default when the target has
   FMA, e.g. with -march=native or on aarch64; clang only within an expression). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize ("fp-contract=off")
#endif
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "sktf_macros.h"
#include "sktf_optim.h"
/* Optimiser steps on a chunk of entries: plain C loops over the one-entry steps of
   sktf_optim.h (shared with the OpenCL kernels), which the compiler inlines and vectorises.
   Each loop is written once (the _BODY macros) and compiled twice: in place (u updated) and
   into another array (out = the step from u, u left as it is; the multi-threaded loop of
   steps keeps the factors of two consecutive steps). */
#define SKTF_ADAM_BODY(OUT)                                                                  \
    for (int64_t i = 0; i < n; i++) {                                                       \
        double mi = m[i], vi = v[i];                                                        \
        OUT[i] = sktf_adam_entry(u[i], g[i], &mi, &vi, beta1, beta2, a, e, lower);         \
        m[i] = mi;                                                                          \
        v[i] = vi;                                                                          \
    }
#define SKTF_ADAGRAD_BODY(OUT)                                                               \
    for (int64_t i = 0; i < n; i++) {                                                       \
        double si = s[i];                                                                   \
        OUT[i] = sktf_adagrad_entry(u[i], g[i], &si, lr, eps, lower);                       \
        s[i] = si;                                                                          \
    }
#define SKTF_SGD_BODY(OUT)                                                                   \
    for (int64_t i = 0; i < n; i++) OUT[i] = sktf_sgd_entry(u[i], g[i], lr, lower);

static void sktf_adam_chunk(
        double* __restrict u, const double* __restrict g, double* __restrict m,
        double* __restrict v, int64_t n, double beta1, double beta2, double a, double e,
        double lower) {
    SKTF_ADAM_BODY(u)
}
static void sktf_adagrad_chunk(
        double* __restrict u, const double* __restrict g, double* __restrict s, int64_t n,
        double lr, double eps, double lower) {
    SKTF_ADAGRAD_BODY(u)
}
static void sktf_sgd_chunk(double* __restrict u, const double* __restrict g, int64_t n,
                           double lr, double lower) {
    SKTF_SGD_BODY(u)
}
static void sktf_adam_chunk_to(
        double* __restrict out, const double* __restrict u, const double* __restrict g,
        double* __restrict m, double* __restrict v, int64_t n, double beta1, double beta2,
        double a, double e, double lower) {
    SKTF_ADAM_BODY(out)
}
static void sktf_adagrad_chunk_to(
        double* __restrict out, const double* __restrict u, const double* __restrict g,
        double* __restrict s, int64_t n, double lr, double eps, double lower) {
    SKTF_ADAGRAD_BODY(out)
}
static void sktf_sgd_chunk_to(double* __restrict out, const double* __restrict u,
                              const double* __restrict g, int64_t n, double lr,
                              double lower) {
    SKTF_SGD_BODY(out)
}

/* g_k += the contributions of stored samples i0 .. i1-1 to their rows of mode k, in order:
   sample i has rows srows[i N .. i N + N-1] and weighted derivative y = sy[i], and adds to
   row srows[i N + k] of g_k, entry by entry,
       ((((y lam) A_0) A_1) ... A_{k-1}) times (((1 A_{N-1}) A_{N-2}) ... A_{k+1}),
   the products in the order of the serial kernel (prefix from mode 0, suffix from the last
   mode; 1 x = x exactly), so that the multi-threaded gradient adds the serial kernel's
   terms.  One pass over the rank per sample; three modes spelled out (the common case). */
static inline void sktf_gcp_add_stored(double* g_k, double* const* fac, const int64_t* srows,
                                       const double* sy, int64_t i0, int64_t i1, int N, int k,
                                       const double* __restrict lam, int64_t R) {
    if (N == 3) {
        const double* a0 = fac[0];
        const double* a1 = fac[1];
        const double* a2 = fac[2];
        for (int64_t i = i0; i < i1; i++) {
            const int64_t* rw = srows + i * 3;
            const double y = sy[i];
            double* __restrict g = g_k + rw[k] * R;
            if (k == 0) {
                const double* __restrict b1 = a1 + rw[1] * R;
                const double* __restrict b2 = a2 + rw[2] * R;
                for (int64_t r = 0; r < R; r++) {
                    double t = (y * lam[r]) * (b2[r] * b1[r]);
                    g[r] = g[r] + t;
                }
            } else if (k == 1) {
                const double* __restrict b0 = a0 + rw[0] * R;
                const double* __restrict b2 = a2 + rw[2] * R;
                for (int64_t r = 0; r < R; r++) {
                    double t = ((y * lam[r]) * b0[r]) * b2[r];
                    g[r] = g[r] + t;
                }
            } else {
                const double* __restrict b0 = a0 + rw[0] * R;
                const double* __restrict b1 = a1 + rw[1] * R;
                for (int64_t r = 0; r < R; r++) {
                    double t = ((y * lam[r]) * b0[r]) * b1[r];
                    g[r] = g[r] + t;
                }
            }
        }
        return;
    }
    for (int64_t i = i0; i < i1; i++) {
        const int64_t* rw = srows + i * N;
        const double y = sy[i];
        double* __restrict g = g_k + rw[k] * R;
        for (int64_t r = 0; r < R; r++) {
            double p = y * lam[r], q = 1.0;
            for (int l = 0; l < k; l++) p = p * fac[l][rw[l] * R + r];
            for (int l = N - 1; l > k; l--) q = q * fac[l][rw[l] * R + r];
            double t = p * q;
            g[r] = g[r] + t;
        }
    }
}

/* The tasks of a block of the multi-threaded gradient, chunks 0 .. n-1 of samples: the first
   thread claims them from the front (and adds their samples straight into the gradient), the
   other threads from the back, until they meet.  Where they meet depends on the timing, the
   result does not.  Claims are rare (one per chunk of 256 samples or more): a critical
   section is cheap enough. */
typedef struct sktf_gcp_claims {
    int64_t front;  /* chunks 0 .. front-1 are the first thread's */
    int64_t back;   /* chunks back .. n-1 are the others' */
} sktf_gcp_claims;

/* the first thread's next chunks: sets *first and returns how many, 0 when they have met
   (1 / share of those left, at least one: larger pieces while the others are far) */
static inline int64_t sktf_gcp_claim_front(sktf_gcp_claims* c, int64_t share,
                                           int64_t* first) {
    int64_t got;
#ifdef _OPENMP
#pragma omp critical(sktf_gcp_claims)
#endif
    {
        got = c->back - c->front;
        if (got > 0) {
            got = got / share;
            if (got < 1) got = 1;
        } else {
            got = 0;
        }
        *first = c->front;
        c->front += got;
    }
    return got;
}

/* another thread's next chunk, or -1 when they have met */
static inline int64_t sktf_gcp_claim_back(sktf_gcp_claims* c) {
    int64_t got;
#ifdef _OPENMP
#pragma omp critical(sktf_gcp_claims)
#endif
    {
        if (c->back > c->front) got = --c->back;
        else got = -1;
    }
    return got;
}

/* The number of threads of the enclosing OpenMP parallel region (1 outside one). */
static inline int sktf_omp_team_size(void) {
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

/* A barrier of the enclosing OpenMP parallel region (an orphaned directive: the Cython
   kernels' parallel blocks run several loops, and Cython's prange loops end without one). */
static inline void sktf_omp_barrier(void) {
#ifdef _OPENMP
#pragma omp barrier
#endif
}

/* The drawing thread of the serial loop of steps (_gcp.pyx, _steps_drawn_ahead): the one
   thread computing the steps and the one drawing their samples ahead share a ring of steps'
   samples through three kinds of flags, each written by one thread only: a slot's "ready"
   (the step whose samples it holds, written by the drawer after the samples), "consumed"
   (steps finished, written by the computing thread after it read a slot) and "stop".  A
   release store publishes what the thread wrote (or read) before it; an acquire load sees it. */
#if defined(_MSC_VER) && !defined(__clang__)
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
/* interlocked operations: full barriers, on every target of the compiler */
static inline int64_t sktf_load_acquire(const int64_t* p) {
    return InterlockedCompareExchange64((volatile LONG64*)p, 0, 0);
}
static inline void sktf_store_release(int64_t* p, int64_t v) {
    InterlockedExchange64((volatile LONG64*)p, v);
}
/* gives up the rest of the time slice (Sleep(1) would sleep a timer tick, up to 16 ms) */
static inline void sktf_nap(void) { Sleep(0); }
#else
#include <time.h>
static inline int64_t sktf_load_acquire(const int64_t* p) {
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline void sktf_store_release(int64_t* p, int64_t v) {
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
/* a short sleep (the kernel rounds it up by its timer slack, about 50 us on Linux) */
static inline void sktf_nap(void) {
    struct timespec ts;
    ts.tv_sec = 0;
    ts.tv_nsec = 10000;
    nanosleep(&ts, NULL);
}
#endif

#endif /* SKTF_GCP_H */
