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

/* Tell OpenBLAS. */
void dtf_threads_set(int n);

#endif
