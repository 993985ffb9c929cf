/*
 * buckets.c - fusion buckets (Horovod tensor fusion, PyTorch DDP buckets)
 * and their reduction: by nonblocking MPI collectives cut into units of at
 * most CHUNK floats (flat, to replica 0 for central_storage, or in three
 * stages for hierarchical), or through the replicas' shared-memory window
 * (distribute/shm.h).
 *
 * Ordering rule: MPI requires the ranks of a communicator to start their
 * collectives on it in the same order.  Buckets are launched in bucket
 * order (the order backward produces gradients, the same on every rank);
 * the later stages of the hierarchical reduction (leaders' allreduce,
 * broadcast in the node) are started by cursors that walk the units in
 * order, each stage on a communicator of its own (the node-reduce and the
 * node-broadcast communicators are duplicates), so no rank can interleave
 * two stages differently from another.
 */
#include <mpi.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "distribute/strategy_impl.h"


/* With overlap, buckets hold at most 1/OVERLAP_BUCKETS of all gradients,
 * whatever bucket_mb says: a model smaller than one bucket would otherwise
 * be one bucket, ready only when backward ends, with nothing to overlap
 * (PyTorch DDP's small first bucket answers the same problem). */
#define OVERLAP_BUCKETS 4

int dtf_fusion_make(struct dtf_strategy *s)
{
	size_t cap = (size_t)(s->o.bucket_mb * 1e6 / 4);
	if (s->overlap && cap > s->np / OVERLAP_BUCKETS)
		cap = s->np / OVERLAP_BUCKETS;
	if (cap < 1)
		cap = 1;
	s->fu.cap = cap;
	s->fu.buckets = dtf_calloc((size_t)s->nvars + 1, sizeof(*s->fu.buckets));
	if (!s->fu.buckets)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	for (int i = 0; i < s->nvars; i++) {
		struct bucket *b = s->fu.nbuckets
					   ? &s->fu.buckets[s->fu.nbuckets - 1]
					       : NULL;
		if (!b || (b->n > 0 && b->n + s->vars[i].n > cap)) {
			b = &s->fu.buckets[s->fu.nbuckets++];
			b->first = i;
		}
		b->nvars++;
		b->n += s->vars[i].n;
		b->trigger = s->vars[i].grad_node;
	}
	/* where each bucket lives; chunks */
	size_t packed_total = 0, nunits = 0;
	for (int bi = 0; bi < s->fu.nbuckets; bi++) {
		struct bucket *b = &s->fu.buckets[bi];
		size_t lo = (size_t)-1, hi = 0;
		for (int i = b->first; i < b->first + b->nvars; i++) {
			if (s->vars[i].off < lo)
				lo = s->vars[i].off;
			if (s->vars[i].off + s->vars[i].n > hi)
				hi = s->vars[i].off + s->vars[i].n;
		}
		/* shared memory reduces each variable where it lies */
		b->packed = !s->shm && hi - lo != b->n;
		b->buf = b->packed ? NULL : s->grads + lo;
		packed_total += b->packed ? b->n : 0;
		b->nunits = (int)((b->n + CHUNK - 1) / CHUNK);
		nunits += (size_t)b->nunits;
	}
	if (packed_total &&
	    !(s->fu.fusion = dtf_alloc_aligned(packed_total * sizeof(float))))
		return dtf_error(DTF_ERR_NOMEM, "out of memory for fusion buffers");
	if (s->cz.kind != DTF_GRAD_COMPRESSION_NONE &&
	    !(s->cz.half = dtf_alloc_aligned(s->np * sizeof(uint16_t) + 64)))
		return dtf_error(DTF_ERR_NOMEM, "out of memory for compression");
	s->fu.units = dtf_calloc(nunits + 1, sizeof(*s->fu.units));
	if (!s->fu.units)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	size_t poff = 0, hoff = 0;
	for (int bi = 0; bi < s->fu.nbuckets; bi++) {
		struct bucket *b = &s->fu.buckets[bi];
		if (b->packed) {
			b->buf = s->fu.fusion + poff;
			poff += b->n;
		}
		if (s->cz.half) {
			b->half = s->cz.half + hoff;
			hoff += b->n;
		}
		b->first_unit = s->fu.nunits;
		for (size_t off = 0; off < b->n; off += CHUNK) {
			struct unit *u = &s->fu.units[s->fu.nunits++];
			u->bucket = bi;
			u->off = off;
			u->n = b->n - off < CHUNK ? b->n - off : CHUNK;
			u->req = MPI_REQUEST_NULL;
		}
		b->sh_req = MPI_REQUEST_NULL;
	}
	return 0;
}

void dtf_fusion_add_acc(struct dtf_strategy *s, const struct var *v)
{
	float *restrict g = s->grads + v->off;
	float *restrict a = s->acc + v->off;
	for (size_t i = 0; i < v->n; i++) {
		g[i] += a[i];
		a[i] = 0.0f;
	}
}

static int start_stage(struct dtf_strategy *s, struct unit *u, enum stage st)
{
	struct bucket *b = &s->fu.buckets[u->bucket];
	void *p;
	MPI_Datatype t;
	MPI_Op op;
	if (b->half) {
		p = b->half + u->off;
		t = MPI_UINT16_T;
		op = s->cz.op;
	} else {
		p = b->buf + u->off;
		t = MPI_FLOAT;
		op = MPI_SUM;
	}
	int n = (int)u->n, err;
	u->stage = st;
	u->busy = 1;
	if (st == ST_LEADERS) {
		err = MPI_Iallreduce(MPI_IN_PLACE, p, n, t, op, s->leaders,
				     &u->req);
	} else if (st == ST_BCAST) {
		err = MPI_Ibcast(p, n, t, 0, s->node_bc, &u->req);
	} else if (s->hierarchical) {
		err = MPI_Ireduce(s->is_leader ? MPI_IN_PLACE : p, p, n, t, op,
				  0, s->node_red, &u->req);
	} else if (s->kind == DTF_STRATEGY_CENTRAL_STORAGE) {
		err = MPI_Ireduce(s->rank == 0 ? MPI_IN_PLACE : p, p, n, t, op,
				  0, s->bcomm, &u->req);
	} else {
		err = MPI_Iallreduce(MPI_IN_PLACE, p, n, t, op, s->bcomm,
				     &u->req);
	}
	return err == MPI_SUCCESS ? 0 : dtf_comm_mpi_fail(err, "starting a gradient reduction");
}

/* ---- buckets through shared memory (distribute/shm.h) ------------------------------- */

/* Call fn(s, part, off, n, ctx) on each range of the gradient vector in
 * slice `part` of bucket b: the slice is of the bucket's floats in
 * variable order, each variable where it lies in the gradient vector. */
void dtf_fusion_each_slice_range(struct dtf_strategy *s,
				 const struct bucket *b, int part,
				 void (*fn)(struct dtf_strategy *s, int part,
					    size_t off, size_t n, void *ctx),
				 void *ctx)
{
	size_t lo, hi, off = 0;
	dtf_shm_slice(b->n, part, s->shm->size, &lo, &hi);
	for (int i = b->first; i < b->first + b->nvars && off < hi; i++) {
		const struct var *v = &s->vars[i];
		size_t a = lo > off ? lo - off : 0;
		size_t e = hi - off < v->n ? hi - off : v->n;
		if (a < e)
			fn(s, part, v->off + a, e - a, ctx);
		off += v->n;
	}
}

static void sum_range(struct dtf_strategy *s, int part, size_t off, size_t n,
		      void *ctx)
{
	(void)part;
	(void)ctx;
	s->fu.sh_bad |= dtf_shm_sum(s->shm, off, n);
}

static void copy_range(struct dtf_strategy *s, int part, size_t off,
		       size_t n, void *ctx)
{
	(void)ctx;
	dtf_shm_copy_from(s->shm, part, off, n);
}

/* Sum (gather 0) or copy in (gather 1) slice `part` of bucket b. */
static void shm_slice(struct dtf_strategy *s, const struct bucket *b,
		      int part, int gather)
{
	dtf_fusion_each_slice_range(s, b, part,
				    gather ? copy_range : sum_range, NULL);
}

static int shm_test(MPI_Request *req, int block, int *done)
{
	int err = block ? MPI_Wait(req, MPI_STATUS_IGNORE)
			: MPI_Test(req, done, MPI_STATUS_IGNORE);
	if (err != MPI_SUCCESS)
		return dtf_comm_mpi_fail(err, block ? "MPI_Wait" : "MPI_Test");
	if (block)
		*done = 1;
	return 0;
}

/* Move the launched buckets on: a bucket every replica has reached is
 * summed (this rank's slice), one every replica has summed is gathered.
 * block: until every bucket is gathered (all must have been launched). */
static int shm_progress(struct dtf_strategy *s, int block)
{
	struct dtf_shm *sh = s->shm;
	for (;;) {
		int moved = 0, done, rc, err;
		while (s->fu.sh_gather < s->fu.sh_red) {
			struct bucket *b = &s->fu.buckets[s->fu.sh_gather];
			done = 0;
			if ((rc = shm_test(&b->sh_req, 0, &done)) < 0)
				return rc;
			if (!done)
				break;
			MPI_Win_sync(sh->win);
			for (int q = 0; q < sh->size; q++)
				if (q != sh->rank)
					shm_slice(s, b, q, 1);
			s->fu.sh_gather++;
			b->t_done = now();
			moved = 1;
		}
		while (s->fu.sh_red < s->fu.next_bucket) {
			struct bucket *b = &s->fu.buckets[s->fu.sh_red];
			done = 0;
			if ((rc = shm_test(&b->sh_req, 0, &done)) < 0)
				return rc;
			if (!done)
				break;
			MPI_Win_sync(sh->win);
			shm_slice(s, b, sh->rank, 0);
			s->fu.sh_red++;
			moved = 1;
			if (s->zs.sharded) { /* no gather: each updates its own */
				s->fu.sh_gather++;
				b->t_done = now();
				continue;
			}
			MPI_Win_sync(sh->win);
			err = MPI_Ibarrier(sh->reduced, &b->sh_req);
			if (err != MPI_SUCCESS)
				return dtf_comm_mpi_fail(err, "MPI_Ibarrier");
		}
		if (!block || s->fu.sh_gather == s->fu.nbuckets)
			return 0;
		if (moved)
			continue;
		/* nothing ready: wait for the oldest barrier */
		struct bucket *b = &s->fu.buckets[s->fu.sh_red < s->fu.nbuckets
						       ? s->fu.sh_red
						       : s->fu.sh_gather];
		if ((rc = shm_test(&b->sh_req, 1, &done)) < 0)
			return rc;
		/* the request is now MPI_REQUEST_NULL: MPI_Test on it
		 * answers done at once */
	}
}

static int launch(struct dtf_strategy *s, int bi)
{
	struct bucket *b = &s->fu.buckets[bi];
	const struct var *v0 = &s->vars[b->first];
	b->t_launch = now();
	if (s->have_acc)
		for (int i = 0; i < b->nvars; i++)
			dtf_fusion_add_acc(s, &v0[i]);
	if (!comm_active(s))
		return 0;
	if (s->shm) { /* this rank's gradients of the bucket are final */
		MPI_Win_sync(s->shm->win);
		int err = MPI_Ibarrier(s->shm->arrive, &b->sh_req);
		return err == MPI_SUCCESS ? 0 : dtf_comm_mpi_fail(err, "MPI_Ibarrier");
	}
	if (b->half || b->packed) {
		size_t off = 0;
		float scale = 1.0f / (float)s->nreplicas;
		for (int i = 0; i < b->nvars; i++) {
			const float *g = s->grads + v0[i].off;
			if (b->half)
				dtf_compress_pack(s->cz.kind, g, b->half + off,
					 v0[i].n, scale);
			else
				memcpy(b->buf + off, g, v0[i].n * sizeof(float));
			off += v0[i].n;
		}
	}
	for (int u = b->first_unit; u < b->first_unit + b->nunits; u++) {
		int rc = start_stage(s, &s->fu.units[u], ST_LOCAL);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Time the launched buckets whose units are all done. */
static void mark_done(struct dtf_strategy *s)
{
	double t = 0;
	for (int bi = 0; bi < s->fu.next_bucket; bi++) {
		struct bucket *b = &s->fu.buckets[bi];
		if (b->t_done > 0)
			continue;
		int done = 1;
		for (int u = b->first_unit; u < b->first_unit + b->nunits && done; u++)
			done = s->fu.units[u].stage == ST_DONE;
		if (done)
			b->t_done = t > 0 ? t : (t = now());
	}
}

/* Start the hierarchical follow-up stages, in unit order. */
static int advance_stages(struct dtf_strategy *s)
{
	for (int i = 0; i < s->fu.nunits; i++) {
		struct unit *u = &s->fu.units[i];
		if (!u->busy && u->stage != ST_IDLE && u->stage != ST_DONE &&
		    !s->hierarchical)
			u->stage = ST_DONE;
	}
	if (!s->hierarchical)
		return 0;
	int rc;
	while (s->is_leader && s->fu.cur_lead < s->fu.nunits) {
		struct unit *u = &s->fu.units[s->fu.cur_lead];
		if (u->busy || u->stage != ST_LOCAL)
			break;
		if ((rc = start_stage(s, u, ST_LEADERS)) < 0)
			return rc;
		s->fu.cur_lead++;
	}
	while (s->fu.cur_bcast < s->fu.nunits) {
		struct unit *u = &s->fu.units[s->fu.cur_bcast];
		enum stage before = s->is_leader ? ST_LEADERS : ST_LOCAL;
		if (u->busy || u->stage != before)
			break;
		if ((rc = start_stage(s, u, ST_BCAST)) < 0)
			return rc;
		s->fu.cur_bcast++;
	}
	for (int i = 0; i < s->fu.nunits; i++)
		if (!s->fu.units[i].busy && s->fu.units[i].stage == ST_BCAST)
			s->fu.units[i].stage = ST_DONE;
	return 0;
}

/* advance_stages, then time the buckets that are reduced */
static int advance(struct dtf_strategy *s)
{
	int rc = advance_stages(s);
	mark_done(s);
	return rc;
}

/* Let MPI move data: test every active request once. */
static int progress(struct dtf_strategy *s)
{
	if (s->shm)
		return shm_progress(s, 0);
	int any = 0;
	for (int i = 0; i < s->fu.nunits; i++) {
		struct unit *u = &s->fu.units[i];
		if (!u->busy)
			continue;
		int flag = 0;
		int err = MPI_Test(&u->req, &flag, MPI_STATUS_IGNORE);
		if (err != MPI_SUCCESS)
			return dtf_comm_mpi_fail(err, "MPI_Test");
		if (flag) {
			u->busy = 0;
			any = 1;
		}
	}
	return any ? advance(s) : 0;
}

/* Wait for every unit, in order. */
int dtf_fusion_wait(struct dtf_strategy *s)
{
	int rc;
	if (s->shm)
		return shm_progress(s, 1);
	for (;;) {
		int i = 0;
		while (i < s->fu.nunits && s->fu.units[i].stage == ST_DONE)
			i++;
		if (i == s->fu.nunits)
			return 0;
		struct unit *u = &s->fu.units[i];
		if (u->busy) {
			int err = MPI_Wait(&u->req, MPI_STATUS_IGNORE);
			if (err != MPI_SUCCESS)
				return dtf_comm_mpi_fail(err, "MPI_Wait");
			u->busy = 0;
		}
		if ((rc = advance(s)) < 0)
			return rc;
		if ((rc = progress(s)) < 0)
			return rc;
	}
}

void dtf_fusion_unpack(struct dtf_strategy *s)
{
	for (int bi = 0; bi < s->fu.nbuckets; bi++) {
		struct bucket *b = &s->fu.buckets[bi];
		if (!b->half && !b->packed)
			continue;
		size_t off = 0;
		for (int i = b->first; i < b->first + b->nvars; i++) {
			const struct var *v = &s->vars[i];
			if (b->half)
				dtf_compress_unpack(s->cz.kind, b->half + off,
					   s->grads + v->off, v->n,
					   (float)s->nreplicas);
			else
				memcpy(s->grads + v->off, b->buf + off,
				       v->n * sizeof(float));
			off += v->n;
		}
	}
}

/* ---- a whole buffer through the strategy's collectives (benchmarks) ---------- */

/* One bucket of n floats at buf (inside this rank's segment) through the
 * shared window, blocking, with the closing barrier a step's statistics
 * allreduce would give. */
int dtf_fusion_shm_reduce_buffer(struct dtf_strategy *s, float *buf,
				 size_t n)
{
	struct dtf_shm *sh = s->shm;
	float *me = sh->seg[sh->rank];
	if (buf < me || n > sh->n || (size_t)(buf - me) > sh->n - n)
		return dtf_error(DTF_ERR_USAGE,
				 "reducing through shared memory: the buffer is not in this rank's segment (dtf_strategy_share_grads)");
	size_t base = (size_t)(buf - me), lo, hi;
	MPI_Win_sync(sh->win);
	MPI_TRY(MPI_Barrier(sh->arrive));
	MPI_Win_sync(sh->win);
	dtf_shm_slice(n, sh->rank, sh->size, &lo, &hi);
	dtf_shm_sum(sh, base + lo, hi - lo);
	MPI_Win_sync(sh->win);
	MPI_TRY(MPI_Barrier(sh->reduced));
	MPI_Win_sync(sh->win);
	for (int q = 0; q < sh->size; q++) {
		if (q == sh->rank)
			continue;
		dtf_shm_slice(n, q, sh->size, &lo, &hi);
		dtf_shm_copy_from(sh, q, base + lo, hi - lo);
	}
	MPI_Win_sync(sh->win);
	MPI_TRY(MPI_Barrier(sh->arrive));
	return 0;
}

/* A new step: no bucket launched, every unit idle. */
void dtf_fusion_begin(struct dtf_strategy *s)
{
	struct dtf_fusion *fu = &s->fu;
	fu->next_bucket = 0;
	fu->cur_lead = fu->cur_bcast = 0;
	fu->sh_red = fu->sh_gather = fu->sh_bad = 0;
	for (int i = 0; i < fu->nunits; i++)
		fu->units[i].stage = ST_IDLE;
	for (int i = 0; i < fu->nbuckets; i++)
		fu->buckets[i].t_launch = fu->buckets[i].t_done = 0;
}

/* After backward node `node`: launch the buckets it completed, else let
 * the launched ones progress. */
void dtf_fusion_after_node(struct dtf_strategy *s, int node)
{
	int launched = 0, rc = 0;
	while (rc == 0 && s->fu.next_bucket < s->fu.nbuckets &&
	       s->fu.buckets[s->fu.next_bucket].trigger <= node) {
		rc = launch(s, s->fu.next_bucket++);
		launched = 1;
	}
	if (rc == 0 && !launched && s->in_step)
		rc = progress(s);
	if (rc < 0 && !s->err)
		s->err = rc; /* reported by dtf_strategy_finish_step */
}

/* Launch the buckets backward has not launched (no overlap). */
int dtf_fusion_launch_rest(struct dtf_strategy *s)
{
	int rc;
	while (s->fu.next_bucket < s->fu.nbuckets)
		if ((rc = launch(s, s->fu.next_bucket++)) < 0)
			return rc;
	return 0;
}

void dtf_fusion_deinit(struct dtf_fusion *fu)
{
	dtf_free(fu->buckets);
	dtf_free(fu->units);
	dtf_free(fu->fusion);
	memset(fu, 0, sizeof(*fu));
}
