/*
 * testutil.c - scaffolding shared by the Check test programs (testutil.h).
 */
#include "testutil.h"

#include <ftw.h>
#include <glob.h>
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
#include "data/tfrecord.h"
#include "graph/lower.h"
#include "ops/backend.h"

/* ---- processes ---------------------------------------------------------- */

static const char *env_or_dot(const char *name)
{
	const char *v = getenv(name);
	return v ? v : ".";
}

const char *tu_build_root(void) { return env_or_dot("DTF_BUILD_ROOT"); }

const char *tu_source_root(void) { return env_or_dot("DTF_SOURCE_ROOT"); }

const char *tu_exe_wrapper(void)
{
	static char buf[1024];
	const char *w = getenv("DTF_TEST_EXE_WRAPPER");
	if (!w || !*w)
		return "";
	int len = snprintf(buf, sizeof(buf), "%s ", w);
	ck_assert_msg(len > 0 && (size_t)len < sizeof(buf),
		      "DTF_TEST_EXE_WRAPPER too long: %.200s...", w);
	return buf;
}

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

int tu_mpirun(int np, const char *env, const char *dir, const char *log,
	      const char *fmt, ...)
{
	char args[6144], path[4096];
	va_list ap;
	va_start(ap, fmt);
	int len = vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	ck_assert_msg(len >= 0 && (size_t)len < sizeof(args),
		      "dtf-train arguments too long: %.200s...", args);
	return tu_run("%s%stimeout %d mpirun -np %d %s%s/dtf-train %s >/dev/null "
		      "2>%s",
		      env ? env : "", env && *env ? " " : "",
		      TU_MPIRUN_TIMEOUT_S, np, tu_exe_wrapper(), tu_build_root(),
		      args,
		      log ? tu_path(path, sizeof(path), dir, log) : "/dev/null");
}

void tu_write_tiny_job(const char *dir, const char *name, int shuffle,
		       int with_eval, const char *rest)
{
	char eval[512] = "";
	if (with_eval)
		snprintf(eval, sizeof(eval),
			 "  eval: {files: \"%s/test-*.tfrecord\"}\n", dir);
	tu_write_file(dir, name,
		      "name: tiny-cnn\n"
		      "seed: 7\n"
		      "data:\n"
		      "  train: {files: \"%s/train-*.tfrecord\", "
		      "shuffle_buffer: %d}\n"
		      "%s" TU_SYNTH_FEATURES_8X8 TU_TINY_CNN_MODEL "%s",
		      dir, shuffle, eval, rest);
}

void tu_synth(const char *dir, const char *prefix, int count, int shards,
	      const char *shape, int seed)
{
	int st = tu_run("%s%s/dtf-records synth --out %s/%s --count %d "
			"--shards %d --shape %s --classes 4 --seed %d "
			">/dev/null",
			tu_exe_wrapper(), tu_build_root(), dir, prefix, count, shards, shape,
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

int tu_count_lines(const char *dir, const char *name, const char *text)
{
	int n = 0;
	for (const char *l = tu_slurp(dir, name); *l;) {
		const char *end = strchr(l, '\n');
		size_t len = end ? (size_t)(end - l) : strlen(l);
		const char *hit = strstr(l, text);
		n += hit && hit < l + len;
		l += len + (end != NULL);
	}
	return n;
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
	rc = dtf_plan_graph_with(&m->g, planner, m->params, m->grads,
				 dtf_backend_cpu_workspace(&m->g), &m->plan);
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

/* ---- TensorBoard event files ----------------------------------------------- */

/* a protobuf walker for Event / Summary / Value */

static int get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	*v = 0;
	for (int s = 0; s < 64 && *p < end; s += 7) {
		uint8_t b = *(*p)++;
		*v |= (uint64_t)(b & 0x7f) << s;
		if (!(b & 0x80))
			return 0;
	}
	return -1;
}

/* Next field: number, wire type, and its payload (varint value, or the
 * bytes of a fixed or length-delimited field). */
struct field {
	int num, wt;
	uint64_t v;
	const uint8_t *data;
	size_t len;
};

static int next_field(const uint8_t **p, const uint8_t *end, struct field *f)
{
	uint64_t key;
	if (get_varint(p, end, &key) < 0)
		return -1;
	f->num = (int)(key >> 3);
	f->wt = (int)(key & 7);
	switch (f->wt) {
	case 0:
		return get_varint(p, end, &f->v);
	case 1:
	case 5: {
		size_t n = f->wt == 1 ? 8 : 4;
		if ((size_t)(end - *p) < n)
			return -1;
		f->data = *p;
		f->len = n;
		*p += n;
		return 0;
	}
	case 2:
		if (get_varint(p, end, &f->v) < 0 || f->v > (uint64_t)(end - *p))
			return -1;
		f->data = *p;
		f->len = (size_t)f->v;
		*p += f->len;
		return 0;
	}
	return -1;
}

static double le_double(const uint8_t *b)
{
	uint64_t u = 0;
	for (int i = 7; i >= 0; i--)
		u = u << 8 | b[i];
	double d;
	memcpy(&d, &u, 8);
	return d;
}

static float le_float(const uint8_t *b)
{
	uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 |
		     (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static void decode_value(const uint8_t *p, const uint8_t *end, int64_t step,
			 struct tu_event_file *ef)
{
	struct field f;
	struct tu_event_scalar *s = &ef->s[ef->n];
	int have_tag = 0, have_value = 0;
	while (p < end) {
		ck_assert_int_eq(next_field(&p, end, &f), 0);
		if (f.num == 1 && f.wt == 2) {
			ck_assert_uint_lt(f.len, sizeof(s->tag));
			memcpy(s->tag, f.data, f.len);
			s->tag[f.len] = 0;
			have_tag = 1;
		} else if (f.num == 2 && f.wt == 5) {
			s->value = le_float(f.data);
			have_value = 1;
		}
	}
	ck_assert(have_tag && have_value);
	s->step = step;
	ck_assert_int_lt(ef->n, TU_EVENTS_MAX - 1);
	ef->n++;
}

static void decode_event(const uint8_t *p, size_t len, struct tu_event_file *ef)
{
	const uint8_t *end = p + len;
	struct field f;
	double wall = 0;
	int64_t step = 0;
	const uint8_t *summary = NULL;
	size_t slen = 0;
	while (p < end) {
		ck_assert_int_eq(next_field(&p, end, &f), 0);
		if (f.num == 1 && f.wt == 1)
			wall = le_double(f.data);
		else if (f.num == 2 && f.wt == 0)
			step = (int64_t)f.v;
		else if (f.num == 3 && f.wt == 2) {
			ck_assert_int_eq(ef->nevents, 0); /* first record only */
			ck_assert_uint_lt(f.len, sizeof(ef->version));
			memcpy(ef->version, f.data, f.len);
			ef->version[f.len] = 0;
		} else if (f.num == 5 && f.wt == 2) {
			summary = f.data;
			slen = f.len;
		} else if (f.num == 7 && f.wt == 2) {
			const uint8_t *q = f.data;
			struct field g;
			ck_assert_int_eq(next_field(&q, f.data + f.len, &g), 0);
			ck_assert_int_eq(g.num, 1); /* status */
			ck_assert_uint_eq(g.v, 1);  /* START */
			ef->session_starts++;
			ef->start_step = step;
		}
	}
	ck_assert_msg(wall > 1e9, "wall_time %f", wall); /* seconds since 1970 */
	if (ef->nevents == 0)
		ef->first_wall = wall;
	ef->nevents++;
	if (summary) {
		const uint8_t *q = summary, *qend = summary + slen;
		while (q < qend) {
			ck_assert_int_eq(next_field(&q, qend, &f), 0);
			ck_assert_int_eq(f.num, 1); /* Summary.value */
			ck_assert_int_eq(f.wt, 2);
			decode_value(f.data, f.data + f.len, step, ef);
		}
	}
}

void tu_events_read(const char *path, struct tu_event_file *ef)
{
	memset(ef, 0, sizeof(*ef));
	struct dtf_tfrecord_reader *r;
	ck_assert_msg(dtf_tfrecord_reader_open(path, &r) == 0, "%s",
		      dtf_error_msg());
	const uint8_t *data;
	size_t len;
	int rc;
	while ((rc = dtf_tfrecord_reader_next(r, &data, &len)) == 1)
		decode_event(data, len, ef);
	ck_assert_msg(rc == 0, "%s", dtf_error_msg());
	dtf_tfrecord_reader_free(r);
	ck_assert_str_eq(ef->version, "brain.Event:2");
}

const struct tu_event_scalar *tu_events_find(const struct tu_event_file *ef,
					int64_t step, const char *tag)
{
	for (int i = 0; i < ef->n; i++)
		if (ef->s[i].step == step && strcmp(ef->s[i].tag, tag) == 0)
			return &ef->s[i];
	return NULL;
}

void tu_one_file(const char *pattern, char *out, size_t size)
{
	glob_t g;
	ck_assert_msg(glob(pattern, 0, NULL, &g) == 0, "no %s", pattern);
	ck_assert_msg(g.gl_pathc == 1, "%zu files match %s", g.gl_pathc,
		      pattern);
	snprintf(out, size, "%s", g.gl_pathv[0]);
	globfree(&g);
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
