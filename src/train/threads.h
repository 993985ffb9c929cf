/*
 * threads.h - how many BLAS threads a rank uses.
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

#endif
