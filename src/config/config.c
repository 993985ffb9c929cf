/*
 * config.c - read a job file into struct dtf_job: the load entry points.
 *
 * The file's text is parsed into a YAML tree (ytree.c), the --set
 * overrides are grafted into it, then the job is filled with every
 * default and read by the schema walk (walk.c over the tables of schema.c
 * and schema_layers.c), and the checks across sections run (checks.c)
 * while the tree is still there to give positions.
 */
#include "config/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/walk.h"
#include "core/alloc.h"
#include "core/error.h"

static int load_text(const char *file, const char *text, size_t len,
		     const char *const *overrides, int noverrides,
		     struct dtf_job **out)
{
	struct dtf_ytree t;
	struct ctx c;
	struct dtf_job *job = NULL;
	int rc;

	*out = NULL;
	memset(&t, 0, sizeof(t));
	/* a bad command line is reported before a bad file */
	rc = dtf_ytree_check_overrides(overrides, noverrides);
	if (rc)
		return rc;
	rc = dtf_ytree_load(&t, file, text, len);
	if (rc)
		goto out_tree;
	rc = dtf_ytree_apply_overrides(&t, overrides, noverrides);
	if (rc)
		goto out_tree;

	job = dtf_calloc(1, sizeof(*job));
	if (!job) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out_tree;
	}
	rc = dtf_cfg_job_defaults(job, file);
	if (rc)
		goto out_job;
	memset(&c, 0, sizeof(c));
	c.t = &t;
	c.job = job;
	rc = dtf_cfg_read_job(&c);
	if (rc)
		goto out_job;
	rc = dtf_cfg_check_job(&c);
	if (rc)
		goto out_job;
	*out = job;
	job = NULL;
out_job:
	dtf_job_free(job);
out_tree:
	dtf_ytree_deinit(&t);
	return rc;
}

int dtf_job_load_string(const char *name, const char *text,
			const char *const *overrides, int noverrides,
			struct dtf_job **out)
{
	return load_text(name, text, strlen(text), overrides, noverrides, out);
}

int dtf_job_load(const char *path, const char *const *overrides,
		 int noverrides, struct dtf_job **out)
{
	char *text = NULL;
	size_t len = 0, cap = 0;
	int rc;

	*out = NULL;
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return dtf_error(DTF_ERR_IO, "%s: cannot open job file: %s",
				 path, strerror(errno));
	for (;;) {
		if (cap - len < 4096) {
			cap = cap ? cap * 2 : 8192;
			char *grown = dtf_realloc(text, cap);
			if (!grown) {
				rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
				goto out_text;
			}
			text = grown;
		}
		size_t got = fread(text + len, 1, cap - len, fp);
		len += got;
		if (got == 0)
			break;
	}
	if (ferror(fp)) {
		rc = dtf_error(DTF_ERR_IO, "%s: cannot read job file: %s", path,
			       strerror(errno));
		goto out_text;
	}
	rc = load_text(path, text, len, overrides, noverrides, out);
out_text:
	dtf_free(text);
	fclose(fp);
	return rc;
}

void dtf_job_free(struct dtf_job *job)
{
	if (!job)
		return;
	dtf_free(job->path);
	dtf_free(job->data.train_files);
	dtf_free(job->data.eval_files);
	dtf_free(job->data.features);
	for (int i = 0; i < job->model.nlayers; i++)
		dtf_free(job->model.layers[i].values);
	for (int i = 0; i < job->model.nnodes; i++)
		dtf_free(job->model.nodes[i].values);
	dtf_free(job->model.layers);
	dtf_free(job->model.nodes);
	dtf_free(job->logging.dir);
	dtf_free(job->logging.trace);
	dtf_free(job->checkpoint.dir);
	dtf_free(job);
}
