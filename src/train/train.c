/*
 * train.c - the training loop.
 *
 * The step runs on the replica's backend (ops/backend.h: the CPU, or one
 * GPU), which the loop reaches only through its interface.  Per step, on
 * every rank:
 *   1. the backend loads a batch from the pipeline into the input nodes'
 *      buffers (on the CPU without a copy);
 *   2. every rank agrees on the step's status (dtf_comm_agree), so a rank
 *      whose data failed stops the others before the gradient collective;
 *   3. forward, backward: variable gradients land in the gradient vector;
 *   4. the strategy (distribute/strategy.h) sums gradients and the step
 *      statistics (loss sum, correct count, example count) that ride
 *      behind them, in buckets started from inside backward (after it,
 *      for a backend whose backward can fail: the GPU's);
 *   5. every rank applies the same optimizer update.
 * dtf_train_run is split along its phases: check_options, setup,
 * setup_threads, open_all, resume, then one_epoch (one_step each, and
 * maybe_evaluate), finish and release, over one struct run.
 * All ranks agree on the number of steps per epoch before the first step
 * (minimum over ranks of records / per-replica batch), so uneven shards
 * never leave a rank waiting in a collective.  Nothing is allocated after
 * setup: buffers come from the planner, the optimizer and the pipeline.
 */
#include "train/train.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "data/crc32c.h"
#include "core/error.h"
#include "core/log.h"
#include "distribute/comm.h"
#include "distribute/strategy.h"
#include "data/pipeline.h"
#include "graph/lower.h"
#include "mem/plan.h"
#include "obs/obs.h"
#include "ops/backend.h"
#include "ops/cpu/exec.h"
#include "ops/cpu/fast.h"
#include "ops/cpu/isa.h"
#include "ops/cuda/exec_cuda.h"
#include "config/config.h"
#include "train/checkpoint.h"
#include "train/elastic.h"
#include "train/evaluator.h"
#include "train/fault.h"
#include "train/optimizer.h"
#include "train/optimizer_ops.h"
#include "train/schedule.h"
#include "train/summary.h"
#include "train/threads.h"
#include "train/train_priv.h"

static double now_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void dtf_replica_deinit(struct replica *r)
{
	dtf_backend_free(r->be);
	dtf_optimizer_deinit(&r->opt);
	dtf_pool_free(r->pool);
	dtf_free(r->feature_bytes);
	dtf_plan_deinit(&r->plan);
	dtf_graph_deinit(&r->g);
	dtf_free(r->layer_out);
	if (!r->params_shared)
		dtf_free(r->params);
	if (!r->grads_shared)
		dtf_free(r->grads);
	dtf_free(r->feed);
	dtf_free(r->scratch);
	dtf_free(r->own_stats);
	dtf_free(r->ids);
}

int dtf_replica_build(const struct dtf_job *job, int batch, int with_backward,
		      struct replica *r)
{
	memset(r, 0, sizeof(*r));
	int rc;
	r->layer_out = dtf_calloc((size_t)job->model.nlayers +
					  (size_t)job->model.nnodes + 1,
				  sizeof(int));
	if (!r->layer_out)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	if ((rc = dtf_graph_lower_model(job, batch, &r->g, r->layer_out)) < 0)
		return rc;
	if (with_backward && (rc = dtf_graph_backward(&r->g)) < 0)
		return rc;
	return 0;
}

int dtf_replica_setup_buffers(const struct dtf_job *job, struct replica *r)
{
	struct dtf_graph *g = &r->g;
	int rc;
	if (!r->params) /* else the strategy's shared memory */
		r->params = dtf_alloc_aligned(g->nparams * sizeof(float));
	if (!r->grads) /* else the strategy's shared memory */
		r->grads = dtf_alloc_aligned((g->nparams + NSTATS) *
					     sizeof(float));
	r->feed = dtf_calloc((size_t)job->data.nfeatures, sizeof(void *));
	r->feature_bytes = dtf_calloc((size_t)job->data.nfeatures + 1,
				      sizeof(size_t));
	r->ids = dtf_calloc((size_t)g->batch, sizeof(uint64_t));
	if (!r->params || !r->grads || !r->feed || !r->feature_bytes || !r->ids)
		return dtf_error(DTF_ERR_NOMEM, "out of memory for parameters");
	if ((rc = dtf_plan_graph_with(g, job->memory.planner, r->params,
				      r->grads, dtf_backend_cpu_workspace(g),
				      &r->plan)) < 0)
		return rc;
	size_t scratch = 0;
	for (int f = 0; f < job->data.nfeatures; f++) {
		r->feature_bytes[f] =
			(size_t)dtf_feature_numel(&job->data.features[f]) * 4;
		scratch += r->feature_bytes[f] * (size_t)g->batch;
	}
	r->scratch = dtf_alloc_aligned(scratch);
	if (!r->scratch)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	char *s = r->scratch;
	for (int f = 0; f < job->data.nfeatures; f++) {
		r->feed[f] = s;
		s += (size_t)dtf_feature_numel(&job->data.features[f]) *
		     (size_t)g->batch * 4;
	}
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i].op == DTF_OP_INPUT)
			r->feed[g->nodes[i].a.in.feature] = g->nodes[i].data;
	if (job->checkpoint.dir && dtf_graph_num_nontrainable(g) > 0 &&
	    !(r->own_stats = dtf_alloc_aligned(g->nparams * sizeof(float))))
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	if ((rc = dtf_optimizer_init(&r->opt, job, g->nparams)) < 0)
		return rc;
	return dtf_optimizer_segments_from_graph(&r->opt, job, g);
}

/* Copy the non-trainable variables of params to dst (the same offsets). */
static void copy_nontrainable(const struct dtf_graph *g, float *dst,
			      const float *params)
{
	for (int i = 0; i < g->nnodes; i++) {
		const struct dtf_node *n = &g->nodes[i];
		if (n->op == DTF_OP_VARIABLE && !n->a.var.trainable)
			memcpy(dst + n->a.var.offset, params + n->a.var.offset,
			       (size_t)dtf_shape_numel(&n->shape) * sizeof(float));
	}
}

/* ---- the backend --------------------------------------------------------- */

/* The update is sgd or adam without weight decay or clipping (what every
 * backend applies; ops/backend.h plain_update). */
static int plain_update(const struct dtf_optimizer *op)
{
	return op->kind != DTF_OPT_ADAMW && op->kind != DTF_OPT_RMSPROP &&
	       !(op->weight_decay > 0) && !(op->clipnorm > 0);
}

/*
 * The backend of this replica, prepared for its planned graph: with
 * `device_ok` (training ranks) the job's device (cuda, or auto: a GPU
 * where this rank sees one and it can run the graph, with a warning when
 * it cannot), else the CPU.  Errors: those of the backends' open and
 * prepare (ops/backend.h).
 */
int dtf_replica_open_backend(const struct dtf_job *job, struct dtf_comm *comm,
			     struct replica *r, int device_ok)
{
	int rc = 0, required = job->device.kind == DTF_DEVICE_CUDA;
	struct dtf_backend_graph bg = {
		.g = &r->g, .arena = r->plan.arena,
		.arena_bytes = r->plan.arena_bytes, .params = r->params,
		.grads = r->grads, .nstats = NSTATS, .feed = r->feed,
		.feature_bytes = r->feature_bytes,
		.nfeatures = job->data.nfeatures,
		.optimizer_slots = (size_t)r->opt.nslots * r->g.nparams,
		.slots = r->opt.slots, .top_k = job->model.metric_top_k,
		.pool = r->use_fast ? r->pool : NULL,
		.poison = job->memory.poison ? &r->plan : NULL};
	if (device_ok && job->device.kind != DTF_DEVICE_CPU) {
		struct dtf_backend_cuda_opts co = {
			.required = required,
			.allow_sharing = job->device.allow_gpu_sharing,
			.tf32 = job->device.precision == DTF_PRECISION_TF32,
			.local_rank = comm ? dtf_comm_local_rank(comm) : 0,
			.local_size = comm ? dtf_comm_local_size(comm) : 1,
			.world = comm ? dtf_comm_size(comm) : 1,
			.accumulate_steps = job->train.accumulate_steps,
			.plain_update = plain_update(&r->opt)};
		if ((rc = dtf_backend_cuda_open(&co, &r->be)) < 0)
			return rc;
		if (r->be && (rc = r->be->i->prepare(r->be->ctx, &bg)) < 0) {
			dtf_backend_free(r->be);
			r->be = NULL;
			if (rc != -DTF_ERR_CONFIG || required)
				return rc;
			dtf_warn("device: auto: %s; training on the CPU",
				 dtf_error_msg());
		}
		if (r->be)
			return 0;
	}
	if ((rc = dtf_backend_cpu_new(&r->be)) < 0)
		return rc;
	return r->be->i->prepare(r->be->ctx, &bg);
}

void dtf_train_obs_job(const struct dtf_job *job, struct dtf_obs_job *out)
{
	*out = (struct dtf_obs_job){
		.name = job->name, .dir = job->logging.dir,
		.tensorboard = job->logging.tensorboard,
		.trace = job->logging.trace,
		.trace_steps = {job->logging.trace_steps[0],
				job->logging.trace_steps[1]},
		.every_steps = job->logging.every_steps,
		.metric_accuracy = job->model.metric_accuracy,
		.metric_top_k = job->model.metric_top_k,
		.has_eval = job->data.eval_files != NULL,
		.straggler_window_steps = job->fault.straggler_window_steps,
		.straggler_windows = job->fault.straggler_windows,
		.straggler_factor = job->fault.straggler_factor};
}

/* ---- summary ------------------------------------------------------------ */

int dtf_train_summary(const struct dtf_job *job, int batch, FILE *out)
{
	struct replica r;
	int rc = dtf_replica_build(job, batch, 1, &r);
	if (rc == 0)
		rc = dtf_summary_print(job, &r.g, r.layer_out, out);
	dtf_replica_deinit(&r);
	return rc;
}

/* ---- batch sizes ------------------------------------------------------- */

int dtf_train_per_replica_batch(const struct dtf_job *job, int world, int *out)
{
	if (job->train.per_replica_batch_size > DTF_BATCH_MAX)
		return dtf_error(DTF_ERR_CONFIG,
				 "%s: train.per_replica_batch_size: %lld is more than %d",
				 job->train.where,
				 (long long)job->train.per_replica_batch_size, DTF_BATCH_MAX);
	if (job->train.per_replica_batch_size > 0) {
		*out = (int)job->train.per_replica_batch_size;
		return 0;
	}
	int64_t global = job->train.batch_size;
	if (global > DTF_BATCH_MAX * (int64_t)world)
		return dtf_error(DTF_ERR_CONFIG,
				 "%s: train.batch_size: %lld is more than %d examples per replica",
				 job->train.where, (long long)global, DTF_BATCH_MAX);
	if (global % world != 0)
		return dtf_error(DTF_ERR_CONFIG,
				 "%s: train.batch_size: the global batch %lld is not divisible by the %d replicas\n"
				 "HINT: use a multiple of %d, or set per_replica_batch_size",
				 job->train.where, (long long)global, world,
				 world);
	*out = (int)(global / world);
	return 0;
}

/* ---- evaluation -------------------------------------------------------- */

/* Non-trainable variables (batch_norm moving statistics) are updated by
 * each replica from its own batches; before they are read, replace them by
 * their mean over the replicas, as TF's MirroredStrategy aggregates them
 * (VariableAggregation.MEAN). */
static int average_nontrainable(struct dtf_comm *comm, struct replica *r)
{
	int world = comm ? dtf_comm_size(comm) : 1;
	if (world == 1)
		return 0;
	for (int i = 0; i < r->g.nnodes; i++) {
		const struct dtf_node *n = &r->g.nodes[i];
		if (n->op != DTF_OP_VARIABLE || n->a.var.trainable)
			continue;
		float *p = r->params + n->a.var.offset;
		size_t numel = (size_t)dtf_shape_numel(&n->shape);
		int rc = dtf_comm_allreduce_sum_f32(comm, p, numel);
		if (rc < 0)
			return rc;
		for (size_t k = 0; k < numel; k++)
			p[k] /= (float)world;
	}
	return 0;
}

int dtf_train_read_batch(void *arg, void *const *feed, uint64_t *ids,
			 int *count)
{
	return dtf_pipeline_next(arg, feed, ids, count);
}

static int agree_vote(struct dtf_comm *comm, int rc, int vote, int *agreed,
		      const char *when, int64_t step,
		      struct dtf_train_result *result);

int dtf_train_evaluate(const struct dtf_job *job, struct dtf_comm *comm,
		       struct replica *r, struct dtf_pipeline *eval,
		       int64_t step, struct eval_totals *tot,
		       struct dtf_train_result *result, struct dtf_fault *fault)
{
	struct dtf_backend *be = r->be;
	struct dtf_exec_ctx ctx = {.training = 0,
				   .example_ids = r->ids,
				   .workspace = r->plan.workspace,
				   .loss_scale = 1.0f};
	/* loss sum, correct, count, top-k correct (where the backend counts
	 * it); the batches run while the next is read where it can */
	double local[4] = {0, 0, 0, 0}, sums[3];
	int rc = dtf_pipeline_begin_epoch(eval, 0);
	while (rc == 0) {
		int count = 0;
		rc = be->i->load(be->ctx, dtf_train_read_batch, eval, r->ids, &count);
		if (rc == 0)
			rc = dtf_train_check_labels(r, eval, count, job->model.loss_logits);
		if (rc < 0 || count == 0)
			break;
		ctx.valid = count;
		be->i->forward(be->ctx, &ctx);
		local[2] += count;
		dtf_fault_progress(fault, "evaluation", step);
	}
	int crc = be->i->eval_totals(be->ctx, sums);
	if (rc == 0)
		rc = crc;
	tot->has_top_k = rc == 0 && !isnan(sums[2]);
	if (rc == 0) {
		local[0] = sums[0];
		local[1] = sums[1];
		local[3] = tot->has_top_k ? sums[2] : 0;
	}
	crc = dtf_train_agree(comm, rc, "evaluating after", step, result);
	if (crc < 0)
		return crc;
	if ((crc = dtf_comm_allreduce_sum_f64(comm, local, 4)) < 0)
		return crc;
	tot->loss_sum = local[0];
	tot->correct = local[1];
	tot->count = local[2];
	tot->top_k = local[3];
	return 0;
}

/*
 * Read this rank's eval data once at start (framing, CRCs, decoding into
 * the input buffers, labels against the classes), so that a bad eval
 * record stops the run before training instead of at the first
 * evaluation, maybe hours in.  With data.on_error: skip the bad records
 * are left out here as at every evaluation (a label out of range is never
 * skipped, as in training).  Each evaluation checks its labels again
 * after loading a batch.  Errors: those of dtf_pipeline_next() and
 * check_labels().
 */
int dtf_train_check_eval_data(const struct dtf_job *job, struct replica *r,
			      struct dtf_pipeline *eval)
{
	double t0 = now_seconds();
	int64_t n = 0;
	int count = 0;
	int rc = dtf_pipeline_begin_epoch(eval, 0);
	while (rc == 0 &&
	       (rc = dtf_pipeline_next(eval, r->feed, r->ids, &count)) == 0 &&
	       count > 0 &&
	       (rc = dtf_train_check_labels(r, eval, count, job->model.loss_logits)) == 0)
		n += count;
	if (rc == 0)
		dtf_log(DTF_LOG_DEBUG, 1,
			"data.eval: %lld records read and decoded in %.3f s",
			(long long)n, now_seconds() - t0);
	return rc;
}

/* ---- the loop ---------------------------------------------------------- */

int dtf_train_open_pipeline(const struct dtf_job *job, const char *pattern,
			    const char *label, int rank, int world,
			    int batch, int training,
			    struct dtf_pipeline **out)
{
	char **files = NULL;
	int nfiles = 0;
	int rc = dtf_glob_files(pattern, &files, &nfiles);
	if (rc < 0) {
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", dtf_error_msg());
		return dtf_error(DTF_ERR_DATA,
				 "%s%s: %s (relative patterns are read from the current directory)",
				 label, label[0] == '-' ? "" : ".files", msg);
	}
	/* data.compression, or the split's own */
	struct dtf_read_spec rd = job->data.read;
	rd.compression = (enum dtf_compression)(training
							? job->data.train_compression
							: job->data.eval_compression);
	/* shard_policy off is for the training data (every rank trains on
	 * all of it); an evaluation counts each record once, whatever the
	 * policy, so its off reads as data (every rank reads every file and
	 * keeps every world-th record) */
	if (!training && rd.shard_policy == DTF_SHARD_OFF)
		rd.shard_policy = DTF_SHARD_DATA;
	if (rd.shard_policy == DTF_SHARD_FILE && nfiles < world) {
		char what[1200];
		snprintf(what, sizeof(what), "%s%s (%s)", label,
			 label[0] == '-' ? "" : ".files", pattern);
		dtf_free(files);
		return dtf_pipeline_file_shard_error(job->data.shard_policy_where,
						     what, nfiles, world);
	}
	struct dtf_pipeline_opts po = {
		.files = (const char *const *)files, .nfiles = nfiles,
		.rank = rank, .world = world,
		.features = job->data.features,
		.nfeatures = job->data.nfeatures, .batch = batch,
		.shuffle_buffer = training ? (size_t)job->data.shuffle_buffer : 0,
		.seed = job->seed, .read = &rd,
		.drop_remainder = training ? job->data.drop_remainder : 0,
		.augment = training ? &job->data.augment : NULL,
		.label = label};
	rc = dtf_pipeline_open(&po, out);
	dtf_free(files);
	return rc;
}

static int write_variables(const char *path, const float *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return dtf_error(DTF_ERR_IO, "%s: cannot write: %m", path);
	uint64_t count = n;
	int ok = fwrite("DTFVARS1", 1, 8, f) == 8 &&
		 fwrite(&count, sizeof(count), 1, f) == 1 &&
		 fwrite(p, sizeof(float), n, f) == n;
	if (fclose(f) != 0 || !ok)
		return dtf_error(DTF_ERR_IO, "%s: write failed", path);
	return 0;
}

/*
 * Agree on the step's status; on a failure, return the right error.  Beside
 * errors the status carries a vote (fault.h): bits 8-15 a pending signal,
 * bit 0 "a time-based checkpoint is due" (set by rank 0 only, so ranks
 * follow rank 0's clock).  Errors outrank signals, which outrank the
 * clock; *agreed receives the winning vote when nobody failed.
 */
static int agree_vote(struct dtf_comm *comm, int rc, int vote, int *agreed,
		      const char *when, int64_t step,
		      struct dtf_train_result *result)
{
	int status = 0;
	if (rc < 0) {
		status = dtf_error_exit_status(rc);
		if (status == 0)
			status = 1;
	}
	int worst, who;
	int crc = dtf_comm_agree(comm, status << 16 | vote, &worst, &who);
	if (crc < 0)
		return crc;
	*agreed = (worst & 0xffff) | (who << 16);
	worst >>= 16;
	if (!worst)
		return 0;
	/* did every rank fail with the same message?  (a collective of
	 * every rank: each saw worst) */
	const char *msg = dtf_error_msg();
	int64_t mine = status ? (int64_t)status << 32 |
					dtf_crc32c(0, msg, strlen(msg))
			      : -1;
	int64_t range[2] = {mine, -mine};
	if ((crc = dtf_comm_allreduce_min_i64(comm, range, 2)) < 0)
		return crc;
	if (range[0] >= 0 && range[0] == -range[1])
		result->same_error = 1;
	if (status)
		return rc;
	result->remote_failure = 1;
	/* Exit with the failing rank's status so the job's status tells the
	 * kind of failure whichever rank the scheduler looks at. */
	enum dtf_err code = worst == 3 ? DTF_ERR_DATA
			    : worst == 2 ? DTF_ERR_CONFIG
			    : worst == 4 ? DTF_ERR_CHECKPOINT
					 : DTF_ERR_REMOTE;
	return dtf_error(code, "stopping: rank %d failed %s step %lld", who,
			 when, (long long)step);
}

int dtf_train_agree(struct dtf_comm *comm, int rc, const char *when,
		    int64_t step, struct dtf_train_result *result)
{
	int agreed;
	return agree_vote(comm, rc, 0, &agreed, when, step, result);
}

/* printf-style at buf + *len, within size; a text that does not fit is
 * cut and *len stays at the end of what fits. */
static void appendf(char *buf, size_t size, size_t *len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void appendf(char *buf, size_t size, size_t *len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int w = vsnprintf(buf + *len, size - *len, fmt, ap);
	va_end(ap);
	*len = w < 0 || (size_t)w >= size - *len ? size - 1 : *len + (size_t)w;
}

/* "0-3,5,7,8" for the ascending ranks r[0..n-1] (a range from three ranks
 * on), appended as appendf does. */
static void append_ranks(char *buf, size_t size, size_t *len,
			 const int32_t *r, int n)
{
	for (int i = 0; i < n;) {
		int j = i;
		while (j + 1 < n && r[j + 1] == r[j] + 1)
			j++;
		if (j < i + 2)
			j = i;
		if (j > i)
			appendf(buf, size, len, "%s%d-%d", i ? "," : "",
				(int)r[i], (int)r[j]);
		else
			appendf(buf, size, len, "%s%d", i ? "," : "", (int)r[i]);
		i = j + 1;
	}
}

/* "SIGTERM on ranks 0,1 and SIGUSR1 on rank 2" into who[size] from the
 * gathered {world rank, signal or 0} pairs of `n` replicas; *got_sigterm
 * becomes 1 when one of the signals is SIGTERM.  At most 64 ranks are
 * listed per signal ("..." for more). */
static void name_signalled(const int32_t *all, int n, char *who, size_t size,
			   int *got_sigterm)
{
	size_t len = 0;
	int groups = 0;
	who[0] = 0;
	for (int i = 0; i < n; i++) {
		int sig = all[2 * i + 1], first = sig != 0;
		for (int k = 0; k < i && first; k++)
			first = all[2 * k + 1] != sig;
		if (!first)
			continue;
		int32_t ranks[64];
		int m = 0, more = 0;
		for (int k = i; k < n; k++)
			if (all[2 * k + 1] == sig) {
				if (m < 64)
					ranks[m++] = all[2 * k];
				else
					more = 1;
			}
		*got_sigterm |= sig == SIGTERM;
		appendf(who, size, &len, "%s%s on rank%s ", groups ? " and " : "",
			dtf_fault_signal_name(sig), m > 1 ? "s" : "");
		append_ranks(who, size, &len, ranks, m);
		if (more)
			appendf(who, size, &len, ",...");
		groups++;
	}
	if (!groups)
		snprintf(who, size, "a signal");
}

/*
 * The end of a stop on a signal, on every replica: gather which world
 * ranks (as the log's prefixes name them) have received which signal by
 * now, after the checkpoint, and let replica 0 print one notice naming
 * them, what was saved (`saved`: the checkpoint's path, or NULL) and what
 * the launcher will report.  A rank whose signal comes later is not named.
 * Returns DTF_ERR_SIGNAL, the notice's text as its message (on replica 0;
 * "a signal" elsewhere), with result->stop_announced set.
 */
static int signal_stop(struct dtf_comm *comm, const char *saved, int64_t step,
		       struct dtf_train_result *result)
{
	int size = comm ? dtf_comm_size(comm) : 1;
	int root = !comm || dtf_comm_rank(comm) == 0;
	int32_t mine[2] = {dtf_log_rank(), dtf_fault_pending_signal()};
	int32_t *all = root ? dtf_calloc((size_t)size * 2, sizeof(*all)) : NULL;
	int rc = root && !all ? dtf_error(DTF_ERR_NOMEM, "out of memory") : 0;
	if ((rc = dtf_train_agree(comm, rc, "gathering the signals after", step,
			result)) < 0)
		return rc;
	if ((rc = dtf_comm_gather_i32(comm, mine, 2, all, 0)) < 0) {
		dtf_free(all);
		return rc;
	}
	char who[512] = "a signal";
	int got_sigterm = 0;
	if (root)
		name_signalled(all, size, who, sizeof(who), &got_sigterm);
	dtf_free(all);
	const char *note = dtf_fault_exit_note(got_sigterm);
	if (saved)
		rc = dtf_error(DTF_ERR_SIGNAL,
			       "stop requested by %s at step %lld: checkpoint of step %lld "
			       "written (%s); exit status 75%s; run again with --resume "
			       "to continue",
			       who, (long long)step, (long long)step, saved, note);
	else
		rc = dtf_error(DTF_ERR_SIGNAL,
			       "stop requested by %s at step %lld: nothing saved (no "
			       "checkpoint.dir); exit status 75%s; a new run starts from "
			       "step 0 (set checkpoint.dir to be able to resume)",
			       who, (long long)step, note);
	if (root)
		dtf_log_notice("%s", dtf_error_msg());
	result->stop_announced = 1;
	return rc;
}

/*
 * After a step: save a checkpoint when one is due (every_steps, the last
 * step, or agreed in the step's status: rank 0's clock or a signal), agree
 * on the save, and after a signal stop with DTF_ERR_SIGNAL.  The vote
 * `agreed` is agree_vote's: every rank takes the same branch.
 */
static int after_step(const struct dtf_job *job, struct dtf_comm *comm,
		      struct dtf_strategy *strat, struct replica *r,
		      struct dtf_checkpointer *ck, struct dtf_fault *fault,
		      struct dtf_obs *obs,
		      const struct dtf_ckpt_position *pos, int agreed,
		      int last, struct dtf_train_result *result)
{
	int sig = (agreed >> 8) & 0xff;
	int64_t every = job->checkpoint.every_steps;
	int due = last || sig || (agreed & 1) ||
		  (every > 0 && pos->step % every == 0);
	if (!due || (!ck && !sig))
		return 0;
	char path[512];
	if (ck) {
		dtf_fault_progress(fault, "checkpoint", pos->step);
		double t0 = now_seconds();
		int rc = dtf_strategy_sync_slots(strat);
		/* the GPU's variables and slots into the host copies the
		 * checkpointer reads */
		if (rc == 0)
			rc = dtf_backend_download(r->be, DTF_BACKEND_PARAMS |
							    DTF_BACKEND_SLOTS);
		/* the replicas' own moving statistics (batch_norm): the
		 * checkpoint holds their mean, as TF saves a MEAN-aggregated
		 * variable, while each replica goes on from its own, so
		 * saving does not change the training */
		if (r->own_stats) {
			copy_nontrainable(&r->g, r->own_stats, r->params);
			/* a collective: every rank takes part, failed or not */
			int arc = average_nontrainable(comm, r);
			if (rc == 0)
				rc = arc;
		}
		if (rc == 0)
			rc = dtf_checkpointer_save(ck, pos);
		if (r->own_stats)
			copy_nontrainable(&r->g, r->params, r->own_stats);
		if (rc == 0 && (sig || last))
			rc = dtf_checkpointer_wait(ck);
		dtf_obs_span(obs, DTF_OBS_CHECKPOINT, pos->step, -1, t0,
			     now_seconds());
		if ((rc = dtf_train_agree(comm, rc, "saving the checkpoint after", pos->step,
				result)) < 0)
			return rc;
		snprintf(path, sizeof(path), "%s/ckpt-%lld.dtf",
			 job->checkpoint.dir, (long long)pos->step);
	}
	if (!sig || last)
		return 0;
	return signal_stop(comm, ck ? path : NULL, pos->step, result);
}

static void add_times(struct dtf_step_times *sum,
		      const struct dtf_step_times *t)
{
	sum->data_wait += t->data_wait;
	sum->forward += t->forward;
	sum->backward += t->backward;
	sum->comm += t->comm;
	sum->optimizer += t->optimizer;
}

/*
 * Labels outside [0, classes) would make the loss NaN (and the accuracy
 * quietly wrong): a data error naming the file, record index and byte
 * offset of the first such example of the batch, for training and
 * evaluation data alike.  The caller agrees on the status before the next
 * collective, so every rank stops.
 */
int dtf_train_check_labels(const struct replica *r,
			   const struct dtf_pipeline *p, int count,
			   const char *logits_layer)
{
	const struct dtf_graph *g = &r->g;
	if (g->nodes[g->loss].op != DTF_OP_SPARSE_SOFTMAX_XENT)
		return 0; /* float labels: any value is a valid target */
	/* labels computed from a feature (slices of a token window) are
	 * checked in the feature they come from, which is fed already: a
	 * superset of them */
	int src = g->labels;
	while (g->nodes[src].op == DTF_OP_SLICE ||
	       g->nodes[src].op == DTF_OP_RESHAPE ||
	       g->nodes[src].op == DTF_OP_IDENTITY)
		src = g->nodes[src].inputs[0];
	if (g->nodes[src].op != DTF_OP_INPUT ||
	    g->nodes[src].dtype != DTF_INT32)
		return 0; /* computed otherwise: the kernels give NaN */
	const int32_t *labels = g->nodes[src].data;
	const struct dtf_shape *ls = &g->nodes[g->logits].shape;
	int classes = (int)ls->d[ls->rank - 1];
	size_t per = (size_t)(dtf_shape_numel(&g->nodes[src].shape) /
			      g->nodes[src].shape.d[0]);
	for (size_t q = 0; q < (size_t)count * per; q++) {
		if (labels[q] >= 0 && labels[q] < classes)
			continue;
		int i = (int)(q / per);
		uint64_t id = r->ids[i], off = 0;
		char at[64] = "";
		/* the offset only costs a read up to the record */
		if (dtf_pipeline_record_offset(p, id, &off) == 0)
			snprintf(at, sizeof(at), " at byte offset %llu",
				 (unsigned long long)off);
		return dtf_error(DTF_ERR_DATA,
				 "%s: record %llu%s: label %d is outside [0, %d), the classes of layer '%s'",
				 dtf_pipeline_file(p, (int)(id >> 40)),
				 (unsigned long long)(id & ((1ull << 40) - 1)),
				 at, labels[q], classes, logits_layer);
	}
	return 0;
}

/*
 * One update: train.accumulate_steps micro-batches, each read, agreed on,
 * run forward and backward, then the gradients and the statistics behind
 * them summed over the replicas and the optimizer applied.  `rc` carries
 * an error from before the step (e.g. starting the epoch) into the
 * agreement.  Backward runs on the backend between the strategy's
 * backward_begin and backward_end (distribute/strategy.h): the last
 * micro-batch starts the gradient buckets from inside it through the
 * strategy's per-node callback, except on a backend whose backward can
 * fail (ops/backend.h: checked_backward), where the step agrees once more
 * after computing, as a device failure must stop every rank before the
 * sum, and the buckets start after it.  The strategy then reduces, checks
 * and applies (through the backend's apply where it keeps the variables).
 * Phase times are added to *t; t->mark is left where the optimizer's time
 * begins.
 */
static int train_step(const struct dtf_job *job, struct dtf_comm *comm,
		      struct dtf_strategy *strat, struct replica *r,
		      struct dtf_pipeline *train, struct dtf_exec_ctx *ctx,
		      int rc, int vote, int *agreed, int64_t step, double lr,
		      int read_ahead, struct dtf_step_times *t,
		      struct dtf_obs *obs, struct dtf_train_result *result)
{
	struct dtf_graph *g = &r->g;
	struct dtf_backend *be = r->be;
	int checked = be->i->checked_backward;
	int batch = g->batch, count = 0, k = job->train.accumulate_steps;
	float *stats = r->grads + g->nparams;
	memset(stats, 0, NSTATS * sizeof(float));
	double t0 = now_seconds(), t1 = t0, t2 = t0, t3 = t0, t4 = t0;
	for (int micro = 0; micro < k; micro++) {
		t0 = now_seconds();
		if (rc == 0)
			rc = be->i->load(be->ctx, dtf_train_read_batch, train, r->ids,
					 &count);
		if (rc == 0 && count < batch)
			rc = dtf_error(DTF_ERR_DATA,
				       "%s: this rank's shard ended early (%d of %d examples at step %lld): were the files changed while training?",
				       job->data.train_files, count, batch,
				       (long long)step);
		if (rc == 0)
			rc = dtf_train_check_labels(r, train, count, job->model.loss_logits);
		t1 = now_seconds();
		t->data_wait += t1 - t0;
		if ((rc = agree_vote(comm, rc, vote, agreed, "reading data for",
				     step, result)) < 0)
			return rc;
		t2 = now_seconds();
		be->i->forward(be->ctx, ctx);
		if (read_ahead && micro == k - 1 && be->i->prefetch)
			be->i->prefetch(be->ctx, dtf_train_read_batch, train);
		t3 = now_seconds();
		int hook = dtf_strategy_backward_begin(strat, micro, k, lr) &&
			   !checked;
		rc = be->i->backward(be->ctx, ctx,
				     hook ? dtf_strategy_after_node : NULL, strat);
		if (checked &&
		    (rc = dtf_train_agree(comm, rc, "computing", step, result)) < 0)
			return rc;
		dtf_strategy_backward_end(strat, micro, k);
		be->i->step_stats(be->ctx, ctx, batch, stats);
		t4 = now_seconds();
		t->forward += t3 - t2;
		t->backward += t4 - t3;
		t->comm += t2 - t1; /* the agreement */
	}
	int applied;
	rc = dtf_strategy_finish_step(strat, stats, lr, step, &applied,
				      &t->comm, &t->optimizer);
	if (rc < 0 && dtf_strategy_error_is_agreed(strat))
		result->same_error = 1; /* said once, by rank 0 */
	double t5 = now_seconds();
	t->mark = t5;
	if (dtf_obs_tracing(obs, step + 1)) { /* the last micro-batch */
		dtf_obs_span(obs, DTF_OBS_DATA_WAIT, step + 1, -1, t0, t1);
		dtf_obs_span(obs, DTF_OBS_AGREE, step + 1, -1, t1, t2);
		dtf_obs_span(obs, DTF_OBS_FORWARD, step + 1, -1, t2, t3);
		dtf_obs_span(obs, DTF_OBS_BACKWARD, step + 1, -1, t3, t4);
		dtf_obs_span(obs, DTF_OBS_ALLREDUCE, step + 1, -1, t4, t5);
		double b0, b1; /* each bucket, from its launch */
		for (int b = 0; b < dtf_strategy_num_buckets(strat); b++)
			if (dtf_strategy_bucket_span(strat, b, &b0, &b1) == 0)
				dtf_obs_span(obs, DTF_OBS_ALLREDUCE, step + 1, b,
					     b0, b1);
	}
	return rc;
}

/* Where a resumed run starts (struct start) and how its first epoch ends. */
struct start {
	int64_t step;      /* global step */
	int epoch;         /* 0-based */
	int64_t in_epoch;  /* batches of the epoch already consumed */
	int64_t epoch_end; /* the step in epoch where the first epoch ends */
	int elastic;       /* re-sharded: records consumed are left out */
	int32_t nprev;     /* segments of the epoch before this run */
	struct dtf_ckpt_segment prev[DTF_CKPT_MAX_SEGMENTS];
	struct dtf_elastic *el;
};

/*
 * From the checkpoint's position `pos`: with the same world size and
 * per-replica batch, skip the batches consumed (exact resume); otherwise
 * leave out the records the epoch consumed (elastic.h) and agree on the
 * steps left in it.  Collective.
 */
static int start_position(const struct dtf_job *job, struct dtf_comm *comm,
			  const struct dtf_checkpointer *ck,
			  struct dtf_pipeline *train, struct replica *r,
			  const struct dtf_ckpt_position *pos, int world,
			  int batch, int64_t steps_per_epoch, struct start *st,
			  struct dtf_train_result *result)
{
	st->step = pos->step;
	st->epoch = (int)pos->epoch;
	st->in_epoch = pos->step_in_epoch;
	/* the order of the epoch's records and the dropout masks are drawn
	 * from the job's seed; the batches taken so far were the
	 * checkpoint's seed's */
	if (pos->seed != job->seed) {
		char shuffle[192] = "";
		if (job->data.shuffle_buffer > 0)
			snprintf(shuffle, sizeof(shuffle),
				 "the rest of epoch %d is taken from the new seed's shuffle, so some of its records are read twice and others not at all; ",
				 st->epoch + 1);
		dtf_info("notice: the job's seed %llu is not the checkpoint's %llu: %sdropout and augmentation draw anew\n"
			 "HINT: --set seed=%llu continues exactly",
			 (unsigned long long)job->seed,
			 (unsigned long long)pos->seed, shuffle,
			 (unsigned long long)pos->seed);
	}
	if (!dtf_elastic_needed(pos, world, batch)) {
		dtf_info("resuming from %s: step %lld, epoch %d, batch %lld of %lld",
			 dtf_checkpointer_path(ck), (long long)st->step,
			 st->epoch + 1, (long long)st->in_epoch,
			 (long long)steps_per_epoch);
		return 0;
	}
	/* the epoch's batches so far were the checkpoint's, not this run's
	 * (the notice below says what is left at this run's) */
	dtf_info("resuming from %s: step %lld, epoch %d, after %lld batch(es) of it at the checkpoint's global batch %lld",
		 dtf_checkpointer_path(ck), (long long)st->step, st->epoch + 1,
		 (long long)st->in_epoch, (long long)pos->global_batch);
	int64_t left = 0;
	int rc = 0;
	if (pos->nprev >= DTF_CKPT_MAX_SEGMENTS)
		rc = dtf_error(DTF_ERR_CHECKPOINT,
			       "epoch %d was resumed on other world sizes %d times; at most %d are recorded",
			       st->epoch + 1, pos->nprev + 1,
			       DTF_CKPT_MAX_SEGMENTS);
	if (rc == 0)
		rc = dtf_elastic_new(job, pos, &st->el);
	if (rc == 0)
		rc = dtf_elastic_start_epoch(st->el, train, st->epoch, r->feed,
					     r->ids, &left);
	if ((rc = dtf_train_agree(comm, rc, "re-sharding the data position before",
			st->step, result)) < 0)
		return rc;
	int64_t rest = left / batch;
	if ((rc = dtf_comm_allreduce_min_i64(comm, &rest, 1)) < 0)
		return rc;
	st->elastic = 1;
	st->epoch_end = st->in_epoch + rest;
	int64_t before = 0;
	st->nprev = pos->nprev + 1;
	for (int i = 0; i < pos->nprev; i++) {
		st->prev[i] = pos->prev[i];
		before += pos->prev[i].steps;
	}
	st->prev[pos->nprev] = (struct dtf_ckpt_segment){
		pos->world, pos->per_replica_batch, pos->step_in_epoch - before};
	dtf_info("notice: elastic resume at step %lld: the checkpoint was written by %d rank(s) at per-replica batch %d "
		 "(global %lld), this run has %d at %d (global %lld); the %lld records of epoch %d read before are left out, "
		 "%lld steps remain in it, and later epochs are sharded over %d rank(s)",
		 (long long)st->step, pos->world, pos->per_replica_batch,
		 (long long)pos->global_batch, world, batch,
		 (long long)batch * world,
		 (long long)dtf_elastic_consumed(st->el), st->epoch + 1,
		 (long long)rest, world);
	return 0;
}

/* ---- the evaluator task (evaluator.h) ---------------------------------- */

struct eval_task {
	const struct dtf_job *job;
	struct replica *r;
	struct dtf_pipeline *eval;
	struct dtf_train_result *result;
};

/* evaluate() on this rank alone, for the evaluator */
static int evaluate_loaded(void *arg, int64_t step,
			   struct dtf_evaluator_totals *out)
{
	struct eval_task *t = arg;
	struct eval_totals tot;
	int rc = dtf_train_evaluate(t->job, NULL, t->r, t->eval, step, &tot, t->result,
				    NULL);
	out->loss_sum = tot.loss_sum;
	out->correct = tot.correct;
	out->count = tot.count;
	out->top_k = tot.top_k;
	return rc;
}

/*
 * The evaluator rank: its own variables, threads, checkpoint reader, eval
 * data and outputs, set up before the set-up agreement it shares with the
 * training ranks; then evaluate until the chief's notice.
 */
static int run_evaluator(const struct dtf_job *job, struct dtf_comm *world,
			 const struct dtf_train_opts *opts, struct replica *r,
			 int batch, struct dtf_train_result *result)
{
	struct dtf_fault *fault = NULL;
	struct dtf_checkpointer *ck = NULL;
	struct dtf_pipeline *eval = NULL;
	struct dtf_evaluator *ev = NULL;
	struct eval_task task = {job, r, NULL, result};
	int threads = dtf_threads_choose(opts->threads,
					 dtf_comm_local_size(world));
	int rc = dtf_replica_setup_buffers(job, r);
	dtf_threads_flush_denormals();
	if (rc == 0)
		rc = dtf_threads_setup_fast(threads, &r->use_fast, &r->pool);
	if (rc == 0)
		rc = dtf_replica_open_backend(job, NULL, r, 0);
	if (rc == 0)
		rc = dtf_fault_new(NULL, dtf_comm_rank(world), 0, &fault);
	if (rc == 0)
		rc = dtf_checkpointer_new(job, &r->g, r->params, &r->opt, 0,
					  NULL, &ck);
	if (rc == 0)
		rc = dtf_train_open_pipeline(job, job->data.eval_files,
					     "data.eval", 0, 1, batch, 0, &eval);
	if (rc == 0)
		rc = dtf_train_check_eval_data(job, r, eval);
	task.eval = eval;
	if (rc == 0)
		rc = dtf_evaluator_new(&(struct dtf_evaluator_config){
					       .job = job, .world = world,
					       .chief_rank = 0, .ck = ck,
					       .evaluate = evaluate_loaded,
					       .arg = &task},
				       &ev);
	/* the set-up agreement of every rank (dtf_train_run) */
	if ((rc = dtf_train_agree(world, rc, "setting up before", 0, result)) < 0)
		goto out;
	dtf_log(DTF_LOG_INFO, 1, "evaluator: %lld eval example(s) in batches of %d, %d thread(s) (%s)",
		(long long)dtf_pipeline_num_records(eval), batch, threads,
		r->use_fast ? "fast kernels" : "reference kernels");
	rc = dtf_evaluator_run(ev, &result->steps, &result->eval_loss,
			       &result->eval_accuracy);
out:
	dtf_evaluator_free(ev);
	dtf_pipeline_free(eval);
	dtf_checkpointer_free(ck);
	dtf_fault_free(fault);
	return rc;
}

/* ---- dtf_train_run: setup, resume, epochs, evaluation, finish ---------- */

/* One training run's state, from setup to the end (dtf_train_run). */
struct run {
	const struct dtf_job *job;
	const struct dtf_train_opts *opts;
	struct dtf_train_result *result;
	struct dtf_comm *world_comm; /* every rank, ps and evaluator included */
	struct dtf_comm *comm;       /* the training replicas' (NULL on ps and
					evaluator ranks, and without MPI) */
	struct dtf_strategy *strat;
	enum dtf_task_type role;
	int rank, world, batch;
	int evaluator;   /* the world rank of an evaluator task, or -1 */
	int notify;      /* this rank (the chief) sends it the end notice */
	int resume;
	int ckpt_lock;   /* the chief's lock on checkpoint.dir, or -1 */
	struct replica r;
	struct dtf_pipeline *train, *eval;
	struct dtf_obs *obs;
	struct dtf_fault *fault;
	struct dtf_checkpointer *ck;
	struct start st;
	struct dtf_ckpt_position pos; /* of the last step, for checkpoints */
	struct dtf_schedule sched;
	struct dtf_exec_ctx ctx;
	int64_t global_batch, steps_per_epoch, total_steps;
	int64_t step, first_step;
	uint64_t step_allocs; /* allocations inside steps after the first */
	double t_start;
};

/*
 * The options that are the same on every rank and checked before any
 * collective, then rank 0's (--export-variables writable, the lock on
 * checkpoint.dir), agreed on by every rank.
 */
static int check_options(struct run *R)
{
	const struct dtf_job *job = R->job;
	const struct dtf_train_opts *opts = R->opts;
	int rc = 0;
	if (opts->overwrite_checkpoints && opts->resume)
		rc = dtf_error(DTF_ERR_USAGE,
			       "--overwrite-checkpoints starts a new run: it cannot be given with --resume");
	if (rc == 0 && opts->overwrite_checkpoints && !opts->dry_run &&
	    !job->checkpoint.dir)
		rc = dtf_error(DTF_ERR_USAGE,
			       "%s: --overwrite-checkpoints needs checkpoint.dir in the job file",
			       job->path);
	if (rc == 0 && opts->allow_fresh_start && !R->resume)
		rc = dtf_error(DTF_ERR_USAGE,
			       "--allow-fresh-start applies to a resume only: "
			       "give --resume too (or set checkpoint.resume: auto)");
	if (rc == 0 && R->resume && !opts->dry_run && !job->checkpoint.dir)
		rc = dtf_error(DTF_ERR_USAGE,
			       "%s: resuming needs checkpoint.dir in the job file",
			       job->path);
	if (rc == 0 && job->checkpoint.dir &&
	    job->strategy.type == DTF_STRATEGY_PARAMETER_SERVER)
		rc = dtf_error(DTF_ERR_CONFIG,
			       "checkpoint.dir: checkpoints are not supported with strategy parameter_server yet (the ps ranks hold the variables and optimizer state)");
	if (rc == 0)
		rc = dtf_train_per_replica_batch(job, R->world, &R->batch);
	int chief = !opts->dry_run && R->rank == 0 &&
		    R->role != DTF_TASK_PS && R->role != DTF_TASK_EVALUATOR;
	if (rc == 0 && chief && opts->export_variables) {
		/* find out now, not after the training, that it cannot be
		 * written */
		FILE *f = fopen(opts->export_variables, "ab");
		if (!f)
			rc = dtf_error(DTF_ERR_USAGE,
				       "--export-variables %s: cannot write: %m",
				       opts->export_variables);
		else
			fclose(f);
	}
	if (rc == 0 && chief && job->checkpoint.dir)
		/* the chief, which writes the checkpoints: lock checkpoint.dir
		 * for this run, prove it writable, and refuse (or, asked to,
		 * delete) an earlier run's checkpoints now, not at the first
		 * save */
		rc = dtf_checkpoint_dir_open(
			job->checkpoint.dir,
			R->resume ? DTF_CKPT_START_RESUME
			: opts->overwrite_checkpoints ? DTF_CKPT_START_OVERWRITE
						      : DTF_CKPT_START_FRESH,
			&R->ckpt_lock);
	/* rank 0 alone checked --export-variables and checkpoint.dir: every
	 * rank, ps and evaluator included, learns of a failure before any
	 * other collective */
	return dtf_train_agree(R->world_comm, rc, "checking the options before", 0,
		     R->result);
}

/*
 * The graph, its buffers and the strategy's setup on every rank; the
 * dry run, the evaluator and the ps ranks end here (*done).
 */
static int setup(struct run *R, int *done)
{
	const struct dtf_job *job = R->job;
	struct replica *r = &R->r;
	int rc = dtf_replica_build(job, R->batch, 1, r);
	*done = 1;
	if (!R->opts->dry_run && dtf_strategy_wants_shared_grads(R->strat)) {
		/* the gradient vector in the replicas' shared-memory window
		 * (distribute/strategy.h): a collective, so agree first */
		if ((rc = dtf_train_agree(R->comm, rc, "building the graph before", 0,
				R->result)) == 0 &&
		    (rc = dtf_strategy_share_grads(R->strat, &r->g,
						   r->g.nparams + NSTATS,
						   &r->grads, &r->params)) == 0) {
			r->grads_shared = r->grads != NULL;
			r->params_shared = r->params != NULL;
		}
	}
	if (rc < 0)
		return rc;
	R->result->num_params = dtf_graph_num_params(&r->g);
	if (R->opts->dry_run) {
		char ops[512];
		if (R->rank != 0)
			return 0;
		if ((rc = dtf_summary_print(job, &r->g, r->layer_out, stdout)) < 0)
			return rc;
		if (R->opts->dry_run_ranks > 1)
			printf("ranks: %d (the launcher's), %d replica(s), global batch %lld\n",
			       R->opts->dry_run_ranks, R->world,
			       (long long)R->batch * R->world);
		/* the op table's "not on this backend" entries, by name */
		if (job->device.kind != DTF_DEVICE_CPU &&
		    dtf_cuda_graph_missing(&r->g, ops, sizeof(ops)) > 0)
			printf("not on the cuda backend: %s (device: %s)\n", ops,
			       job->device.kind == DTF_DEVICE_AUTO
				       ? "auto trains on the CPU"
				       : "cuda cannot run this model");
		return 0;
	}
	if (R->role == DTF_TASK_EVALUATOR)
		return run_evaluator(job, R->world_comm, R->opts, r, R->batch,
				     R->result);
	/* the strategy applies the updates through r->opt (and takes upd) */
	struct dtf_update_ops upd;
	if ((rc = dtf_replica_setup_buffers(job, r)) == 0 &&
	    (rc = dtf_optimizer_ops(&r->opt, job, &upd)) == 0)
		rc = dtf_strategy_setup(R->strat, &r->g, r->params, r->grads,
					&upd);
	/* every rank, ps and evaluator included, learns of a failed setup */
	if ((rc = dtf_train_agree(R->world_comm, rc, "setting up before", 0,
			R->result)) < 0)
		return rc;
	/* from here the evaluator waits for the chief's notice */
	R->notify = R->evaluator >= 0 && dtf_comm_rank(R->world_comm) == 0;
	if (R->role == DTF_TASK_PS) {
		/* no step to stop at: a signal ends a ps rank at once */
		dtf_fault_default_signals();
		dtf_graph_init_params(&r->g, job->seed, r->params);
		return dtf_strategy_serve(R->strat);
	}
	*done = 0;
	return 0;
}

/* Threads, then the start-up lines: replicas, batch, strategy. */
/*
 * The start-up line's learning rate: train.schedule's rate at its step 0
 * (what its warmup ramps up to), where it comes from when it is not the
 * optimizer's learning_rate, and the rate after learning_rate_scaling
 * ("effective", on `nrep` replicas) with its ramp.
 */
static void describe_rate(const struct dtf_job *job,
			  const struct dtf_strategy *strat, int nrep,
			  char *buf, size_t size)
{
	struct dtf_schedule sched;
	dtf_schedule_init(&sched, job, INT64_MAX);
	double lr = dtf_schedule_initial_lr(&sched);
	const struct dtf_schedule_spec *sp = &job->train.schedule;
	size_t at = 0;
	dtf_log_append(buf, size, &at, "learning rate %g", lr);
	if (sp->kind == DTF_SCHED_PIECEWISE_CONSTANT)
		dtf_log_append(buf, size, &at,
			       " (train.schedule piecewise_constant's first value; "
			       "the optimizer's learning_rate %g is not used%s",
			       job->train.learning_rate,
			       sp->warmup_steps > 0 ? "; " : ")");
	else if (sp->warmup_steps > 0)
		dtf_log_append(buf, size, &at, " (");
	if (sp->warmup_steps > 0)
		dtf_log_append(buf, size, &at,
			       "reached after train.schedule's %lld warmup "
			       "steps from 0)",
			       (long long)sp->warmup_steps);
	dtf_log_append(buf, size, &at, ", effective %g",
		       strat ? dtf_strategy_learning_rate(strat, lr, INT64_MAX)
			     : lr);
	if (job->train.lr_scaling == DTF_LR_SCALING_LINEAR) {
		dtf_log_append(buf, size, &at,
			       " (linear scaling by the %d replica(s)", nrep);
		if (job->train.lr_warmup_steps > 0)
			dtf_log_append(buf, size, &at,
				       ", ramped from %g over the first %lld "
				       "updates",
				       lr, (long long)job->train.lr_warmup_steps);
		dtf_log_append(buf, size, &at, ")");
	}
	if (size > 0 && at >= size)
		buf[size - 1] = '\0';
}

static int setup_threads(struct run *R)
{
	const struct dtf_job *job = R->job;
	struct replica *r = &R->r;
	int threads = dtf_threads_choose(R->opts->threads,
					 R->comm ? dtf_comm_local_size(R->comm) : 1);
	dtf_threads_flush_denormals();
	int rc = dtf_threads_setup_fast(threads, &r->use_fast, &r->pool);
	if (rc < 0)
		return rc;
	if (r->use_fast)
		dtf_optimizer_set_pool(&r->opt, r->pool);
	R->global_batch = (int64_t)R->batch * R->world;
	dtf_info("%s: %d replica(s) on %d node(s), strategy %s, %d thread(s) per rank (%s%s%s, OpenBLAS %s)",
		 job->name, R->world, R->comm ? dtf_comm_num_nodes(R->comm) : 1,
		 dtf_strategy_name(job->strategy.type), threads,
		 r->use_fast ? "fast kernels " : "reference kernels",
		 r->use_fast ? dtf_cpu_isa_name(dtf_cpu_isa()) : "",
		 r->use_fast ? ", 1 BLAS thread each" : ", all BLAS threads",
		 dtf_threads_blas_core());
	char rate[512];
	describe_rate(job, R->strat, R->world, rate, sizeof(rate));
	dtf_info("batch: global %lld, per replica %d, %d micro-batch(es) per update (%lld examples); %zu parameters; %s",
		 (long long)R->global_batch, R->batch,
		 job->train.accumulate_steps,
		 (long long)R->global_batch * job->train.accumulate_steps,
		 R->result->num_params, rate);
	char desc[256];
	dtf_strategy_describe(R->strat, desc, sizeof(desc));
	dtf_info("strategy %s: %s", dtf_strategy_name(job->strategy.type), desc);
	return 0;
}

/* Backend, signals, watchdog, checkpoints and data: set up on every rank,
 * then agree before any other collective. */
static int open_all(struct run *R)
{
	const struct dtf_job *job = R->job;
	struct replica *r = &R->r;
	int rc = dtf_replica_open_backend(job, R->comm, r, 1);
	if (rc == 0 && r->be->i->apply) {
		/* the variables live on the device: the strategy's update
		 * becomes the backend's */
		struct dtf_update_ops upd;
		if (job->strategy.type == DTF_STRATEGY_CENTRAL_STORAGE ||
		    job->strategy.type == DTF_STRATEGY_PARAMETER_SERVER)
			rc = dtf_error(DTF_ERR_CONFIG,
				       "strategy: %s is not supported on the GPU yet (it updates the variables on one rank or on the ps, on the host)\n"
				       "HINT: use mirrored or multi_worker_mirrored, or set device: cpu",
				       dtf_strategy_name(job->strategy.type));
		else if ((rc = dtf_backend_update_ops(r->be, &r->opt, job,
						      &upd)) == 0)
			dtf_strategy_set_update(R->strat, &upd);
	}
	if (rc == 0)
		rc = dtf_fault_new(R->comm, R->rank, job->fault.timeout_seconds,
				   &R->fault);
	if (rc == 0 && job->checkpoint.dir)
		rc = dtf_checkpointer_new(job, &r->g, r->params, &r->opt,
					  R->rank == 0, R->fault, &R->ck);
	if (rc == 0)
		rc = dtf_train_open_pipeline(job, job->data.train_files,
					     "data.train", R->rank, R->world,
					     R->batch, 1, &R->train);
	if (rc == 0 && job->data.eval_files && R->evaluator < 0)
		/* with an evaluator task, it evaluates; the chief does not */
		rc = dtf_train_open_pipeline(job, job->data.eval_files,
					     "data.eval", R->rank, R->world,
					     R->batch, 0, &R->eval);
	if (rc == 0 && R->eval)
		rc = dtf_train_check_eval_data(job, r, R->eval);
	return dtf_train_agree(R->comm, rc, "opening data before", 0, R->result);
}

/* All ranks agree on the steps per epoch (the fewest over the shards). */
static int agree_steps_per_epoch(struct run *R)
{
	int64_t per_update = (int64_t)R->batch * R->job->train.accumulate_steps;
	int64_t records = dtf_pipeline_num_records(R->train);
	int64_t spe[3] = {records / per_update, -records / per_update, records};
	int rc = dtf_comm_allreduce_min_i64(R->comm, spe, 3);
	if (rc < 0)
		return rc;
	int64_t most = -spe[1];
	/* from the allreduce: the same on every rank */
	R->result->same_error = spe[0] == 0;
	if (spe[0] == 0)
		return dtf_error(DTF_ERR_DATA,
				 "data.train.files: the smallest of the %d shards has %lld record(s), fewer than one per-replica batch of %d\n"
				 "HINT: use fewer ranks, a smaller batch, or more data",
				 R->world, (long long)spe[2], R->batch);
	if (most > spe[0])
		dtf_info("shards are uneven: %lld to %lld steps per rank; every rank runs %lld steps per epoch",
			 (long long)spe[0], (long long)most, (long long)spe[0]);
	R->steps_per_epoch = spe[0];
	return 0;
}

/* Whether an evaluation is due after step `step` (maybe_evaluate): every
 * train.eval_every_steps, or at an epoch's end without it, or after the
 * last step when it is not a multiple of it. */
static int eval_due(const struct run *R, int64_t step, int epoch_end)
{
	const int64_t every = R->job->train.eval_every_steps;
	return epoch_end ? !every || (step == R->total_steps && step % every)
			 : every && step % every == 0;
}

/*
 * An identical start: deterministic init or rank 0's checkpoint, then rank
 * 0's values win (with one shared copy, rank 0 alone writes); the backend
 * gets the host's variables and (restored) slots; where to start (step 0,
 * or the checkpoint's position, re-sharded when the world size or
 * per-replica batch changed), the schedule and the outputs.
 */
static int resume(struct run *R)
{
	const struct dtf_job *job = R->job;
	struct replica *r = &R->r;
	int rc;
	if ((rc = agree_steps_per_epoch(R)) < 0)
		return rc;
	if (dtf_strategy_writes_params(R->strat))
		dtf_graph_init_params(&r->g, job->seed, r->params);
	struct dtf_ckpt_position pos = {0};
	int found = 0;
	if (R->ck && R->resume) {
		if (R->rank == 0)
			rc = dtf_checkpointer_restore(R->ck,
						      R->opts->allow_fresh_start,
						      &pos, &found);
		if ((rc = dtf_train_agree(R->comm, rc, "restoring a checkpoint before", 0,
				R->result)) < 0)
			return rc;
		if ((rc = dtf_checkpointer_share(R->ck, R->comm, &pos,
						 &found)) < 0)
			return rc;
	}
	if ((rc = dtf_strategy_share_params(R->strat, R->comm, r->params,
					    r->g.nparams)) < 0)
		return rc;
	if ((rc = dtf_backend_upload(r->be, DTF_BACKEND_PARAMS |
						    DTF_BACKEND_SLOTS)) < 0)
		return rc;

	int64_t spe = R->steps_per_epoch;
	R->total_steps = spe * job->train.epochs;
	if (job->train.max_steps > 0 && job->train.max_steps < R->total_steps)
		R->total_steps = job->train.max_steps;
	R->ctx = (struct dtf_exec_ctx){
		.training = 1, .example_ids = r->ids, .valid = R->batch,
		.loss_scale = (float)(1.0 / ((double)R->global_batch *
					     job->train.accumulate_steps)),
		.dropout_key = dtf_philox_make_key(job->seed, DTF_RNG_DROPOUT),
		.workspace = r->plan.workspace};
	R->st.epoch_end = spe;
	if (found && (rc = start_position(job, R->comm, R->ck, R->train, r,
					  &pos, R->world, R->batch, spe, &R->st,
					  R->result)) < 0)
		return rc;
	R->step = R->first_step = R->st.step;
	if (R->st.elastic) {
		R->total_steps = R->st.epoch_end - pos.step_in_epoch + R->step +
				 spe * (job->train.epochs - R->st.epoch - 1);
		if (job->train.max_steps > 0 &&
		    job->train.max_steps < R->total_steps)
			R->total_steps = job->train.max_steps;
	}
	R->pos = (struct dtf_ckpt_position){
		.global_batch = R->global_batch, .world = R->world,
		.per_replica_batch = R->batch, .seed = job->seed};
	if (R->st.elastic) { /* the parts of this epoch run before */
		R->pos.nprev = R->st.nprev;
		memcpy(R->pos.prev, R->st.prev, sizeof(R->st.prev));
	}
	/* a checkpoint at or past this run's end: nothing to train, which
	 * is not an error (as Keras's fit with initial_epoch >= epochs) */
	if (found && R->rank == 0 && R->step >= R->total_steps) {
		int by_max = job->train.max_steps > 0 &&
			     job->train.max_steps <= spe * job->train.epochs;
		if (by_max)
			dtf_log_notice("the checkpoint's step %lld is %s train.max_steps %lld: nothing to train; exit status 0\n"
				       "HINT: raise train.max_steps (e.g. --set train.max_steps=%lld) to train on",
				       (long long)R->step,
				       R->step == job->train.max_steps ? "already at"
								       : "past",
				       (long long)job->train.max_steps,
				       (long long)R->step + spe);
		else
			dtf_log_notice("the checkpoint's step %lld is the end of train.epochs %d (%lld steps per epoch): nothing to train; exit status 0\n"
				       "HINT: raise train.epochs (e.g. --set train.epochs=%d) to train on",
				       (long long)R->step, job->train.epochs,
				       (long long)spe, job->train.epochs + 1);
	}
	dtf_schedule_init(&R->sched, job, R->total_steps);
	/* a warmup as long as the run: the rate only ramps up (not an
	 * error: a short trial run of a long job's schedule is one) */
	int64_t warm = job->train.schedule.warmup_steps;
	if (R->rank == 0 && warm > 0 && warm >= R->total_steps &&
	    R->step < R->total_steps)
		dtf_warn("train.schedule.%s.warmup_steps %lld is not below the run's %lld steps: the rate ramps up from 0 for the whole run, to %g at its last step, and the schedule never %s\n"
			 "HINT: fewer warmup_steps, or more steps (train.max_steps, train.epochs)",
			 dtf_schedule_kind_name(job->train.schedule.kind),
			 (long long)warm, (long long)R->total_steps,
			 dtf_schedule_lr(&R->sched, R->total_steps - 1),
			 job->train.schedule.kind == DTF_SCHED_CONSTANT
				 ? "reaches its rate"
				 : "starts");
	/* what the update is: optimizer and schedule in force */
	char od[256], sd[512];
	dtf_optimizer_describe(job, od, sizeof(od));
	dtf_schedule_describe(&R->sched, sd, sizeof(sd));
	dtf_info("optimizer %s; schedule %s", od, sd);
	/* a checkpoint policy with nowhere to write: say so before training
	 * (a job file may leave the directory to --set, so not an error) */
	if (R->rank == 0 && !job->checkpoint.dir &&
	    (job->checkpoint.every_steps > 0 || job->checkpoint.every_seconds > 0))
		dtf_warn("checkpoint.%s is set but checkpoint.dir is not: this run writes no checkpoints\n"
			 "HINT: --set checkpoint.dir=DIR",
			 job->checkpoint.every_steps > 0 ? "every_steps"
							 : "every_seconds");

	/* console, metrics, events, trace (obs/obs.h); a collective, after
	 * the restore so steps continue from the checkpoint's */
	/* a resume at an epoch's end runs no step of that epoch, then its
	 * end's evaluation (one_epoch, maybe_evaluate) */
	int eval_at_start = R->step > 0 && R->st.in_epoch >= R->st.epoch_end &&
			    eval_due(R, R->step, 1);
	struct dtf_obs_config oc = {
		.quiet = R->opts->quiet, .start_step = R->step,
		.eval_at_start = eval_at_start,
		.total_steps = R->total_steps, .steps_per_epoch = spe,
		.global_batch = R->global_batch,
		.sidecar_eval = R->evaluator >= 0};
	dtf_train_obs_job(job, &oc.job);
	rc = dtf_obs_open(R->comm, &oc, &R->obs);
	if ((rc = dtf_train_agree(R->comm, rc, "opening logging files before", R->step,
			R->result)) < 0)
		return rc;
	if (R->ck)
		dtf_obs_set_checkpoint_dir(R->obs, job->checkpoint.dir);
	return 0;
}

/*
 * Evaluate when due: after step `step` every train.eval_every_steps, or at
 * the end of an epoch (`epoch_end`) without eval_every_steps, or after
 * the last step when it is not a multiple of it.  All ranks see the same
 * (allreduced) accuracy, so all stop together: *stop when
 * train.stop_at_accuracy is reached.  At an epoch's end the caller has
 * averaged the non-trainable variables already.
 */
static int maybe_evaluate(struct run *R, int epoch, int epoch_end, int *stop)
{
	const struct dtf_job *job = R->job;
	struct dtf_train_result *result = R->result;
	const int64_t step = R->step;
	int due = eval_due(R, step, epoch_end);
	int rc;
	if (!R->eval || !due)
		return 0;
	if (!epoch_end && (rc = average_nontrainable(R->comm, &R->r)) < 0)
		return rc;
	dtf_fault_progress(R->fault, "evaluation", step);
	if ((rc = dtf_strategy_sync_params(R->strat)) < 0)
		return rc;
	struct eval_totals tot;
	double te = now_seconds();
	if ((rc = dtf_train_evaluate(job, R->comm, &R->r, R->eval, step, &tot,
				     result, R->fault)) < 0)
		return rc;
	result->eval_loss = tot.loss_sum / tot.count;
	result->eval_accuracy = tot.correct / tot.count;
	if (job->model.metric_top_k && tot.has_top_k)
		result->eval_top_k_accuracy = tot.top_k / tot.count;
	/* the evaluation's one console line */
	dtf_obs_eval(R->obs, step, epoch, result->eval_loss,
		     result->eval_accuracy, result->eval_top_k_accuracy,
		     tot.count, te, now_seconds());
	if (job->train.stop_at_accuracy > 0 &&
	    result->eval_accuracy >= job->train.stop_at_accuracy) {
		if (epoch_end)
			dtf_info("test accuracy %.4f reached train.stop_at_accuracy %g: stopping",
				 result->eval_accuracy,
				 job->train.stop_at_accuracy);
		else
			dtf_info("test accuracy %.4f reached train.stop_at_accuracy %g at step %lld: stopping",
				 result->eval_accuracy,
				 job->train.stop_at_accuracy, (long long)step);
		*stop = 1;
	}
	return 0;
}

/* Step `s` of epoch `epoch` (rc: an error from before it, for its
 * agreement), its records and outputs, and a checkpoint when due. */
static int one_step(struct run *R, int epoch, int64_t s, int rc)
{
	const struct dtf_job *job = R->job;
	struct replica *r = &R->r;
	struct dtf_train_result *result = R->result;
	size_t np = r->g.nparams;
	int64_t step = R->step;
	uint64_t allocs_before = dtf_alloc_count();
	struct dtf_step_times stt = {0};
	double t_begin = now_seconds();
	R->ctx.step = (uint64_t)step;
	/* train.schedule's rate, then the replicas' scaling */
	double lr = dtf_strategy_learning_rate(
		R->strat, dtf_schedule_lr(&R->sched, step), step);
	dtf_fault_progress(R->fault, "training step", step);
	dtf_fault_at_step(R->fault, step);
	if (rc == 0)
		rc = dtf_checkpointer_poll(R->ck);
	int vote = dtf_fault_pending_signal() << 8 |
		   dtf_checkpointer_time_due(R->ck), agreed = 0;
	int read_ahead = s + 1 < R->steps_per_epoch &&
			 step + 1 < R->total_steps;
	rc = train_step(job, R->comm, R->strat, r, R->train, &R->ctx, rc, vote,
			&agreed, step, lr, read_ahead, &stt, R->obs, result);
	if (rc < 0)
		return rc;
	double t_end = now_seconds();
	stt.optimizer += t_end - stt.mark;
	R->step = ++step;
	add_times(&result->times, &stt);
	dtf_obs_span(R->obs, DTF_OBS_OPTIMIZER, step, -1, stt.mark, t_end);
	dtf_obs_step(R->obs, &(struct dtf_obs_step){
		.step = step, .epoch = epoch,
		.loss_sum = r->grads[np], .correct = r->grads[np + 1],
		.count = r->grads[np + 2], .learning_rate = lr,
		.times = stt, .t_begin = t_begin, .t_end = t_end});
	/* every fault.straggler_window_steps steps: a gather to the chief */
	if ((rc = dtf_obs_stragglers(R->obs, R->comm, step)) < 0)
		return rc;
	R->pos.step = step;
	R->pos.epoch = epoch;
	R->pos.step_in_epoch = s + 1;
	if ((rc = after_step(job, R->comm, R->strat, r, R->ck, R->fault,
			     R->obs, &R->pos, agreed, step == R->total_steps,
			     result)) < 0)
		return rc;
	/* the first step of this run (of a resumed one too) may set up */
	if (step > R->first_step + 1)
		R->step_allocs += dtf_alloc_count() - allocs_before;
	return 0;
}

/* One epoch (the first one of a resumed run from where the checkpoint
 * left it), with its evaluations; *stop as maybe_evaluate's. */
static int one_epoch(struct run *R, int epoch, int *stop)
{
	struct replica *r = &R->r;
	struct start *st = &R->st;
	int rc = dtf_pipeline_begin_epoch(R->train, epoch);
	int64_t s = 0, end = R->steps_per_epoch;
	if (epoch == st->epoch) {
		s = st->in_epoch;
		end = st->epoch_end;
		/* same sharding: consume what the checkpoint had */
		for (int64_t k = 0, n = R->batch; !st->elastic && rc == 0 &&
					       k < s && n == R->batch; k++) {
			int got = 0;
			rc = dtf_pipeline_next(R->train, r->feed, r->ids, &got);
			n = got;
		}
	} else if (st->elastic) { /* the re-sharded epoch is over */
		dtf_pipeline_set_exclude(R->train, NULL, NULL);
		R->pos.nprev = 0;
	}
	for (; s < end && R->step < R->total_steps; s++) {
		if ((rc = one_step(R, epoch, s, rc)) < 0)
			return rc;
		if ((rc = maybe_evaluate(R, epoch, 0, stop)) < 0 || *stop)
			return rc;
	}
	if (rc < 0)
		return rc;
	dtf_pipeline_log_skipped(R->train, epoch);
	if ((rc = average_nontrainable(R->comm, r)) < 0)
		return rc;
	return maybe_evaluate(R, epoch, 1, stop);
}

/* The run's numbers, the variables back from the backend, the outputs
 * closed and --export-variables written. */
static int finish(struct run *R)
{
	struct dtf_train_result *result = R->result;
	int rc;
	dtf_fault_idle(R->fault);
	result->steps = R->step;
	result->wall_seconds = now_seconds() - R->t_start;
	result->samples_per_second = (double)(R->step - R->first_step) *
				     (double)R->global_batch /
				     result->wall_seconds;
	result->step_allocations = R->step_allocs;
	if (R->step_allocs)
		dtf_warn("%llu allocations happened inside training steps",
			 (unsigned long long)R->step_allocs);
	if ((rc = dtf_backend_download(R->r.be, DTF_BACKEND_PARAMS)) < 0)
		return rc;
	struct dtf_obs_run run = {
		.steps = result->steps, .wall_seconds = result->wall_seconds,
		.samples_per_second = result->samples_per_second,
		.times = result->times};
	if ((rc = dtf_obs_finish(R->obs, R->comm, &run)) < 0)
		return rc;
	if ((rc = dtf_strategy_sync_params(R->strat)) < 0)
		return rc;
	if (R->opts->export_variables && R->rank == 0)
		rc = write_variables(R->opts->export_variables, R->r.params,
				     R->r.g.nparams);
	return rc;
}

/* Release everything of R, telling the ps ranks and the evaluator how the
 * run ended; returns rc (or the notice's failure). */
static int release(struct run *R, int rc)
{
	dtf_strategy_end(R->strat, rc);
	dtf_strategy_free(R->strat);
	dtf_obs_free(R->obs);
	dtf_checkpointer_free(R->ck); /* joins a write in flight */
	if (R->ckpt_lock >= 0)
		close(R->ckpt_lock); /* another run may use checkpoint.dir now */
	if (R->notify) {
		int nrc = dtf_evaluator_notify(R->world_comm, R->evaluator, rc,
					       R->result->steps);
		if (rc == 0)
			rc = nrc;
	}
	dtf_fault_free(R->fault);
	dtf_pipeline_free(R->eval);
	dtf_pipeline_free(R->train); /* joins its reader, which asks st.el */
	dtf_elastic_free(R->st.el);
	dtf_replica_deinit(&R->r);
	return rc;
}

int dtf_train_run(const struct dtf_job *job, struct dtf_comm *comm,
		  const struct dtf_train_opts *opts,
		  struct dtf_train_result *result)
{
	struct run R = {
		.job = job, .opts = opts, .result = result, .world_comm = comm,
		.evaluator = opts->cluster ? dtf_evaluator_rank(opts->cluster)
					   : -1,
		.ckpt_lock = -1,
		/* --overwrite-checkpoints starts a new run, whatever
		 * checkpoint.resume says */
		.resume = (opts->resume || job->checkpoint.resume) &&
			  !opts->overwrite_checkpoints};
	int rc, done = 0;
	if (!opts->dry_run && R.evaluator >= 0 &&
	    (rc = dtf_evaluator_check_job(job)) < 0)
		return rc; /* the same on every rank, before any collective */
	/* roles and sub-communicators (distribute/strategy.h); from here
	 * R.comm is the training replicas' */
	int on_device = job->device.kind == DTF_DEVICE_CUDA ||
			(job->device.kind == DTF_DEVICE_AUTO &&
			 dtf_backend_cuda_visible());
	if (comm && (rc = dtf_strategy_new(job, comm, on_device, opts->cluster,
					   &R.strat)) < 0)
		return rc;
	R.role = R.strat ? dtf_strategy_role(R.strat) : DTF_TASK_WORKER;
	R.comm = R.strat ? dtf_strategy_replica_comm(R.strat) : NULL;
	R.rank = R.comm ? dtf_comm_rank(R.comm) : 0;
	R.world = R.strat ? dtf_strategy_num_replicas(R.strat) : 1;
	if (!comm && opts->dry_run && opts->dry_run_ranks > 1) {
		/* the replicas a run on the launcher's ranks would have */
		struct dtf_cluster cl;
		if ((rc = dtf_cluster_from_job(job, opts->dry_run_ranks,
					       &cl)) < 0)
			return rc;
		R.world = cl.count[DTF_TASK_WORKER];
		dtf_cluster_deinit(&cl);
	}
	memset(result, 0, sizeof(*result));
	result->eval_loss = result->eval_accuracy = -1;
	result->eval_top_k_accuracy = -1;
	if ((rc = check_options(&R)) < 0) {
		dtf_strategy_free(R.strat);
		if (R.ckpt_lock >= 0)
			close(R.ckpt_lock);
		return rc;
	}
	rc = setup(&R, &done);
	if (rc == 0 && !done && (rc = setup_threads(&R)) == 0 &&
	    (rc = open_all(&R)) == 0 && (rc = resume(&R)) == 0) {
		int stop = 0;
		R.t_start = now_seconds();
		for (int epoch = R.st.epoch;
		     rc == 0 && !stop && R.step < R.total_steps; epoch++)
			rc = one_epoch(&R, epoch, &stop);
		if (rc == 0)
			rc = finish(&R);
	}
	return release(&R, rc);
}
