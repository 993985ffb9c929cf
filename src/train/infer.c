/*
 * infer.c - `dtf-train evaluate` and `predict` (contract in infer.h).
 *
 * Design: a model is opened as the evaluator task opens one (train.c's
 * run_evaluator): the replica's graph and buffers, the CPU backend, a
 * checkpointer that reads only; then evaluate is the training's own
 * evaluation loop (dtf_train_evaluate) over a pipeline sharded by rank,
 * and predict is the same load + inference forward per batch, writing
 * each row of the logits node as it comes.  Nothing is allocated per
 * batch; predict's memory does not grow with the records.
 */
#include "train/infer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "data/pipeline.h"
#include "distribute/comm.h"
#include "obs/obs.h"
#include "ops/backend.h"
#include "train/checkpoint.h"
#include "train/threads.h"
#include "train/train_priv.h"

static double now_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_seconds(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
	       (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

/* A model opened for inference on this rank. */
struct model {
	struct replica r;
	struct dtf_checkpointer *ck;
	struct dtf_ckpt_position pos;
	char path[DTF_INFER_PATH_MAX]; /* the checkpoint loaded */
};

static void model_deinit(struct model *m)
{
	dtf_checkpointer_free(m->ck);
	dtf_replica_deinit(&m->r);
}

/* Rank 0: the checkpoint file `where`, or the newest in directory
 * `where` that verifies, into the variables. */
static int load_checkpoint(struct model *m, const char *where)
{
	struct stat st;
	int verified, rc;
	if (stat(where, &st) == 0 && S_ISDIR(st.st_mode))
		rc = dtf_checkpointer_load_newest(m->ck, where, &m->pos);
	else
		rc = dtf_checkpointer_load(m->ck, where, &m->pos, &verified);
	if (rc == 0)
		snprintf(m->path, sizeof(m->path), "%s",
			 dtf_checkpointer_path(m->ck));
	return rc;
}

/*
 * The forward graph at per-replica batch `batch` on the CPU backend,
 * then the checkpoint `where`, loaded by rank 0 and broadcast; every rank
 * agrees on the status before each collective.  Release with
 * model_deinit, also after an error.
 */
static int model_open(const struct dtf_job *job, struct dtf_comm *comm,
		      const char *where, int threads, int batch,
		      struct model *m, struct dtf_train_result *tr)
{
	struct replica *r = &m->r;
	int rank = comm ? dtf_comm_rank(comm) : 0;
	int rc = dtf_replica_build(job, batch, 0, r);
	if (rc == 0)
		rc = dtf_replica_setup_buffers(job, r);
	dtf_threads_flush_denormals();
	if (rc == 0)
		rc = dtf_threads_setup_fast(
			dtf_threads_choose(threads, comm ? dtf_comm_local_size(comm)
							 : 1),
			&r->use_fast, &r->pool);
	if (rc == 0)
		rc = dtf_replica_open_backend(job, NULL, r, 0);
	if (rc == 0)
		rc = dtf_checkpointer_new(job, &r->g, r->params, &r->opt, 0,
					  NULL, &m->ck);
	if (rc == 0 && rank == 0)
		rc = load_checkpoint(m, where);
	if ((rc = dtf_train_agree(comm, rc, "loading the checkpoint before",
				  0, tr)) < 0)
		return rc;
	int found = 1;
	if ((rc = dtf_checkpointer_share(m->ck, comm, &m->pos, &found)) < 0 ||
	    (rc = dtf_comm_bcast_f32(comm, r->params, r->g.nparams, 0)) < 0 ||
	    (rc = dtf_comm_bcast_bytes(comm, m->path, sizeof(m->path), 0)) < 0)
		return rc;
	return dtf_backend_upload(r->be, DTF_BACKEND_PARAMS);
}

/* Where the variables come from: the option, else checkpoint.dir. */
static int checkpoint_source(const struct dtf_job *job,
			     const struct dtf_infer_source *src,
			     const char **where)
{
	*where = src->checkpoint ? src->checkpoint : job->checkpoint.dir;
	if (!*where)
		return dtf_error(DTF_ERR_USAGE,
				 "%s: no checkpoint: the job has no checkpoint.dir\n"
				 "HINT: --checkpoint FILE_OR_DIR",
				 job->path);
	return 0;
}

/* ---- evaluate ------------------------------------------------------------ */

/* The training's per-replica batch on `world` ranks; a global batch that
 * the ranks do not divide (which training refuses) is rounded up: the
 * batch changes nothing but the order of the sums. */
static int eval_batch(const struct dtf_job *job, int world, int *batch)
{
	int64_t global = job->train.batch_size;
	if (job->train.per_replica_batch_size > 0 || global % world == 0)
		return dtf_train_per_replica_batch(job, world, batch);
	int rc = dtf_train_per_replica_batch(job, 1, batch);
	*batch = (int)((global + world - 1) / world);
	return rc;
}

int dtf_infer_evaluate(const struct dtf_job *job, struct dtf_comm *comm,
		       const struct dtf_infer_source *src,
		       struct dtf_evaluate_result *out)
{
	struct model m;
	struct dtf_pipeline *p = NULL;
	struct dtf_train_result tr;
	struct eval_totals tot;
	const char *where = NULL;
	const char *pattern = src->data ? src->data : job->data.eval_files;
	int rank = comm ? dtf_comm_rank(comm) : 0;
	int world = comm ? dtf_comm_size(comm) : 1;
	int batch = 0;
	memset(&m, 0, sizeof(m));
	memset(&tr, 0, sizeof(tr));
	memset(out, 0, sizeof(*out));
	out->top_k_accuracy = -1;
	/* the same on every rank: no collective needed */
	int rc = checkpoint_source(job, src, &where);
	if (rc == 0 && !pattern)
		rc = dtf_error(DTF_ERR_USAGE,
			       "%s: nothing to evaluate on: the job has no data.eval\n"
			       "HINT: --data PATTERN",
			       job->path);
	if (rc == 0)
		rc = eval_batch(job, world, &batch);
	if (rc < 0)
		return rc;
	if ((rc = model_open(job, comm, where, src->threads, batch, &m,
			     &tr)) < 0)
		goto out;
	rc = dtf_train_open_pipeline(job, pattern,
				     src->data ? "--data" : "data.eval", rank,
				     world, batch, 0, &p);
	if ((rc = dtf_train_agree(comm, rc, "opening the data before", 0,
				  &tr)) < 0)
		goto out;
	dtf_info("evaluating %s (step %lld) on %s: %d rank(s), batch %d per rank, %s",
		 m.path, (long long)m.pos.step, pattern, world, batch,
		 m.r.use_fast ? "fast kernels" : "reference kernels");
	double t0 = now_seconds();
	if ((rc = dtf_train_evaluate(job, comm, &m.r, p, m.pos.step, &tot,
				     &tr, NULL)) < 0)
		goto out;
	if (tot.count == 0) {
		rc = dtf_error(DTF_ERR_DATA, "%s: no records to evaluate on",
			       pattern);
		goto out;
	}
	snprintf(out->checkpoint, sizeof(out->checkpoint), "%s", m.path);
	out->step = m.pos.step;
	out->loss = tot.loss_sum / tot.count;
	out->accuracy = tot.correct / tot.count;
	if (job->model.metric_top_k && tot.has_top_k)
		out->top_k_accuracy = tot.top_k / tot.count;
	/* a sequence loss's correct sum is of per-example fractions
	 * (exec.h): as a count of the positions that were right */
	out->positions = dtf_graph_loss_positions(&m.r.g);
	out->correct = nearbyint(tot.correct * out->positions);
	out->examples = tot.count;
	out->seconds = now_seconds() - t0;
	if (rank == 0 && job->logging.dir) {
		struct dtf_obs_job oj;
		dtf_train_obs_job(job, &oj);
		rc = dtf_obs_append_evaluate(&oj, &(struct dtf_obs_evaluate){
			.checkpoint = out->checkpoint, .data = pattern,
			.step = out->step, .loss = out->loss,
			.accuracy = out->accuracy,
			.top_k_accuracy = out->top_k_accuracy,
			.correct = out->correct, .examples = out->examples,
			.positions = out->positions,
			.seconds = out->seconds});
	}
	rc = dtf_train_agree(comm, rc, "writing metrics.jsonl after", 0, &tr);
out:
	out->remote_failure = tr.remote_failure;
	dtf_pipeline_free(p);
	model_deinit(&m);
	return rc;
}

/* ---- predict ------------------------------------------------------------- */

enum format { FORMAT_JSONL, FORMAT_CSV };

/* The format from the output's extension (case ignored). */
static int output_format(const char *path, enum format *fmt)
{
	const char *dot = strrchr(path, '.');
	const char *slash = strrchr(path, '/');
	if (dot && (!slash || dot > slash)) {
		if (!strcasecmp(dot, ".csv")) {
			*fmt = FORMAT_CSV;
			return 0;
		}
		if (!strcasecmp(dot, ".jsonl") || !strcasecmp(dot, ".ndjson") ||
		    !strcasecmp(dot, ".json")) {
			*fmt = FORMAT_JSONL;
			return 0;
		}
	}
	return dtf_error(DTF_ERR_USAGE,
			 "--output %s: the extension says the format: .csv (CSV) or .jsonl (JSON Lines)",
			 path);
}

/* A CSV field (RFC 4180: quoted when it holds a comma, quote or line
 * break, quotes doubled). */
static void put_csv_string(FILE *f, const char *s)
{
	if (!strpbrk(s, ",\"\r\n")) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

/* A float, 9 significant digits (float32's round trip); JSON has no
 * non-finite numbers: null there, "nan"/"inf" in CSV. */
static void put_number(FILE *f, enum format fmt, double v)
{
	if (isfinite(v))
		fprintf(f, "%.9g", v);
	else if (fmt == FORMAT_JSONL)
		fputs("null", f);
	else
		fputs(isnan(v) ? "nan" : v > 0 ? "inf" : "-inf", f);
}

/* What one predict run writes, and its per-row working memory. */
struct writer {
	FILE *f;
	enum format fmt;
	enum dtf_predict_outputs outputs;
	int top_k;
	int cols;           /* values of the logits per record */
	int classes;        /* of one position: cols / positions */
	int positions;      /* per record: 1, or t of a sequence loss's
			       (n, t, classes) logits */
	int sigmoid;        /* probabilities: sigmoid (else softmax) */
	double *prob;       /* classes */
	unsigned char *taken; /* classes */
	int *best;          /* positions x top_k: the classes of a record,
			       best first */
	double *pbest;      /* positions x top_k: their probabilities */
};

static void write_header(struct writer *w)
{
	if (w->fmt != FORMAT_CSV)
		return;
	fputs("file,record", w->f);
	if (w->outputs == DTF_PREDICT_LOGITS)
		for (int j = 0; j < w->cols; j++)
			fprintf(w->f, ",logit_%d", j);
	else {
		if (w->positions > 1)
			fputs(",position", w->f);
		for (int j = 1; j <= w->top_k; j++)
			fprintf(w->f, ",class_%d,probability_%d", j, j);
	}
	fputc('\n', w->f);
}

/* The probabilities of one position's logits x (w->classes) into w->prob,
 * and its top_k classes, best first, with their probabilities, into
 * best and pbest. */
static void top_classes(struct writer *w, const float *x, int *best,
			double *pbest)
{
	int n = w->classes;
	if (w->sigmoid) {
		for (int j = 0; j < n; j++)
			w->prob[j] = 1.0 / (1.0 + exp(-(double)x[j]));
	} else {
		double mx = x[0], sum = 0;
		for (int j = 1; j < n; j++)
			if (x[j] > mx)
				mx = x[j];
		for (int j = 0; j < n; j++)
			sum += w->prob[j] = exp((double)x[j] - mx);
		for (int j = 0; j < n; j++)
			w->prob[j] /= sum;
	}
	memset(w->taken, 0, (size_t)n);
	for (int k = 0; k < w->top_k; k++) { /* first maximum wins */
		int b = -1;
		for (int j = 0; j < n; j++)
			if (!w->taken[j] && (b < 0 || w->prob[j] > w->prob[b]))
				b = j;
		w->taken[b] = 1;
		best[k] = b;
		pbest[k] = w->prob[b];
	}
}

/* One record's line: file, record index, then the outputs of row x. */
static void write_row(struct writer *w, const char *file, uint64_t record,
		      const float *x)
{
	FILE *f = w->f;
	int json = w->fmt == FORMAT_JSONL;
	if (json) {
		fputs("{\"file\":", f);
		dtf_obs_put_json_string(f, file);
		fprintf(f, ",\"record\":%llu,", (unsigned long long)record);
	} else {
		put_csv_string(f, file);
		fprintf(f, ",%llu", (unsigned long long)record);
	}
	if (w->outputs == DTF_PREDICT_LOGITS) {
		fputs(json ? "\"logits\":[" : ",", f);
		for (int j = 0; j < w->cols; j++) {
			if (j)
				fputc(',', f);
			put_number(f, w->fmt, x[j]);
		}
		fputs(json ? "]}\n" : "\n", f);
		return;
	}
	int seq = w->positions > 1, kk = w->top_k;
	for (int t = 0; t < w->positions; t++)
		top_classes(w, x + (size_t)t * (size_t)w->classes,
			    w->best + t * kk, w->pbest + t * kk);
	if (json) {
		/* a sequence: a list per position, as Keras's predict gives
		 * (n, t, classes) */
		for (int pass = 0; pass < 2; pass++) {
			fputs(pass ? ",\"probabilities\":" : "\"classes\":", f);
			if (seq)
				fputc('[', f);
			for (int t = 0; t < w->positions; t++) {
				fputs(t ? ",[" : "[", f);
				for (int k = 0; k < kk; k++) {
					if (k)
						fputc(',', f);
					if (pass)
						put_number(f, w->fmt,
							   w->pbest[t * kk + k]);
					else
						fprintf(f, "%d", w->best[t * kk + k]);
				}
				fputc(']', f);
			}
			if (seq)
				fputc(']', f);
		}
		fputs("}\n", f);
		return;
	}
	/* CSV: a sequence's positions a line each, after file and record */
	for (int t = 0; t < w->positions; t++) {
		if (t) {
			put_csv_string(f, file);
			fprintf(f, ",%llu", (unsigned long long)record);
		}
		if (seq)
			fprintf(f, ",%d", t);
		for (int k = 0; k < kk; k++) {
			fprintf(f, ",%d,", w->best[t * kk + k]);
			put_number(f, w->fmt, w->pbest[t * kk + k]);
		}
		fputc('\n', f);
	}
}

/* 1 when feature node `labels` feeds the loss alone (not the model). */
static int labels_feed_loss_only(const struct dtf_graph *g)
{
	if (g->labels < 0 || g->nodes[g->labels].op != DTF_OP_INPUT)
		return 0;
	for (int i = 0; i < g->nforward; i++)
		for (int k = 0; i != g->loss &&
				k < dtf_op_ninputs(g->nodes[i].op); k++)
			if (g->nodes[i].inputs[k] == g->labels)
				return 0;
	return 1;
}

/* The loss's outputs as w's columns; *outputs checked against it. */
static int setup_writer(const struct dtf_job *job, const struct dtf_graph *g,
			const struct dtf_predict_opts *o, struct writer *w)
{
	const struct dtf_node *l = &g->nodes[g->logits];
	enum dtf_op loss = g->nodes[g->loss].op;
	w->outputs = o->outputs;
	w->top_k = o->top_k > 0 ? o->top_k : 1;
	w->cols = (int)(dtf_shape_numel(&l->shape) / l->shape.d[0]);
	w->positions = dtf_graph_loss_positions(g);
	w->classes = w->cols / w->positions;
	w->sigmoid = loss == DTF_OP_SIGMOID_XENT;
	if (o->outputs == DTF_PREDICT_CLASSES && loss != DTF_OP_SPARSE_SOFTMAX_XENT &&
	    loss != DTF_OP_SOFTMAX_XENT && loss != DTF_OP_SIGMOID_XENT)
		return dtf_error(DTF_ERR_USAGE,
				 "%s: the model's loss (%s) has no classes to predict\n"
				 "HINT: --outputs logits writes the layer '%s' as it is",
				 job->path, job->model.loss_where,
				 job->model.loss_logits);
	if (o->outputs == DTF_PREDICT_CLASSES &&
	    (w->top_k < 1 || w->top_k > w->classes))
		return dtf_error(DTF_ERR_USAGE,
				 "--top-k %d: the model has %d classes (layer '%s')",
				 o->top_k, w->classes, job->model.loss_logits);
	w->prob = dtf_calloc((size_t)w->classes, sizeof(double));
	w->taken = dtf_calloc((size_t)w->classes, 1);
	w->best = dtf_calloc((size_t)w->positions * (size_t)w->top_k,
			     sizeof(int));
	w->pbest = dtf_calloc((size_t)w->positions * (size_t)w->top_k,
			      sizeof(double));
	if (!w->prob || !w->taken || !w->best || !w->pbest)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	return 0;
}

/* Every record of p through the forward pass into w. */
static int predict_all(const struct dtf_job *job, struct replica *r,
		       struct dtf_pipeline *p, struct writer *w,
		       int64_t *records)
{
	struct dtf_backend *be = r->be;
	const struct dtf_graph *g = &r->g;
	const float *x = g->nodes[g->logits].data;
	struct dtf_exec_ctx ctx = {.training = 0, .example_ids = r->ids,
				   .workspace = r->plan.workspace,
				   .loss_scale = 1.0f};
	int loss_only = labels_feed_loss_only(g);
	int rc = dtf_pipeline_begin_epoch(p, 0);
	write_header(w);
	while (rc == 0) {
		int count = 0;
		rc = be->i->load(be->ctx, dtf_train_read_batch, p, r->ids, &count);
		/* labels that only the loss reads are not predict's: any
		 * value (-1 for "unlabelled") passes, and the loss it does
		 * not report is NaN */
		if (rc == 0 && !loss_only)
			rc = dtf_train_check_labels(r, p, count,
						    job->model.loss_logits);
		if (rc < 0 || count == 0)
			break;
		ctx.valid = count;
		be->i->forward(be->ctx, &ctx);
		for (int i = 0; i < count; i++) {
			uint64_t id = r->ids[i];
			write_row(w, dtf_pipeline_file(p, (int)(id >> 40)),
				  id & ((1ull << 40) - 1),
				  x + (size_t)i * (size_t)w->cols);
		}
		*records += count;
		if (ferror(w->f))
			break;
	}
	double unused[3];
	be->i->eval_totals(be->ctx, unused); /* forward adds to them */
	return rc;
}

/* Flush, fsync and close the temporary file, then rename it to `path`;
 * on any failure (or rc < 0) the temporary file is removed. */
static int finish_output(FILE *f, const char *tmp, const char *path, int rc)
{
	int werr = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
	int err = errno;
	if (fclose(f) != 0 && !werr) {
		werr = 1;
		err = errno;
	}
	if (rc == 0 && werr)
		rc = dtf_error(DTF_ERR_IO, "%s: write failed: %s", tmp,
			       strerror(err));
	if (rc == 0 && rename(tmp, path) != 0)
		rc = dtf_error(DTF_ERR_IO, "%s: cannot rename to %s: %s", tmp,
			       path, strerror(errno));
	if (rc < 0)
		unlink(tmp);
	return rc;
}

int dtf_infer_predict(const struct dtf_job *job,
		      const struct dtf_predict_opts *o,
		      struct dtf_predict_result *out)
{
	struct model m;
	struct writer w;
	struct dtf_train_result tr;
	struct dtf_pipeline *p = NULL;
	struct dtf_feature_spec *feat = NULL;
	const char *where = NULL;
	char tmp[DTF_INFER_PATH_MAX];
	struct stat st;
	int batch = 0, rc;
	memset(&m, 0, sizeof(m));
	memset(&w, 0, sizeof(w));
	memset(&tr, 0, sizeof(tr));
	memset(out, 0, sizeof(*out));
	if ((rc = output_format(o->output, &w.fmt)) < 0)
		return rc;
	if (stat(o->output, &st) == 0 && S_ISDIR(st.st_mode))
		return dtf_error(DTF_ERR_USAGE, "--output %s: is a directory",
				 o->output);
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", o->output) >= (int)sizeof(tmp))
		return dtf_error(DTF_ERR_USAGE, "--output %s: path too long",
				 o->output);
	/* before any work: an output that cannot be written fails first */
	if (!(w.f = fopen(tmp, "w")))
		return dtf_error(DTF_ERR_USAGE, "--output %s: cannot write %s: %s",
				 o->output, tmp, strerror(errno));
	rc = checkpoint_source(job, &o->src, &where);
	if (rc == 0 && !o->src.data)
		rc = dtf_error(DTF_ERR_USAGE, "predict needs --data PATTERN");
	if (rc == 0)
		rc = dtf_train_per_replica_batch(job, 1, &batch);
	if (rc == 0)
		rc = model_open(job, NULL, where, o->src.threads, batch, &m, &tr);
	if (rc == 0)
		rc = setup_writer(job, &m.r.g, o, &w);
	/* records to predict on need not carry the labels (read as 0) */
	struct dtf_job pj = *job;
	if (rc == 0 && !(feat = dtf_malloc((size_t)job->data.nfeatures *
					   sizeof(*feat))))
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
	if (rc == 0) {
		memcpy(feat, job->data.features,
		       (size_t)job->data.nfeatures * sizeof(*feat));
		const struct dtf_graph *g = &m.r.g;
		if (labels_feed_loss_only(g)) {
			struct dtf_feature_spec *lf =
				&feat[g->nodes[g->labels].a.in.feature];
			if (!lf->has_default)
				lf->has_default = 1, lf->default_value = 0;
		}
		pj.data.features = feat;
		rc = dtf_train_open_pipeline(&pj, o->src.data, "--data", 0, 1,
					     batch, 0, &p);
	}
	double t0 = now_seconds(), c0 = cpu_seconds();
	if (rc == 0) {
		dtf_info("predicting with %s (step %lld) on %s into %s: batch %d, %s",
			 m.path, (long long)m.pos.step, o->src.data, o->output,
			 batch, m.r.use_fast ? "fast kernels" : "reference kernels");
		rc = predict_all(job, &m.r, p, &w, &out->records);
	}
	rc = finish_output(w.f, tmp, o->output, rc);
	out->seconds = now_seconds() - t0;
	out->cpu_seconds = cpu_seconds() - c0;
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	out->peak_rss_mib = (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
	snprintf(out->checkpoint, sizeof(out->checkpoint), "%s", m.path);
	out->step = m.pos.step;
	dtf_pipeline_free(p);
	dtf_free(feat);
	dtf_free(w.prob);
	dtf_free(w.taken);
	dtf_free(w.best);
	dtf_free(w.pbest);
	model_deinit(&m);
	return rc;
}
