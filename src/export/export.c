/*
 * export.c - `dtf-train export`: graph, checkpoint, file (export.h).
 *
 * The forward graph is lowered for a batch of 1 (the exports do not
 * depend on the batch: ONNX's is symbolic), the parameter vector starts
 * from the seed (which gives constants their values) and every variable is
 * then read from the checkpoint by its name, so the export holds exactly
 * the checkpoint's bits.  The file is written under a temporary name and
 * renamed, as checkpoints are.
 */
#include "export/export.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "graph/lower.h"
#include "train/checkpoint.h"
#include "train/fault.h"

int dtf_export_load_variables(const struct dtf_graph *g, const char *path,
			      float *params, char *used, size_t used_size)
{
	char file[4096];
	struct dtf_ckpt_file f;
	int rc = dtf_ckpt_file_read_newest(path, &f, file, sizeof(file));
	if (rc < 0)
		return rc;
	if (used)
		snprintf(used, used_size, "%s", file);
	for (int i = 0; i < g->nnodes && rc == 0; i++) {
		const struct dtf_node *n = &g->nodes[i];
		if (n->op != DTF_OP_VARIABLE || n->a.var.constant)
			continue;
		const struct dtf_ckpt_tensor *t = dtf_ckpt_file_find(&f, n->name);
		int same = t && t->dtype == DTF_CKPT_F32 &&
			   t->rank == n->shape.rank;
		for (int d = 0; same && d < t->rank; d++)
			same = t->dims[d] == n->shape.d[d];
		char sh[128], have[160] = "";
		if (t && !same) {
			size_t o = 0;
			for (int d = 0; d < t->rank && o < sizeof(have); d++)
				o += (size_t)snprintf(have + o, sizeof(have) - o,
						      "%s%lld", d ? ", " : "(",
						      (long long)t->dims[d]);
			if (o < sizeof(have))
				snprintf(have + o, sizeof(have) - o, ")");
		}
		if (!t)
			rc = dtf_error(DTF_ERR_CHECKPOINT,
				       "%s has no variable '%s' (a checkpoint of another model?)",
				       file, n->name);
		else if (!same)
			rc = dtf_error(DTF_ERR_CHECKPOINT,
				       "%s: variable '%s' is %s %s there, the job's model has float32 %s (a checkpoint of another model?)",
				       file, n->name,
				       t->dtype == DTF_CKPT_F32 ? "float32" : "not float32",
				       t->rank ? have : "()",
				       dtf_shape_str(&n->shape, sh, sizeof(sh)));
		else
			memcpy(params + n->a.var.offset, f.data + t->offset,
			       (size_t)t->nbytes);
	}
	dtf_ckpt_file_deinit(&f);
	return rc;
}

static int fsync_parent(const char *path)
{
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", path);
	int fd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int r = fsync(fd);
	close(fd);
	return r;
}

/* data[0..n) to `path` through "<path>.tmp": write, fsync, rename, fsync
 * the directory.  On failure the temporary file is removed. */
static int write_file(const char *path, const uint8_t *data, size_t n)
{
	char tmp[4096 + 8];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return dtf_error(DTF_ERR_IO, "%s: open: %s", tmp, strerror(errno));
	int kill_half = dtf_fault_kill_in_export();
	size_t done = 0;
	while (done < n) {
		size_t chunk = n - done;
		if (kill_half && done < n / 2 && done + chunk > n / 2)
			chunk = n / 2 - done;
		ssize_t w = write(fd, data + done, chunk);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int err = w < 0 ? errno : ENOSPC;
			close(fd);
			unlink(tmp);
			return dtf_error(DTF_ERR_IO, "%s: write (%zu of %zu bytes): %s",
					 tmp, done, n, strerror(err));
		}
		done += (size_t)w;
		if (kill_half && done == n / 2) {
			dtf_warn("DTF_FAULT: injecting 'kill-in-export-write' after %zu of %zu bytes",
				 done, n);
			fflush(stderr);
			raise(SIGKILL);
		}
	}
	if (fsync(fd) < 0) {
		int err = errno;
		close(fd);
		unlink(tmp);
		return dtf_error(DTF_ERR_IO, "%s: fsync: %s", tmp, strerror(err));
	}
	if (close(fd) < 0) {
		int err = errno;
		unlink(tmp);
		return dtf_error(DTF_ERR_IO, "%s: close: %s", tmp, strerror(err));
	}
	if (rename(tmp, path) < 0) {
		int err = errno;
		unlink(tmp);
		return dtf_error(DTF_ERR_IO, "rename %s to %s: %s", tmp, path,
				 strerror(err));
	}
	if (fsync_parent(path) < 0)
		return dtf_error(DTF_ERR_IO, "%s: fsync of the directory: %s",
				 path, strerror(errno));
	return 0;
}

int dtf_export_run(const struct dtf_job *job, const struct dtf_export_opts *o)
{
	const char *ckpt = o->checkpoint ? o->checkpoint : job->checkpoint.dir;
	if (!ckpt)
		return dtf_error(DTF_ERR_USAGE,
				 "export: no --checkpoint given and the job has no checkpoint.dir");
	struct dtf_graph g;
	int rc = dtf_graph_lower_model(job, 1, &g, NULL);
	if (rc < 0)
		return rc;
	uint8_t *bytes = NULL;
	size_t len = 0;
	char used[4096] = "";
	float *params = dtf_alloc_aligned(g.nparams * sizeof(float) + 64);
	if (!params) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory for the variables");
		goto out;
	}
	dtf_graph_init_params(&g, job->seed, params);
	if ((rc = dtf_export_load_variables(&g, ckpt, params, used,
					    sizeof(used))) < 0)
		goto out;
	rc = o->format == DTF_EXPORT_ONNX
		     ? dtf_export_onnx(job, &g, params, &bytes, &len)
		     : dtf_export_safetensors(job, &g, params, &bytes, &len);
	if (rc < 0)
		goto out;
	if ((rc = write_file(o->output, bytes, len)) < 0)
		goto out;
	dtf_info("exported %s (%s, %zu bytes) from %s", o->output,
		     o->format == DTF_EXPORT_ONNX ? "ONNX" : "safetensors", len,
		     used);
out:
	dtf_free(bytes);
	dtf_free(params);
	dtf_graph_deinit(&g);
	return rc;
}
