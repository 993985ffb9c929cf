/*
 * threads.h - how many compute threads a rank uses (the fast kernels' pool,
 * each thread calling OpenBLAS single-threaded; OpenBLAS's own threads
 * with DTF_CPU_KERNELS=reference).
 *
 * ranks x threads must not exceed the cores (DESIGN.md section 7): each
 * rank takes min(cores it may run on (its affinity mask, e.g. after
 * mpirun's --bind-to core), online cores / ranks on this node), at least 1.
 * An explicit --threads N, or OPENBLAS_NUM_THREADS in the environment, wins.
 */
#ifndef DTF_TRAIN_THREADS_H
#define DTF_TRAIN_THREADS_H

/* The thread count for this rank; `requested` > 0 overrides. */
int dtf_threads_choose(int requested, int local_ranks);

/* Flush denormal floats to zero in this thread and the threads it starts
 * afterwards (x86 MXCSR FTZ and DAZ), as TensorFlow does on CPU: late in
 * training, tiny gradients and Adam moments turn denormal and each
 * operation on them costs ~100 cycles. */
void dtf_threads_flush_denormals(void);

/* Tell OpenBLAS. */
void dtf_threads_set(int n);

/*
 * OpenBLAS picks its kernels from the CPU model when the library loads.
 * Debian's OpenBLAS 0.3.21 maps Sapphire Rapids (and other models newer
 * than its table, or whose kernel set it does not ship) to its generic
 * Prescott SSE3 kernels, which run sgemm about 5x slower than the AVX-512
 * ones.  When OPENBLAS_CORETYPE is unset and OpenBLAS chose Prescott on a
 * CPU with AVX-512 (AVX2+FMA), set OPENBLAS_CORETYPE=SkylakeX (Haswell)
 * and re-execute the program (/proc/self/exe, same argv) so the library
 * loads again with it; returns only when nothing was to be done or the
 * exec failed.  Call first thing in main(), before MPI is initialised.
 * An OPENBLAS_CORETYPE set by the user is always kept.
 */
void dtf_threads_fix_blas_core(char **argv);

/* OpenBLAS's kernel set, for the log ("SkylakeX", "Haswell", ...). */
const char *dtf_threads_blas_core(void);

struct dtf_pool;

/*
 * Set up `threads` threads for the kernels.  Default: the fast kernels
 * (ops/cpu/fast.h) on a pool of `threads` threads (*pool; NULL when 1),
 * each calling OpenBLAS single-threaded.  With DTF_CPU_KERNELS=reference
 * in the environment: the reference kernels (*use_fast = 0, no pool) with
 * OpenBLAS using `threads` threads, the way to compare the two.  Sets the
 * fast kernels' ISA (ops/cpu/isa.h) from DTF_CPU_ISA, with a warning for
 * an unknown value or one this CPU lacks.  Call after
 * dtf_threads_flush_denormals() so the workers inherit it.
 * Errors: those of dtf_pool_new().
 */
int dtf_threads_setup_fast(int threads, int *use_fast, struct dtf_pool **pool);

#endif
