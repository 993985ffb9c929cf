/*
 * testutil.c - scaffolding shared by the Check test programs (testutil.h).
 */
#include "testutil.h"

#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/rng.h"
#include "graph/lower.h"

/* ---- processes ---------------------------------------------------------- */

static const char *env_or_dot(const char *name)
{
	const char *v = getenv(name);
	return v ? v : ".";
}

const char *tu_build_root(void) { return env_or_dot("DTF_BUILD_ROOT"); }

const char *tu_source_root(void) { return env_or_dot("DTF_SOURCE_ROOT"); }

int tu_run(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	va_start(ap, fmt);
	int len = vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	ck_assert_msg(len >= 0 && (size_t)len < sizeof(cmd),
		      "command too long: %.200s...", cmd);
	int st = system(cmd);
	return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

void tu_synth(const char *dir, const char *prefix, int count, int shards,
	      const char *shape, int seed)
{
	int st = tu_run("%s/dtf-records synth --out %s/%s --count %d "
			"--shards %d --shape %s --classes 4 --seed %d "
			">/dev/null",
			tu_build_root(), dir, prefix, count, shards, shape,
			seed);
	ck_assert_msg(st == 0, "dtf-records synth --out %s/%s: exit status %d",
		      dir, prefix, st);
}

/* ---- temporary directory ------------------------------------------------ */

void tu_tmpdir_create(char *dir, size_t size, const char *tag)
{
	const char *base = getenv("TMPDIR");
	if (!base || !*base)
		base = "/tmp";
	int len = snprintf(dir, size, "%s/%s-XXXXXX", base, tag);
	ck_assert_msg(len > 0 && (size_t)len < size, "temporary path too long");
	ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp %s failed", dir);
}

static int remove_entry(const char *path, const struct stat *st, int flag,
			struct FTW *ftw)
{
	remove(path);
	return 0;
}

void tu_tmpdir_remove(const char *dir)
{
	if (dir && *dir)
		nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *tu_path(char *buf, size_t n, const char *dir, const char *name)
{
	int len = dir ? snprintf(buf, n, "%s/%s", dir, name)
		      : snprintf(buf, n, "%s", name);
	ck_assert_msg(len >= 0 && (size_t)len < n, "path too long: %s/%s",
		      dir ? dir : "", name);
	return buf;
}

/* ---- files -------------------------------------------------------------- */

char *tu_read_file(const char *dir, const char *name, size_t *len)
{
	char path[4096];
	tu_path(path, sizeof(path), dir, name);
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
	long n = ftell(f);
	ck_assert_int_ge(n, 0);
	ck_assert_int_eq(fseek(f, 0, SEEK_SET), 0);
	char *p = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(p);
	size_t got = fread(p, 1, (size_t)n, f);
	fclose(f);
	ck_assert_msg(got == (size_t)n, "short read of %s", path);
	p[n] = 0;
	if (len)
		*len = (size_t)n;
	return p;
}

const char *tu_slurp(const char *dir, const char *name)
{
	static char *buf;
	free(buf);
	buf = NULL;
	buf = tu_read_file(dir, name, NULL);
	return buf;
}

void tu_write_file(const char *dir, const char *name, const char *fmt, ...)
{
	char path[4096];
	tu_path(path, sizeof(path), dir, name);
	FILE *f = fopen(path, "w");
	ck_assert_msg(f != NULL, "cannot create %s", path);
	va_list ap;
	va_start(ap, fmt);
	int w = vfprintf(f, fmt, ap);
	va_end(ap);
	int c = fclose(f);
	ck_assert_msg(w >= 0 && c == 0, "cannot write %s", path);
}

void tu_write_bytes(const char *dir, const char *name, const void *b,
		    size_t n)
{
	char path[4096];
	tu_path(path, sizeof(path), dir, name);
	FILE *f = fopen(path, "wb");
	ck_assert_msg(f != NULL, "cannot create %s", path);
	size_t w = fwrite(b, 1, n, f);
	int c = fclose(f);
	ck_assert_msg(w == n && c == 0, "cannot write %s", path);
}

int tu_exists(const char *dir, const char *name)
{
	char path[4096];
	return access(tu_path(path, sizeof(path), dir, name), F_OK) == 0;
}

long tu_file_size(const char *dir, const char *name)
{
	char path[4096];
	struct stat st;
	tu_path(path, sizeof(path), dir, name);
	return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

int tu_patch_xor(const char *path, long off, int mask)
{
	FILE *f = fopen(path, "r+b");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	ck_assert_int_eq(fseek(f, off, SEEK_SET), 0);
	int c = fgetc(f);
	ck_assert_msg(c != EOF, "%s has no byte at %ld", path, off);
	ck_assert_int_eq(fseek(f, off, SEEK_SET), 0);
	fputc(c ^ mask, f);
	ck_assert_int_eq(fclose(f), 0);
	return c;
}

void tu_patch_bytes(const char *path, long off, const void *b, size_t n)
{
	FILE *f = fopen(path, "r+b");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	ck_assert_int_eq(fseek(f, off, SEEK_SET), 0);
	ck_assert_uint_eq(fwrite(b, 1, n, f), n);
	ck_assert_int_eq(fclose(f), 0);
}

void tu_cut_file(const char *path, long size)
{
	ck_assert_msg(truncate(path, size) == 0, "cannot truncate %s", path);
}

/* ---- exported variables ------------------------------------------------- */

float *tu_read_vars(const char *dir, const char *name, size_t *n)
{
	char path[4096];
	tu_path(path, sizeof(path), dir, name);
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "missing %s", path);
	char magic[8];
	uint64_t count;
	ck_assert_int_eq(fread(magic, 1, 8, f), 8);
	ck_assert_msg(memcmp(magic, "DTFVARS1", 8) == 0,
		      "%s: not an exported-variables file", path);
	ck_assert_int_eq(fread(&count, sizeof(count), 1, f), 1);
	float *p = malloc((count ? count : 1) * sizeof(float));
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(fread(p, sizeof(float), count, f), count);
	fclose(f);
	*n = count;
	return p;
}

double tu_vars_rel_diff(const char *dir, const char *got_name,
			const char *ref_name, size_t *n, size_t *moved,
			int *same_bits)
{
	size_t ng, nr;
	float *got = tu_read_vars(dir, got_name, &ng);
	float *ref = tu_read_vars(dir, ref_name, &nr);
	ck_assert_uint_eq(ng, nr);
	double worst = tu_max_rel_diff(got, ref, ng, moved);
	if (same_bits)
		*same_bits = memcmp(got, ref, ng * sizeof(float)) == 0;
	if (n)
		*n = ng;
	free(got);
	free(ref);
	return worst;
}

double tu_max_rel_diff(const float *got, const float *ref, size_t n,
		       size_t *moved)
{
	double worst = 0;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		double rel = fabs((double)got[i] - ref[i]) /
			     fmax(fabs((double)ref[i]), 1e-2);
		if (!(rel <= worst)) /* NaN counts as the worst */
			worst = isnan(rel) ? INFINITY : rel;
		k += ref[i] != 0.0f;
	}
	if (moved)
		*moved = k;
	return worst;
}

/* ---- random numbers and float buffers ----------------------------------- */

static uint64_t rng_state = 0x5eed;

void tu_rng_seed(uint64_t seed) { rng_state = seed; }

uint64_t tu_next_u64(void)
{
	uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

float tu_frand(float lo, float hi)
{
	return lo + (hi - lo) * (float)((tu_next_u64() >> 40) / 16777216.0);
}

float *tu_falloc(size_t n)
{
	float *p = malloc((n ? n : 1) * sizeof *p);
	ck_assert_ptr_nonnull(p);
	return p;
}

float *tu_fnan(size_t n)
{
	float *p = tu_falloc(n);
	for (size_t i = 0; i < n; i++)
		p[i] = NAN;
	return p;
}

float *tu_frandom(size_t n, float lo, float hi)
{
	float *p = tu_falloc(n);
	for (size_t i = 0; i < n; i++)
		p[i] = tu_frand(lo, hi);
	return p;
}

/* ---- a small trainable model -------------------------------------------- */

void tu_model_plan(struct tu_model *m, int batch,
		   enum dtf_planner_kind planner, uint64_t id0,
		   uint64_t id_stride, uint64_t step)
{
	ck_assert_int_le(batch, TU_MODEL_MAX_BATCH);
	int rc = dtf_graph_backward(&m->g);
	ck_assert_msg(rc == 0, "%s", dtf_error_msg());
	m->params = dtf_alloc_aligned(m->g.nparams * sizeof(float));
	m->grads = dtf_alloc_aligned(m->g.nparams * sizeof(float));
	rc = dtf_plan_graph_with(&m->g, planner, m->params, m->grads, &m->plan);
	ck_assert_msg(rc == 0, "%s", dtf_error_msg());
	dtf_graph_init_params(&m->g, 3, m->params);
	for (int r = 0; r < batch; r++)
		m->ids[r] = id0 + (uint64_t)r * id_stride;
	m->ctx = (struct dtf_exec_ctx){
		.training = 1, .step = step, .example_ids = m->ids,
		.valid = batch, .loss_scale = 1.0f / batch,
		.dropout_key = dtf_philox_make_key(11, DTF_RNG_DROPOUT),
		.workspace = m->plan.workspace};
}

void tu_model_build(struct tu_model *m, struct dtf_job *job, int batch,
		    enum dtf_planner_kind planner, uint64_t id0,
		    uint64_t id_stride, uint64_t step)
{
	memset(m, 0, sizeof(*m));
	m->job = job;
	int rc = dtf_graph_lower_model(m->job, batch, &m->g, NULL);
	ck_assert_msg(rc == 0, "%s", dtf_error_msg());
	tu_model_plan(m, batch, planner, id0, id_stride, step);
}

void tu_model_randomize(struct tu_model *m, float bias_range, int label_mul,
			int classes)
{
	struct dtf_philox_key key = dtf_philox_make_key(99, 1);
	for (int i = 0; i < m->g.nnodes; i++) {
		struct dtf_node *n = &m->g.nodes[i];
		if (n->op == DTF_OP_VARIABLE && n->shape.rank == 1)
			dtf_rng_uniform(key, (uint32_t)i, 0, 0, -bias_range,
					bias_range, n->data,
					(size_t)n->shape.d[0]);
		if (n->op == DTF_OP_INPUT && n->dtype == DTF_FLOAT32)
			dtf_rng_uniform(key, (uint32_t)i, 1, 0, 0.0f, 1.0f,
					n->data,
					(size_t)dtf_shape_numel(&n->shape));
		if (n->op == DTF_OP_INPUT && n->dtype == DTF_INT32)
			for (int r = 0; r < m->ctx.valid; r++)
				((int32_t *)n->data)[r] =
					(r * label_mul + 1) % classes;
	}
}

double tu_model_loss(struct tu_model *m)
{
	dtf_exec_forward(&m->g, &m->ctx);
	return m->ctx.loss_sum * m->ctx.loss_scale;
}

void tu_model_free(struct tu_model *m)
{
	dtf_plan_deinit(&m->plan);
	dtf_graph_deinit(&m->g);
	dtf_free(m->params);
	dtf_free(m->grads);
	dtf_job_free(m->job);
}

/* ---- main --------------------------------------------------------------- */

int tu_run_suite(Suite *s, int fork)
{
	SRunner *sr = srunner_create(s);
	if (!fork)
		srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
