/*
 * strategy.c - the strategy dispatch: roles and sub-communicators, setup,
 * and each step's backward and finish, handed to the part that serves the
 * strategy: fusion buckets (buckets.c) with compression (compress.c) or
 * the shared window and its sharded update (shard.c), or the parameter
 * server (ps.c).  strategy_impl.h says what they share.
 *
 * Blocking collectives of the step (statistics, variables) run on the
 * replica communicator once every bucket is done (the ordering rule of
 * the buckets' nonblocking ones: buckets.c).
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "distribute/strategy_impl.h"

/* ---- creation --------------------------------------------------------------- */

enum dtf_task_type dtf_strategy_role(const struct dtf_strategy *s)
{
	return s->role;
}

struct dtf_comm *dtf_strategy_replica_comm(const struct dtf_strategy *s)
{
	return s->replicas;
}

int dtf_strategy_num_buckets(const struct dtf_strategy *s)
{
	if (!s || s->kind == DTF_STRATEGY_PARAMETER_SERVER || !comm_active(s))
		return 0;
	return s->fu.nbuckets;
}

int dtf_strategy_bucket_span(const struct dtf_strategy *s, int k,
			     double *launched, double *done)
{
	if (k < 0 || k >= dtf_strategy_num_buckets(s))
		return -1;
	const struct bucket *b = &s->fu.buckets[k];
	if (!(b->t_launch > 0) || !(b->t_done >= b->t_launch))
		return -1;
	*launched = b->t_launch;
	*done = b->t_done;
	return 0;
}

int dtf_strategy_num_replicas(const struct dtf_strategy *s)
{
	return s->nreplicas;
}

int64_t dtf_strategy_skipped(const struct dtf_strategy *s)
{
	return s->skipped;
}

double dtf_strategy_learning_rate(const struct dtf_strategy *s, double base,
				  int64_t step)
{
	if (s->o.lr_scaling != DTF_LR_SCALING_LINEAR)
		return base;
	double n = (double)s->nreplicas;
	int64_t w = s->o.lr_warmup_steps;
	if (w > 0 && step < w)
		return base * (1.0 + (n - 1.0) * (double)step / (double)w);
	return base * n;
}

static int check_strategy(const struct dtf_strategy_opts *o,
			  struct dtf_comm *world)
{
	int size = world->size;
	/* job errors that depend on the ranks: at strategy.type's position
	 * (the job reader checks hierarchical outside multi_worker_mirrored,
	 * which does not) */
	const char *tw = o->type_where ? o->type_where : "";
	const char *sep = tw[0] ? ": " : "";
	switch (o->type) {
	case DTF_STRATEGY_ONE_DEVICE:
		if (size > 1)
			return dtf_error(DTF_ERR_CONFIG,
					 "%s%sstrategy one_device runs one process, but %d ranks were started\n"
					 "HINT: run without mpirun (or -np 1), or use strategy mirrored / multi_worker_mirrored",
					 tw, sep, size);
		break;
	case DTF_STRATEGY_MIRRORED:
		if (world->num_nodes > 1)
			return dtf_error(DTF_ERR_CONFIG,
					 "%s%sstrategy mirrored keeps its replicas on one node, but the %d ranks span %d nodes\n"
					 "HINT: use strategy multi_worker_mirrored across nodes",
					 tw, sep, size, world->num_nodes);
		break;
	default:
		break;
	}
	if (o->implementation != DTF_COMM_IMPL_SHARED_MEMORY)
		return 0;
	/* asked for by name: every case it cannot serve is a job error (the
	 * same on every rank: num_nodes is the world's) */
	const char *why = NULL;
	if (o->type != DTF_STRATEGY_MIRRORED &&
	    o->type != DTF_STRATEGY_MULTI_WORKER_MIRRORED &&
	    o->type != DTF_STRATEGY_ONE_DEVICE)
		why = dtf_strategy_name(o->type);
	else if (o->compression != DTF_GRAD_COMPRESSION_NONE)
		why = "compression";
	else if (o->hierarchical)
		why = "hierarchical";
	else if (o->on_cuda)
		why = "device cuda";
	else if (world->num_nodes > 1)
		why = "ranks on several nodes";
	/* a job error: where the key was given, as the job reader says it */
	const char *where = o->implementation_where ? o->implementation_where
						    : "";
	if (why)
		return dtf_error(DTF_ERR_CONFIG,
				 "%s%sstrategy.communication.implementation: shared_memory reduces the gradients of mirrored or multi_worker_mirrored replicas on one node, on the CPU, without compression or hierarchical; not with %s\n"
				 "HINT: use implementation auto (shared memory where it applies, MPI elsewhere) or mpi",
				 where, where[0] ? ": " : "", why);
	return 0;
}

static MPI_Comm dup_or_null(MPI_Comm c)
{
	MPI_Comm d = MPI_COMM_NULL;
	if (c != MPI_COMM_NULL)
		MPI_Comm_dup(c, &d);
	return d;
}

void dtf_strategy_free_comm(MPI_Comm *c)
{
	int fin = 0;
	MPI_Finalized(&fin);
	if (!fin && *c != MPI_COMM_NULL)
		MPI_Comm_free(c);
	*c = MPI_COMM_NULL;
}

/* Set s->shm_comm when the gradients may be reduced through shared
 * memory: implementation auto or shared_memory, a flat mirrored strategy
 * of more than one replica without compression, not on CUDA, and every
 * replica on this node (MPI_Comm_split_type SHARED of the replicas has
 * them all).  A collective over the replicas. */
static int shm_candidate(struct dtf_strategy *s)
{
	if (!s->replicas || s->nreplicas < 2 ||
	    s->replicas->local_size != s->replicas->size ||
	    s->o.implementation == DTF_COMM_IMPL_MPI ||
	    (s->kind != DTF_STRATEGY_MIRRORED &&
	     s->kind != DTF_STRATEGY_MULTI_WORKER_MIRRORED) ||
	    s->cz.kind != DTF_GRAD_COMPRESSION_NONE || s->hierarchical ||
	    s->o.on_cuda)
		return 0;
	MPI_Comm node;
	MPI_TRY(MPI_Comm_split_type(s->replicas->comm, MPI_COMM_TYPE_SHARED,
				    s->replicas->rank, MPI_INFO_NULL, &node));
	int n = 0;
	MPI_Comm_size(node, &n);
	if (n == s->replicas->size)
		s->shm_comm = node;
	else
		MPI_Comm_free(&node);
	return 0;
}

void dtf_strategy_opts_from_job(const struct dtf_job *job,
				struct dtf_strategy_opts *out)
{
	memset(out, 0, sizeof(*out));
	out->type = job->strategy.type;
	out->type_where = job->strategy.type_where;
	out->implementation =
		(enum dtf_comm_implementation)job->strategy.implementation;
	out->implementation_where = job->strategy.implementation_where;
	out->compression = (enum dtf_grad_compression)job->strategy.compression;
	out->hierarchical = job->strategy.hierarchical;
	out->overlap = job->strategy.overlap;
	out->bucket_mb = job->strategy.bucket_mb;
	out->sync = job->strategy.sync;
	out->max_staleness = job->strategy.max_staleness;
	out->on_cuda = job->device.kind == DTF_DEVICE_CUDA;
	out->lr_scaling = (enum dtf_lr_scaling)job->train.lr_scaling;
	out->lr_warmup_steps = job->train.lr_warmup_steps;
	out->accumulate_steps = job->train.accumulate_steps;
	out->clipnorm = job->train.clipnorm;
	out->on_nonfinite = (enum dtf_on_nonfinite)job->train.on_nonfinite;
	out->keep_slots = job->checkpoint.dir != NULL;
}

int dtf_strategy_new(const struct dtf_job *job, struct dtf_comm *world,
		     int on_device,
		     const struct dtf_cluster *cluster,
		     struct dtf_strategy **out)
{
	struct dtf_strategy_opts o;
	struct dtf_cluster own;
	int rc;
	*out = NULL;
	memset(&own, 0, sizeof(own));
	dtf_strategy_opts_from_job(job, &o);
	o.on_cuda |= on_device != 0;
	if ((rc = check_strategy(&o, world)) < 0)
		return rc;
	if (!cluster) {
		if ((rc = dtf_cluster_from_job(job, world->size, &own)) < 0)
			return rc;
		cluster = &own;
	}
	rc = dtf_strategy_new_opts(&o, world, cluster, out);
	dtf_cluster_deinit(&own);
	return rc;
}

int dtf_strategy_new_opts(const struct dtf_strategy_opts *opts,
			  struct dtf_comm *world,
			  const struct dtf_cluster *cluster,
			  struct dtf_strategy **out)
{
	int rc;
	*out = NULL;
	if ((rc = check_strategy(opts, world)) < 0)
		return rc;
	struct dtf_strategy *s = dtf_calloc(1, sizeof(*s));
	if (!s)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	s->o = *opts;
	s->kind = opts->type;
	s->world = world;
	s->rank = world->rank;
	s->role = cluster->tasks[world->rank].type;
	s->nreplicas = cluster->count[DTF_TASK_CHIEF] +
		       cluster->count[DTF_TASK_WORKER];
	dtf_ps_init(&s->ps);
	s->ps.nps = cluster->count[DTF_TASK_PS];
	s->ps.first_ps = s->nreplicas;
	s->ps.ps_index = s->role == DTF_TASK_PS ? s->rank - s->ps.first_ps : -1;
	s->overlap = opts->overlap;
	s->hierarchical = opts->hierarchical;
	s->bcomm = s->node_red = s->node_bc = s->leaders = MPI_COMM_NULL;
	s->shm_comm = MPI_COMM_NULL;
	s->cz.kind = opts->compression; /* op: dtf_compress_init, below */
	s->cz.op = MPI_OP_NULL;

	int replica = s->role == DTF_TASK_CHIEF || s->role == DTF_TASK_WORKER;
	if ((rc = dtf_comm_split(world, replica ? 0 : -1, &s->replicas)) < 0)
		goto fail;
	if (s->replicas)
		s->bcomm = dup_or_null(s->replicas->comm);
	if (s->kind == DTF_STRATEGY_PARAMETER_SERVER) {
		MPI_Comm_dup(world->comm, &s->ps.pscomm);
		MPI_Comm_split(world->comm,
			       s->role == DTF_TASK_PS ? 0 : MPI_UNDEFINED,
			       s->rank, &s->ps.ps_only);
	}
	if (s->hierarchical && s->replicas) {
		MPI_Comm node;
		if ((rc = dtf_comm_split_node(s->replicas->comm, s->rank,
					      &node)) < 0)
			goto fail;
		int lr;
		MPI_Comm_rank(node, &lr);
		s->is_leader = lr == 0;
		s->node_red = node;
		s->node_bc = dup_or_null(node);
		MPI_Comm_split(s->replicas->comm, s->is_leader ? 0 : MPI_UNDEFINED,
			       s->rank, &s->leaders);
	}
	if ((rc = shm_candidate(s)) < 0)
		goto fail;
	dtf_compress_init(&s->cz, opts->compression);
	*out = s;
	return 0;
fail:
	dtf_strategy_free(s);
	return rc;
}

void dtf_strategy_free(struct dtf_strategy *s)
{
	if (!s)
		return;
	if (!s->ps.ended)
		dtf_strategy_end(s, -DTF_ERR_RUNTIME);
	dtf_compress_deinit(&s->cz);
	dtf_shm_free(s->shm);
	dtf_shard_deinit(&s->zs);
	dtf_strategy_free_comm(&s->shm_comm);
	dtf_strategy_free_comm(&s->bcomm);
	dtf_strategy_free_comm(&s->node_red);
	dtf_strategy_free_comm(&s->node_bc);
	dtf_strategy_free_comm(&s->leaders);
	dtf_ps_deinit(&s->ps);
	dtf_comm_finalize(s->replicas);
	if (s->upd.free)
		s->upd.free(s->upd.ctx);
	dtf_free(s->vars);
	dtf_fusion_deinit(&s->fu);
	dtf_free(s->acc);
	dtf_free(s);
}

/* ---- setup ------------------------------------------------------------------ */

static int by_production(const void *a, const void *b)
{
	const struct var *x = a, *y = b;
	if (x->grad_node != y->grad_node)
		return x->grad_node < y->grad_node ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

static int collect_vars(struct dtf_strategy *s)
{
	const struct dtf_graph *g = s->g;
	int n = 0;
	for (int i = 0; i < g->nforward; i++)
		n += g->nodes[i].op == DTF_OP_VARIABLE;
	/* non-trainable variables (batch_norm moving statistics) have no
	 * gradient and stay on the replica that updates them; the trainer
	 * averages them over the replicas before they are read */
	s->vars = dtf_calloc((size_t)n + 1, sizeof(*s->vars));
	if (!s->vars)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	for (int i = 0; i < g->nforward; i++) {
		const struct dtf_node *nd = &g->nodes[i];
		if (nd->op != DTF_OP_VARIABLE || !nd->a.var.trainable)
			continue;
		struct var *v = &s->vars[s->nvars++];
		v->off = nd->a.var.offset;
		v->n = (size_t)dtf_shape_numel(&nd->shape);
		/* a variable without a gradient is ready at once (its zeros) */
		v->grad_node = g->var_grad && g->var_grad[i] >= 0
				       ? g->var_grad[i]
				       : g->nforward;
	}
	qsort(s->vars, (size_t)s->nvars, sizeof(*s->vars), by_production);
	return 0;
}

int dtf_strategy_setup(struct dtf_strategy *s, const struct dtf_graph *g,
		       float *params, float *grads,
		       const struct dtf_update_ops *upd)
{
	int rc;
	s->g = g;
	s->params = params;
	s->grads = grads;
	s->upd = *upd;
	s->np = g->nparams;
	if ((rc = collect_vars(s)) < 0)
		return rc;
	if (s->kind == DTF_STRATEGY_PARAMETER_SERVER)
		return dtf_ps_setup(s);
	if (!s->replicas)
		return 0;
	if (s->o.accumulate_steps > 1 &&
	    !(s->acc = dtf_alloc_aligned(s->np * sizeof(float) + 4)))
		return dtf_error(DTF_ERR_NOMEM, "out of memory for accumulation");
	if ((rc = dtf_fusion_make(s)) < 0)
		return rc;
	if (s->zs.sharded && (rc = dtf_shard_make(s)) < 0)
		return rc;
	/* the state lives on replica 0; the others release theirs, except
	 * with checkpoints, whose restore broadcasts the slots to every
	 * replica (they then hold a copy that is never updated) */
	if (s->kind == DTF_STRATEGY_CENTRAL_STORAGE && s->rank != 0 &&
	    !s->o.keep_slots)
		s->upd.release(s->upd.ctx);
	return 0;
}

void dtf_strategy_set_update(struct dtf_strategy *s,
			     const struct dtf_update_ops *upd)
{
	DTF_ASSERT(!s->zs.sharded && s->kind != DTF_STRATEGY_PARAMETER_SERVER);
	if (s->upd.free)
		s->upd.free(s->upd.ctx);
	s->upd = *upd;
}

void dtf_strategy_describe(const struct dtf_strategy *s, char *buf,
			   size_t size)
{
	if (s->kind == DTF_STRATEGY_PARAMETER_SERVER) {
		dtf_ps_describe(s, buf, size);
		return;
	}
	if (s->shm) {
		char update[80];
		if (s->zs.sharded)
			snprintf(update, sizeof(update), "sharded (each replica its slices, one copy of the variables)");
		else
			snprintf(update, sizeof(update), "whole on every replica (%s)",
				 s->zs.whole_why);
		snprintf(buf, size,
			 "%d bucket%s (cap %.3g MB), overlap %s, compression none, implementation shared_memory (%d replicas, one window), update %s",
			 s->fu.nbuckets, s->fu.nbuckets == 1 ? "" : "s",
			 (double)s->fu.cap * 4 / 1e6,
			 s->overlap ? "on" : "off", s->nreplicas, update);
		return;
	}
	snprintf(buf, size,
		 "%d bucket%s (cap %.3g MB, %d call%s), overlap %s, compression %s%s%s",
		 s->fu.nbuckets, s->fu.nbuckets == 1 ? "" : "s",
		 (double)s->fu.cap * 4 / 1e6, s->fu.nunits,
		 s->fu.nunits == 1 ? "" : "s", s->overlap ? "on" : "off",
		 s->cz.kind == DTF_GRAD_COMPRESSION_FP16	  ? "fp16"
		 : s->cz.kind == DTF_GRAD_COMPRESSION_BF16 ? "bf16"
							  : "none",
		 s->hierarchical ? ", hierarchical" : "",
		 comm_active(s) ? ", implementation mpi" : "");
}

void dtf_strategy_after_node(void *arg, int node)
{
	struct dtf_strategy *s = arg;
	if (s->kind == DTF_STRATEGY_PARAMETER_SERVER)
		dtf_ps_after_node(s, node);
	else
		dtf_fusion_after_node(s, node);
}

int dtf_strategy_backward_begin(struct dtf_strategy *s, int micro, int nmicro,
				double lr)
{
	s->lr = lr;
	if (micro < nmicro - 1)
		return 0;
	dtf_fusion_begin(s);
	dtf_ps_begin(s);
	s->in_step = 1;
	int ps = s->kind == DTF_STRATEGY_PARAMETER_SERVER;
	return s->overlap && (comm_active(s) || ps);
}

void dtf_strategy_backward_end(struct dtf_strategy *s, int micro, int nmicro)
{
	if (micro == nmicro - 1)
		return;
	float *restrict a = s->acc;
	const float *restrict gr = s->grads;
	if (a)
		for (size_t i = 0; i < s->np; i++)
			a[i] += gr[i];
	s->have_acc = 1;
}

/* step is 0-based: at step 0 of a fresh run no update has been applied,
 * so the learning rate cannot have made the gradients non-finite. */
int dtf_strategy_error_is_agreed(const struct dtf_strategy *s)
{
	return s && s->agreed_error;
}

int dtf_strategy_nonfinite_error(struct dtf_strategy *s, int64_t step)
{
	s->agreed_error = 1;
	return dtf_error(DTF_ERR_RUNTIME,
			 "step %lld: the summed gradients hold NaN or Inf; stopping (train.on_nonfinite: fail)\n"
			 "HINT: %s",
			 (long long)step + 1,
			 step == 0 ? "the first step's gradients are already non-finite, before any update, so the learning rate is not the cause: check the data (NaN or Inf in the inputs) and the model (initializers, constants)"
				   : "lower the learning rate, or set train.on_nonfinite: skip");
}

void dtf_strategy_note_skip(struct dtf_strategy *s, int64_t step)
{
	s->skipped++;
	dtf_info("step %lld: non-finite gradients, update skipped (%lld so far)",
		 (long long)step + 1, (long long)s->skipped);
}

int dtf_strategy_finish_step(struct dtf_strategy *s, float *stats, double lr,
			     int64_t step, int *applied, double *comm_s,
			     double *opt_s)
{
	int rc = 0;
	double t0 = now();
	*applied = 1;
	if (s->err) {
		rc = s->err;
		s->err = 0;
		return rc;
	}
	if (s->kind == DTF_STRATEGY_PARAMETER_SERVER) {
		rc = dtf_ps_finish(s, stats, step, applied, comm_s);
		s->in_step = 0;
		return rc;
	}
	if ((rc = dtf_fusion_launch_rest(s)) < 0)
		return rc;
	s->have_acc = 0;
	int central = s->kind == DTF_STRATEGY_CENTRAL_STORAGE;
	float red[DTF_NSTATS + 1];
	memcpy(red, stats, sizeof(float) * DTF_NSTATS);
	red[DTF_NSTATS] = 0;
	if (comm_active(s)) {
		if ((rc = dtf_fusion_wait(s)) < 0)
			return rc;
		if (s->shm) /* the peers' segments are read: the statistics'
			     * allreduce below is the synchronization after
			     * which a replica may overwrite its own */
			MPI_Win_sync(s->shm->win);
		else if (!central || s->rank == 0)
			dtf_fusion_unpack(s);
	}
	s->in_step = 0;
	/* one verdict: the sum of the flags of every replica (central: the
	 * root's; shared memory: each of the slices it summed), reduced with
	 * the statistics */
	if (s->shm && comm_active(s)) {
		red[DTF_NSTATS] = (float)s->fu.sh_bad;
	} else if (!central || s->rank == 0) {
		red[DTF_NSTATS] = (float)s->upd.nonfinite(s->upd.ctx, s->grads,
							  s->np);
	}
	if (comm_active(s) &&
	    (rc = dtf_comm_allreduce_sum_f32(s->replicas, red,
					     DTF_NSTATS + 1)) < 0)
		return rc;
	memcpy(stats, red, sizeof(float) * DTF_NSTATS);
	double t1 = now();
	*comm_s += t1 - t0;
	if (red[DTF_NSTATS] != 0) {
		if (s->o.on_nonfinite == DTF_NONFINITE_FAIL)
			return dtf_strategy_nonfinite_error(s, step);
		dtf_strategy_note_skip(s, step);
		*applied = 0;
		return 0;
	}
	if (s->zs.sharded)
		return dtf_shard_apply(s, lr, t1, comm_s, opt_s);
	if (!central || s->rank == 0)
		s->upd.apply(s->upd.ctx, s->params, s->grads, lr);
	double t2 = now();
	*opt_s += t2 - t1;
	if (central && comm_active(s)) {
		rc = dtf_comm_bcast_f32(s->replicas, s->params, s->np, 0);
		*comm_s += now() - t2;
	}
	return rc < 0 ? rc : 0;
}

int dtf_strategy_reduce_buffer(struct dtf_strategy *s, float *buf,
			       uint16_t *scratch, size_t n)
{
	if (s->kind == DTF_STRATEGY_PARAMETER_SERVER)
		return dtf_ps_reduce_buffer(s, buf, n);
	if (!s->replicas || s->nreplicas == 1)
		return 0;
	if (s->shm)
		return dtf_fusion_shm_reduce_buffer(s, buf, n);
	int half = s->cz.kind != DTF_GRAD_COMPRESSION_NONE;
	if (half)
		dtf_compress_pack(s->cz.kind, buf, scratch, n,
			 1.0f / (float)s->nreplicas);
	MPI_Datatype t = half ? MPI_UINT16_T : MPI_FLOAT;
	MPI_Op op = half ? s->cz.op : MPI_SUM;
	size_t esize = half ? 2 : 4;
	char *base = half ? (char *)scratch : (char *)buf;
	for (size_t off = 0; off < n; off += CHUNK) {
		int len = (int)(n - off < CHUNK ? n - off : CHUNK);
		void *p = base + off * esize;
		if (s->hierarchical) {
			MPI_TRY(MPI_Reduce(s->is_leader ? MPI_IN_PLACE : p, p, len,
					   t, op, 0, s->node_red));
			if (s->is_leader)
				MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, p, len, t, op,
						      s->leaders));
			MPI_TRY(MPI_Bcast(p, len, t, 0, s->node_bc));
		} else if (s->kind == DTF_STRATEGY_CENTRAL_STORAGE) {
			MPI_TRY(MPI_Reduce(s->rank == 0 ? MPI_IN_PLACE : p, p, len,
					   t, op, 0, s->bcomm));
			MPI_TRY(MPI_Bcast(p, len, t, 0, s->bcomm));
		} else {
			MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, p, len, t, op,
					      s->bcomm));
		}
	}
	if (half)
		dtf_compress_unpack(s->cz.kind, scratch, buf, n,
			   (float)s->nreplicas);
	return 0;
}
