/*
 * strategy_impl.h - what the files of the strategy share (distribute/
 * only): the variables in gradient order, and the strategy's state as one
 * struct of the dispatch's fields plus one part per concern, each owned
 * by its file:
 *   strategy.c  creation, roles, setup, the step's dispatch
 *   compress.c  fp16/bf16 wire values and their MPI reduction (cz)
 *   buckets.c   fusion buckets and their reduction, by MPI or through
 *               the shared window (fu)
 *   shard.c     the shared window's vectors and the sharded (ZeRO stage
 *               1) update (zs)
 *   ps.c        the parameter server, worker and ps sides (ps)
 * Ordering rule and message layout: strategy.c and ps.c open with them.
 */
#ifndef DTF_DIST_STRATEGY_IMPL_H
#define DTF_DIST_STRATEGY_IMPL_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "distribute/comm_impl.h"
#include "distribute/shm.h"
#include "distribute/strategy.h"

/* floats per collective call: Open MPI's shared-memory allreduce slows
 * about 5x above ~24 MB per call (DESIGN.md section 7; tests/bench) */
#define CHUNK ((size_t)4 << 20)

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
	double t_launch, t_done; /* this step (now()): launched, seen
				    reduced; 0 when not (yet) */
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

/* compress.c: 16-bit wire values (compression fp16, bf16) */
struct dtf_compress {
	enum dtf_grad_compression kind;
	MPI_Op op;                  /* adds 16-bit values in float32 */
	uint16_t *half;             /* np wire values, the buckets' */
};

/* buckets.c: fusion buckets, cut into units of at most CHUNK floats */
struct dtf_fusion {
	struct bucket *buckets;
	int nbuckets;
	size_t cap;                 /* floats, as dtf_fusion_make chose */
	struct unit *units;
	int nunits;
	float *fusion;              /* the packed buckets' regions */
	int next_bucket, cur_lead, cur_bcast; /* launch and stage cursors */
	int sh_red, sh_gather;      /* next bucket to reduce / to gather */
	int sh_bad;                 /* a sum of this rank's slices is NaN/Inf */
};

/* shard.c: the sharded update (ZeRO stage 1) through the window (set
 * only with shm): the variables are one copy in the window
 * (shm->shared), each replica updates the floats of its own slices
 * (`mine`) in place; the optimizer slots stay per replica, current in
 * `mine` only, and are completed from the others' (`theirs`, with the
 * owner) for a checkpoint.  whole_why: why not (NULL when sharded) */
struct dtf_shard {
	int sharded;
	const char *whole_why;
	struct dtf_update_range *mine;
	int nmine;
	struct shard_range *theirs;
	int ntheirs;
};

/* ps.c: parameter_server */
struct dtf_ps {
	int nps, first_ps, ps_index; /* ps ranks follow the replicas */
	MPI_Comm pscomm;            /* ps <-> worker messages (dup world) */
	MPI_Comm ps_only;           /* the ps ranks among themselves */
	struct psbuf *bufs;         /* worker: [nps] */
	float *mem;
	/* ps rank */
	size_t own_n;               /* floats this ps owns */
	float *own_params, *own_sum, *own_reply;
	float *wbuf;                /* [nreplicas][HDR + own_n] */
	struct dtf_update_ops own_upd; /* ctx owned */
	int ended;
};

struct dtf_strategy {
	struct dtf_strategy_opts o;  /* copied; its strings borrowed */
	enum dtf_strategy_kind kind;
	struct dtf_comm *world;     /* borrowed */
	struct dtf_comm *replicas;  /* owned; NULL off the replicas */
	MPI_Comm bcomm;             /* bucket traffic (dup of replicas) */
	MPI_Comm node_red, node_bc, leaders; /* hierarchical */
	enum dtf_task_type role;
	int rank, nreplicas;
	int hierarchical, overlap, is_leader;
	/* shared memory (distribute/shm.h): shm_comm is the replicas' node
	 * communicator when they may reduce through a window (all on one
	 * node, flat mirrored strategy, no compression); shm, once
	 * dtf_strategy_share_grads made it, holds the gradient vectors */
	MPI_Comm shm_comm;
	struct dtf_shm *shm;
	const char *shm_why;        /* why the window could not be had */

	const struct dtf_graph *g;
	float *params, *grads;
	struct dtf_update_ops upd;  /* ctx owned */
	size_t np;
	struct var *vars;           /* production order */
	int nvars;
	float *acc;                 /* accumulation; NULL when k = 1 */
	int have_acc;
	int in_step;
	double lr;                  /* of the step in progress */
	int err;                    /* first error met inside backward */
	int64_t skipped;
	int agreed_error; /* the last error is the replicas' shared verdict */

	struct dtf_compress cz;
	struct dtf_fusion fu;
	struct dtf_shard zs;
	struct dtf_ps ps;
};

static inline double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int comm_active(const struct dtf_strategy *s)
{
	return s->nreplicas > 1;
}

/* strategy.c */
int dtf_strategy_nonfinite_error(struct dtf_strategy *s, int64_t step);
void dtf_strategy_note_skip(struct dtf_strategy *s, int64_t step);
/* MPI_Comm_free unless MPI is finalized; *c becomes MPI_COMM_NULL. */
void dtf_strategy_free_comm(MPI_Comm *c);

/* compress.c: x (n floats) times scale as wire values h, and back. */
int dtf_compress_init(struct dtf_compress *c, enum dtf_grad_compression kind);
void dtf_compress_deinit(struct dtf_compress *c);
void dtf_compress_pack(enum dtf_grad_compression c, const float *x,
		       uint16_t *h, size_t n, float scale);
void dtf_compress_unpack(enum dtf_grad_compression c, const uint16_t *h,
			 float *x, size_t n, float scale);

/* buckets.c */
int dtf_fusion_make(struct dtf_strategy *s);
void dtf_fusion_deinit(struct dtf_fusion *fu);
/* add the accumulated micro-batches into v's gradient, zero them */
void dtf_fusion_add_acc(struct dtf_strategy *s, const struct var *v);
void dtf_fusion_begin(struct dtf_strategy *s);
void dtf_fusion_after_node(struct dtf_strategy *s, int node);
int dtf_fusion_launch_rest(struct dtf_strategy *s);
int dtf_fusion_wait(struct dtf_strategy *s);
void dtf_fusion_unpack(struct dtf_strategy *s);
void dtf_fusion_each_slice_range(struct dtf_strategy *s,
				 const struct bucket *b, int part,
				 void (*fn)(struct dtf_strategy *s, int part,
					    size_t off, size_t n, void *ctx),
				 void *ctx);
int dtf_fusion_shm_reduce_buffer(struct dtf_strategy *s, float *buf,
				 size_t n);

/* shard.c */
int dtf_shard_make(struct dtf_strategy *s);
void dtf_shard_deinit(struct dtf_shard *zs);
int dtf_shard_apply(struct dtf_strategy *s, double lr, double t1,
		    double *comm_s, double *opt_s);

/* ps.c */
void dtf_ps_init(struct dtf_ps *ps);
void dtf_ps_deinit(struct dtf_ps *ps);
int dtf_ps_setup(struct dtf_strategy *s);
void dtf_ps_describe(const struct dtf_strategy *s, char *buf, size_t size);
void dtf_ps_begin(struct dtf_strategy *s);
void dtf_ps_after_node(struct dtf_strategy *s, int node);
int dtf_ps_finish(struct dtf_strategy *s, float *stats, int64_t step,
		  int *applied, double *comm_s);
int dtf_ps_reduce_buffer(struct dtf_strategy *s, float *buf, size_t n);

#endif
