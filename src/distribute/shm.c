/*
 * shm.c - a shared-memory window for the replicas' gradients (shm.h).
 */
#include "distribute/shm.h"

#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/finite.h"

/* floats summed per block: the block of sums stays in L1 */
#define BLOCK 1024
#define PAGE 4096

static void free_comm(MPI_Comm *c)
{
	if (*c != MPI_COMM_NULL)
		MPI_Comm_free(c);
	*c = MPI_COMM_NULL;
}

void dtf_shm_free(struct dtf_shm *sh)
{
	if (!sh)
		return;
	int fin = 0;
	MPI_Finalized(&fin);
	if (!fin) {
		if (sh->win != MPI_WIN_NULL) {
			if (sh->locked)
				MPI_Win_unlock_all(sh->win);
			MPI_Win_free(&sh->win);
		}
		free_comm(&sh->arrive);
		free_comm(&sh->reduced);
	}
	dtf_free(sh->seg);
	dtf_free(sh);
}

int dtf_shm_new(MPI_Comm comm, size_t n, size_t nshared,
		struct dtf_shm **out, const char **why)
{
	*out = NULL;
	*why = NULL;
	struct dtf_shm *sh = dtf_calloc(1, sizeof(*sh));
	int size = 1, rank = 0;
	MPI_Comm_size(comm, &size);
	MPI_Comm_rank(comm, &rank);
	if (sh) {
		sh->win = MPI_WIN_NULL;
		sh->arrive = sh->reduced = MPI_COMM_NULL;
		sh->rank = rank;
		sh->size = size;
		sh->n = n;
		sh->seg = dtf_calloc((size_t)size, sizeof(float *));
	}
	/* [0] made the handle, [1] made the window, [2] every segment is
	 * usable; the minimum over ranks decides, so all agree */
	int ok[3] = {sh && sh->seg, 0, 0}, all[3];
	if (MPI_Allreduce(ok, all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS ||
	    !all[0]) {
		*why = "out of memory for the window's handle";
		goto fallback;
	}
	/* room to align each segment: Open MPI puts them on no particular
	 * boundary, but the mapping starts on a page in every process, so
	 * rounding a segment's address up reaches the same byte everywhere */
	/* the shared part starts on the first cache line past rank 0's n */
	const size_t lead = (n + DTF_ALIGN / sizeof(float) - 1) /
			    (DTF_ALIGN / sizeof(float)) *
			    (DTF_ALIGN / sizeof(float));
	const size_t rank0 = nshared ? lead + nshared : n; /* rank 0's floats */
	size_t bytes = ((rank == 0 ? rank0 : n) * sizeof(float) + DTF_ALIGN +
			PAGE - 1) / PAGE * PAGE;
	MPI_Info info;
	MPI_Info_create(&info);
	/* each segment on pages of its own (not packed behind the last) */
	MPI_Info_set(info, "alloc_shared_noncontig", "true");
	float *base = NULL;
	int err = MPI_Win_allocate_shared((MPI_Aint)bytes, (int)sizeof(float),
					  info, comm, &base, &sh->win);
	MPI_Info_free(&info);
	ok[1] = err == MPI_SUCCESS;
	if (!ok[1])
		sh->win = MPI_WIN_NULL;
	ok[2] = ok[1];
	for (int q = 0; ok[2] && q < size; q++) {
		MPI_Aint qsize = 0;
		int disp = 0;
		void *qbase = NULL;
		if (MPI_Win_shared_query(sh->win, q, &qsize, &disp, &qbase) !=
			    MPI_SUCCESS ||
		    (size_t)qsize < (q == 0 ? rank0 : n) * sizeof(float) +
					    DTF_ALIGN) {
			ok[2] = 0;
			break;
		}
		uintptr_t a = ((uintptr_t)qbase + DTF_ALIGN - 1) &
			      ~(uintptr_t)(DTF_ALIGN - 1);
		sh->seg[q] = (float *)a;
	}
	/* every rank must see each segment at the same offset from a page
	 * (then the rounding above lands on the same byte): compare each
	 * rank's own view with everyone's */
	int *pg = dtf_calloc((size_t)size, sizeof(int));
	int mine = ok[1] ? (int)((uintptr_t)base % PAGE) : -1;
	if (MPI_Allgather(&mine, 1, MPI_INT, pg, 1, MPI_INT, comm) !=
		    MPI_SUCCESS || !pg)
		ok[2] = 0;
	for (int q = 0; ok[2] && q < size; q++) {
		MPI_Aint qsize = 0;
		int disp = 0;
		void *qbase = NULL;
		MPI_Win_shared_query(sh->win, q, &qsize, &disp, &qbase);
		if ((int)((uintptr_t)qbase % PAGE) != pg[q])
			ok[2] = 0;
	}
	dtf_free(pg);
	if (MPI_Allreduce(ok + 1, all + 1, 2, MPI_INT, MPI_MIN, comm) !=
	    MPI_SUCCESS)
		all[1] = all[2] = 0;
	if (!all[1] || !all[2]) {
		*why = !all[1] ? "MPI_Win_allocate_shared failed"
			       : "the window's segments are not aligned";
		/* a window made on some ranks only cannot be freed
		 * collectively: it is left to MPI_Finalize */
		int every = 0;
		MPI_Allreduce(ok + 1, &every, 1, MPI_INT, MPI_MIN, comm);
		if (!every)
			sh->win = MPI_WIN_NULL;
		goto fallback;
	}
	MPI_Win_set_errhandler(sh->win, MPI_ERRORS_RETURN);
	MPI_Win_lock_all(MPI_MODE_NOCHECK, sh->win);
	sh->locked = 1;
	memset(sh->seg[rank], 0, n * sizeof(float));
	if (nshared) {
		sh->shared = sh->seg[0] + lead;
		if (rank == 0)
			memset(sh->shared, 0, nshared * sizeof(float));
	}
	MPI_Win_sync(sh->win);
	if (MPI_Comm_dup(comm, &sh->arrive) != MPI_SUCCESS ||
	    MPI_Comm_dup(comm, &sh->reduced) != MPI_SUCCESS) {
		dtf_shm_free(sh);
		return dtf_error(DTF_ERR_MPI, "MPI_Comm_dup failed");
	}
	*out = sh;
	return 0;
fallback:
	dtf_shm_free(sh);
	return 0;
}

void dtf_shm_slice(size_t n, int part, int size, size_t *lo, size_t *hi)
{
	size_t a = (n * (size_t)part / (size_t)size + 15) & ~(size_t)15;
	size_t b = (n * (size_t)(part + 1) / (size_t)size + 15) & ~(size_t)15;
	*lo = a < n ? a : n;
	*hi = part == size - 1 || b > n ? n : b;
}

static void add2(float *restrict t, const float *restrict a,
		 const float *restrict b, size_t m)
{
	for (size_t j = 0; j < m; j++)
		t[j] = a[j] + b[j];
}

static void add1(float *restrict t, const float *restrict a, size_t m)
{
	for (size_t j = 0; j < m; j++)
		t[j] += a[j];
}

/* the non-finite check (core/finite.h), for AVX2 where the CPU has it */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && \
	!defined(__clang__)
__attribute__((target("avx2"))) static uint32_t
nonfinite_avx2(size_t n, const float *restrict x)
{
	return dtf_nonfinite_body(n, x);
}

static int nonfinite(size_t n, const float *x)
{
	if (__builtin_cpu_supports("avx2"))
		return nonfinite_avx2(n, x) != 0;
	return dtf_nonfinite_body(n, x) != 0;
}
#else
static int nonfinite(size_t n, const float *x)
{
	return dtf_nonfinite_body(n, x) != 0;
}
#endif

int dtf_shm_sum(const struct dtf_shm *sh, size_t off, size_t n)
{
	_Alignas(64) float t[BLOCK];
	float *dst = sh->seg[sh->rank] + off;
	int bad = 0;
	if (sh->size == 1)
		return nonfinite(n, dst);
	for (size_t i = 0; i < n; i += BLOCK) {
		size_t m = n - i < BLOCK ? n - i : BLOCK;
		add2(t, sh->seg[0] + off + i, sh->seg[1] + off + i, m);
		for (int k = 2; k < sh->size; k++)
			add1(t, sh->seg[k] + off + i, m);
		/* checked while the block is in L1, not in a pass of its own */
		bad |= nonfinite(m, t);
		memcpy(dst + i, t, m * sizeof(float));
	}
	return bad;
}

void dtf_shm_copy_from(const struct dtf_shm *sh, int from, size_t off,
		       size_t n)
{
	memcpy(sh->seg[sh->rank] + off, sh->seg[from] + off,
	       n * sizeof(float));
}
