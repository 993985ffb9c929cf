/*
 * strategy.c - strategies, fusion buckets, overlap, compression, ps.
 *
 * Ordering rule: MPI requires the ranks of a communicator to start their
 * collectives on it in the same order.  Buckets are launched in bucket
 * order (the order backward produces gradients, the same on every rank);
 * the later stages of the hierarchical reduction (leaders' allreduce,
 * broadcast in the node) are started by cursors that walk the units in
 * order, each stage on a communicator of its own (the node-reduce and the
 * node-broadcast communicators are duplicates), so no rank can interleave
 * two stages differently from another.  Blocking collectives of the step
 * (statistics, variables) run on the replica communicator once every
 * bucket is done.
 *
 * Parameter server messages (tag MSG from a worker, tag REPLY from a ps)
 * carry a header of HDR floats before the packed values:
 *   worker -> ps: {GRAD, lr} + gradients | {PULL, 0} | {DONE, 0} |
 *                 {STOP, exit status}
 *   ps -> worker: {OK | SKIPPED | STOP | NONFINITE, status} + variables
 */
#include "distribute/strategy.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "distribute/comm_impl.h"
#include "distribute/shm.h"

/* floats per collective call: Open MPI's shared-memory allreduce slows
 * about 5x above ~24 MB per call (DESIGN.md section 7; tests/bench) */
#define CHUNK ((size_t)4 << 20)
#define HDR 2
#define TAG_MSG 7101
#define TAG_REPLY 7102

enum { MSG_GRAD = 1, MSG_PULL, MSG_DONE, MSG_STOP };
enum { REPLY_OK = 1, REPLY_SKIPPED, REPLY_STOP, REPLY_NONFINITE };

enum stage { ST_IDLE, ST_LOCAL, ST_LEADERS, ST_BCAST, ST_DONE };

struct var {
	size_t off, n;  /* floats in the parameter/gradient vectors */
	int grad_node;  /* node whose run makes the gradient final */
	int ps;         /* parameter_server: owning ps (0-based) */
};

struct bucket {
	int first, nvars;  /* s->vars[first .. first+nvars) */
	int trigger;       /* the last of its variables' gradient nodes */
	size_t n;          /* floats */
	float *buf;        /* reduced in place: grads + lo, or fusion */
	int packed;        /* buf is a fusion region (gather/scatter) */
	uint16_t *half;    /* compression: wire values */
	int first_unit, nunits;
	MPI_Request sh_req; /* shared memory: the phase's barrier */
};

struct unit {
	int bucket;
	size_t off, n;     /* within the bucket's wire layout */
	enum stage stage;
	int busy;          /* req is active */
	MPI_Request req;
};

struct shard_range {
	size_t off, n;     /* floats in the parameter vector */
	int owner;         /* the replica that updates them */
};

struct psbuf {                /* worker side, one per ps */
	size_t n;             /* floats it owns */
	int trigger;          /* gradients ready after this node */
	int sent;
	float *send, *recv;   /* HDR + n each */
	MPI_Request sreq, rreq;
};

struct dtf_strategy {
	struct dtf_strategy_opts o;  /* copied; its strings borrowed */
	enum dtf_strategy_kind kind;
	struct dtf_comm *world;     /* borrowed */
	struct dtf_comm *replicas;  /* owned; NULL off the replicas */
	MPI_Comm bcomm;             /* bucket traffic (dup of replicas) */
	MPI_Comm node_red, node_bc, leaders; /* hierarchical */
	MPI_Comm pscomm;            /* ps <-> worker messages (dup world) */
	MPI_Comm ps_only;           /* the ps ranks among themselves */
	enum dtf_task_type role;
	int rank, nreplicas, nps, first_ps, ps_index;
	int hierarchical, overlap, is_leader;
	enum dtf_grad_compression compression;
	MPI_Op op16;
	/* shared memory (distribute/shm.h): shm_comm is the replicas' node
	 * communicator when they may reduce through a window (all on one
	 * node, flat mirrored strategy, no compression); shm, once
	 * dtf_strategy_share_grads made it, holds the gradient vectors */
	MPI_Comm shm_comm;
	struct dtf_shm *shm;
	const char *shm_why;        /* why the window could not be had */
	int sh_red, sh_gather;      /* next bucket to reduce / to gather */
	int sh_bad;                 /* a sum of this rank's slices is NaN/Inf */
	/* sharded update (ZeRO stage 1) through the window (set only with
	 * shm): the variables are one copy in the window (shm->shared),
	 * each replica updates the floats of its own slices (`mine`) in
	 * place; the optimizer slots stay per replica, current in `mine`
	 * only, and are completed from the others' (`theirs`, with the
	 * owner) for a checkpoint.  whole_why: why not (NULL when sharded) */
	int sharded;
	const char *whole_why;
	struct dtf_update_range *mine;
	int nmine;
	struct shard_range *theirs;
	int ntheirs;

	const struct dtf_graph *g;
	float *params, *grads;
	struct dtf_update_ops upd;  /* ctx owned */
	size_t np;
	struct var *vars;           /* production order */
	int nvars;
	struct bucket *buckets;
	int nbuckets;
	size_t bucket_cap;          /* floats, as make_buckets() chose */
	struct unit *units;
	int nunits;
	float *fusion;
	uint16_t *half;
	float *acc;                 /* accumulation; NULL when k = 1 */
	int have_acc;
	int next_bucket, cur_lead, cur_bcast;
	int in_step;
	double lr;                  /* of the step in progress */
	int err;                    /* first error met inside backward */
	int64_t skipped;

	struct psbuf *ps;           /* worker: [nps] */
	float *psmem;
	/* ps rank */
	size_t own_n;               /* floats this ps owns */
	float *own_params, *own_sum, *own_reply;
	float *wbuf;                /* [nreplicas][HDR + own_n] */
	struct dtf_update_ops own_upd; /* ctx owned */
	int ended;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- 16-bit floats -------------------------------------------------------- */

static uint32_t bits_of(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	return x;
}

static float float_of(uint32_t x)
{
	float f;
	memcpy(&f, &x, 4);
	return f;
}

uint16_t dtf_f32_to_f16(float f)
{
	uint32_t x = bits_of(f);
	uint32_t sign = (x >> 16) & 0x8000u;
	uint32_t e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
	if (e == 0xff) /* inf, nan (kept quiet) */
		return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));
	int he = (int)e - 127 + 15;
	if (he >= 31)
		return (uint16_t)(sign | 0x7c00u);
	if (he <= 0) { /* subnormal half, or zero */
		if (he < -10)
			return (uint16_t)sign;
		m |= 0x800000u;
		unsigned shift = (unsigned)(14 - he);
		uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1);
		uint32_t half = 1u << (shift - 1);
		if (rem > half || (rem == half && (hm & 1)))
			hm++;
		return (uint16_t)(sign | hm);
	}
	uint32_t h = sign | ((uint32_t)he << 10) | (m >> 13);
	uint32_t rem = m & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
		h++; /* a carry into the exponent is right, up to inf */
	return (uint16_t)h;
}

float dtf_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	if (e == 0) {
		float v = (float)m * 5.9604644775390625e-8f; /* 2^-24 */
		return sign ? -v : v;
	}
	if (e == 31)
		return float_of(sign | 0x7f800000u | (m << 13));
	return float_of(sign | ((e - 15 + 127) << 23) | (m << 13));
}

uint16_t dtf_f32_to_bf16(float f)
{
	uint32_t x = bits_of(f);
	if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu))
		return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
	x += 0x7fffu + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

float dtf_bf16_to_f32(uint16_t h)
{
	return float_of((uint32_t)h << 16);
}

/* MPI reduction operators: add 16-bit values in float32. */
static void sum_f16(void *in, void *inout, int *len, MPI_Datatype *type)
{
	const uint16_t *a = in;
	uint16_t *b = inout;
	for (int i = 0; i < *len; i++)
		b[i] = dtf_f32_to_f16(dtf_f16_to_f32(a[i]) +
				      dtf_f16_to_f32(b[i]));
}

static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *type)
{
	const uint16_t *a = in;
	uint16_t *b = inout;
	for (int i = 0; i < *len; i++)
		b[i] = dtf_f32_to_bf16(dtf_bf16_to_f32(a[i]) +
				       dtf_bf16_to_f32(b[i]));
}

static void compress(enum dtf_grad_compression c, const float *x, uint16_t *h,
		     size_t n, float scale)
{
	if (c == DTF_GRAD_COMPRESSION_FP16)
		for (size_t i = 0; i < n; i++)
			h[i] = dtf_f32_to_f16(x[i] * scale);
	else
		for (size_t i = 0; i < n; i++)
			h[i] = dtf_f32_to_bf16(x[i] * scale);
}

static void decompress(enum dtf_grad_compression c, const uint16_t *h, float *x,
		       size_t n, float scale)
{
	if (c == DTF_GRAD_COMPRESSION_FP16)
		for (size_t i = 0; i < n; i++)
			x[i] = dtf_f16_to_f32(h[i]) * scale;
	else
		for (size_t i = 0; i < n; i++)
			x[i] = dtf_bf16_to_f32(h[i]) * scale;
}

int dtf_strategy_allreduce_compressed(struct dtf_comm *c, float *buf,
				      uint16_t *scratch, size_t n,
				      enum dtf_grad_compression compression)
{
	if (compression == DTF_GRAD_COMPRESSION_NONE)
		return dtf_comm_allreduce_sum_f32(c, buf, n);
	MPI_Op op;
	MPI_TRY(MPI_Op_create(compression == DTF_GRAD_COMPRESSION_FP16 ? sum_f16
								  : sum_bf16,
			      1, &op));
	compress(compression, buf, scratch, n, 1.0f / (float)c->size);
	int rc = 0;
	for (size_t off = 0; off < n && rc == 0; off += CHUNK) {
		size_t len = n - off < CHUNK ? n - off : CHUNK;
		int err = MPI_Allreduce(MPI_IN_PLACE, scratch + off, (int)len,
					MPI_UINT16_T, op, c->comm);
		if (err != MPI_SUCCESS)
			rc = dtf_comm_mpi_fail(err, "MPI_Allreduce");
	}
	MPI_Op_free(&op);
	if (rc == 0)
		decompress(compression, scratch, buf, n, (float)c->size);
	return rc;
}

/* ---- creation --------------------------------------------------------------- */

enum dtf_task_type dtf_strategy_role(const struct dtf_strategy *s)
{
	return s->role;
}

struct dtf_comm *dtf_strategy_replica_comm(const struct dtf_strategy *s)
{
	return s->replicas;
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
	const char *tw = o->type_where;
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
	const char *where = o->implementation_where;
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

static void free_comm(MPI_Comm *c)
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
	    s->compression != DTF_GRAD_COMPRESSION_NONE || s->hierarchical ||
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
		     const struct dtf_cluster *cluster,
		     struct dtf_strategy **out)
{
	struct dtf_strategy_opts o;
	struct dtf_cluster own;
	int rc;
	*out = NULL;
	memset(&own, 0, sizeof(own));
	dtf_strategy_opts_from_job(job, &o);
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
	s->nps = cluster->count[DTF_TASK_PS];
	s->first_ps = s->nreplicas;
	s->ps_index = s->role == DTF_TASK_PS ? s->rank - s->first_ps : -1;
	s->overlap = opts->overlap;
	s->compression = opts->compression;
	s->hierarchical = opts->hierarchical;
	s->bcomm = s->node_red = s->node_bc = s->leaders = MPI_COMM_NULL;
	s->pscomm = s->ps_only = MPI_COMM_NULL;
	s->shm_comm = MPI_COMM_NULL;
	s->op16 = MPI_OP_NULL;

	int replica = s->role == DTF_TASK_CHIEF || s->role == DTF_TASK_WORKER;
	if ((rc = dtf_comm_split(world, replica ? 0 : -1, &s->replicas)) < 0)
		goto fail;
	if (s->replicas)
		s->bcomm = dup_or_null(s->replicas->comm);
	if (s->kind == DTF_STRATEGY_PARAMETER_SERVER) {
		MPI_Comm_dup(world->comm, &s->pscomm);
		MPI_Comm_split(world->comm,
			       s->role == DTF_TASK_PS ? 0 : MPI_UNDEFINED,
			       s->rank, &s->ps_only);
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
	if (s->compression != DTF_GRAD_COMPRESSION_NONE)
		MPI_Op_create(s->compression == DTF_GRAD_COMPRESSION_FP16 ? sum_f16
								     : sum_bf16,
			      1, &s->op16);
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
	if (!s->ended)
		dtf_strategy_end(s, -DTF_ERR_RUNTIME);
	int fin = 0;
	MPI_Finalized(&fin);
	if (!fin && s->op16 != MPI_OP_NULL)
		MPI_Op_free(&s->op16);
	dtf_shm_free(s->shm);
	dtf_free(s->mine);
	dtf_free(s->theirs);
	free_comm(&s->shm_comm);
	free_comm(&s->bcomm);
	free_comm(&s->node_red);
	free_comm(&s->node_bc);
	free_comm(&s->leaders);
	free_comm(&s->pscomm);
	free_comm(&s->ps_only);
	dtf_comm_finalize(s->replicas);
	if (s->own_upd.free)
		s->own_upd.free(s->own_upd.ctx);
	if (s->upd.free)
		s->upd.free(s->upd.ctx);
	dtf_free(s->vars);
	dtf_free(s->buckets);
	dtf_free(s->units);
	dtf_free(s->fusion);
	dtf_free(s->half);
	dtf_free(s->acc);
	dtf_free(s->ps);
	dtf_free(s->psmem);
	dtf_free(s->own_params);
	dtf_free(s->own_sum);
	dtf_free(s->own_reply);
	dtf_free(s->wbuf);
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

/* With overlap, buckets hold at most 1/OVERLAP_BUCKETS of all gradients,
 * whatever bucket_mb says: a model smaller than one bucket would otherwise
 * be one bucket, ready only when backward ends, with nothing to overlap
 * (PyTorch DDP's small first bucket answers the same problem). */
#define OVERLAP_BUCKETS 4

static int make_buckets(struct dtf_strategy *s)
{
	size_t cap = (size_t)(s->o.bucket_mb * 1e6 / 4);
	if (s->overlap && cap > s->np / OVERLAP_BUCKETS)
		cap = s->np / OVERLAP_BUCKETS;
	if (cap < 1)
		cap = 1;
	s->bucket_cap = cap;
	s->buckets = dtf_calloc((size_t)s->nvars + 1, sizeof(*s->buckets));
	if (!s->buckets)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	for (int i = 0; i < s->nvars; i++) {
		struct bucket *b = s->nbuckets ? &s->buckets[s->nbuckets - 1]
					       : NULL;
		if (!b || (b->n > 0 && b->n + s->vars[i].n > cap)) {
			b = &s->buckets[s->nbuckets++];
			b->first = i;
		}
		b->nvars++;
		b->n += s->vars[i].n;
		b->trigger = s->vars[i].grad_node;
	}
	/* where each bucket lives; chunks */
	size_t packed_total = 0, nunits = 0;
	for (int bi = 0; bi < s->nbuckets; bi++) {
		struct bucket *b = &s->buckets[bi];
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
	    !(s->fusion = dtf_alloc_aligned(packed_total * sizeof(float))))
		return dtf_error(DTF_ERR_NOMEM, "out of memory for fusion buffers");
	if (s->compression != DTF_GRAD_COMPRESSION_NONE &&
	    !(s->half = dtf_alloc_aligned(s->np * sizeof(uint16_t) + 64)))
		return dtf_error(DTF_ERR_NOMEM, "out of memory for compression");
	s->units = dtf_calloc(nunits + 1, sizeof(*s->units));
	if (!s->units)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	size_t poff = 0, hoff = 0;
	for (int bi = 0; bi < s->nbuckets; bi++) {
		struct bucket *b = &s->buckets[bi];
		if (b->packed) {
			b->buf = s->fusion + poff;
			poff += b->n;
		}
		if (s->half) {
			b->half = s->half + hoff;
			hoff += b->n;
		}
		b->first_unit = s->nunits;
		for (size_t off = 0; off < b->n; off += CHUNK) {
			struct unit *u = &s->units[s->nunits++];
			u->bucket = bi;
			u->off = off;
			u->n = b->n - off < CHUNK ? b->n - off : CHUNK;
			u->req = MPI_REQUEST_NULL;
		}
		b->sh_req = MPI_REQUEST_NULL;
	}
	return 0;
}

/* Greedy balanced partition: largest variable first onto the ps holding
 * the fewest floats so far (ties: lowest ps). */
static int partition(struct dtf_strategy *s)
{
	int *idx = dtf_calloc((size_t)s->nvars + 1, sizeof(int));
	size_t *load = dtf_calloc((size_t)s->nps, sizeof(size_t));
	if (!idx || !load) {
		dtf_free(idx);
		dtf_free(load);
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	}
	for (int i = 0; i < s->nvars; i++)
		idx[i] = i;
	/* insertion sort by size, descending; variables are few */
	for (int i = 1; i < s->nvars; i++)
		for (int j = i; j > 0 && s->vars[idx[j]].n > s->vars[idx[j - 1]].n; j--) {
			int t = idx[j];
			idx[j] = idx[j - 1];
			idx[j - 1] = t;
		}
	for (int i = 0; i < s->nvars; i++) {
		int best = 0;
		for (int p = 1; p < s->nps; p++)
			if (load[p] < load[best])
				best = p;
		s->vars[idx[i]].ps = best;
		load[best] += s->vars[idx[i]].n;
	}
	dtf_free(idx);
	dtf_free(load);
	return 0;
}

static size_t ps_owned(const struct dtf_strategy *s, int p)
{
	size_t n = 0;
	for (int i = 0; i < s->nvars; i++)
		if (s->vars[i].ps == p)
			n += s->vars[i].n;
	return n;
}

static int setup_ps(struct dtf_strategy *s)
{
	int rc = partition(s);
	if (rc < 0)
		return rc;
	if (s->role == DTF_TASK_PS) {
		s->own_n = ps_owned(s, s->ps_index);
		size_t row = HDR + s->own_n;
		s->own_params = dtf_alloc_aligned(s->own_n * sizeof(float) + 4);
		s->own_sum = dtf_alloc_aligned(s->own_n * sizeof(float) + 4);
		s->own_reply = dtf_alloc_aligned(row * sizeof(float));
		s->wbuf = dtf_alloc_aligned(row * (size_t)s->nreplicas *
					    sizeof(float));
		if (!s->own_params || !s->own_sum || !s->own_reply || !s->wbuf)
			return dtf_error(DTF_ERR_NOMEM, "out of memory on the ps");
		return s->upd.part_new(s->upd.ctx, s->own_n, &s->own_upd);
	}
	if (!s->replicas)
		return 0;
	s->ps = dtf_calloc((size_t)s->nps, sizeof(*s->ps));
	size_t total = 0;
	for (int p = 0; s->ps && p < s->nps; p++) {
		s->ps[p].n = ps_owned(s, p);
		s->ps[p].trigger = -1;
		total += 2 * (HDR + s->ps[p].n);
	}
	s->psmem = dtf_alloc_aligned(total * sizeof(float));
	if (!s->ps || !s->psmem)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	float *m = s->psmem;
	for (int p = 0; p < s->nps; p++) {
		s->ps[p].send = m;
		m += HDR + s->ps[p].n;
		s->ps[p].recv = m;
		m += HDR + s->ps[p].n;
		s->ps[p].sreq = s->ps[p].rreq = MPI_REQUEST_NULL;
	}
	for (int i = 0; i < s->nvars; i++)
		if (s->vars[i].grad_node > s->ps[s->vars[i].ps].trigger)
			s->ps[s->vars[i].ps].trigger = s->vars[i].grad_node;
	if (s->o.accumulate_steps > 1 &&
	    !(s->acc = dtf_alloc_aligned(s->np * sizeof(float) + 4)))
		return dtf_error(DTF_ERR_NOMEM, "out of memory for accumulation");
	/* the ps rank keeps the optimizer state */
	s->upd.release(s->upd.ctx);
	return 0;
}

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
	s->whole_why = whole_update_why(s, params ? g : NULL);
	int shard = !s->whole_why;
	int rc = dtf_shm_new(s->shm_comm, n, shard ? (size_t)g->nparams : 0,
			     &s->shm, &s->shm_why);
	if (rc < 0)
		return rc;
	if (!s->shm) {
		const char *where = s->o.implementation_where;
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
	s->sharded = shard;
	if (shard)
		*params = s->shm->shared;
	return 0;
}

int dtf_strategy_writes_params(const struct dtf_strategy *s)
{
	return !s || !s->sharded || s->shm->rank == 0;
}

int dtf_strategy_share_params(struct dtf_strategy *s, struct dtf_comm *comm,
			      float *params, size_t n)
{
	if (!s || !s->sharded)
		return dtf_comm_bcast_f32(comm, params, n, 0);
	/* replica 0 wrote the one copy: order its stores before the others'
	 * loads */
	MPI_Win_sync(s->shm->win);
	MPI_TRY(MPI_Barrier(s->shm->reduced));
	MPI_Win_sync(s->shm->win);
	return 0;
}

static int make_shards(struct dtf_strategy *s);

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
		return setup_ps(s);
	if (!s->replicas)
		return 0;
	if (s->o.accumulate_steps > 1 &&
	    !(s->acc = dtf_alloc_aligned(s->np * sizeof(float) + 4)))
		return dtf_error(DTF_ERR_NOMEM, "out of memory for accumulation");
	if ((rc = make_buckets(s)) < 0)
		return rc;
	if (s->sharded && (rc = make_shards(s)) < 0)
		return rc;
	/* the state lives on replica 0; the others release theirs, except
	 * with checkpoints, whose restore broadcasts the slots to every
	 * replica (they then hold a copy that is never updated) */
	if (s->kind == DTF_STRATEGY_CENTRAL_STORAGE && s->rank != 0 &&
	    !s->o.keep_slots)
		s->upd.release(s->upd.ctx);
	return 0;
}

static int comm_active(const struct dtf_strategy *s);

void dtf_strategy_describe(const struct dtf_strategy *s, char *buf,
			   size_t size)
{
	if (s->kind == DTF_STRATEGY_PARAMETER_SERVER) {
		int n = snprintf(buf, size, "%d ps, %s; variables per ps (floats):",
				 s->nps,
				 s->o.sync ? "sync" : "async");
		for (int p = 0; p < s->nps && n > 0 && (size_t)n < size; p++)
			n += snprintf(buf + n, size - (size_t)n, " %zu",
				      ps_owned(s, p));
		return;
	}
	if (s->shm) {
		char update[80];
		if (s->sharded)
			snprintf(update, sizeof(update), "sharded (each replica its slices, one copy of the variables)");
		else
			snprintf(update, sizeof(update), "whole on every replica (%s)",
				 s->whole_why);
		snprintf(buf, size,
			 "%d bucket%s (cap %.3g MB), overlap %s, compression none, implementation shared_memory (%d replicas, one window), update %s",
			 s->nbuckets, s->nbuckets == 1 ? "" : "s",
			 (double)s->bucket_cap * 4 / 1e6,
			 s->overlap ? "on" : "off", s->nreplicas, update);
		return;
	}
	snprintf(buf, size,
		 "%d bucket%s (cap %.3g MB, %d call%s), overlap %s, compression %s%s%s",
		 s->nbuckets, s->nbuckets == 1 ? "" : "s",
		 (double)s->bucket_cap * 4 / 1e6, s->nunits,
		 s->nunits == 1 ? "" : "s", s->overlap ? "on" : "off",
		 s->compression == DTF_GRAD_COMPRESSION_FP16	  ? "fp16"
		 : s->compression == DTF_GRAD_COMPRESSION_BF16 ? "bf16"
							  : "none",
		 s->hierarchical ? ", hierarchical" : "",
		 comm_active(s) ? ", implementation mpi" : "");
}

/* ---- buckets ----------------------------------------------------------------- */

static int comm_active(const struct dtf_strategy *s)
{
	return s->nreplicas > 1;
}

static void add_acc(struct dtf_strategy *s, const struct var *v)
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
	struct bucket *b = &s->buckets[u->bucket];
	void *p;
	MPI_Datatype t;
	MPI_Op op;
	if (b->half) {
		p = b->half + u->off;
		t = MPI_UINT16_T;
		op = s->op16;
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
static void each_slice_range(struct dtf_strategy *s, const struct bucket *b,
			     int part,
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
	s->sh_bad |= dtf_shm_sum(s->shm, off, n);
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
	each_slice_range(s, b, part, gather ? copy_range : sum_range, NULL);
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
			s->mine[f->nm] = (struct dtf_update_range){off, n};
		f->nm++;
	} else {
		if (!f->count_only)
			s->theirs[f->nt] = (struct shard_range){off, n, part};
		f->nt++;
	}
}

/* This replica's ranges (its slice of every bucket) and the others'. */
static int make_shards(struct dtf_strategy *s)
{
	for (int pass = 0; pass < 2; pass++) {
		struct shard_fill f = {pass == 0, 0, 0};
		for (int bi = 0; bi < s->nbuckets; bi++)
			for (int q = 0; q < s->shm->size; q++)
				each_slice_range(s, &s->buckets[bi], q,
						 note_range, &f);
		if (pass == 0) {
			s->mine = dtf_calloc((size_t)f.nm + 1, sizeof(*s->mine));
			s->theirs = dtf_calloc((size_t)f.nt + 1, sizeof(*s->theirs));
			if (!s->mine || !s->theirs)
				return dtf_error(DTF_ERR_NOMEM,
						 "out of memory for the shards of the update");
		}
		s->nmine = f.nm;
		s->ntheirs = f.nt;
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
	for (int i = 0; i < s->nmine; i++)
		memcpy(out + s->mine[i].off, v + s->mine[i].off,
		       s->mine[i].n * sizeof(float));
	MPI_Win_sync(sh->win);
	MPI_TRY(MPI_Barrier(sh->reduced));
	MPI_Win_sync(sh->win);
	for (int i = 0; i < s->ntheirs; i++) {
		const struct shard_range *r = &s->theirs[i];
		memcpy(v + r->off, sh->seg[r->owner] + r->off,
		       r->n * sizeof(float));
	}
	return 0;
}

int dtf_strategy_sync_slots(struct dtf_strategy *s)
{
	if (!s || !s->sharded || !s->upd.slot(s->upd.ctx, 0))
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
		while (s->sh_gather < s->sh_red) {
			struct bucket *b = &s->buckets[s->sh_gather];
			done = 0;
			if ((rc = shm_test(&b->sh_req, 0, &done)) < 0)
				return rc;
			if (!done)
				break;
			MPI_Win_sync(sh->win);
			for (int q = 0; q < sh->size; q++)
				if (q != sh->rank)
					shm_slice(s, b, q, 1);
			s->sh_gather++;
			moved = 1;
		}
		while (s->sh_red < s->next_bucket) {
			struct bucket *b = &s->buckets[s->sh_red];
			done = 0;
			if ((rc = shm_test(&b->sh_req, 0, &done)) < 0)
				return rc;
			if (!done)
				break;
			MPI_Win_sync(sh->win);
			shm_slice(s, b, sh->rank, 0);
			s->sh_red++;
			moved = 1;
			if (s->sharded) { /* no gather: each updates its own */
				s->sh_gather++;
				continue;
			}
			MPI_Win_sync(sh->win);
			err = MPI_Ibarrier(sh->reduced, &b->sh_req);
			if (err != MPI_SUCCESS)
				return dtf_comm_mpi_fail(err, "MPI_Ibarrier");
		}
		if (!block || s->sh_gather == s->nbuckets)
			return 0;
		if (moved)
			continue;
		/* nothing ready: wait for the oldest barrier */
		struct bucket *b = &s->buckets[s->sh_red < s->nbuckets
						       ? s->sh_red
						       : s->sh_gather];
		if ((rc = shm_test(&b->sh_req, 1, &done)) < 0)
			return rc;
		/* the request is now MPI_REQUEST_NULL: MPI_Test on it
		 * answers done at once */
	}
}

static int launch(struct dtf_strategy *s, int bi)
{
	struct bucket *b = &s->buckets[bi];
	const struct var *v0 = &s->vars[b->first];
	if (s->have_acc)
		for (int i = 0; i < b->nvars; i++)
			add_acc(s, &v0[i]);
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
				compress(s->compression, g, b->half + off,
					 v0[i].n, scale);
			else
				memcpy(b->buf + off, g, v0[i].n * sizeof(float));
			off += v0[i].n;
		}
	}
	for (int u = b->first_unit; u < b->first_unit + b->nunits; u++) {
		int rc = start_stage(s, &s->units[u], ST_LOCAL);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Start the hierarchical follow-up stages, in unit order. */
static int advance(struct dtf_strategy *s)
{
	for (int i = 0; i < s->nunits; i++) {
		struct unit *u = &s->units[i];
		if (!u->busy && u->stage != ST_IDLE && u->stage != ST_DONE &&
		    !s->hierarchical)
			u->stage = ST_DONE;
	}
	if (!s->hierarchical)
		return 0;
	int rc;
	while (s->is_leader && s->cur_lead < s->nunits) {
		struct unit *u = &s->units[s->cur_lead];
		if (u->busy || u->stage != ST_LOCAL)
			break;
		if ((rc = start_stage(s, u, ST_LEADERS)) < 0)
			return rc;
		s->cur_lead++;
	}
	while (s->cur_bcast < s->nunits) {
		struct unit *u = &s->units[s->cur_bcast];
		enum stage before = s->is_leader ? ST_LEADERS : ST_LOCAL;
		if (u->busy || u->stage != before)
			break;
		if ((rc = start_stage(s, u, ST_BCAST)) < 0)
			return rc;
		s->cur_bcast++;
	}
	for (int i = 0; i < s->nunits; i++)
		if (!s->units[i].busy && s->units[i].stage == ST_BCAST)
			s->units[i].stage = ST_DONE;
	return 0;
}

/* Let MPI move data: test every active request once. */
static int progress(struct dtf_strategy *s)
{
	if (s->shm)
		return shm_progress(s, 0);
	int any = 0;
	for (int i = 0; i < s->nunits; i++) {
		struct unit *u = &s->units[i];
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

static int ps_send(struct dtf_strategy *s, int p);

static void after_node(void *arg, int node)
{
	struct dtf_strategy *s = arg;
	if (s->kind == DTF_STRATEGY_PARAMETER_SERVER) {
		for (int p = 0; p < s->nps; p++)
			if (!s->ps[p].sent && s->ps[p].trigger <= node) {
				int rc = ps_send(s, p);
				if (rc < 0 && !s->err)
					s->err = rc;
			}
		return;
	}
	int launched = 0, rc = 0;
	while (rc == 0 && s->next_bucket < s->nbuckets &&
	       s->buckets[s->next_bucket].trigger <= node) {
		rc = launch(s, s->next_bucket++);
		launched = 1;
	}
	if (rc == 0 && !launched && s->in_step)
		rc = progress(s);
	if (rc < 0 && !s->err)
		s->err = rc; /* reported by dtf_strategy_finish_step */
}

void dtf_strategy_backward(struct dtf_strategy *s, struct dtf_exec_ctx *ctx,
			   int micro, int nmicro, double lr)
{
	const struct dtf_graph *g = s->g;
	s->lr = lr;
	if (micro < nmicro - 1) {
		dtf_exec_backward(g, ctx);
		float *restrict a = s->acc;
		const float *restrict gr = s->grads;
		if (a)
			for (size_t i = 0; i < s->np; i++)
				a[i] += gr[i];
		s->have_acc = 1;
		return;
	}
	s->next_bucket = 0;
	s->cur_lead = s->cur_bcast = 0;
	s->sh_red = s->sh_gather = s->sh_bad = 0;
	for (int i = 0; i < s->nunits; i++)
		s->units[i].stage = ST_IDLE;
	for (int p = 0; s->ps && p < s->nps; p++)
		s->ps[p].sent = 0;
	s->in_step = 1;
	int ps = s->kind == DTF_STRATEGY_PARAMETER_SERVER;
	if (s->overlap && (comm_active(s) || ps))
		dtf_exec_backward_hook(g, ctx, after_node, s);
	else
		dtf_exec_backward(g, ctx);
}

static int nonfinite(const float *x, size_t n)
{
	const uint32_t *b = (const uint32_t *)x;
	uint32_t bad = 0;
	for (size_t i = 0; i < n; i++)
		bad |= (b[i] & 0x7f800000u) == 0x7f800000u;
	return bad != 0;
}

/* step is 0-based: at step 0 of a fresh run no update has been applied,
 * so the learning rate cannot have made the gradients non-finite. */
static int nonfinite_error(const struct dtf_strategy *s, int64_t step)
{
	return dtf_error(DTF_ERR_RUNTIME,
			 "step %lld: the summed gradients hold NaN or Inf; stopping (train.on_nonfinite: fail)\n"
			 "HINT: %s",
			 (long long)step + 1,
			 step == 0 ? "the first step's gradients are already non-finite, before any update, so the learning rate is not the cause: check the data (NaN or Inf in the inputs) and the model (initializers, constants)"
				   : "lower the learning rate, or set train.on_nonfinite: skip");
}

static void note_skip(struct dtf_strategy *s, int64_t step)
{
	s->skipped++;
	dtf_info("step %lld: non-finite gradients, update skipped (%lld so far)",
		 (long long)step + 1, (long long)s->skipped);
}

/* Wait for every unit, in order. */
static int wait_all(struct dtf_strategy *s)
{
	int rc;
	if (s->shm)
		return shm_progress(s, 1);
	for (;;) {
		int i = 0;
		while (i < s->nunits && s->units[i].stage == ST_DONE)
			i++;
		if (i == s->nunits)
			return 0;
		struct unit *u = &s->units[i];
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

static void unpack(struct dtf_strategy *s)
{
	for (int bi = 0; bi < s->nbuckets; bi++) {
		struct bucket *b = &s->buckets[bi];
		if (!b->half && !b->packed)
			continue;
		size_t off = 0;
		for (int i = b->first; i < b->first + b->nvars; i++) {
			const struct var *v = &s->vars[i];
			if (b->half)
				decompress(s->compression, b->half + off,
					   s->grads + v->off, v->n,
					   (float)s->nreplicas);
			else
				memcpy(s->grads + v->off, b->buf + off,
				       v->n * sizeof(float));
			off += v->n;
		}
	}
}

static int finish_ps(struct dtf_strategy *s, float *stats, double lr,
		     int64_t step, int *applied, double *comm_s);

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
		rc = finish_ps(s, stats, lr, step, applied, comm_s);
		s->in_step = 0;
		return rc;
	}
	while (s->next_bucket < s->nbuckets)
		if ((rc = launch(s, s->next_bucket++)) < 0)
			return rc;
	s->have_acc = 0;
	int central = s->kind == DTF_STRATEGY_CENTRAL_STORAGE;
	float red[DTF_NSTATS + 1];
	memcpy(red, stats, sizeof(float) * DTF_NSTATS);
	red[DTF_NSTATS] = 0;
	if (comm_active(s)) {
		if ((rc = wait_all(s)) < 0)
			return rc;
		if (s->shm) /* the peers' segments are read: the statistics'
			     * allreduce below is the synchronization after
			     * which a replica may overwrite its own */
			MPI_Win_sync(s->shm->win);
		else if (!central || s->rank == 0)
			unpack(s);
	}
	s->in_step = 0;
	/* one verdict: the sum of the flags of every replica (central: the
	 * root's; shared memory: each of the slices it summed), reduced with
	 * the statistics */
	if (s->shm && comm_active(s)) {
		red[DTF_NSTATS] = (float)s->sh_bad;
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
			return nonfinite_error(s, step);
		note_skip(s, step);
		*applied = 0;
		return 0;
	}
	if (s->sharded) {
		/* every replica is past its backward pass (it joined the
		 * allreduce above): the one copy may change */
		if ((rc = s->upd.apply_ranges(s->upd.ctx, s->params, s->grads,
					      lr, s->mine, s->nmine)) < 0)
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

/* ---- parameter server: worker side ------------------------------------------ */

static int ps_send(struct dtf_strategy *s, int p)
{
	struct psbuf *b = &s->ps[p];
	float *out = b->send + HDR;
	for (int i = 0; i < s->nvars; i++) {
		const struct var *v = &s->vars[i];
		if (v->ps != p)
			continue;
		if (s->have_acc && s->acc)
			add_acc(s, v);
		memcpy(out, s->grads + v->off, v->n * sizeof(float));
		out += v->n;
	}
	b->send[0] = MSG_GRAD;
	b->send[1] = (float)s->lr;
	b->sent = 1;
	int dest = s->first_ps + p;
	int err = MPI_Irecv(b->recv, (int)(HDR + b->n), MPI_FLOAT, dest,
			    TAG_REPLY, s->pscomm, &b->rreq);
	if (err == MPI_SUCCESS)
		err = MPI_Isend(b->send, (int)(HDR + b->n), MPI_FLOAT, dest,
				TAG_MSG, s->pscomm, &b->sreq);
	return err == MPI_SUCCESS ? 0 : dtf_comm_mpi_fail(err, "sending gradients to a ps");
}

static int finish_ps(struct dtf_strategy *s, float *stats, double lr,
		     int64_t step, int *applied, double *comm_s)
{
	int rc, err;
	double t0 = now();
	(void)lr; /* sent with the gradients (dtf_strategy_backward) */
	for (int p = 0; p < s->nps; p++)
		if (!s->ps[p].sent && (rc = ps_send(s, p)) < 0)
			return rc;
	s->have_acc = 0;
	int verdict = REPLY_OK, who = 0;
	for (int p = 0; p < s->nps; p++) {
		struct psbuf *b = &s->ps[p];
		MPI_Wait(&b->sreq, MPI_STATUS_IGNORE);
		if ((err = MPI_Wait(&b->rreq, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
			return dtf_comm_mpi_fail(err, "receiving variables from a ps");
		int r = (int)b->recv[0];
		if (r > verdict || (r == REPLY_SKIPPED && verdict == REPLY_OK)) {
			verdict = r;
			who = (int)b->recv[1];
		}
		if (r != REPLY_OK)
			continue;
		const float *in = b->recv + HDR;
		for (int i = 0; i < s->nvars; i++) {
			const struct var *v = &s->vars[i];
			if (v->ps != p)
				continue;
			memcpy(s->params + v->off, in, v->n * sizeof(float));
			in += v->n;
		}
	}
	if (verdict == REPLY_STOP) {
		*comm_s += now() - t0;
		return dtf_error(who == 3   ? DTF_ERR_DATA
				 : who == 2 ? DTF_ERR_CONFIG
					    : DTF_ERR_REMOTE,
				 "stopping at step %lld: another worker failed",
				 (long long)step + 1);
	}
	if (verdict == REPLY_NONFINITE)
		return nonfinite_error(s, step);
	if (verdict == REPLY_SKIPPED) {
		note_skip(s, step);
		*applied = 0;
	}
	rc = comm_active(s) ? dtf_comm_allreduce_sum_f32(s->replicas, stats,
							 DTF_NSTATS)
			    : 0;
	*comm_s += now() - t0;
	return rc;
}

static int ps_message(struct dtf_strategy *s, float kind, float value)
{
	float hdr[HDR] = {kind, value};
	for (int p = 0; p < s->nps; p++) {
		int err = MPI_Send(hdr, HDR, MPI_FLOAT, s->first_ps + p,
				   TAG_MSG, s->pscomm);
		if (err != MPI_SUCCESS)
			return dtf_comm_mpi_fail(err, "messaging a ps");
	}
	return 0;
}

int dtf_strategy_sync_params(struct dtf_strategy *s)
{
	if (s->kind != DTF_STRATEGY_PARAMETER_SERVER || !s->replicas ||
	    s->o.sync)
		return 0;
	int rc = dtf_comm_barrier(s->replicas);
	if (rc < 0)
		return rc;
	for (int p = 0; p < s->nps; p++) {
		struct psbuf *b = &s->ps[p];
		float hdr[HDR] = {MSG_PULL, 0};
		int dest = s->first_ps + p;
		MPI_TRY(MPI_Send(hdr, HDR, MPI_FLOAT, dest, TAG_MSG, s->pscomm));
		MPI_TRY(MPI_Recv(b->recv, (int)(HDR + b->n), MPI_FLOAT, dest,
				 TAG_REPLY, s->pscomm, MPI_STATUS_IGNORE));
		if ((int)b->recv[0] != REPLY_OK)
			return dtf_error(DTF_ERR_REMOTE,
					 "stopping: another worker failed");
		const float *in = b->recv + HDR;
		for (int i = 0; i < s->nvars; i++) {
			const struct var *v = &s->vars[i];
			if (v->ps != p)
				continue;
			memcpy(s->params + v->off, in, v->n * sizeof(float));
			in += v->n;
		}
	}
	return 0;
}

void dtf_strategy_end(struct dtf_strategy *s, int rc)
{
	if (!s || s->ended || s->kind != DTF_STRATEGY_PARAMETER_SERVER ||
	    !s->replicas)
		return;
	s->ended = 1;
	int status = rc < 0 ? dtf_error_exit_status(rc) : 0;
	ps_message(s, rc < 0 ? MSG_STOP : MSG_DONE,
		   (float)(status ? status : (rc < 0 ? 1 : 0)));
}

/* ---- parameter server: ps side ------------------------------------------------ */

struct serve {
	int nw, active, stop_status, pending;
	MPI_Request *req;
	int *waiting, *done;
	int64_t *steps;
};

static int reply(struct dtf_strategy *s, int w, int verdict, int status)
{
	float *r = s->own_reply;
	r[0] = (float)verdict;
	r[1] = (float)status;
	memcpy(r + HDR, s->own_params, s->own_n * sizeof(float));
	int n = verdict == REPLY_OK ? (int)(HDR + s->own_n) : HDR;
	MPI_TRY(MPI_Send(r, n, MPI_FLOAT, w, TAG_REPLY, s->pscomm));
	return 0;
}

static int repost(struct dtf_strategy *s, struct serve *sv, int w)
{
	size_t row = HDR + s->own_n;
	MPI_TRY(MPI_Irecv(s->wbuf + row * (size_t)w, (int)row, MPI_FLOAT, w,
			  TAG_MSG, s->pscomm, &sv->req[w]));
	return 0;
}

/* The worker's rows start with the header; pack vars into own order. */
static void pack_own(struct dtf_strategy *s, float *dst, const float *full)
{
	for (int i = 0; i < s->nvars; i++) {
		const struct var *v = &s->vars[i];
		if (v->ps != s->ps_index)
			continue;
		memcpy(dst, full + v->off, v->n * sizeof(float));
		dst += v->n;
	}
}

/* Apply own_sum (or a worker's row) at lr; returns the reply verdict. */
static int update(struct dtf_strategy *s, float *grad, double lr,
		  int agree_ps)
{
	int bad = nonfinite(grad, s->own_n);
	if (agree_ps && s->nps > 1) /* the ps ranks decide together */
		MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX,
			      s->ps_only);
	if (bad)
		return s->o.on_nonfinite == DTF_NONFINITE_FAIL
			       ? REPLY_NONFINITE
			       : REPLY_SKIPPED;
	s->own_upd.apply(s->own_upd.ctx, s->own_params, grad, lr);
	return REPLY_OK;
}

static int64_t min_steps(const struct serve *sv)
{
	int64_t m = INT64_MAX;
	for (int w = 0; w < sv->nw; w++)
		if (!sv->done[w] && sv->steps[w] < m)
			m = sv->steps[w];
	return m;
}

static int serve_loop(struct dtf_strategy *s, struct serve *sv)
{
	size_t row = HDR + s->own_n;
	int sync = s->o.sync, rc;
	int64_t staleness = s->o.max_staleness;
	for (int w = 0; w < sv->nw; w++)
		if ((rc = repost(s, sv, w)) < 0)
			return rc;
	while (sv->active > 0) {
		/* poll with short sleeps rather than MPI_Waitany, whose busy
		 * wait would take a core from the workers when ranks share
		 * cores */
		int w, flag = 0;
		for (;;) {
			MPI_TRY(MPI_Testany(sv->nw, sv->req, &w, &flag,
					    MPI_STATUS_IGNORE));
			if (flag)
				break;
			struct timespec nap = {0, 50000}; /* 50 us */
			nanosleep(&nap, NULL);
		}
		if (w == MPI_UNDEFINED)
			break;
		float *msg = s->wbuf + row * (size_t)w;
		int kind = (int)msg[0];
		if (kind == MSG_PULL) {
			if ((rc = reply(s, w, REPLY_OK, 0)) < 0 ||
			    (rc = repost(s, sv, w)) < 0)
				return rc;
		} else if (kind == MSG_DONE || kind == MSG_STOP) {
			sv->active--;
			sv->done[w] = 1;
			if (kind == MSG_STOP && !sv->stop_status)
				sv->stop_status = msg[1] > 0 ? (int)msg[1] : 1;
		} else if (sv->stop_status) {
			if ((rc = reply(s, w, REPLY_STOP, sv->stop_status)) < 0 ||
			    (rc = repost(s, sv, w)) < 0)
				return rc;
		} else if (sync) {
			sv->waiting[w] = 1;
			sv->pending++;
		} else {
			int v = update(s, msg + HDR, msg[1], 0);
			sv->steps[w]++;
			if (v == REPLY_NONFINITE)
				sv->stop_status = 1;
			if (v != REPLY_OK || sv->steps[w] - min_steps(sv) <= staleness) {
				if ((rc = reply(s, w, v, 1)) < 0 ||
				    (rc = repost(s, sv, w)) < 0)
					return rc;
			} else {
				sv->waiting[w] = 1; /* too far ahead: waits */
			}
		}
		if (sync && !sv->stop_status && sv->pending > 0 &&
		    sv->pending == sv->active) {
			/* one synchronous round: sum in worker order */
			double lr = 0;
			memset(s->own_sum, 0, s->own_n * sizeof(float));
			for (int u = 0; u < sv->nw; u++) {
				if (!sv->waiting[u])
					continue;
				const float *g = s->wbuf + row * (size_t)u;
				lr = g[1];
				for (size_t i = 0; i < s->own_n; i++)
					s->own_sum[i] += g[HDR + i];
			}
			int v = update(s, s->own_sum, lr, 1);
			if (v == REPLY_NONFINITE)
				sv->stop_status = 1;
			for (int u = 0; u < sv->nw; u++) {
				if (!sv->waiting[u])
					continue;
				sv->waiting[u] = 0;
				if ((rc = reply(s, u, v, 1)) < 0 ||
				    (rc = repost(s, sv, u)) < 0)
					return rc;
			}
			sv->pending = 0;
		}
		/* release waiting workers: all of them after a failure, the
		 * ones back within max_staleness otherwise (async) */
		for (int u = 0; u < sv->nw; u++) {
			if (!sv->waiting[u])
				continue;
			int release = sv->stop_status ||
				      (!sync && sv->steps[u] - min_steps(sv) <=
							staleness);
			if (!release)
				continue;
			sv->waiting[u] = 0;
			if (sync)
				sv->pending--;
			if ((rc = reply(s, u, sv->stop_status ? REPLY_STOP : REPLY_OK,
					sv->stop_status)) < 0 ||
			    (rc = repost(s, sv, u)) < 0)
				return rc;
		}
	}
	return 0;
}

int dtf_strategy_serve(struct dtf_strategy *s)
{
	struct serve sv;
	memset(&sv, 0, sizeof(sv));
	sv.nw = s->nreplicas;
	sv.active = sv.nw;
	sv.req = dtf_calloc((size_t)sv.nw, sizeof(*sv.req));
	sv.waiting = dtf_calloc((size_t)sv.nw, sizeof(int));
	sv.done = dtf_calloc((size_t)sv.nw, sizeof(int));
	sv.steps = dtf_calloc((size_t)sv.nw, sizeof(int64_t));
	int rc = 0;
	if (!sv.req || !sv.waiting || !sv.done || !sv.steps) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (int w = 0; w < sv.nw; w++)
		sv.req[w] = MPI_REQUEST_NULL;
	pack_own(s, s->own_params, s->params);
	dtf_log(DTF_LOG_DEBUG, 1, "ps %d: serving %zu floats to %d workers",
		s->ps_index, s->own_n, sv.nw);
	rc = serve_loop(s, &sv);
	for (int w = 0; w < sv.nw; w++)
		if (sv.req[w] != MPI_REQUEST_NULL) {
			MPI_Cancel(&sv.req[w]);
			MPI_Request_free(&sv.req[w]);
		}
	if (rc == 0 && sv.stop_status)
		rc = dtf_error(sv.stop_status == 3   ? DTF_ERR_DATA
			       : sv.stop_status == 2 ? DTF_ERR_CONFIG
						     : DTF_ERR_REMOTE,
			       "ps %d: stopping: a worker failed", s->ps_index);
out:
	dtf_free(sv.req);
	dtf_free(sv.waiting);
	dtf_free(sv.done);
	dtf_free(sv.steps);
	return rc;
}

/* ---- a whole buffer through the strategy's collectives (benchmarks) ---------- */

/* One bucket of n floats at buf (inside this rank's segment) through the
 * shared window, blocking, with the closing barrier a step's statistics
 * allreduce would give. */
static int shm_reduce_buffer(struct dtf_strategy *s, float *buf, size_t n)
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

int dtf_strategy_reduce_buffer(struct dtf_strategy *s, float *buf,
			       uint16_t *scratch, size_t n)
{
	if (s->kind == DTF_STRATEGY_PARAMETER_SERVER) {
		/* one push and one pull through ps 0 (the others idle) */
		int ps = s->first_ps;
		if (s->role == DTF_TASK_PS) {
			if (s->rank != ps)
				return 0;
			for (int w = 0; w < s->nreplicas; w++) {
				MPI_TRY(MPI_Recv(buf, (int)n, MPI_FLOAT, w, TAG_MSG,
						 s->pscomm, MPI_STATUS_IGNORE));
				MPI_TRY(MPI_Send(buf, (int)n, MPI_FLOAT, w,
						 TAG_REPLY, s->pscomm));
			}
			return 0;
		}
		MPI_TRY(MPI_Send(buf, (int)n, MPI_FLOAT, ps, TAG_MSG, s->pscomm));
		MPI_TRY(MPI_Recv(buf, (int)n, MPI_FLOAT, ps, TAG_REPLY, s->pscomm,
				 MPI_STATUS_IGNORE));
		return 0;
	}
	if (!s->replicas || s->nreplicas == 1)
		return 0;
	if (s->shm)
		return shm_reduce_buffer(s, buf, n);
	int half = s->compression != DTF_GRAD_COMPRESSION_NONE;
	if (half)
		compress(s->compression, buf, scratch, n,
			 1.0f / (float)s->nreplicas);
	MPI_Datatype t = half ? MPI_UINT16_T : MPI_FLOAT;
	MPI_Op op = half ? s->op16 : MPI_SUM;
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
		decompress(s->compression, scratch, buf, n,
			   (float)s->nreplicas);
	return 0;
}
