/*
 * generate.h - sampling text from a trained character-level GPT
 * (`dtf-train generate`, dtf-train(1)): an incremental decoder with a
 * key/value cache, the sampler, and the vocabulary file.
 *
 * The model is nanoGPT's (Karpathy, nanoGPT model.py and sample.py), a
 * pre-norm GPT-2 stack; its variables are read from a checkpoint by name
 * (train/checkpoint.h), as the job's graph names them:
 *
 *   wte/embeddings [V, C]   wpe/embeddings [T, C]   (T = block_size)
 *   h{i}/ln_1/gamma, beta [C]
 *   h{i}/attn/qkv/kernel [C, 3C], bias [3C]  (columns q | k | v; head j
 *                                             of each: j*D .. j*D+D-1)
 *   h{i}/attn/proj/kernel [C, C], bias [C]
 *   h{i}/ln_2/gamma, beta [C]
 *   h{i}/mlp/fc/kernel [C, F], bias [F]   (F: the MLP width, 4C in GPT-2)
 *   h{i}/mlp/proj/kernel [F, C], bias [C]
 *   ln_f/gamma, beta [C]
 *   HEAD/kernel [C, V]      (absent: the head is tied to wte)
 *   HEAD/bias [V]           (optional)
 *
 * for i = 0 .. n_layer-1, with D = C / heads; HEAD is the name of the
 * output layer (the job's logits layer, nanoGPT's lm_head).  Per
 * position t of a window
 * of ids x (t < T):
 *   h = wte[x_t] + wpe[t]
 *   per block: a = layer_norm(h); q|k|v = a W_qkv + b_qkv;
 *              h += attention(q, k, v) W_proj + b_proj   (causal: keys
 *              0..t, scale 1/sqrt(D), softmax per head);
 *              h += gelu_tanh(layer_norm(h) W_fc + b_fc) W_mp + b_mp
 *   logits_t = layer_norm(h) wte^T  (tied)  or  layer_norm(h) W_head,
 *              + b_head when there is one
 * layer_norm with the job's epsilon (nanoGPT's 1e-5), the CPU kernels of the graph
 * (ops/cpu/kernels.h: dtf_cpu_layer_norm, dtf_cpu_softmax; gelu
 * approximate by the fast kernel, ops/cpu/fast.h dtf_fast_gelu, within
 * about 1e-6 of dtf_cpu_gelu); products by OpenBLAS sgemm / sgemv.
 *
 * The cache holds, per block, the keys and values of every position fed
 * so far ([T, C] each), so one more position costs one row of each
 * product and one row of attention over the positions before it.
 * Everything is float32 on the CPU, on the calling thread; the caller
 * sets OpenBLAS to one thread (dtf-train generate does: its products have
 * at most block_size rows, too few for its threads to pay).
 */
#ifndef DTF_TRAIN_GENERATE_H
#define DTF_TRAIN_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "config/job.h"

/* Bytes of a checkpoint path kept in struct dtf_gpt. */
#define DTF_GPT_PATH_MAX 4352

struct dtf_gpt_block {
	const float *ln_1_gamma, *ln_1_beta;   /* [C] */
	const float *qkv_kernel, *qkv_bias;    /* [C, 3C], [3C] */
	const float *proj_kernel, *proj_bias;  /* [C, C], [C] */
	const float *ln_2_gamma, *ln_2_beta;   /* [C] */
	const float *fc_kernel, *fc_bias;      /* [C, F], [F] */
	const float *mlp_proj_kernel, *mlp_proj_bias; /* [F, C], [C] */
	int hidden;                            /* F */
};

/* What the variables do not say (dtf_gpt_load): the heads, the layers'
 * names (the prefixes of their variables) and the epsilons. */
struct dtf_gpt_opts {
	int heads;            /* > 0, divides C */
	const char *wte, *wpe; /* NULL: "wte", "wpe" */
	/* the blocks in order; nblocks 0: "h0", "h1", ... as long as the
	 * checkpoint has h{i}/ln_1/gamma */
	const char *const *blocks;
	int nblocks;
	const char *ln_f;     /* NULL: "ln_f" */
	const char *head;     /* the output layer's name; NULL: "lm_head" */
	float epsilon;        /* the blocks' layer_norm; 0: 1e-5 */
	float epsilon_final;  /* ln_f's; 0: 1e-5 */
};

/* A GPT's structure and variables (owned: dtf_gpt_deinit). */
struct dtf_gpt {
	int n_layer, n_head, n_embd; /* blocks, heads, C */
	int vocab_size, block_size;  /* V, T */
	int tied;                    /* 1: logits = h wte^T */
	float epsilon, epsilon_final; /* the blocks' layer_norm, ln_f's */
	int max_hidden;              /* the widest block's F */
	const float *wte, *wpe;      /* [V, C], [T, C] */
	const float *ln_f_gamma, *ln_f_beta; /* [C] */
	const float *lm_head;        /* [C, V]; NULL when tied */
	const float *lm_head_bias;   /* [V]; NULL: none */
	struct dtf_gpt_block *blocks; /* n_layer */
	float *params;               /* every variable above, one buffer */
	char checkpoint[DTF_GPT_PATH_MAX]; /* the file read */
	int64_t step;                /* its global step */
};

/*
 * Read the GPT from a checkpoint: `path` is a checkpoint file, or a
 * directory whose index names the newest (tf.train.latest_checkpoint, as
 * `dtf-train export` reads one).  n_layer, C, F, V and T come from the
 * variables' shapes (the blocks o names, or h0, h1, ... until
 * h{n}/ln_1/gamma is missing), tying from whether HEAD/kernel is there;
 * o->heads must divide C.  The names above are the defaults of o's.  Every
 * variable must be float32 of the shape above.
 * Errors: DTF_ERR_CHECKPOINT (path missing, no index, the file does not
 * verify, a variable of the wrong shape, naming the file and variable),
 * DTF_ERR_CONFIG (no wte/embeddings or h0: not a GPT's checkpoint; heads
 * do not divide C), DTF_ERR_NOMEM.
 */
int dtf_gpt_load(const char *path, const struct dtf_gpt_opts *o,
		 struct dtf_gpt *g);
void dtf_gpt_deinit(struct dtf_gpt *g);

/* The key/value cache and the workspace of one sequence. */
struct dtf_gpt_cache {
	int len;        /* positions held, 0 .. block_size */
	float *k, *v;   /* [n_layer][block_size][C] */
	float *ws;      /* rows of h, a, qkv, y, mlp: block_size *
			   (6C + max_hidden), then block_size scores */
};

/* Allocate for g's sizes (len 0).  Errors: DTF_ERR_NOMEM. */
int dtf_gpt_cache_init(const struct dtf_gpt *g, struct dtf_gpt_cache *c);
void dtf_gpt_cache_deinit(struct dtf_gpt_cache *c);

/*
 * Feed ids[0..n) (each in [0, V)) at positions c->len .. c->len+n-1 (the
 * caller keeps c->len + n <= block_size), storing their keys and values
 * in the cache (c->len grows by n).  logits: [n, V] when all_rows, else
 * [V] for the last of them; NULL: none computed.  With c->len = 0 this is
 * the full forward of a window (batched products); with n = 1 one step
 * of the incremental decoder.  Never fails.
 */
void dtf_gpt_extend(const struct dtf_gpt *g, struct dtf_gpt_cache *c,
		    const int32_t *ids, int n, int all_rows, float *logits);

/* The vocabulary: id i is byte bytes[i] (datasets/prepare.sh, dtf-records
 * convert-text). */
struct dtf_vocab {
	int size;          /* 1 .. 256 */
	uint8_t bytes[256];
	int16_t id_of[256]; /* -1: not in the vocabulary */
};

/*
 * Read a vocabulary file: its bytes in id order, nothing else (so the
 * file's size is V; no byte twice).  Errors: DTF_ERR_USAGE (cannot be
 * read, empty, a byte twice: naming the file).
 */
int dtf_vocab_read(const char *path, struct dtf_vocab *v);

/*
 * The ids of text[0..len) into ids (len of them).  Errors: DTF_ERR_USAGE
 * naming the first character not in the vocabulary and its offset.
 */
int dtf_vocab_encode(const struct dtf_vocab *v, const char *text, size_t len,
		     int32_t *ids);

struct dtf_sample_opts {
	float temperature; /* > 0: softmax(logits / temperature); 0: argmax */
	int top_k;         /* > 0: only the k largest logits (and ties with
			      the k-th, as nanoGPT) may be drawn; 0: all */
	uint64_t seed;
};

/*
 * Draw the next id from logits [V] (scratch: V floats): the argmax (the
 * lowest id among ties) when temperature is 0 or top_k is 1, else one
 * inverse-CDF draw from the tempered, top-k restricted softmax with the
 * uniform of Philox-4x32-10 (core/rng.h) keyed by (seed, DTF_RNG_SAMPLE)
 * at counter `index`: the same seed and index give the same id.
 */
int dtf_gpt_sample(const float *logits, int vocab, const struct dtf_sample_opts *o,
		   uint64_t index, float *scratch);

/*
 * Sample `ntokens` ids after the prompt ids[0..nprompt) (nprompt >= 1;
 * only its last block_size ids are the context) into out[0..ntokens),
 * calling emit(id, arg) after each (may be NULL).  Draw i uses counter i.
 * While the context is shorter than block_size each new id costs one
 * cached step; once it is full, the oldest id is dropped and the cache is
 * recomputed over the window (nanoGPT's generate crops the same way).
 * Errors: DTF_ERR_NOMEM.
 */
int dtf_gpt_generate(const struct dtf_gpt *g, const int32_t *prompt,
		     int nprompt, int ntokens, const struct dtf_sample_opts *o,
		     int32_t *out, void (*emit)(int32_t id, void *arg),
		     void *arg);

#endif
