/*
 * threadpool.c - a fixed pool of worker threads for the fast kernels.
 *
 * Design: one job at a time.  dtf_pool_run() publishes (fn, arg), bumps a
 * generation counter and wakes the workers; each worker runs fn with its
 * id and decrements `pending`; the caller runs thread 0's share itself and
 * then waits for pending == 0.  Both sides spin briefly before sleeping on
 * a condition variable: a training step issues a few dozen jobs a few
 * milliseconds apart, so a short spin catches the next one without a
 * futex round trip, while an idle pool (evaluation, I/O) sleeps and leaves
 * the cores to others.  Nothing is allocated after dtf_pool_new().
 */
#include "ops/cpu/fast.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* Busy-wait iterations before sleeping (a pause is ~10-140 cycles: tens
 * of microseconds in all). */
#define SPIN 2000

struct worker {
	struct dtf_pool *pool;
	int tid;
};

struct dtf_pool {
	int n;
	pthread_t *threads;
	struct worker *workers;
	int started;
	pthread_mutex_t mu;
	pthread_cond_t work_cv, done_cv;
	atomic_uint gen;
	atomic_int pending;
	atomic_int stop;
	dtf_pool_fn fn;
	void *arg;
};

static void *worker_main(void *vp)
{
	struct worker *w = vp;
	struct dtf_pool *p = w->pool;
	/* No job was posted before the workers started (dtf_pool_new()
	 * returns first); reading gen here instead would race with the
	 * first dtf_pool_run() and could miss that job. */
	unsigned seen = 0;
	for (;;) {
		int i = 0;
		while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen &&
		       !atomic_load(&p->stop) && i++ < SPIN)
			CPU_RELAX();
		if (atomic_load_explicit(&p->gen, memory_order_acquire) == seen &&
		    !atomic_load(&p->stop)) {
			pthread_mutex_lock(&p->mu);
			while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
				pthread_cond_wait(&p->work_cv, &p->mu);
			pthread_mutex_unlock(&p->mu);
		}
		if (atomic_load(&p->stop))
			return NULL;
		seen = atomic_load_explicit(&p->gen, memory_order_acquire);
		p->fn(p->arg, w->tid, p->n);
		if (atomic_fetch_sub_explicit(&p->pending, 1,
					      memory_order_acq_rel) == 1) {
			pthread_mutex_lock(&p->mu);
			pthread_cond_signal(&p->done_cv);
			pthread_mutex_unlock(&p->mu);
		}
	}
}

int dtf_pool_new(int nthreads, struct dtf_pool **out)
{
	*out = NULL;
	struct dtf_pool *p = dtf_calloc(1, sizeof(*p));
	if (!p)
		return dtf_error(DTF_ERR_NOMEM, "out of memory for threads");
	p->n = nthreads > 1 ? nthreads : 1;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->work_cv, NULL);
	pthread_cond_init(&p->done_cv, NULL);
	atomic_init(&p->gen, 0);
	atomic_init(&p->pending, 0);
	atomic_init(&p->stop, 0);
	if (p->n > 1) {
		p->threads = dtf_calloc((size_t)p->n, sizeof(pthread_t));
		p->workers = dtf_calloc((size_t)p->n, sizeof(struct worker));
		if (!p->threads || !p->workers) {
			dtf_pool_free(p);
			return dtf_error(DTF_ERR_NOMEM, "out of memory for threads");
		}
		for (int t = 1; t < p->n; t++) {
			p->workers[t].pool = p;
			p->workers[t].tid = t;
			int rc = pthread_create(&p->threads[t], NULL, worker_main,
						&p->workers[t]);
			if (rc != 0) {
				dtf_pool_free(p);
				return dtf_error(DTF_ERR_IO,
						 "cannot start worker thread %d: %s",
						 t, strerror(rc));
			}
			p->started = t;
		}
	}
	*out = p;
	return 0;
}

void dtf_pool_free(struct dtf_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	atomic_store(&p->stop, 1);
	pthread_cond_broadcast(&p->work_cv);
	pthread_mutex_unlock(&p->mu);
	for (int t = 1; t <= p->started; t++)
		pthread_join(p->threads[t], NULL);
	pthread_cond_destroy(&p->work_cv);
	pthread_cond_destroy(&p->done_cv);
	pthread_mutex_destroy(&p->mu);
	dtf_free(p->threads);
	dtf_free(p->workers);
	dtf_free(p);
}

int dtf_pool_size(const struct dtf_pool *p) { return p ? p->n : 1; }

void dtf_pool_run(struct dtf_pool *p, dtf_pool_fn fn, void *arg)
{
	if (!p || p->n <= 1) {
		fn(arg, 0, 1);
		return;
	}
	p->fn = fn;
	p->arg = arg;
	atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
	pthread_mutex_lock(&p->mu);
	atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
	pthread_cond_broadcast(&p->work_cv);
	pthread_mutex_unlock(&p->mu);
	fn(arg, 0, p->n);
	int i = 0;
	while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0 &&
	       i++ < SPIN)
		CPU_RELAX();
	if (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
		pthread_mutex_lock(&p->mu);
		while (atomic_load(&p->pending) > 0)
			pthread_cond_wait(&p->done_cv, &p->mu);
		pthread_mutex_unlock(&p->mu);
	}
}

void dtf_pool_split(size_t n, size_t align, int tid, int nt, size_t *lo,
		    size_t *hi)
{
	if (align < 1)
		align = 1;
	size_t units = (n + align - 1) / align;
	size_t per = units / (size_t)nt, extra = units % (size_t)nt;
	size_t u0 = (size_t)tid * per + ((size_t)tid < extra ? (size_t)tid : extra);
	size_t u1 = u0 + per + ((size_t)tid < extra ? 1 : 0);
	*lo = u0 * align < n ? u0 * align : n;
	*hi = u1 * align < n ? u1 * align : n;
}
