/*
 * main_generate.c - `dtf-train generate`: argv -> the job, the checkpoint
 * and the vocabulary -> text sampled from the GPT (train/generate.h) on
 * stdout (main.h).  One process, no MPI.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "main.h"
#include "train/generate.h"
#include "train/threads.h"

static const char generate_usage[] =
	"Usage: dtf-train generate JOB.yaml [--checkpoint PATH] [--prompt TEXT]\n"
	"                          [--tokens N] [OPTION]...\n"
	"Sample text from the job's character-level GPT with a checkpoint of it:\n"
	"the prompt, then N characters drawn one at a time (a key/value cache:\n"
	"each costs one row of attention), on stdout.  One process, no mpirun.\n"
	"\n"
	"Options:\n"
	"  -c, --checkpoint PATH    a checkpoint file, or a directory: the newest its\n"
	"                           index names (default: checkpoint.dir)\n"
	"  -p, --prompt TEXT        the text to continue (default: a newline); only\n"
	"                           its last block_size characters are the context\n"
	"  -n, --tokens N           characters to generate (default 256)\n"
	"      --temperature T      divide the logits by T before the softmax\n"
	"                           (default 1.0; 0: always the most likely)\n"
	"  -k, --top-k K            draw among the K most likely only (default: all)\n"
	"      --seed S             seed of the draws (default: the job's seed); the\n"
	"                           same seed gives the same text\n"
	"      --vocab FILE         the vocabulary: its bytes in id order (default:\n"
	"                           vocab.txt in the directory of data.train)\n"
	"      --heads H            attention heads (default: the job's\n"
	"                           transformer_block heads)\n"
	"  -s, --set KEY=VALUE      override a job key; repeatable\n"
	"  -q, --quiet              only warnings and errors on stderr\n"
	"  -v, --verbose            also debug messages\n"
	"  -h, --help               show this help and exit\n"
	"\n"
	"Exit status: 0 done, 1 runtime failure, 2 usage or job-file error,\n"
	"4 checkpoint error.  See dtf-train(1).\n";

enum { OPT_TEMPERATURE = 256, OPT_SEED, OPT_VOCAB, OPT_HEADS };

struct gen_args {
	const char *job_path, *checkpoint, *prompt, *vocab;
	long tokens;
	int top_k, heads, seed_given;
	float temperature;
	uint64_t seed;
};

static int bad_number(const char *opt, const char *what, const char *arg)
{
	fprintf(stderr, "dtf-train generate: %s: expected %s, got '%s'\n", opt,
		what, arg);
	return 2;
}

/* argv into *a and sets[]; -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct gen_args *a,
		      const char **sets, int *nsets)
{
	static const struct option longopts[] = {
		{"checkpoint", required_argument, NULL, 'c'},
		{"prompt", required_argument, NULL, 'p'},
		{"tokens", required_argument, NULL, 'n'},
		{"temperature", required_argument, NULL, OPT_TEMPERATURE},
		{"top-k", required_argument, NULL, 'k'},
		{"seed", required_argument, NULL, OPT_SEED},
		{"vocab", required_argument, NULL, OPT_VOCAB},
		{"heads", required_argument, NULL, OPT_HEADS},
		{"set", required_argument, NULL, 's'},
		{"quiet", no_argument, NULL, 'q'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;
	char *end;
	optind = 1;
	while ((c = getopt_long(argc, argv, "c:p:n:k:s:qvh", longopts, NULL)) != -1) {
		errno = 0;
		switch (c) {
		case 'c':
			a->checkpoint = optarg;
			break;
		case 'p':
			a->prompt = optarg;
			break;
		case 'n':
			a->tokens = strtol(optarg, &end, 10);
			if (*end || end == optarg || errno || a->tokens < 0 ||
			    a->tokens > (1L << 30))
				return bad_number("--tokens", "an integer from 0 to 1073741824", optarg);
			break;
		case OPT_TEMPERATURE: {
			double t = strtod(optarg, &end);
			if (*end || end == optarg || errno || !isfinite(t) ||
			    t < 0 || t > 1e6)
				return bad_number("--temperature", "a number from 0 to 1e6", optarg);
			a->temperature = (float)t;
			break;
		}
		case 'k': {
			long k = strtol(optarg, &end, 10);
			if (*end || end == optarg || errno || k < 1 || k > 256)
				return bad_number("--top-k", "an integer from 1 to 256", optarg);
			a->top_k = (int)k;
			break;
		}
		case OPT_SEED: {
			unsigned long long s = strtoull(optarg, &end, 10);
			if (*end || end == optarg || errno || optarg[0] == '-')
				return bad_number("--seed", "a non-negative integer", optarg);
			a->seed = s;
			a->seed_given = 1;
			break;
		}
		case OPT_VOCAB:
			a->vocab = optarg;
			break;
		case OPT_HEADS: {
			long h = strtol(optarg, &end, 10);
			if (*end || end == optarg || errno || h < 1 || h > 4096)
				return bad_number("--heads", "an integer from 1 to 4096", optarg);
			a->heads = (int)h;
			break;
		}
		case 's':
			sets[(*nsets)++] = optarg;
			break;
		case 'q':
			dtf_log_set_level(DTF_LOG_WARN);
			break;
		case 'v':
			dtf_log_set_level(DTF_LOG_DEBUG);
			break;
		case 'h':
			fputs(generate_usage, stdout);
			return 0;
		default:
			fputs("Try 'dtf-train generate --help'.\n", stderr);
			return 2;
		}
	}
	const char *missing = optind >= argc	       ? "missing the job file"
			      : optind != argc - 1     ? "expected exactly one job file"
			      : a->prompt && !a->prompt[0] ? "--prompt: the prompt is empty"
						       : NULL;
	if (missing) {
		fprintf(stderr, "dtf-train generate: %s\nTry 'dtf-train generate --help'.\n",
			missing);
		return 2;
	}
	a->job_path = argv[optind];
	return -1;
}

static const struct dtf_feature_spec *token_feature(const struct dtf_job *job,
						    const char *name)
{
	for (int i = 0; i < job->data.nfeatures; i++) {
		const struct dtf_feature_spec *f = &job->data.features[i];
		if (!strcmp(f->name, name))
			return f->dtype == DTF_INT32 && f->rank == 1 ? f : NULL;
	}
	return NULL;
}

/* The job must feed token ids to its model: model.input a rank-1 int32
 * feature, or (model.graph) an embedding of one. */
static int check_job(const struct dtf_job *job)
{
	if (job->model.input[0] && token_feature(job, job->model.input))
		return 0;
	const struct dtf_layer *ls = job->model.nnodes ? job->model.nodes
						       : job->model.layers;
	int n = job->model.nnodes ? job->model.nnodes : job->model.nlayers;
	for (int i = 0; i < n; i++)
		if (ls[i].kind == DTF_LAYER_EMBEDDING && ls[i].ninputs > 0 &&
		    token_feature(job, ls[i].inputs[0]))
			return 0;
	return dtf_error(DTF_ERR_CONFIG,
			 "%s: the job's model is not a GPT: it does not take token ids (a rank-1 int32 feature as model.input or an embedding's ids)",
			 job->path);
}

/* The epsilon of the job's layer or graph node `name` (a layer_norm, or
 * a block holding them); 0 when there is none. */
static float job_epsilon(const struct dtf_job *job, const char *name)
{
	const struct dtf_layer *ls = job->model.nnodes ? job->model.nodes
						       : job->model.layers;
	int n = job->model.nnodes ? job->model.nnodes : job->model.nlayers;
	for (int i = 0; i < n; i++)
		if (!strcmp(ls[i].name, name))
			return ls[i].epsilon;
	return 0;
}

/*
 * The GPT's structure from the job into *o (blocks[] holds the blocks'
 * names): the layers form's embedding, position_embedding,
 * transformer_block layers (their heads, which must agree, and epsilon),
 * the last layer_norm and the loss's logits layer; the graph form's
 * nodes keep the spec's names (wte, wpe, h0.., ln_f) with the heads of
 * its first causal_self_attention.  --heads (heads > 0) overrides.
 */
static int job_structure(const struct dtf_job *job, int heads,
			 const char **blocks, struct dtf_gpt_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->head = job->model.loss_logits[0] ? job->model.loss_logits : NULL;
	if (job->model.nnodes) {
		for (int i = 0; i < job->model.nnodes && !o->heads; i++)
			if (job->model.nodes[i].kind == DTF_LAYER_CAUSAL_SELF_ATTENTION)
				o->heads = job->model.nodes[i].heads;
		o->epsilon = job_epsilon(job, "h0/ln_1");
		o->epsilon_final = job_epsilon(job, "ln_f");
	} else {
		const struct dtf_layer *lnf = NULL;
		for (int i = 0; i < job->model.nlayers; i++) {
			const struct dtf_layer *l = &job->model.layers[i];
			if (l->kind == DTF_LAYER_EMBEDDING && !o->wte)
				o->wte = l->name;
			else if (l->kind == DTF_LAYER_POSITION_EMBEDDING)
				o->wpe = l->name;
			else if (l->kind == DTF_LAYER_LAYER_NORM && o->nblocks)
				lnf = l;
			if (l->kind != DTF_LAYER_TRANSFORMER_BLOCK)
				continue;
			if (o->nblocks && l->heads != o->heads && !heads)
				return dtf_error(DTF_ERR_CONFIG,
						 "%s: transformer_block %s has %d heads, %s %d: generate takes one number of heads",
						 l->where, l->name, l->heads,
						 blocks[0], o->heads);
			o->heads = l->heads;
			o->epsilon = l->epsilon;
			blocks[o->nblocks++] = l->name;
		}
		if (!o->nblocks)
			return dtf_error(DTF_ERR_CONFIG,
					 "%s: the job's model is not a GPT: it has no transformer_block layer",
					 job->path);
		o->blocks = blocks;
		o->epsilon_final = lnf ? lnf->epsilon : 0;
		o->ln_f = lnf ? lnf->name : NULL;
	}
	if (heads)
		o->heads = heads;
	if (!o->heads)
		return dtf_error(DTF_ERR_USAGE,
				 "the job does not say its attention heads: give --heads H");
	return 0;
}

/* vocab.txt next to the training files (datasets/prepare.sh's layout). */
static int default_vocab(const struct dtf_job *job, char *out, size_t size)
{
	const char *files = job->data.train_files;
	if (!files)
		return dtf_error(DTF_ERR_USAGE,
				 "no --vocab given and the job has no data.train to find vocab.txt next to");
	const char *slash = strrchr(files, '/');
	int dir = slash ? (int)(slash - files) : 0;
	snprintf(out, size, "%.*s%svocab.txt", dir, files, slash ? "/" : "");
	return 0;
}

struct emit_state {
	const struct dtf_vocab *vocab;
};

static void emit(int32_t id, void *arg)
{
	const struct emit_state *s = arg;
	fputc(s->vocab->bytes[id], stdout);
	if (s->vocab->bytes[id] == '\n')
		fflush(stdout);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The vocabulary, the checkpoint and the prompt; then the text. */
static int generate_with(const struct dtf_job *job, const struct gen_args *a,
			 const struct dtf_gpt_opts *go)
{
	int rc;
	const char *ckpt = a->checkpoint ? a->checkpoint : job->checkpoint.dir;
	if (!ckpt)
		return dtf_error(DTF_ERR_USAGE,
				 "no --checkpoint given and the job has no checkpoint.dir");
	char vpath[4096];
	if (a->vocab)
		snprintf(vpath, sizeof(vpath), "%s", a->vocab);
	else if ((rc = default_vocab(job, vpath, sizeof(vpath))) < 0)
		return rc;
	struct dtf_vocab vocab;
	if ((rc = dtf_vocab_read(vpath, &vocab)) < 0)
		return rc;
	struct dtf_gpt g;
	if ((rc = dtf_gpt_load(ckpt, go, &g)) < 0)
		return rc;
	const char *prompt = a->prompt ? a->prompt : "\n";
	size_t plen = strlen(prompt);
	int32_t *ids = dtf_malloc((plen + (size_t)a->tokens + 1) * sizeof(int32_t));
	if (!ids) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out;
	}
	if (vocab.size != g.vocab_size) {
		rc = dtf_error(DTF_ERR_USAGE,
			       "vocabulary %s has %d characters, the model of %s has %d",
			       vpath, vocab.size, g.checkpoint, g.vocab_size);
		goto out;
	}
	if ((rc = dtf_vocab_encode(&vocab, prompt, plen, ids)) < 0)
		goto out;
	if (plen > (size_t)1 << 30) {
		rc = dtf_error(DTF_ERR_USAGE, "--prompt: longer than 2^30 bytes");
		goto out;
	}
	dtf_info("generate: %s (step %lld): %d blocks, %d heads, width %d, block_size %d, vocabulary %d (%s), %s head",
		 g.checkpoint, (long long)g.step, g.n_layer, g.n_head, g.n_embd,
		 g.block_size, g.vocab_size, vpath, g.tied ? "tied" : "untied");
	struct dtf_sample_opts so = {
		.temperature = a->temperature,
		.top_k = a->top_k,
		.seed = a->seed_given ? a->seed : job->seed,
	};
	struct emit_state es = {.vocab = &vocab};
	fwrite(prompt, 1, plen, stdout);
	/* at most block_size rows a product: OpenBLAS's threads would
	 * spin more than they compute */
	dtf_threads_set(1);
	double t0 = now();
	rc = dtf_gpt_generate(&g, ids, (int)plen, (int)a->tokens, &so,
			      ids + plen, emit, &es);
	double dt = now() - t0;
	fputc('\n', stdout);
	if (fflush(stdout) != 0 && rc == 0)
		rc = dtf_error(DTF_ERR_IO, "writing stdout: %s", strerror(errno));
	if (rc == 0)
		dtf_info("generate: %ld characters in %.3f s: %.1f characters/s",
			 a->tokens, dt, dt > 0 ? (double)a->tokens / dt : 0);
out:
	dtf_free(ids);
	dtf_gpt_deinit(&g);
	return rc;
}

/* The job and its GPT's structure; then generate_with. */
static int generate(const struct dtf_job *job, const struct gen_args *a)
{
	int rc = check_job(job);
	if (rc < 0)
		return rc;
	const char **blocks = dtf_calloc((size_t)job->model.nlayers + 1,
					 sizeof(char *));
	struct dtf_gpt_opts go;
	if (!blocks)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	if ((rc = job_structure(job, a->heads, blocks, &go)) < 0) {
		dtf_free(blocks);
		return rc;
	}
	rc = generate_with(job, a, &go);
	dtf_free(blocks);
	return rc;
}

int dtf_main_generate(int argc, char **argv)
{
	struct gen_args a = {.tokens = 256, .temperature = 1.0f};
	const char **sets = dtf_calloc((size_t)argc + 1, sizeof(char *));
	int nsets = 0, status;
	struct dtf_job *job = NULL;
	if (!sets)
		return 1;
	if ((status = parse_args(argc, argv, &a, sets, &nsets)) >= 0)
		goto out;
	int rc = dtf_main_load_job(a.job_path, sets, nsets, &job);
	if (rc == 0)
		rc = generate(job, &a);
	if (rc < 0)
		dtf_errlog("%s", dtf_error_msg());
	status = rc < 0 ? dtf_error_exit_status(rc) : 0;
out:
	dtf_job_free(job);
	dtf_free(sets);
	return status;
}
