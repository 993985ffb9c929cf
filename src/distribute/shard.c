/*
 * shard.c - the replicas' vectors in the shared-memory window
 * (distribute/shm.h) and the sharded update (ZeRO stage 1, Rajbhandari
 * et al., SC 2020): replica r applies the optimizer to slice r of every
 * bucket of the one shared copy of the variables, and completes its
 * optimizer slots from the others' for a checkpoint.
 */
#include <mpi.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "distribute/strategy_impl.h"


int dtf_strategy_wants_shared_grads(const struct dtf_strategy *s)
{
	return s && s->shm_comm != MPI_COMM_NULL;
}

/* Why every replica must update all the variables, or NULL: the global
 * norm needs every gradient, and non-trainable variables (batch_norm's
 * moving statistics) are each replica's own until averaged. */
static const char *whole_update_why(const struct dtf_strategy *s,
				    const struct dtf_graph *g)
{
	if (s->o.clipnorm > 0)
		return "clipnorm";
	if (!g)
		return "no graph";
	if (dtf_graph_num_nontrainable(g) > 0)
		return "non-trainable variables";
	return NULL;
}

int dtf_strategy_share_grads(struct dtf_strategy *s, const struct dtf_graph *g,
			     size_t n, float **grads, float **params)
{
	*grads = NULL;
	if (params)
		*params = NULL;
	if (!dtf_strategy_wants_shared_grads(s))
		return 0;
	/* a sharded update keeps the variables in the window too */
	s->zs.whole_why = whole_update_why(s, params ? g : NULL);
	int shard = !s->zs.whole_why;
	int rc = dtf_shm_new(s->shm_comm, n, shard ? (size_t)g->nparams : 0,
			     &s->shm, &s->shm_why);
	if (rc < 0)
		return rc;
	if (!s->shm) {
		const char *where = s->o.implementation_where
					    ? s->o.implementation_where
					    : "";
		if (s->o.implementation == DTF_COMM_IMPL_SHARED_MEMORY)
			return dtf_error(DTF_ERR_MPI,
					 "%s%sstrategy.communication.implementation: shared_memory: %s",
					 where, where[0] ? ": " : "", s->shm_why);
		if (s->replicas->rank == 0)
			dtf_warn("shared-memory gradient reduction unavailable (%s): using MPI_Iallreduce",
				 s->shm_why);
		return 0;
	}
	*grads = s->shm->seg[s->shm->rank];
	s->zs.sharded = shard;
	if (shard)
		*params = s->shm->shared;
	return 0;
}

int dtf_strategy_writes_params(const struct dtf_strategy *s)
{
	return !s || !s->zs.sharded || s->shm->rank == 0;
}

int dtf_strategy_share_params(struct dtf_strategy *s, struct dtf_comm *comm,
			      float *params, size_t n)
{
	if (!s || !s->zs.sharded)
		return dtf_comm_bcast_f32(comm, params, n, 0);
	/* replica 0 wrote the one copy: order its stores before the others'
	 * loads */
	MPI_Win_sync(s->shm->win);
	MPI_TRY(MPI_Barrier(s->shm->reduced));
	MPI_Win_sync(s->shm->win);
	return 0;
}

/* ---- the sharded update (ZeRO stage 1) through the window ------------------ */

struct shard_fill {
	int count_only, nm, nt;
};

static void note_range(struct dtf_strategy *s, int part, size_t off,
		       size_t n, void *ctx)
{
	struct shard_fill *f = ctx;
	if (part == s->shm->rank) {
		if (!f->count_only)
			s->zs.mine[f->nm] = (struct dtf_update_range){off, n};
		f->nm++;
	} else {
		if (!f->count_only)
			s->zs.theirs[f->nt] = (struct shard_range){off, n, part};
		f->nt++;
	}
}

/* This replica's ranges (its slice of every bucket) and the others'. */
int dtf_shard_make(struct dtf_strategy *s)
{
	for (int pass = 0; pass < 2; pass++) {
		struct shard_fill f = {pass == 0, 0, 0};
		for (int bi = 0; bi < s->fu.nbuckets; bi++)
			for (int q = 0; q < s->shm->size; q++)
				dtf_fusion_each_slice_range(s, &s->fu.buckets[bi],
							    q, note_range, &f);
		if (pass == 0) {
			s->zs.mine = dtf_calloc((size_t)f.nm + 1,
						sizeof(*s->zs.mine));
			s->zs.theirs = dtf_calloc((size_t)f.nt + 1,
						  sizeof(*s->zs.theirs));
			if (!s->zs.mine || !s->zs.theirs)
				return dtf_error(DTF_ERR_NOMEM,
						 "out of memory for the shards of the update");
		}
		s->zs.nmine = f.nm;
		s->zs.ntheirs = f.nt;
	}
	return 0;
}

/* Every replica holds all s->np floats of an optimizer slot v where only
 * its own ranges are current: publish them in its segment (whose
 * gradients are used up once the update is applied), then take the
 * others'.  A collective over the replicas; after it a replica may write
 * its segment again only past a later synchronization (the closing
 * barrier of dtf_strategy_sync_slots). */
static int exchange_shards(struct dtf_strategy *s, float *v)
{
	struct dtf_shm *sh = s->shm;
	float *out = sh->seg[sh->rank];
	for (int i = 0; i < s->zs.nmine; i++)
		memcpy(out + s->zs.mine[i].off, v + s->zs.mine[i].off,
		       s->zs.mine[i].n * sizeof(float));
	MPI_Win_sync(sh->win);
	MPI_TRY(MPI_Barrier(sh->reduced));
	MPI_Win_sync(sh->win);
	for (int i = 0; i < s->zs.ntheirs; i++) {
		const struct shard_range *r = &s->zs.theirs[i];
		memcpy(v + r->off, sh->seg[r->owner] + r->off,
		       r->n * sizeof(float));
	}
	return 0;
}

int dtf_strategy_sync_slots(struct dtf_strategy *s)
{
	if (!s || !s->zs.sharded || !s->upd.slot(s->upd.ctx, 0))
		return 0;
	int rc;
	/* every replica has applied its update: the segments' gradients
	 * are used up */
	MPI_TRY(MPI_Barrier(s->shm->reduced));
	float *slot;
	for (int k = 0; (slot = s->upd.slot(s->upd.ctx, k)) != NULL; k++) {
		if ((rc = exchange_shards(s, slot)) < 0)
			return rc;
		/* the others have read this replica's segment */
		MPI_TRY(MPI_Barrier(s->shm->reduced));
	}
	return 0;
}

/* The sharded update of a step at lr, from t1 (now() once the gradients
 * were reduced and judged finite): this replica's ranges, then the
 * barrier that ends the update. */
int dtf_shard_apply(struct dtf_strategy *s, double lr, double t1,
		    double *comm_s, double *opt_s)
{
	int rc;
	/* every replica is past its backward pass (it joined the
	 * allreduce above): the one copy may change */
	if ((rc = s->upd.apply_ranges(s->upd.ctx, s->params, s->grads,
				      lr, s->zs.mine, s->zs.nmine)) < 0)
		return rc;
	double t2 = now();
	*opt_s += t2 - t1;
	/* every replica has applied its part before any reads the
	 * variables again; none writes them again before the next
	 * step's statistics allreduce */
	MPI_Win_sync(s->shm->win);
	MPI_TRY(MPI_Barrier(s->shm->reduced));
	MPI_Win_sync(s->shm->win);
	*comm_s += now() - t2;
	return 0;
}

void dtf_shard_deinit(struct dtf_shard *zs)
{
	dtf_free(zs->mine);
	dtf_free(zs->theirs);
	memset(zs, 0, sizeof(*zs));
}
