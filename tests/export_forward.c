/*
 * export_forward.c - dtf-train's own forward pass on the first COUNT
 * records of a job's data.eval, for tests/export_models.sh to hold
 * onnxruntime's outputs against.
 *
 *   export_forward JOB.yaml CHECKPOINT COUNT OUTDIR [KEY=VALUE]...
 *
 * The variables come from CHECKPOINT (file or directory, as `dtf-train
 * export --checkpoint`); the records are read in file order (the eval
 * glob sorted) with the library's TFRecord reader and Example decoder and
 * (KEY=VALUE: job keys set as with --set) run through the CPU backend (ops/backend.h) with the reference kernels,
 * in inference mode, 100 records per batch.  Writes OUTDIR/logits.f32
 * (COUNT x classes float32) and, per float feature or token bytes
 * (dtype: int32), OUTDIR/<feature>.raw:
 * the values as the records hold them (decoded with scale 1 and offset 0)
 * in the record's own type: uint8, int8, or float32 (for float16 and
 * float features; float16 to float32 is exact).  Exit 0, or 1 with a
 * message.
 */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "data/example.h"
#include "data/tfrecord.h"
#include "export/export.h"
#include "graph/lower.h"
#include "mem/plan.h"
#include "ops/backend.h"

#define BATCH 100

struct reader {
	const struct dtf_job *job;
	struct dtf_feature_spec *raw; /* the job's specs, scale 1, offset 0 */
	float **rawbuf;               /* per feature: BATCH examples */
	glob_t files;
	size_t file;
	struct dtf_tfrecord_reader *r;
	int64_t left; /* records still to read */
};

/* The backend's read function: the next BATCH records into feed (as the
 * job decodes them) and into the raw buffers. */
static int read_batch(void *arg, void *const *feed, uint64_t *ids, int *count)
{
	struct reader *rd = arg;
	const struct dtf_job *job = rd->job;
	int nf = job->data.nfeatures, rc;
	*count = 0;
	while (*count < BATCH && rd->left > 0) {
		const uint8_t *data;
		size_t len;
		if (!rd->r) {
			if (rd->file >= rd->files.gl_pathc)
				return dtf_error(DTF_ERR_DATA, "data.eval holds fewer records than asked for");
			if ((rc = dtf_tfrecord_reader_open_c(
				     rd->files.gl_pathv[rd->file++],
				     (enum dtf_compression)job->data.eval_compression,
				     &rd->r)) < 0)
				return rc;
		}
		if ((rc = dtf_tfrecord_reader_next(rd->r, &data, &len)) < 0)
			return rc;
		if (rc == 0) {
			dtf_tfrecord_reader_free(rd->r);
			rd->r = NULL;
			continue;
		}
		void *dst[64], *rdst[64];
		for (int f = 0; f < nf; f++) {
			size_t bytes = (size_t)dtf_feature_numel(&job->data.features[f]) * 4;
			dst[f] = (char *)feed[f] + (size_t)*count * bytes;
			rdst[f] = (char *)rd->rawbuf[f] + (size_t)*count * bytes;
		}
		if ((rc = dtf_example_decode(data, len, job->data.features, nf, dst)) < 0 ||
		    (rc = dtf_example_decode(data, len, rd->raw, nf, rdst)) < 0)
			return rc;
		ids[*count] = (uint64_t)*count;
		(*count)++;
		rd->left--;
	}
	return 0;
}

/* The raw values of feature f, n examples, in the record's type. */
static int write_raw(FILE *out, const struct dtf_feature_spec *s,
		     const float *v, size_t n)
{
	const int32_t *ids = (const int32_t *)(const void *)v;
	for (size_t i = 0; i < n; i++) {
		if (s->dtype == DTF_INT32) { /* token bytes decoded to ids */
			unsigned char b = (unsigned char)ids[i];
			if (fwrite(&b, 1, 1, out) != 1)
				return -1;
		} else if (s->type == DTF_FEATURE_BYTES &&
			   s->decode == DTF_DECODE_UINT8) {
			unsigned char b = (unsigned char)v[i];
			if (fwrite(&b, 1, 1, out) != 1)
				return -1;
		} else if (s->type == DTF_FEATURE_BYTES &&
			   s->decode == DTF_DECODE_INT8) {
			signed char b = (signed char)v[i];
			if (fwrite(&b, 1, 1, out) != 1)
				return -1;
		} else if (fwrite(&v[i], 4, 1, out) != 1) {
			return -1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: export_forward JOB.yaml CHECKPOINT COUNT OUTDIR [KEY=VALUE]...\n");
		return 2;
	}
	int64_t count = atoll(argv[3]);
	const char *outdir = argv[4];
	struct dtf_job *job = NULL;
	struct dtf_graph g;
	struct dtf_plan plan;
	struct dtf_backend *be = NULL;
	struct reader rd = {0};
	memset(&g, 0, sizeof(g));
	memset(&plan, 0, sizeof(plan));
	float *params = NULL, *grads = NULL, *scratch = NULL;
	void **feed = NULL;
	size_t *fbytes = NULL;
	uint64_t ids[BATCH];
	FILE *logits = NULL, *raw[64] = {0};
	char path[4096];
	int rc = dtf_job_load(argv[1], (const char *const *)argv + 5, argc - 5, &job);
	if (rc < 0)
		goto out;
	int nf = job->data.nfeatures;
	if (nf > 64 || !job->data.eval_files || count <= 0 || count % BATCH) {
		rc = dtf_error(DTF_ERR_USAGE, "needs data.eval, at most 64 features and COUNT a multiple of %d", BATCH);
		goto out;
	}
	if ((rc = dtf_graph_lower_model(job, BATCH, &g, NULL)) < 0)
		goto out;
	params = dtf_alloc_aligned(g.nparams * sizeof(float) + 64);
	grads = dtf_alloc_aligned((g.nparams + 3) * sizeof(float) + 64);
	feed = dtf_calloc((size_t)nf, sizeof(void *));
	fbytes = dtf_calloc((size_t)nf, sizeof(size_t));
	rd.raw = dtf_calloc((size_t)nf, sizeof(*rd.raw));
	rd.rawbuf = dtf_calloc((size_t)nf, sizeof(float *));
	if (!params || !grads || !feed || !fbytes || !rd.raw || !rd.rawbuf) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out;
	}
	dtf_graph_init_params(&g, job->seed, params);
	if ((rc = dtf_export_load_variables(&g, argv[2], params, NULL, 0)) < 0 ||
	    (rc = dtf_plan_graph(&g, params, grads,
				 dtf_backend_cpu_workspace(&g), &plan)) < 0)
		goto out;
	size_t total = 0;
	for (int f = 0; f < nf; f++) {
		fbytes[f] = (size_t)dtf_feature_numel(&job->data.features[f]) * 4;
		total += fbytes[f] * BATCH;
		rd.raw[f] = job->data.features[f];
		rd.raw[f].scale = 1.0f;
		rd.raw[f].offset = 0.0f;
	}
	if (!(scratch = dtf_alloc_aligned(2 * total))) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out;
	}
	char *s = (char *)scratch;
	for (int f = 0; f < nf; f++) {
		feed[f] = s;
		s += fbytes[f] * BATCH;
		rd.rawbuf[f] = (float *)s;
		s += fbytes[f] * BATCH;
	}
	for (int i = 0; i < g.nnodes; i++)
		if (g.nodes[i].op == DTF_OP_INPUT)
			feed[g.nodes[i].a.in.feature] = g.nodes[i].data;
	if ((rc = dtf_backend_cpu_new(&be)) < 0)
		goto out;
	struct dtf_backend_graph bg = {
		.g = &g, .arena = plan.arena, .arena_bytes = plan.arena_bytes,
		.params = params, .grads = grads, .nstats = 3, .feed = feed,
		.feature_bytes = fbytes, .nfeatures = nf};
	if ((rc = be->i->prepare(be->ctx, &bg)) < 0)
		goto out;
	if (glob(job->data.eval_files, 0, NULL, &rd.files) != 0) {
		rc = dtf_error(DTF_ERR_DATA, "%s: no files", job->data.eval_files);
		goto out;
	}
	rd.job = job;
	rd.left = count;
	snprintf(path, sizeof(path), "%s/logits.f32", outdir);
	if (!(logits = fopen(path, "wb"))) {
		rc = dtf_error(DTF_ERR_IO, "%s: cannot create", path);
		goto out_glob;
	}
	for (int f = 0; f < nf; f++) {
		/* the model's inputs: float features and token bytes (ids);
		 * int64 ids are the labels */
		if (job->data.features[f].dtype != DTF_FLOAT32 &&
		    job->data.features[f].type != DTF_FEATURE_BYTES)
			continue;
		snprintf(path, sizeof(path), "%s/%s.raw", outdir,
			 job->data.features[f].name);
		if (!(raw[f] = fopen(path, "wb"))) {
			rc = dtf_error(DTF_ERR_IO, "%s: cannot create", path);
			goto out_glob;
		}
	}
	const struct dtf_node *ln = &g.nodes[g.logits];
	size_t per = (size_t)dtf_shape_numel(&ln->shape) / BATCH;
	while (rd.left > 0) {
		int got = 0;
		if ((rc = be->i->load(be->ctx, read_batch, &rd, ids, &got)) < 0)
			goto out_glob;
		struct dtf_exec_ctx x = {.training = 0, .example_ids = ids,
					 .valid = got, .loss_scale = 1.0f,
					 .workspace = plan.workspace};
		be->i->forward(be->ctx, &x);
		if (fwrite(ln->data, sizeof(float), per * (size_t)got, logits) !=
		    per * (size_t)got) {
			rc = dtf_error(DTF_ERR_IO, "%s: write failed", outdir);
			goto out_glob;
		}
		for (int f = 0; f < nf; f++)
			if (raw[f] &&
			    write_raw(raw[f], &job->data.features[f], rd.rawbuf[f],
				      (size_t)got * (fbytes[f] / 4)) < 0) {
				rc = dtf_error(DTF_ERR_IO, "%s: write failed", outdir);
				goto out_glob;
			}
	}
	printf("%s: %lld records, %zu logits each, %s\n", job->name,
	       (long long)count, per, be->i->describe(be->ctx));
out_glob:
	globfree(&rd.files);
out:
	if (logits && fclose(logits) != 0 && rc == 0)
		rc = dtf_error(DTF_ERR_IO, "%s: close failed", outdir);
	for (int f = 0; f < 64; f++)
		if (raw[f] && fclose(raw[f]) != 0 && rc == 0)
			rc = dtf_error(DTF_ERR_IO, "%s: close failed", outdir);
	if (rd.r)
		dtf_tfrecord_reader_free(rd.r);
	if (rc < 0)
		fprintf(stderr, "export_forward: %s\n", dtf_error_msg());
	dtf_backend_free(be);
	dtf_plan_deinit(&plan);
	dtf_graph_deinit(&g);
	dtf_free(params);
	dtf_free(grads);
	dtf_free(scratch);
	dtf_free(feed);
	dtf_free(fbytes);
	dtf_free(rd.raw);
	dtf_free(rd.rawbuf);
	dtf_job_free(job);
	return rc < 0 ? 1 : 0;
}
