/*
 * test_generate.c - `dtf-train generate`: the GPT's incremental decoder
 * (train/generate.h), its sampler and the command end to end.
 *
 * The model is a small GPT (2 blocks, 2 heads, width 8, vocabulary 11,
 * block_size 6) of random variables (biases and layer_norm parameters
 * random too, so every term counts), written here as a checkpoint file in
 * the documented format (train/checkpoint.h): tied with an MLP of 4C, and
 * untied (the head under the job's logits name, with a bias) with an MLP
 * of 20.
 *  - the cached decoder, fed one id at a time, gives at every position
 *    the logits of a plain-loop full forward of the window written here
 *    in double (no cache, nanoGPT's structure from the spec) to 1e-5,
 *    and so does one batched extend of the whole window, and so does
 *    the window through the graph's CPU reference kernels op by op
 *    (causal_self_attention among them), as the graph of a
 *    transformer_block computes it;
 *  - greedy generation past block_size (the window slides) equals a loop
 *    over the plain forward of the cropped window, as nanoGPT's generate;
 *  - the sampler: temperature 0 and top-k 1 are the argmax; over 20000
 *    draws the frequencies are the tempered softmax's (within 5 sigma);
 *    top-k never draws outside the k largest;
 *  - the command: the same seed gives the same text, another seed another
 *    text; --temperature 0 and --top-k 1 print the greedy text; the job's
 *    seed is the default; the vocabulary is found next to data.train; a
 *    layers-form job names the layers (their variables' prefixes) and
 *    gives the heads;
 *  - the small GPT of tests/fixtures/gpt-small.yaml trained 20 steps:
 *    `dtf-train predict --outputs logits` of its graph on 3 windows equals
 *    the decoder's logits at every position (full window and cached
 *    steps) to 1e-5;
 *  - errors: a prompt character outside the vocabulary (named, exit 2), a
 *    missing checkpoint (exit 4), a job whose input is not token ids
 *    (exit 2, "not a GPT"), a checkpoint without the GPT's variables
 *    (exit 2), heads that do not divide the width (exit 2), a vocabulary
 *    of another size (exit 2).
 */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/crc32c.h"
#include "data/example.h"
#include "data/tfrecord.h"
#include "ops/cpu/kernels.h"
#include "train/generate.h"

#include "testutil.h"

#define L 2
#define H 2
#define C 8
#define V 11
#define T 6

static const char vocab_text[V + 1] = "\n abcdefghi";

/* ---- the model's variables and a checkpoint of them ---------------------- */

#define MAXT 40

struct var {
	char name[64];
	int rank;
	int64_t dims[2];
	float *data;
};

struct model {
	struct var v[MAXT];
	int n, tied;
	int hidden; /* the MLP width: 4C tied, 20 untied */
};

static void add_var(struct model *m, const char *name, int rank, int64_t d0,
		    int64_t d1, float lo, float hi)
{
	struct var *x = &m->v[m->n++];
	snprintf(x->name, sizeof(x->name), "%s", name);
	x->rank = rank;
	x->dims[0] = d0;
	x->dims[1] = d1;
	x->data = tu_frandom((size_t)(d0 * (rank == 2 ? d1 : 1)), lo, hi);
}

static const float *var(const struct model *m, const char *name)
{
	for (int i = 0; i < m->n; i++)
		if (!strcmp(m->v[i].name, name))
			return m->v[i].data;
	ck_abort_msg("no variable %s", name);
	return NULL;
}

static void make_model(struct model *m, int tied, uint64_t seed)
{
	memset(m, 0, sizeof(*m));
	m->tied = tied;
	m->hidden = tied ? 4 * C : 20;
	int F = m->hidden;
	tu_rng_seed(seed);
	add_var(m, "wte/embeddings", 2, V, C, -1, 1);
	add_var(m, "wpe/embeddings", 2, T, C, -1, 1);
	for (int i = 0; i < L; i++) {
		char nm[64];
#define BV(s, r, a, b, lo, hi)                                    \
	do {                                                      \
		snprintf(nm, sizeof(nm), "h%d/%s", i, s);         \
		add_var(m, nm, r, a, b, lo, hi);                  \
	} while (0)
		BV("ln_1/gamma", 1, C, 0, 0.5f, 1.5f);
		BV("ln_1/beta", 1, C, 0, -0.3f, 0.3f);
		BV("attn/qkv/kernel", 2, C, 3 * C, -0.6f, 0.6f);
		BV("attn/qkv/bias", 1, 3 * C, 0, -0.3f, 0.3f);
		BV("attn/proj/kernel", 2, C, C, -0.4f, 0.4f);
		BV("attn/proj/bias", 1, C, 0, -0.3f, 0.3f);
		BV("ln_2/gamma", 1, C, 0, 0.5f, 1.5f);
		BV("ln_2/beta", 1, C, 0, -0.3f, 0.3f);
		BV("mlp/fc/kernel", 2, C, F, -0.5f, 0.5f);
		BV("mlp/fc/bias", 1, F, 0, -0.3f, 0.3f);
		BV("mlp/proj/kernel", 2, F, C, -0.3f, 0.3f);
		BV("mlp/proj/bias", 1, C, 0, -0.3f, 0.3f);
#undef BV
	}
	add_var(m, "ln_f/gamma", 1, C, 0, 0.5f, 1.5f);
	add_var(m, "ln_f/beta", 1, C, 0, -0.3f, 0.3f);
	if (!tied) { /* the head under the job's name, with a bias */
		add_var(m, "logits/kernel", 2, C, V, -1, 1);
		add_var(m, "logits/bias", 1, V, 0, -0.5f, 0.5f);
	}
}

/* Every variable "FROM/..." renamed "TO/..." */
static void rename_prefix(struct model *m, const char *from, const char *to)
{
	size_t n = strlen(from);
	for (int i = 0; i < m->n; i++) {
		char *name = m->v[i].name, buf[64];
		if (!strncmp(name, from, n) && name[n] == '/') {
			snprintf(buf, sizeof(buf), "%s%s", to, name + n);
			snprintf(name, sizeof(m->v[i].name), "%s", buf);
		}
	}
}

static void free_model(struct model *m)
{
	for (int i = 0; i < m->n; i++)
		free(m->v[i].data);
	m->n = 0;
}

static void put_u16(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}
static void put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* DIR/NAME: a version-1 checkpoint (train/checkpoint.h's table) of the
 * first `n` variables of m (n < 0: all) at step 3. */
static void write_checkpoint(const struct model *m, int n, const char *dir,
			     const char *name)
{
	if (n < 0)
		n = m->n;
	size_t hbytes = 88;
	for (int i = 0; i < n; i++)
		hbytes += 2 + strlen(m->v[i].name) + 4 + 8 * (size_t)m->v[i].rank + 20;
	hbytes += 4;
	size_t at = (hbytes + 63) / 64 * 64, offs[MAXT], sizes[MAXT];
	for (int i = 0; i < n; i++) {
		offs[i] = at;
		sizes[i] = 4 * (size_t)(m->v[i].dims[0] *
					(m->v[i].rank == 2 ? m->v[i].dims[1] : 1));
		at = (at + sizes[i] + 63) / 64 * 64;
	}
	size_t total = at;
	uint8_t *b = calloc(1, total);
	ck_assert_ptr_nonnull(b);
	memcpy(b, "DTFCKPT\0", 8);
	put_u32(b + 8, 1);
	put_u32(b + 12, (uint32_t)hbytes);
	put_u64(b + 16, total);
	put_u64(b + 24, 3);  /* step */
	put_u32(b + 56, 1);  /* world */
	put_u32(b + 60, 2);  /* per-replica batch */
	put_u64(b + 64, 2);  /* global batch */
	put_u64(b + 72, 42); /* seed */
	put_u32(b + 80, (uint32_t)n);
	size_t p = 88;
	for (int i = 0; i < n; i++) {
		const struct var *x = &m->v[i];
		size_t len = strlen(x->name);
		memcpy(b + offs[i], x->data, sizes[i]);
		put_u16(b + p, (uint32_t)len);
		memcpy(b + p + 2, x->name, len);
		p += 2 + len;
		b[p] = 1; /* float32 */
		b[p + 1] = (uint8_t)x->rank;
		p += 4;
		for (int d = 0; d < x->rank; d++, p += 8)
			put_u64(b + p, (uint64_t)x->dims[d]);
		put_u64(b + p, offs[i]);
		put_u64(b + p + 8, sizes[i]);
		put_u32(b + p + 16, dtf_crc32c(0, b + offs[i], sizes[i]));
		p += 20;
	}
	ck_assert_uint_eq(p, hbytes - 4);
	put_u32(b + p, dtf_crc32c(0, b, hbytes - 4));
	tu_write_bytes(dir, name, b, total);
	free(b);
}

/* ---- the plain-loop reference, in double ----------------------------------- */

static void ref_layer_norm(const double *x, const float *g, const float *b,
			   double *y)
{
	double mean = 0, var = 0;
	for (int i = 0; i < C; i++)
		mean += x[i];
	mean /= C;
	for (int i = 0; i < C; i++)
		var += (x[i] - mean) * (x[i] - mean);
	var /= C;
	for (int i = 0; i < C; i++)
		y[i] = (x[i] - mean) / sqrt(var + 1e-5) * g[i] + b[i];
}

/* y[cols] = x[rows] w (rows, cols) + b */
static void ref_affine(const double *x, const float *w, const float *b,
		       int rows, int cols, double *y)
{
	for (int j = 0; j < cols; j++) {
		double s = b ? b[j] : 0;
		for (int i = 0; i < rows; i++)
			s += x[i] * w[(size_t)i * cols + j];
		y[j] = s;
	}
}

/* logits [n][V] of the window ids[0..n), no cache */
static void ref_forward(const struct model *m, const int32_t *ids, int n,
			double logits[][V])
{
	static double h[T][C], q[T][3 * C], y[T][C], a[C], f[4 * C], t[C];
	int F = m->hidden;
	const float *wte = var(m, "wte/embeddings"), *wpe = var(m, "wpe/embeddings");
	for (int p = 0; p < n; p++)
		for (int i = 0; i < C; i++)
			h[p][i] = (double)wte[ids[p] * C + i] + wpe[p * C + i];
	for (int l = 0; l < L; l++) {
		char nm[64];
#define W(s) (snprintf(nm, sizeof(nm), "h%d/%s", l, s), var(m, nm))
		for (int p = 0; p < n; p++) {
			ref_layer_norm(h[p], W("ln_1/gamma"), W("ln_1/beta"), a);
			ref_affine(a, W("attn/qkv/kernel"), W("attn/qkv/bias"), C,
				   3 * C, q[p]);
		}
		int D = C / H;
		for (int p = 0; p < n; p++)
			for (int hd = 0; hd < H; hd++) {
				double s[T], mx = -1e300, z = 0;
				for (int k = 0; k <= p; k++) {
					s[k] = 0;
					for (int d = 0; d < D; d++)
						s[k] += q[p][hd * D + d] *
							q[k][C + hd * D + d];
					s[k] /= sqrt((double)D);
					mx = fmax(mx, s[k]);
				}
				for (int k = 0; k <= p; k++)
					z += (s[k] = exp(s[k] - mx));
				for (int d = 0; d < D; d++) {
					double acc = 0;
					for (int k = 0; k <= p; k++)
						acc += s[k] / z * q[k][2 * C + hd * D + d];
					y[p][hd * D + d] = acc;
				}
			}
		for (int p = 0; p < n; p++) {
			ref_affine(y[p], W("attn/proj/kernel"), W("attn/proj/bias"),
				   C, C, t);
			for (int i = 0; i < C; i++)
				h[p][i] += t[i];
			ref_layer_norm(h[p], W("ln_2/gamma"), W("ln_2/beta"), a);
			ref_affine(a, W("mlp/fc/kernel"), W("mlp/fc/bias"), C,
				   F, f);
			for (int i = 0; i < F; i++) {
				double x = f[i];
				f[i] = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) *
							   (x + 0.044715 * x * x * x)));
			}
			ref_affine(f, W("mlp/proj/kernel"), W("mlp/proj/bias"),
				   F, C, t);
			for (int i = 0; i < C; i++)
				h[p][i] += t[i];
		}
#undef W
	}
	for (int p = 0; p < n; p++) {
		ref_layer_norm(h[p], var(m, "ln_f/gamma"), var(m, "ln_f/beta"), a);
		for (int j = 0; j < V; j++) {
			double s = m->tied ? 0 : var(m, "logits/bias")[j];
			for (int i = 0; i < C; i++)
				s += a[i] * (m->tied ? wte[j * C + i]
						     : var(m, "logits/kernel")[i * V + j]);
			logits[p][j] = s;
		}
	}
}

/* logits [n][V] of the window by the graph's CPU reference kernels, op
 * by op as graph/lower_gpt.c lowers a transformer_block (layer_norm,
 * matmul, bias_add, causal_self_attention, add, gelu tanh), for one
 * example of n positions: what `predict --outputs logits` computes on
 * the reference executor. */
static void kernel_forward(const struct model *m, const int32_t *ids, int n,
			   float *logits)
{
	int F = m->hidden;
	float h[T * C], a[T * C], qkv[T * 3 * C], y[T * C], t[T * C];
	float f[T * 4 * C];
	dtf_cpu_embedding((size_t)n, V, C, ids, var(m, "wte/embeddings"), h);
	for (int i = 0; i < n * C; i++)
		h[i] += var(m, "wpe/embeddings")[i];
	for (int l = 0; l < L; l++) {
		char nm[64];
#define W(s) (snprintf(nm, sizeof(nm), "h%d/%s", l, s), var(m, nm))
		dtf_cpu_layer_norm((size_t)n, C, h, W("ln_1/gamma"), W("ln_1/beta"), 1e-5f, a);
		dtf_cpu_matmul(n, 3 * C, C, a, 0, W("attn/qkv/kernel"), 0, qkv);
		dtf_cpu_bias_add((size_t)n, 3 * C, qkv, W("attn/qkv/bias"), qkv);
		dtf_cpu_causal_self_attention(1, n, C, H, qkv, y);
		dtf_cpu_matmul(n, C, C, y, 0, W("attn/proj/kernel"), 0, t);
		dtf_cpu_bias_add((size_t)n, C, t, W("attn/proj/bias"), t);
		for (int i = 0; i < n * C; i++)
			h[i] += t[i];
		dtf_cpu_layer_norm((size_t)n, C, h, W("ln_2/gamma"), W("ln_2/beta"), 1e-5f, a);
		dtf_cpu_matmul(n, F, C, a, 0, W("mlp/fc/kernel"), 0, f);
		dtf_cpu_bias_add((size_t)n, F, f, W("mlp/fc/bias"), f);
		dtf_cpu_gelu((size_t)n * F, 1, f, f);
		dtf_cpu_matmul(n, C, F, f, 0, W("mlp/proj/kernel"), 0, t);
		dtf_cpu_bias_add((size_t)n, C, t, W("mlp/proj/bias"), t);
		for (int i = 0; i < n * C; i++)
			h[i] += t[i];
#undef W
	}
	dtf_cpu_layer_norm((size_t)n, C, h, var(m, "ln_f/gamma"), var(m, "ln_f/beta"), 1e-5f, a);
	if (m->tied) {
		dtf_cpu_matmul(n, V, C, a, 0, var(m, "wte/embeddings"), 1, logits);
	} else {
		dtf_cpu_matmul(n, V, C, a, 0, var(m, "logits/kernel"), 0, logits);
		dtf_cpu_bias_add((size_t)n, V, logits, var(m, "logits/bias"), logits);
	}
}

static int ref_argmax(const double *x)
{
	int b = 0;
	for (int i = 1; i < V; i++)
		if (x[i] > x[b])
			b = i;
	return b;
}

/* nanoGPT's greedy generate over the plain forward: crop to the last T. */
static void ref_greedy(const struct model *m, const int32_t *prompt, int np,
		       int ntok, int32_t *out)
{
	int32_t seq[256];
	double lg[T][V];
	memcpy(seq, prompt, (size_t)np * sizeof(int32_t));
	int len = np;
	for (int i = 0; i < ntok; i++) {
		int n = len < T ? len : T;
		ref_forward(m, seq + len - n, n, lg);
		out[i] = seq[len++] = ref_argmax(lg[n - 1]);
	}
}

static char tmpdir[256];

static void setup(void)
{
	tu_tmpdir_create(tmpdir, sizeof(tmpdir), "dtf-generate");
}

static void teardown(void)
{
	tu_tmpdir_remove(tmpdir);
}

static void load(const struct model *m, struct dtf_gpt *g)
{
	write_checkpoint(m, -1, tmpdir, "model.dtf");
	char path[512];
	struct dtf_gpt_opts o = {.heads = H, .head = "logits"};
	int rc = dtf_gpt_load(tu_path(path, sizeof(path), tmpdir, "model.dtf"),
			      &o, g);
	ck_assert_msg(rc == 0, "load: %s", dtf_error_msg());
	ck_assert_int_eq(g->n_layer, L);
	ck_assert_int_eq(g->n_embd, C);
	ck_assert_int_eq(g->vocab_size, V);
	ck_assert_int_eq(g->block_size, T);
	ck_assert_int_eq(g->tied, m->tied);
	ck_assert_int_eq(g->blocks[1].hidden, m->hidden);
	ck_assert(m->tied == (g->lm_head_bias == NULL));
	ck_assert_int_eq(g->step, 3);
}

/* ---- the decoder ------------------------------------------------------------ */

static void check_cached_equals_full(int tied)
{
	struct model m;
	make_model(&m, tied, 11 + (uint64_t)tied);
	struct dtf_gpt g;
	load(&m, &g);
	static const int32_t ids[T] = {3, 0, 10, 3, 7, 1};
	double ref[T][V];
	ref_forward(&m, ids, T, ref);
	struct dtf_gpt_cache c;
	ck_assert_int_eq(dtf_gpt_cache_init(&g, &c), 0);
	float lg[T * V], all[T * V];
	double worst = 0, spread = 0;
	for (int p = 0; p < T; p++) {
		dtf_gpt_extend(&g, &c, ids + p, 1, 0, lg + p * V);
		ck_assert_int_eq(c.len, p + 1);
	}
	c.len = 0;
	dtf_gpt_extend(&g, &c, ids, T, 1, all);
	for (int p = 0; p < T; p++)
		for (int j = 0; j < V; j++) {
			worst = fmax(worst, fabs(lg[p * V + j] - ref[p][j]));
			worst = fmax(worst, fabs(all[p * V + j] - ref[p][j]));
			spread = fmax(spread, fabs(ref[p][j] - ref[p][0]));
		}
	ck_assert_msg(worst < 1e-5, "cached vs full: %g", worst);
	/* and the graph's kernels op by op give the same logits */
	float kern[T * V];
	kernel_forward(&m, ids, T, kern);
	double kworst = 0;
	for (int i = 0; i < T * V; i++)
		kworst = fmax(kworst, fabs(kern[i] - lg[i]));
	ck_assert_msg(kworst < 1e-5, "cached vs the graph's kernels: %g", kworst);
	ck_assert_msg(spread > 0.5, "logits too flat to tell: %g", spread);
	/* the last row alone (all_rows 0) is the full run's last row */
	c.len = 0;
	dtf_gpt_extend(&g, &c, ids, T, 0, lg);
	for (int j = 0; j < V; j++)
		ck_assert_msg(fabs(lg[j] - all[(T - 1) * V + j]) < 1e-6,
			      "last row %d: %g vs %g", j, lg[j], all[(T - 1) * V + j]);
	dtf_gpt_cache_deinit(&c);
	dtf_gpt_deinit(&g);
	free_model(&m);
}

START_TEST(cached_logits_equal_full_recompute_tied)
{
	check_cached_equals_full(1);
}
END_TEST

START_TEST(cached_logits_equal_full_recompute_untied)
{
	check_cached_equals_full(0);
}
END_TEST

/* Greedy past block_size: the window slides as nanoGPT's crop does. */
START_TEST(greedy_generation_slides_like_nanogpt)
{
	struct model m;
	make_model(&m, _i, 21 + (uint64_t)_i);
	struct dtf_gpt g;
	load(&m, &g);
	static const int32_t prompt[4] = {1, 4, 2, 8};
	int32_t got[20], want[20];
	struct dtf_sample_opts o = {.temperature = 0, .seed = 1};
	ck_assert_int_eq(dtf_gpt_generate(&g, prompt, 4, 20, &o, got, NULL, NULL), 0);
	ref_greedy(&m, prompt, 4, 20, want);
	for (int i = 0; i < 20; i++)
		ck_assert_msg(got[i] == want[i], "token %d: %d, reference %d", i,
			      got[i], want[i]);
	/* a prompt longer than block_size: its last T ids are the context */
	int32_t longp[9] = {5, 5, 5, 1, 4, 2, 8, 3, 9};
	ck_assert_int_eq(dtf_gpt_generate(&g, longp, 9, 5, &o, got, NULL, NULL), 0);
	ref_greedy(&m, longp + 3, 6, 5, want);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(got[i], want[i]);
	/* top-k 1 at temperature 1 is the argmax too */
	struct dtf_sample_opts k1 = {.temperature = 1, .top_k = 1, .seed = 9};
	ck_assert_int_eq(dtf_gpt_generate(&g, prompt, 4, 20, &k1, got, NULL, NULL), 0);
	ref_greedy(&m, prompt, 4, 20, want);
	for (int i = 0; i < 20; i++)
		ck_assert_int_eq(got[i], want[i]);
	dtf_gpt_deinit(&g);
	free_model(&m);
}
END_TEST

/* ---- the sampler -------------------------------------------------------------- */

START_TEST(sampler_frequencies_follow_the_tempered_softmax)
{
	static const float logits[6] = {0.5f, -1.0f, 2.0f, 1.5f, 0.0f, -3.0f};
	float scratch[6];
	const int N = 20000;
	static const float temps[2] = {1.0f, 0.5f};
	for (int ti = 0; ti < 2; ti++) {
		struct dtf_sample_opts o = {.temperature = temps[ti], .seed = 77};
		double p[6], z = 0;
		int count[6] = {0};
		for (int i = 0; i < 6; i++)
			z += p[i] = exp(logits[i] / temps[ti]);
		for (int i = 0; i < N; i++)
			count[dtf_gpt_sample(logits, 6, &o, (uint64_t)i, scratch)]++;
		for (int i = 0; i < 6; i++) {
			double pi = p[i] / z, sd = sqrt(N * pi * (1 - pi));
			ck_assert_msg(fabs(count[i] - N * pi) <= 5 * sd + 1,
				      "T %g class %d: %d draws, expected %.1f",
				      temps[ti], i, count[i], N * pi);
		}
		/* the same (seed, index) draws the same; another seed differs
		 * somewhere */
		struct dtf_sample_opts o2 = o;
		o2.seed = 78;
		int differ = 0;
		for (int i = 0; i < 200; i++) {
			ck_assert_int_eq(dtf_gpt_sample(logits, 6, &o, (uint64_t)i, scratch),
					 dtf_gpt_sample(logits, 6, &o, (uint64_t)i, scratch));
			differ += dtf_gpt_sample(logits, 6, &o, (uint64_t)i, scratch) !=
				  dtf_gpt_sample(logits, 6, &o2, (uint64_t)i, scratch);
		}
		ck_assert_int_gt(differ, 10);
	}
	/* top-k 2: only classes 2 and 3, in the ratio of their softmax */
	struct dtf_sample_opts k2 = {.temperature = 1.0f, .top_k = 2, .seed = 5};
	int c2 = 0, c3 = 0;
	for (int i = 0; i < N; i++) {
		int id = dtf_gpt_sample(logits, 6, &k2, (uint64_t)i, scratch);
		ck_assert_msg(id == 2 || id == 3, "top-k 2 drew %d", id);
		c2 += id == 2;
		c3 += id == 3;
	}
	double p2 = 1 / (1 + exp(-0.5));
	ck_assert_msg(fabs(c2 - N * p2) <= 5 * sqrt(N * p2 * (1 - p2)),
		      "top-k 2: %d of class 2, expected %.1f", c2, N * p2);
	/* temperature 0: the argmax, the lowest id among ties */
	static const float tie[4] = {1.0f, 3.0f, 3.0f, 0.0f};
	struct dtf_sample_opts t0 = {.temperature = 0, .seed = 5};
	ck_assert_int_eq(dtf_gpt_sample(logits, 6, &t0, 3, scratch), 2);
	ck_assert_int_eq(dtf_gpt_sample(tie, 4, &t0, 3, scratch), 1);
}
END_TEST

/* ---- the command ------------------------------------------------------------- */

static const char gpt_job[] =
	"name: gen\n"
	"seed: %d\n"
	"data:\n"
	"  train: {files: \"%s/train-*.tfrecord\"}\n"
	"  features:\n"
	"    tokens: {type: bytes, decode: uint8, dtype: int32, shape: [6]}\n"
	"    label: {type: int64, shape: []}\n"
	"model:\n"
	"  graph:\n"
	"    table: {variable: {shape: [11, 8]}}\n"
	"    emb: {embedding: {inputs: [tokens, table]}}\n"
	"    flat: {flatten: {inputs: [emb]}}\n"
	"    w: {variable: {shape: [48, 11]}}\n"
	"    logits: {matmul: {inputs: [flat, w]}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
	"train: {batch_size: 2}\n"
	"checkpoint: {dir: \"%s/ckpt\"}\n";

static struct model cli_model;

/* DIR/gpt.yaml (seed 42), DIR/vocab.txt, DIR/ckpt/ckpt-3.dtf + index. */
static void cli_setup(int seed)
{
	make_model(&cli_model, 1, 31);
	tu_write_file(tmpdir, "gpt.yaml", gpt_job, seed, tmpdir, tmpdir);
	tu_write_bytes(tmpdir, "vocab.txt", vocab_text, V);
	ck_assert_int_eq(tu_run("mkdir -p %s/ckpt", tmpdir), 0);
	char dir[512];
	write_checkpoint(&cli_model, -1, tu_path(dir, sizeof(dir), tmpdir, "ckpt"),
			 "ckpt-3.dtf");
	tu_write_file(dir, "checkpoint",
		      "model_checkpoint_path: \"ckpt-3.dtf\"\n"
		      "all_model_checkpoint_paths: \"ckpt-3.dtf\"\n");
}

/* Runs generate in DIR with ARGS (paths relative to DIR); stdout into
 * DIR/OUT, stderr into DIR/OUT.err. */
static int gen(const char *out, const char *args)
{
	return tu_run("cd %s && %s/dtf-train generate gpt.yaml --heads 2 %s >%s 2>%s.err",
		      tmpdir, tu_build_root(), args, out, out);
}

START_TEST(same_seed_same_text_greedy_is_argmax)
{
	cli_setup(42);
	/* the prompt "ab c" is ids 2 3 1 4 */
	ck_assert_int_eq(gen("a", "--prompt 'ab c' --tokens 30 --seed 5"), 0);
	ck_assert_int_eq(gen("b", "-p 'ab c' -n 30 --seed 5"), 0);
	ck_assert_int_eq(gen("c", "-p 'ab c' -n 30 --seed 6"), 0);
	ck_assert_int_eq(gen("d", "-p 'ab c' -n 30 --temperature 0"), 0);
	ck_assert_int_eq(gen("e", "-p 'ab c' -n 30 --top-k 1 --seed 8"), 0);
	ck_assert_int_eq(gen("g", "-p 'ab c' -n 30"), 0); /* the job's seed 42 */
	ck_assert_int_eq(gen("h", "-p 'ab c' -n 30 --seed 42 -c ckpt/ckpt-3.dtf"), 0);
	char *a = tu_read_file(tmpdir, "a", NULL), *b = tu_read_file(tmpdir, "b", NULL);
	char *c = tu_read_file(tmpdir, "c", NULL), *d = tu_read_file(tmpdir, "d", NULL);
	char *e = tu_read_file(tmpdir, "e", NULL), *g = tu_read_file(tmpdir, "g", NULL);
	char *h = tu_read_file(tmpdir, "h", NULL);
	ck_assert_uint_eq(strlen(a), 4 + 30 + 1);
	ck_assert_int_eq(strncmp(a, "ab c", 4), 0);
	ck_assert_str_eq(a, b);
	ck_assert_str_ne(a, c);
	/* --seed 42 from a file path equals the job's default seed 42 */
	ck_assert_str_eq(g, h);
	ck_assert_str_ne(g, a);
	/* greedy: the reference's argmax chain, decoded */
	static const int32_t prompt[4] = {2, 3, 1, 4};
	int32_t want[30];
	ref_greedy(&cli_model, prompt, 4, 30, want);
	char text[40] = "ab c";
	for (int i = 0; i < 30; i++)
		text[4 + i] = vocab_text[want[i]];
	text[34] = '\n';
	text[35] = 0;
	ck_assert_str_eq(d, text);
	ck_assert_str_eq(e, text);
	free(a), free(b), free(c), free(d), free(e), free(g), free(h);
	free_model(&cli_model);
}
END_TEST

/* The layers form of the job language: the structure, the layers' names
 * and the heads from the job (no --heads), the greedy text the
 * reference's. */
static const char layers_job[] =
	"name: gen-layers\n"
	"data:\n"
	"  train: {files: \"%s/train-*.tfrecord\"}\n"
	"  features:\n"
	"    tokens: {type: bytes, decode: uint8, dtype: int32, shape: [6]}\n"
	"    label: {type: int64, shape: []}\n"
	"model:\n"
	"  input: tokens\n"
	"  layers:\n"
	"    - {embedding: {input_dim: 11, output_dim: 8, name: tok}}\n"
	"    - {position_embedding: {name: pos}}\n"
	"    - {transformer_block: {heads: 2, name: blk_a}}\n"
	"    - {transformer_block: {heads: %d, name: blk_b}}\n"
	"    - {layer_norm: {epsilon: 1.0e-5, name: final_norm}}\n"
	"    - {dense: {tied_to: tok, use_bias: false, name: out}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: out, labels: label}}\n"
	"train: {batch_size: 2}\n";

START_TEST(layers_form_job_gives_the_structure)
{
	cli_setup(42);
	struct model m = cli_model;
	rename_prefix(&m, "wte", "tok");
	rename_prefix(&m, "wpe", "pos");
	rename_prefix(&m, "h0", "blk_a");
	rename_prefix(&m, "h1", "blk_b");
	rename_prefix(&m, "ln_f", "final_norm");
	write_checkpoint(&m, -1, tmpdir, "layers.dtf");
	tu_write_file(tmpdir, "layers.yaml", layers_job, tmpdir, 2);
	int rc = tu_run("cd %s && %s/dtf-train generate layers.yaml -c layers.dtf -p 'ab c' -n 30 --temperature 0 >out 2>out.err",
			tmpdir, tu_build_root());
	ck_assert_msg(rc == 0, "exit %d: %s", rc, tu_slurp(tmpdir, "out.err"));
	static const int32_t prompt[4] = {2, 3, 1, 4};
	int32_t want[30];
	ref_greedy(&cli_model, prompt, 4, 30, want);
	char text[40] = "ab c";
	for (int i = 0; i < 30; i++)
		text[4 + i] = vocab_text[want[i]];
	text[34] = '\n';
	text[35] = 0;
	ck_assert_str_eq(tu_slurp(tmpdir, "out"), text);
	/* the spec's names are not this job's: the checkpoint of h0.. is
	 * another model's */
	rc = tu_run("cd %s && %s/dtf-train generate layers.yaml -c ckpt -p ab -n 3 2>out.err",
		    tmpdir, tu_build_root());
	ck_assert_int_eq(rc, 2);
	ck_assert_ptr_nonnull(strstr(tu_slurp(tmpdir, "out.err"),
				     "no float32 variable 'tok/embeddings'"));
	/* blocks of different heads */
	tu_write_file(tmpdir, "layers.yaml", layers_job, tmpdir, 4);
	rc = tu_run("cd %s && %s/dtf-train generate layers.yaml -c layers.dtf -p ab -n 3 2>out.err",
		    tmpdir, tu_build_root());
	ck_assert_int_eq(rc, 2);
	ck_assert_ptr_nonnull(strstr(tu_slurp(tmpdir, "out.err"),
				     "transformer_block blk_b has 4 heads, blk_a 2"));
	free_model(&cli_model);
}
END_TEST

/* ---- a trained GPT: the decoder against the graph's own forward ------------ */

#define ST 16 /* tests/fixtures/gpt-small.yaml: V = C = T = 16, 2 blocks, 2 heads */

/* DIR/NAME: n windows of ST + 1 ids; window r's ids from `id(r, i)` */
static void write_windows(const char *name, int n, int noise)
{
	char path[512];
	struct dtf_tfrecord_writer *w;
	ck_assert_int_eq(dtf_tfrecord_writer_open(tu_path(path, sizeof(path), tmpdir, name), &w), 0);
	struct dtf_example_builder b;
	dtf_example_builder_init(&b);
	for (int r = 0; r < n; r++) {
		uint8_t ids[ST + 1];
		for (int i = 0; i <= ST; i++)
			ids[i] = (uint8_t)(noise && tu_next_u64() % 4 == 0
						   ? (int)(tu_next_u64() % ST)
						   : (r + 3 * i) % ST);
		const uint8_t *data;
		size_t len;
		dtf_example_builder_reset(&b);
		ck_assert_int_eq(dtf_example_builder_add_bytes(&b, "tokens", ids, ST + 1), 0);
		ck_assert_int_eq(dtf_example_builder_finish(&b, &data, &len), 0);
		ck_assert_int_eq(dtf_tfrecord_writer_write(w, data, len), 0);
	}
	dtf_example_builder_deinit(&b);
	ck_assert_int_eq(dtf_tfrecord_writer_close(w), 0);
}

/* The small GPT of test_gpt trained 20 steps: `predict --outputs logits`
 * of its graph (the fused causal_self_attention, the executor training
 * uses) on 3 windows equals the decoder's logits at every position, by a
 * full window and by cached steps, to 1e-5; generate takes the heads
 * from the job. */
START_TEST(trained_gpt_matches_predict_logits)
{
	tu_rng_seed(3);
	write_windows("train-00000-of-00001.tfrecord", 96, 1);
	write_windows("validation-00000-of-00001.tfrecord", 3, 0);
	char fixture[512];
	snprintf(fixture, sizeof(fixture), "%s/tests/fixtures/gpt-small.yaml",
		 tu_source_root());
	int rc = tu_run("cd %s && %s/dtf-train -q --set checkpoint.dir=ckpt %s >train.log 2>&1",
			tmpdir, tu_build_root(), fixture);
	ck_assert_msg(rc == 0, "train: exit %d: %s", rc, tu_slurp(tmpdir, "train.log"));
	rc = tu_run("cd %s && %s/dtf-train predict %s -c ckpt --data 'validation-*.tfrecord' --outputs logits --output p.jsonl 2>predict.log",
		    tmpdir, tu_build_root(), fixture);
	ck_assert_msg(rc == 0, "predict: exit %d: %s", rc, tu_slurp(tmpdir, "predict.log"));
	struct dtf_gpt g;
	struct dtf_gpt_opts o = {.heads = 2, .head = "logits"};
	char ckpt[512];
	rc = dtf_gpt_load(tu_path(ckpt, sizeof(ckpt), tmpdir, "ckpt"), &o, &g);
	ck_assert_msg(rc == 0, "%s", dtf_error_msg());
	ck_assert_int_eq(g.step, 20);
	ck_assert_int_eq(g.n_layer, 2);
	ck_assert_int_eq(g.block_size, ST);
	ck_assert_int_eq(g.tied, 1);
	struct dtf_gpt_cache c;
	ck_assert_int_eq(dtf_gpt_cache_init(&g, &c), 0);
	char *text = tu_read_file(tmpdir, "p.jsonl", NULL), *line = text;
	double worst = 0, spread = 0;
	int right = 0; /* positions whose argmax is the next id */
	int argmax[3][ST];
	for (int r = 0; r < 3; r++) {
		char *nl = strchr(line, '\n');
		ck_assert_ptr_nonnull(nl);
		*nl = 0;
		json_error_t err;
		json_t *j = json_loads(line, 0, &err), *lg = json_object_get(j, "logits");
		ck_assert_msg(json_array_size(lg) == ST * ST, "line %d: %s", r, line);
		ck_assert_int_eq(json_integer_value(json_object_get(j, "record")), r);
		int32_t ids[ST];
		for (int i = 0; i < ST; i++)
			ids[i] = (r + 3 * i) % ST;
		float full[ST * ST], step[ST * ST];
		c.len = 0;
		dtf_gpt_extend(&g, &c, ids, ST, 1, full);
		c.len = 0;
		for (int i = 0; i < ST; i++)
			dtf_gpt_extend(&g, &c, ids + i, 1, 0, step + i * ST);
		for (int i = 0; i < ST * ST; i++) {
			double want = json_number_value(json_array_get(lg, (size_t)i));
			worst = fmax(worst, fabs(full[i] - want));
			worst = fmax(worst, fabs(step[i] - want));
			spread = fmax(spread, fabs(want - json_number_value(json_array_get(lg, 0))));
		}
		for (int i = 0; i < ST; i++) {
			int best = 0;
			for (int v = 1; v < ST; v++)
				if (json_number_value(json_array_get(lg, (size_t)(i * ST + v))) >
				    json_number_value(json_array_get(lg, (size_t)(i * ST + best))))
					best = v;
			right += best == (r + 3 * (i + 1)) % ST;
			argmax[r][i] = best;
		}
		json_decref(j);
		line = nl + 1;
	}
	fprintf(stderr, "trained GPT: decoder vs predict logits: max |difference| %.3g (logits spread %.3g); %d of %d positions right\n",
		worst, spread, right, 3 * ST);
	ck_assert_msg(worst <= 1e-5, "decoder vs predict: %g", worst);
	ck_assert_msg(spread > 0.1, "logits of a trained model too flat: %g", spread);
	free(text);
	dtf_gpt_cache_deinit(&c);
	dtf_gpt_deinit(&g);
	/* predict's classes of a sequence: top-k per position (JSON lists
	 * per position; CSV a line per position) */
	rc = tu_run("cd %s && %s/dtf-train predict %s -c ckpt --data 'validation-*.tfrecord' -k 2 --output c.jsonl 2>predict.log && "
		    "%s/dtf-train predict %s -c ckpt --data 'validation-*.tfrecord' -k 2 --output c.csv 2>>predict.log",
		    tmpdir, tu_build_root(), fixture, tu_build_root(), fixture);
	ck_assert_msg(rc == 0, "predict classes: exit %d: %s", rc, tu_slurp(tmpdir, "predict.log"));
	text = tu_read_file(tmpdir, "c.jsonl", NULL);
	line = text;
	for (int r = 0; r < 3; r++) {
		char *nl = strchr(line, '\n');
		ck_assert_ptr_nonnull(nl);
		*nl = 0;
		json_error_t err;
		json_t *j = json_loads(line, 0, &err);
		json_t *cl = json_object_get(j, "classes"), *pr = json_object_get(j, "probabilities");
		ck_assert_msg(json_array_size(cl) == ST && json_array_size(pr) == ST, "%s", line);
		for (int i = 0; i < ST; i++) {
			json_t *ci = json_array_get(cl, (size_t)i), *q = json_array_get(pr, (size_t)i);
			ck_assert_int_eq(json_array_size(ci), 2);
			ck_assert_int_eq(json_integer_value(json_array_get(ci, 0)), argmax[r][i]);
			ck_assert(json_number_value(json_array_get(q, 0)) >= json_number_value(json_array_get(q, 1)));
		}
		json_decref(j);
		line = nl + 1;
	}
	free(text);
	ck_assert_int_eq(tu_count_lines(tmpdir, "c.csv", "validation-"), 3 * ST);
	ck_assert_msg(strstr(tu_slurp(tmpdir, "c.csv"), "file,record,position,class_1,probability_1,class_2,probability_2\n"),
		      "%s", tu_slurp(tmpdir, "c.csv"));
	/* evaluate counts the positions that are right, not examples */
	rc = tu_run("cd %s && %s/dtf-train evaluate %s -c ckpt --data 'validation-*.tfrecord' --set 'model.metrics=[accuracy]' >ev.txt 2>ev.log",
		    tmpdir, tu_build_root(), fixture);
	ck_assert_msg(rc == 0, "evaluate: exit %d: %s", rc, tu_slurp(tmpdir, "ev.log"));
	char want[128];
	snprintf(want, sizeof(want), "accuracy: %.9g (%d of %d positions correct)\n",
		 right / (3.0 * ST), right, 3 * ST);
	ck_assert_msg(strstr(tu_slurp(tmpdir, "ev.txt"), want), "'%s' not in: %s", want,
		      tu_slurp(tmpdir, "ev.txt"));
	/* the command: the heads and names from the job */
	tu_write_bytes(tmpdir, "vocab.txt", "abcdefghijklmnop", ST);
	rc = tu_run("cd %s && %s/dtf-train generate %s -c ckpt -p abc -n 40 --temperature 0 >gen.txt 2>gen.log",
		    tmpdir, tu_build_root(), fixture);
	ck_assert_msg(rc == 0, "generate: exit %d: %s", rc, tu_slurp(tmpdir, "gen.log"));
	ck_assert_uint_eq(strlen(tu_slurp(tmpdir, "gen.txt")), 3 + 40 + 1);
	/* a job of 3 blocks on
	 * this 2-block checkpoint: another model, said as such (before the heads, which would not divide a width of another job) */
	rc = tu_run("cd %s && sed 's/^    - {transformer_block: {heads: 2, name: h1}}$/&\\n    - {transformer_block: {heads: 2, name: h2}}/' %s >three.yaml && "
		    "grep -q 'name: h2' three.yaml", tmpdir, fixture);
	ck_assert_int_eq(rc, 0);
	rc = tu_run("cd %s && %s/dtf-train generate three.yaml -c ckpt -p abc -n 4 >gen.txt 2>gen.log",
		    tmpdir, tu_build_root());
	ck_assert_msg(rc == 4, "generate with another job: exit %d: %s", rc, tu_slurp(tmpdir, "gen.log"));
	tu_assert_log(tmpdir, "gen.log", "is not of this job's model: the job has 3 transformer blocks, the checkpoint 2 "
		      "(no variable 'h2/ln_1/gamma') of width 16");
}
END_TEST

static void expect_error(const char *args, int status, const char *text)
{
	int rc = gen("x", args);
	const char *err = tu_slurp(tmpdir, "x.err");
	ck_assert_msg(rc == status, "%s: exit %d, expected %d: %s", args, rc,
		      status, err);
	ck_assert_msg(strstr(err, text), "%s: '%s' not in: %s", args, text, err);
}

START_TEST(errors_are_clear)
{
	cli_setup(42);
	expect_error("-p 'abz' -n 3", 2, "character 'z' (offset 2) is not in the vocabulary");
	expect_error("-p 'ab' -n 3 -c /nonexistent/ckpt", 4, "/nonexistent/ckpt");
	expect_error("-p 'ab' -n 3 --heads 3", 2, "3 heads do not divide the embedding width 8");
	expect_error("-p '' -n 3", 2, "the prompt is empty");
	expect_error("-p 'ab' -n 3 --vocab /nonexistent/v.txt", 2, "/nonexistent/v.txt");
	tu_write_bytes(tmpdir, "v10.txt", vocab_text, V - 1);
	expect_error("-p 'ab' -n 3 --vocab v10.txt", 2, "has 10 characters, the model");
	/* a checkpoint without the GPT's variables: wte/embeddings alone */
	write_checkpoint(&cli_model, 1, tmpdir, "nogpt.dtf");
	expect_error("-p 'ab' -n 3 -c nogpt.dtf", 2, "is not a GPT's checkpoint");
	/* a variable of another shape names itself */
	struct model m2;
	make_model(&m2, 1, 31);
	m2.v[2].dims[0] = C + 1; /* h0/ln_1/gamma [9]: data of 9 floats */
	free(m2.v[2].data);
	m2.v[2].data = tu_frandom(C + 1, 0, 1);
	write_checkpoint(&m2, -1, tmpdir, "bad.dtf");
	expect_error("-p 'ab' -n 3 -c bad.dtf", 4, "variable 'h0/ln_1/gamma' is float32 (9)");
	free_model(&m2);
	/* a job whose model does not take token ids */
	tu_write_tiny_job(tmpdir, "cnn.yaml", 0, 0, "train: {batch_size: 2}\n");
	int rc = tu_run("%s/dtf-train generate %s/cnn.yaml -p ab -n 3 --heads 2 -c %s/ckpt 2>%s/x.err",
			tu_build_root(), tmpdir, tmpdir, tmpdir);
	ck_assert_int_eq(rc, 2);
	ck_assert_ptr_nonnull(strstr(tu_slurp(tmpdir, "x.err"), "is not a GPT"));
	free_model(&cli_model);
}
END_TEST

static Suite *generate_suite(void)
{
	Suite *s = suite_create("generate");
	TCase *tc = tcase_create("decoder");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, cached_logits_equal_full_recompute_tied);
	tcase_add_test(tc, cached_logits_equal_full_recompute_untied);
	tcase_add_loop_test(tc, greedy_generation_slides_like_nanogpt, 0, 2);
	tcase_add_test(tc, sampler_frequencies_follow_the_tempered_softmax);
	suite_add_tcase(s, tc);
	TCase *cli = tcase_create("command");
	tcase_add_checked_fixture(cli, setup, teardown);
	tcase_add_test(cli, same_seed_same_text_greedy_is_argmax);
	tcase_add_test(cli, errors_are_clear);
	tcase_add_test(cli, layers_form_job_gives_the_structure);
	tcase_add_test(cli, trained_gpt_matches_predict_logits);
	suite_add_tcase(s, cli);
	return s;
}

int main(void)
{
	return tu_run_suite(generate_suite(), 1);
}
