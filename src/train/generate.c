/*
 * generate.c - the GPT's incremental decoder, its sampler and the
 * vocabulary (generate.h).
 */
#include "train/generate.h"

#include <cblas.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/rng.h"
#include "ops/cpu/fast.h"
#include "ops/cpu/kernels.h"
#include "train/checkpoint.h"

/* ---- loading ------------------------------------------------------------ */

/* The layers' names: o's, else the spec's. */
struct names {
	const char *wte, *wpe, *ln_f, *head;
	const struct dtf_gpt_opts *o;
};

static void block_name(const struct names *nm, int i, char *buf, size_t size)
{
	if (nm->o->nblocks)
		snprintf(buf, size, "%s", nm->o->blocks[i]);
	else
		snprintf(buf, size, "h%d", i);
}

/* One variable to load: its name and shape (dims < 0: any, taken from the
 * file and stored through *dims_out). */
struct want {
	char name[DTF_CKPT_NAME_MAX + 1];
	int rank;
	int64_t dims[2];
	const float **dst;
};

static int shape_mismatch(const char *file, const struct dtf_ckpt_tensor *t,
			  const struct want *w)
{
	char have[160] = "", need[64];
	size_t o = 0;
	for (int d = 0; d < t->rank && o < sizeof(have) - 1; d++)
		o += (size_t)snprintf(have + o, sizeof(have) - o, "%s%lld",
				      d ? ", " : "", (long long)t->dims[d]);
	if (w->rank == 1)
		snprintf(need, sizeof(need), "%lld", (long long)w->dims[0]);
	else
		snprintf(need, sizeof(need), "%lld, %lld", (long long)w->dims[0],
			 (long long)w->dims[1]);
	return dtf_error(DTF_ERR_CHECKPOINT,
			 "%s: variable '%s' is %s (%s), the GPT needs float32 (%s)",
			 file, t->name,
			 t->dtype == DTF_CKPT_F32 ? "float32" : "not float32",
			 have, need);
}

static const struct dtf_ckpt_tensor *
find_f32(const struct dtf_ckpt_file *f, const char *name, int rank)
{
	const struct dtf_ckpt_tensor *t = dtf_ckpt_file_find(f, name);
	return t && t->dtype == DTF_CKPT_F32 && t->rank == rank ? t : NULL;
}

static void add_want(struct want *w, int *n, const char *name, int rank,
		     int64_t d0, int64_t d1, const float **dst)
{
	struct want *x = &w[(*n)++];
	snprintf(x->name, sizeof(x->name), "%s", name);
	x->rank = rank;
	x->dims[0] = d0;
	x->dims[1] = d1;
	x->dst = dst;
}

/* The list of variables of g's structure (sizes already known); the
 * head's bias when the file has one. */
static int list_vars(struct dtf_gpt *g, const struct dtf_ckpt_file *f,
		     const struct names *names, struct want *w)
{
	int n = 0;
	int64_t C = g->n_embd, V = g->vocab_size, T = g->block_size;
	char nm[DTF_CKPT_NAME_MAX + 1], bn[DTF_CKPT_NAME_MAX + 1];
	snprintf(nm, sizeof(nm), "%s/embeddings", names->wte);
	add_want(w, &n, nm, 2, V, C, &g->wte);
	snprintf(nm, sizeof(nm), "%s/embeddings", names->wpe);
	add_want(w, &n, nm, 2, T, C, &g->wpe);
	for (int i = 0; i < g->n_layer; i++) {
		struct dtf_gpt_block *b = &g->blocks[i];
		block_name(names, i, bn, 128);
#define BLOCK_VAR(suffix, rank, d0, d1, field)                           \
	do {                                                              \
		snprintf(nm, sizeof(nm), "%.127s/%s", bn, suffix);        \
		add_want(w, &n, nm, rank, d0, d1, &b->field);              \
	} while (0)
		BLOCK_VAR("ln_1/gamma", 1, C, 0, ln_1_gamma);
		BLOCK_VAR("ln_1/beta", 1, C, 0, ln_1_beta);
		BLOCK_VAR("attn/qkv/kernel", 2, C, 3 * C, qkv_kernel);
		BLOCK_VAR("attn/qkv/bias", 1, 3 * C, 0, qkv_bias);
		BLOCK_VAR("attn/proj/kernel", 2, C, C, proj_kernel);
		BLOCK_VAR("attn/proj/bias", 1, C, 0, proj_bias);
		BLOCK_VAR("ln_2/gamma", 1, C, 0, ln_2_gamma);
		BLOCK_VAR("ln_2/beta", 1, C, 0, ln_2_beta);
		BLOCK_VAR("mlp/fc/kernel", 2, C, b->hidden, fc_kernel);
		BLOCK_VAR("mlp/fc/bias", 1, b->hidden, 0, fc_bias);
		BLOCK_VAR("mlp/proj/kernel", 2, b->hidden, C, mlp_proj_kernel);
		BLOCK_VAR("mlp/proj/bias", 1, C, 0, mlp_proj_bias);
#undef BLOCK_VAR
	}
	snprintf(nm, sizeof(nm), "%s/gamma", names->ln_f);
	add_want(w, &n, nm, 1, C, 0, &g->ln_f_gamma);
	snprintf(nm, sizeof(nm), "%s/beta", names->ln_f);
	add_want(w, &n, nm, 1, C, 0, &g->ln_f_beta);
	snprintf(nm, sizeof(nm), "%s/kernel", names->head);
	if (!g->tied)
		add_want(w, &n, nm, 2, C, V, &g->lm_head);
	snprintf(nm, sizeof(nm), "%s/bias", names->head);
	if (dtf_ckpt_file_find(f, nm))
		add_want(w, &n, nm, 1, V, 0, &g->lm_head_bias);
	return n;
}

/* Sizes and structure from the variables' names and shapes. */
static int detect(const char *file, const struct dtf_ckpt_file *f,
		  const struct names *names, struct dtf_gpt *g)
{
	int heads = names->o->heads;
	char nm[DTF_CKPT_NAME_MAX + 1], wten[DTF_CKPT_NAME_MAX + 1],
		wpen[DTF_CKPT_NAME_MAX + 1], bn[DTF_CKPT_NAME_MAX + 1];
	snprintf(wten, sizeof(wten), "%s/embeddings", names->wte);
	snprintf(wpen, sizeof(wpen), "%s/embeddings", names->wpe);
	block_name(names, 0, bn, 128);
	snprintf(nm, sizeof(nm), "%.127s/ln_1/gamma", bn);
	const struct dtf_ckpt_tensor *wte = find_f32(f, wten, 2);
	const struct dtf_ckpt_tensor *wpe = find_f32(f, wpen, 2);
	if (!wte || !wpe || !dtf_ckpt_file_find(f, nm))
		return dtf_error(DTF_ERR_CONFIG,
				 "%s is not a GPT's checkpoint: it has no float32 variable '%s' (dtf-train(1), GENERATING TEXT)",
				 file, !wte ? wten : !wpe ? wpen : nm);
	g->vocab_size = (int)wte->dims[0];
	g->n_embd = (int)wte->dims[1];
	g->block_size = (int)wpe->dims[0];
	if (g->vocab_size < 1 || g->vocab_size > 256 || g->n_embd < 1 ||
	    g->block_size < 1 || wpe->dims[1] != g->n_embd)
		return dtf_error(DTF_ERR_CHECKPOINT,
				 "%s: %s (%lld, %lld) and %s (%lld, %lld) are not a character GPT's (a vocabulary of 1 to 256, the same width)",
				 file, wten, (long long)wte->dims[0],
				 (long long)wte->dims[1], wpen,
				 (long long)wpe->dims[0], (long long)wpe->dims[1]);
	/* the job's blocks against the checkpoint's, before what depends on
	 * them (the heads): another model is named as such */
	if (names->o->nblocks) {
		block_name(names, names->o->nblocks - 1, bn, 128);
		snprintf(nm, sizeof(nm), "%.127s/ln_1/gamma", bn);
		if (!dtf_ckpt_file_find(f, nm)) {
			int have = 0; /* of the job's block names */
			for (; have < names->o->nblocks; have++) {
				char hn[DTF_CKPT_NAME_MAX + 1];
				block_name(names, have, bn, 128);
				snprintf(hn, sizeof(hn), "%.127s/ln_1/gamma", bn);
				if (!dtf_ckpt_file_find(f, hn))
					break;
			}
			return dtf_error(DTF_ERR_CHECKPOINT,
					 "%s is not of this job's model: the job has %d transformer blocks, the checkpoint %d (no variable '%s') of width %d\n"
					 "HINT: generate with the job that trained it",
					 file, names->o->nblocks, have, nm,
					 g->n_embd);
		}
	}
	if (heads < 1 || g->n_embd % heads)
		return dtf_error(DTF_ERR_CONFIG,
				 "%d heads do not divide the embedding width %d of %s",
				 heads, g->n_embd, file);
	g->n_head = heads;
	if (names->o->nblocks) {
		g->n_layer = names->o->nblocks;
	} else {
		for (g->n_layer = 0;; g->n_layer++) {
			snprintf(nm, sizeof(nm), "h%d/ln_1/gamma", g->n_layer);
			if (!dtf_ckpt_file_find(f, nm))
				break;
		}
	}
	snprintf(nm, sizeof(nm), "%s/kernel", names->head);
	g->tied = dtf_ckpt_file_find(f, nm) == NULL;
	g->epsilon = names->o->epsilon > 0 ? names->o->epsilon : 1e-5f;
	g->epsilon_final = names->o->epsilon_final > 0 ? names->o->epsilon_final
						       : 1e-5f;
	return 0;
}

/* Each block's MLP width from its fc kernel (4C when it is missing or
 * malformed: the load then names the variable). */
static void detect_hidden(const struct dtf_ckpt_file *f,
			  const struct names *names, struct dtf_gpt *g)
{
	g->max_hidden = 0;
	for (int i = 0; i < g->n_layer; i++) {
		char nm[DTF_CKPT_NAME_MAX + 1], bn[DTF_CKPT_NAME_MAX + 1];
		block_name(names, i, bn, 128);
		snprintf(nm, sizeof(nm), "%.127s/mlp/fc/kernel", bn);
		const struct dtf_ckpt_tensor *t = find_f32(f, nm, 2);
		int64_t F = t ? t->dims[1] : 4 * (int64_t)g->n_embd;
		if (F < 1 || F > (1 << 24))
			F = 4 * (int64_t)g->n_embd;
		g->blocks[i].hidden = (int)F;
		if (F > g->max_hidden)
			g->max_hidden = (int)F;
	}
}

int dtf_gpt_load(const char *path, const struct dtf_gpt_opts *o,
		 struct dtf_gpt *g)
{
	memset(g, 0, sizeof(*g));
	const struct names names = {
		.wte = o->wte && o->wte[0] ? o->wte : "wte",
		.wpe = o->wpe && o->wpe[0] ? o->wpe : "wpe",
		.ln_f = o->ln_f && o->ln_f[0] ? o->ln_f : "ln_f",
		.head = o->head && o->head[0] ? o->head : "lm_head",
		.o = o,
	};
	const char *file = g->checkpoint;
	struct dtf_ckpt_file f;
	int rc = dtf_ckpt_file_read_newest(path, &f, g->checkpoint,
					   sizeof(g->checkpoint));
	if (rc < 0)
		return rc;
	g->step = f.pos.step;
	struct want *w = NULL;
	if ((rc = detect(file, &f, &names, g)) < 0)
		goto out;
	g->blocks = dtf_calloc((size_t)g->n_layer, sizeof(*g->blocks));
	w = dtf_calloc((size_t)g->n_layer * 12 + 6, sizeof(*w));
	if (!g->blocks || !w) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out;
	}
	detect_hidden(&f, &names, g);
	int nw = list_vars(g, &f, &names, w);
	size_t total = 0;
	for (int i = 0; i < nw; i++)
		total += (size_t)w[i].dims[0] * (size_t)(w[i].rank == 2 ? w[i].dims[1] : 1);
	if (!(g->params = dtf_malloc(total * sizeof(float)))) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory for %zu variables",
			       total);
		goto out;
	}
	size_t at = 0;
	for (int i = 0; i < nw && rc == 0; i++) {
		const struct dtf_ckpt_tensor *t = dtf_ckpt_file_find(&f, w[i].name);
		size_t numel = (size_t)w[i].dims[0] *
			       (size_t)(w[i].rank == 2 ? w[i].dims[1] : 1);
		int same = t && t->dtype == DTF_CKPT_F32 && t->rank == w[i].rank;
		for (int d = 0; same && d < t->rank; d++)
			same = t->dims[d] == w[i].dims[d];
		if (!t)
			rc = dtf_error(DTF_ERR_CHECKPOINT,
				       "%s has no variable '%s' (the GPT of %d blocks needs it)",
				       file, w[i].name, g->n_layer);
		else if (!same)
			rc = shape_mismatch(file, t, &w[i]);
		if (rc == 0) {
			memcpy(g->params + at, f.data + t->offset, numel * sizeof(float));
			*w[i].dst = g->params + at;
			at += numel;
		}
	}
out:
	dtf_free(w);
	dtf_ckpt_file_deinit(&f);
	if (rc < 0)
		dtf_gpt_deinit(g);
	return rc;
}

void dtf_gpt_deinit(struct dtf_gpt *g)
{
	if (!g)
		return;
	dtf_free(g->blocks);
	dtf_free(g->params);
	g->blocks = NULL;
	g->params = NULL;
}

/* ---- the decoder --------------------------------------------------------- */

int dtf_gpt_cache_init(const struct dtf_gpt *g, struct dtf_gpt_cache *c)
{
	memset(c, 0, sizeof(*c));
	size_t kv = (size_t)g->n_layer * g->block_size * g->n_embd;
	size_t ws = (size_t)g->block_size *
		    (6 * (size_t)g->n_embd + (size_t)g->max_hidden + 1);
	c->k = dtf_malloc((kv ? kv : 1) * sizeof(float));
	c->v = dtf_malloc((kv ? kv : 1) * sizeof(float));
	c->ws = dtf_malloc(ws * sizeof(float));
	if (!c->k || !c->v || !c->ws) {
		dtf_gpt_cache_deinit(c);
		return dtf_error(DTF_ERR_NOMEM,
				 "out of memory for the key/value cache");
	}
	return 0;
}

void dtf_gpt_cache_deinit(struct dtf_gpt_cache *c)
{
	dtf_free(c->k);
	dtf_free(c->v);
	dtf_free(c->ws);
	memset(c, 0, sizeof(*c));
}

/* y (n, cols) = x (n, rows) w (rows, cols) + b (cols). */
static void affine(int n, int rows, int cols, const float *x, const float *w,
		   const float *b, float *y)
{
	dtf_cpu_matmul(n, cols, rows, x, 0, w, 0, y);
	dtf_cpu_bias_add((size_t)n, cols, y, b, y);
}

/*
 * Causal attention of n query rows at positions p0 .. p0+n-1 (q: rows of
 * qkv, stride 3C) over the cached keys and values of positions 0 .. p for
 * each: y (n, C), per head j: softmax(q_j K_j^T / sqrt(D)) V_j.
 */
static void attention(const struct dtf_gpt *g, const float *qkv,
		      const float *kc, const float *vc, int p0, int n,
		      float *scores, float *y)
{
	int C = g->n_embd, H = g->n_head, D = C / H;
	float scale = 1.0f / sqrtf((float)D);
	for (int r = 0; r < n; r++) {
		int keys = p0 + r + 1;
		const float *q = qkv + (size_t)r * 3 * C;
		for (int j = 0; j < H; j++) { /* head j: columns j*D .. */
			cblas_sgemv(CblasRowMajor, CblasNoTrans, keys, D, scale,
				    kc + (size_t)j * D, C, q + (size_t)j * D, 1,
				    0.0f, scores, 1);
			dtf_cpu_softmax(1, keys, scores, scores);
			cblas_sgemv(CblasRowMajor, CblasTrans, keys, D, 1.0f,
				    vc + (size_t)j * D, C, scores, 1, 0.0f,
				    y + (size_t)r * C + (size_t)j * D, 1);
		}
	}
}

/* One block over n rows of h (positions p0 ..), in place. */
static void block_forward(const struct dtf_gpt *g, const struct dtf_gpt_block *b,
			  float *kc, float *vc, int p0, int n, float *h,
			  float *ws)
{
	int C = g->n_embd;
	size_t T = (size_t)g->block_size;
	int F = b->hidden;
	float *a = ws, *qkv = a + T * C, *y = qkv + T * 3 * C, *m = y + T * C;
	float *scores = m + T * (size_t)g->max_hidden;
	dtf_cpu_layer_norm((size_t)n, C, h, b->ln_1_gamma, b->ln_1_beta,
			   g->epsilon, a);
	affine(n, C, 3 * C, a, b->qkv_kernel, b->qkv_bias, qkv);
	for (int r = 0; r < n; r++) {
		memcpy(kc + (size_t)(p0 + r) * C, qkv + (size_t)r * 3 * C + C,
		       (size_t)C * sizeof(float));
		memcpy(vc + (size_t)(p0 + r) * C, qkv + (size_t)r * 3 * C + 2 * C,
		       (size_t)C * sizeof(float));
	}
	attention(g, qkv, kc, vc, p0, n, scores, y);
	/* h += y W_proj + b_proj (a is free again) */
	affine(n, C, C, y, b->proj_kernel, b->proj_bias, a);
	for (size_t i = 0; i < (size_t)n * C; i++)
		h[i] += a[i];
	dtf_cpu_layer_norm((size_t)n, C, h, b->ln_2_gamma, b->ln_2_beta,
			   g->epsilon, a);
	affine(n, C, F, a, b->fc_kernel, b->fc_bias, m);
	/* the vector-lane tanh form (libm's double tanh was a quarter of
	 * the decoder's time), on this thread */
	dtf_fast_gelu(NULL, (size_t)n * F, 1, m, m);
	affine(n, F, C, m, b->mlp_proj_kernel, b->mlp_proj_bias, a);
	for (size_t i = 0; i < (size_t)n * C; i++)
		h[i] += a[i];
}

void dtf_gpt_extend(const struct dtf_gpt *g, struct dtf_gpt_cache *c,
		    const int32_t *ids, int n, int all_rows, float *logits)
{
	int C = g->n_embd, V = g->vocab_size, p0 = c->len;
	size_t T = (size_t)g->block_size;
	float *h = c->ws, *ws = h + T * C;
	if (n < 1)
		return;
	dtf_cpu_embedding((size_t)n, V, C, ids, g->wte, h);
	for (int r = 0; r < n; r++)
		for (int i = 0; i < C; i++)
			h[(size_t)r * C + i] += g->wpe[(size_t)(p0 + r) * C + i];
	for (int l = 0; l < g->n_layer; l++)
		block_forward(g, &g->blocks[l], c->k + (size_t)l * T * C,
			      c->v + (size_t)l * T * C, p0, n, h, ws);
	c->len += n;
	if (!logits)
		return;
	int rows = all_rows ? n : 1;
	const float *top = all_rows ? h : h + (size_t)(n - 1) * C;
	dtf_cpu_layer_norm((size_t)rows, C, top, g->ln_f_gamma, g->ln_f_beta,
			   g->epsilon_final, ws);
	if (g->tied)
		dtf_cpu_matmul(rows, V, C, ws, 0, g->wte, 1, logits);
	else
		dtf_cpu_matmul(rows, V, C, ws, 0, g->lm_head, 0, logits);
	if (g->lm_head_bias)
		dtf_cpu_bias_add((size_t)rows, V, logits, g->lm_head_bias, logits);
}

/* ---- sampling ------------------------------------------------------------ */

static int argmax(const float *x, int n)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

/* The k-th largest of x[0..n) (1 <= k <= n); scratch: n floats. */
static float kth_largest(const float *x, int n, int k, float *scratch)
{
	memcpy(scratch, x, (size_t)n * sizeof(float));
	/* partial selection: k passes of the largest left (k <= V <= 256) */
	for (int i = 0; i < k; i++) {
		int best = i;
		for (int j = i + 1; j < n; j++)
			if (scratch[j] > scratch[best])
				best = j;
		float t = scratch[i];
		scratch[i] = scratch[best];
		scratch[best] = t;
	}
	return scratch[k - 1];
}

int dtf_gpt_sample(const float *logits, int vocab, const struct dtf_sample_opts *o,
		   uint64_t index, float *scratch)
{
	if (o->temperature <= 0.0f || o->top_k == 1)
		return argmax(logits, vocab);
	float floor_v = -INFINITY;
	if (o->top_k > 0 && o->top_k < vocab)
		floor_v = kth_largest(logits, vocab, o->top_k, scratch);
	float mx = logits[argmax(logits, vocab)];
	double total = 0;
	for (int i = 0; i < vocab; i++) {
		double p = logits[i] < floor_v
				   ? 0.0
				   : exp(((double)logits[i] - mx) / o->temperature);
		scratch[i] = (float)p;
		total += p;
	}
	struct dtf_philox_key key = dtf_philox_make_key(o->seed, DTF_RNG_SAMPLE);
	uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), 0, 0}, w[4];
	dtf_philox4x32(key, ctr, w);
	double u = (double)dtf_rng_u01(w[0]) * total, cum = 0;
	int last = 0;
	for (int i = 0; i < vocab; i++) {
		if (scratch[i] <= 0.0f)
			continue;
		last = i;
		cum += scratch[i];
		if (u < cum)
			return i;
	}
	return last; /* u at the very top of the rounding */
}

int dtf_gpt_generate(const struct dtf_gpt *g, const int32_t *prompt,
		     int nprompt, int ntokens, const struct dtf_sample_opts *o,
		     int32_t *out, void (*emit)(int32_t id, void *arg),
		     void *arg)
{
	int T = g->block_size, V = g->vocab_size;
	struct dtf_gpt_cache c;
	int rc = dtf_gpt_cache_init(g, &c);
	if (rc < 0)
		return rc;
	int32_t *ctx = dtf_malloc((size_t)T * sizeof(int32_t));
	float *logits = dtf_malloc((size_t)V * 2 * sizeof(float));
	if (!ctx || !logits) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out;
	}
	int len = nprompt < T ? nprompt : T;
	memcpy(ctx, prompt + (nprompt - len), (size_t)len * sizeof(int32_t));
	dtf_gpt_extend(g, &c, ctx, len, 0, logits);
	for (int i = 0; i < ntokens; i++) {
		int32_t id = dtf_gpt_sample(logits, V, o, (uint64_t)i, logits + V);
		out[i] = id;
		if (emit)
			emit(id, arg);
		if (i == ntokens - 1)
			break;
		if (len < T) {
			ctx[len++] = id;
			dtf_gpt_extend(g, &c, &id, 1, 0, logits);
		} else { /* slide: drop the oldest, recompute the window */
			memmove(ctx, ctx + 1, (size_t)(T - 1) * sizeof(int32_t));
			ctx[T - 1] = id;
			c.len = 0;
			dtf_gpt_extend(g, &c, ctx, T, 0, logits);
		}
	}
out:
	dtf_free(ctx);
	dtf_free(logits);
	dtf_gpt_cache_deinit(&c);
	return rc;
}

/* ---- vocabulary ----------------------------------------------------------- */

int dtf_vocab_read(const char *path, struct dtf_vocab *v)
{
	memset(v, 0, sizeof(*v));
	for (int i = 0; i < 256; i++)
		v->id_of[i] = -1;
	FILE *f = fopen(path, "rb");
	if (!f)
		return dtf_error(DTF_ERR_USAGE, "vocabulary %s: cannot open: %s",
				 path, strerror(errno));
	uint8_t buf[257];
	size_t n = fread(buf, 1, sizeof(buf), f);
	int err = ferror(f);
	fclose(f);
	if (err)
		return dtf_error(DTF_ERR_USAGE, "vocabulary %s: read failed",
				 path);
	if (n == 0 || n > 256)
		return dtf_error(DTF_ERR_USAGE,
				 "vocabulary %s: %s (expected its 1 to 256 distinct bytes in id order)",
				 path, n ? "more than 256 bytes" : "empty");
	for (size_t i = 0; i < n; i++) {
		if (v->id_of[buf[i]] >= 0)
			return dtf_error(DTF_ERR_USAGE,
					 "vocabulary %s: byte 0x%02x at offsets %d and %zu (each byte once, in id order)",
					 path, buf[i], v->id_of[buf[i]], i);
		v->id_of[buf[i]] = (int16_t)i;
		v->bytes[i] = buf[i];
	}
	v->size = (int)n;
	return 0;
}

int dtf_vocab_encode(const struct dtf_vocab *v, const char *text, size_t len,
		     int32_t *ids)
{
	for (size_t i = 0; i < len; i++) {
		uint8_t b = (uint8_t)text[i];
		if (v->id_of[b] < 0) {
			char shown[16];
			if (b >= 0x20 && b < 0x7f)
				snprintf(shown, sizeof(shown), "'%c'", b);
			else
				snprintf(shown, sizeof(shown), "byte 0x%02x", b);
			return dtf_error(DTF_ERR_USAGE,
					 "the prompt's character %s (offset %zu) is not in the vocabulary",
					 shown, i);
		}
		ids[i] = v->id_of[b];
	}
	return 0;
}
