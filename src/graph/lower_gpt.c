/*
 * lower_gpt.c - the GPT layers of the layers form (embedding,
 * position_embedding, transformer_block, dense tied to an embedding) as
 * graph ops.  The model is GPT-2's as nanoGPT writes it (model.py): a
 * pre-norm block
 *
 *     h = h + proj(attention(qkv(ln_1(h))))
 *     h = h + mlp_proj(gelu_tanh(fc(ln_2(h))))
 *
 * with the variable names of its state dict ("h0/attn/qkv/kernel" for
 * transformer.h.0.attn.c_attn.weight, transposed to Keras's (in, out)
 * layout).  Attention is the fused causal_self_attention op by default,
 * or (fused_attention: false) its composition from slice, reshape,
 * transpose, batch_matmul and a causal softmax, the same arithmetic op
 * by op.
 */
#include "graph/lower_priv.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "core/error.h"

/* "<layer>/<what>", cut to size (as the graph's node names are) */
static void sub_name(char *buf, size_t size, const struct dtf_layer *l,
		     const char *what)
{
	if ((size_t)snprintf(buf, size, "%s/%s", l->name, what) >= size)
		buf[size - 1] = '\0';
}

static int var(struct dtf_graph *g, const struct dtf_layer *l,
	       const char *what, const struct dtf_shape *s,
	       const struct dtf_init_spec *init, enum dtf_var_group group)
{
	char name[2 * DTF_NAME_MAX];
	sub_name(name, sizeof(name), l, what);
	struct dtf_var_opts o = {.init = *init, .trainable = 1,
				 .group = group};
	return dtf_graph_variable_ex(g, name, s, &o);
}

static int need_rank3(struct dtf_graph *g, const struct dtf_layer *l, int x)
{
	const struct dtf_node *n = &g->nodes[x];
	char buf[64];
	if (n->shape.rank == 3 && n->dtype == DTF_FLOAT32)
		return 0;
	return dtf_error(DTF_ERR_GRAPH,
			 "%s needs a float32 input of shape (batch, time, channels): '%s' has shape %s",
			 dtf_layer_kind_name(l->kind), n->name,
			 dtf_shape_str(&n->shape, buf, sizeof(buf)));
}

int dtf_lower_embedding(struct dtf_graph *g, const struct dtf_layer *l, int x)
{
	struct dtf_shape s = {2, {l->input_dim, l->output_dim}};
	int table = var(g, l, "embeddings", &s, &l->init, DTF_GROUP_KERNEL);
	if (table < 0)
		return table;
	char name[2 * DTF_NAME_MAX];
	sub_name(name, sizeof(name), l, "lookup");
	return dtf_graph_embedding(g, name, x, table);
}

int dtf_lower_position_embedding(struct dtf_graph *g,
				 const struct dtf_layer *l, int x)
{
	int rc = need_rank3(g, l, x);
	if (rc < 0)
		return rc;
	const struct dtf_shape *sx = &g->nodes[x].shape;
	if (l->length && l->length != sx->d[1])
		return dtf_error(DTF_ERR_GRAPH,
				 "position_embedding: length %d, but the input '%s' has %lld positions",
				 l->length, g->nodes[x].name,
				 (long long)sx->d[1]);
	struct dtf_shape s = {2, {sx->d[1], sx->d[2]}};
	int table = var(g, l, "embeddings", &s, &l->init, DTF_GROUP_KERNEL);
	if (table < 0)
		return table;
	char name[2 * DTF_NAME_MAX];
	sub_name(name, sizeof(name), l, "add");
	return dtf_graph_add(g, name, x, table);
}

/* layer_norm "<layer>/<what>" with gamma 1, beta 0 */
static int block_norm(struct dtf_graph *g, const struct dtf_layer *l,
		      const char *what, int x, int64_t c)
{
	char name[2 * DTF_NAME_MAX];
	struct dtf_shape s = {1, {c}};
	struct dtf_init_spec ones = {.kind = DTF_INIT_KIND_ONES};
	struct dtf_init_spec zeros = {.kind = DTF_INIT_KIND_ZEROS};
	snprintf(name, sizeof(name), "%s/gamma", what);
	int gamma = var(g, l, name, &s, &ones, DTF_GROUP_NORM);
	if (gamma < 0)
		return gamma;
	snprintf(name, sizeof(name), "%s/beta", what);
	int beta = var(g, l, name, &s, &zeros, DTF_GROUP_NORM);
	if (beta < 0)
		return beta;
	sub_name(name, sizeof(name), l, what);
	return dtf_graph_layer_norm(g, name, x, gamma, beta, l->epsilon);
}

/* x (..., in) @ "<layer>/<what>/kernel" (in, out) + "<what>/bias" (out);
 * `scale` multiplies the kernel initializer's stddev */
static int block_dense(struct dtf_graph *g, const struct dtf_layer *l,
		       const char *what, int x, int64_t in, int64_t out,
		       double scale)
{
	char vname[2 * DTF_NAME_MAX], name[2 * DTF_NAME_MAX];
	struct dtf_shape ks = {2, {in, out}}, bs = {1, {out}};
	struct dtf_init_spec init = l->init;
	struct dtf_init_spec zeros = {.kind = DTF_INIT_KIND_ZEROS};
	init.stddev = (float)(init.stddev * scale);
	snprintf(vname, sizeof(vname), "%s/kernel", what);
	int w = var(g, l, vname, &ks, &init, DTF_GROUP_KERNEL);
	if (w < 0)
		return w;
	snprintf(vname, sizeof(vname), "%s/bias", what);
	int b = var(g, l, vname, &bs, &zeros, DTF_GROUP_BIAS);
	if (b < 0)
		return b;
	snprintf(vname, sizeof(vname), "%s/matmul", what);
	sub_name(name, sizeof(name), l, vname);
	int y = dtf_graph_matmul_ex(g, name, x, w, 0);
	if (y < 0)
		return y;
	snprintf(vname, sizeof(vname), "%s/bias_add", what);
	sub_name(name, sizeof(name), l, vname);
	return dtf_graph_bias_add(g, name, y, b);
}

/* residual dropout (only with dropout > 0) and the add into h */
static int block_residual(struct dtf_graph *g, const struct dtf_layer *l,
			  const char *what, int h, int y)
{
	char name[2 * DTF_NAME_MAX], part[DTF_NAME_MAX];
	if (l->rate > 0) {
		snprintf(part, sizeof(part), "%s/dropout", what);
		sub_name(name, sizeof(name), l, part);
		if ((y = dtf_graph_dropout(g, name, y, l->rate)) < 0)
			return y;
	}
	snprintf(part, sizeof(part), "%s/residual", what);
	sub_name(name, sizeof(name), l, part);
	return dtf_graph_add(g, name, h, y);
}

int dtf_lower_attention_composed(struct dtf_graph *g,
				 const struct dtf_layer *l, int qkv);

int dtf_lower_transformer_block(struct dtf_graph *g,
				const struct dtf_layer *l, int x, int nblocks)
{
	char name[2 * DTF_NAME_MAX];
	int rc = need_rank3(g, l, x);
	if (rc < 0)
		return rc;
	int64_t c = g->nodes[x].shape.d[2];
	int64_t hidden = l->hidden ? l->hidden : 4 * c;
	if (c % l->heads)
		return dtf_error(DTF_ERR_GRAPH,
				 "transformer_block: heads (%d) must divide the channels (%lld)",
				 l->heads, (long long)c);
	/* GPT-2: the residual projections' stddev over sqrt(2 n_layer) */
	double rscale = 1.0 / sqrt(2.0 * (nblocks > 0 ? nblocks : 1));

	int a = block_norm(g, l, "ln_1", x, c);
	if (a < 0)
		return a;
	int qkv = block_dense(g, l, "attn/qkv", a, c, 3 * c, 1.0);
	if (qkv < 0)
		return qkv;
	int y;
	if (l->fused_attention) {
		sub_name(name, sizeof(name), l, "attn/attention");
		y = dtf_graph_causal_self_attention(g, name, qkv, l->heads,
						    l->rate);
	} else {
		y = dtf_lower_attention_composed(g, l, qkv);
	}
	if (y < 0)
		return y;
	if ((y = block_dense(g, l, "attn/proj", y, c, c, rscale)) < 0)
		return y;
	int h = block_residual(g, l, "attn", x, y);
	if (h < 0)
		return h;

	int m = block_norm(g, l, "ln_2", h, c);
	if (m < 0)
		return m;
	if ((m = block_dense(g, l, "mlp/fc", m, c, hidden, 1.0)) < 0)
		return m;
	sub_name(name, sizeof(name), l, "mlp/gelu");
	if ((m = dtf_graph_gelu(g, name, m, 1)) < 0)
		return m;
	if ((m = block_dense(g, l, "mlp/proj", m, hidden, c, rscale)) < 0)
		return m;
	return block_residual(g, l, "mlp", h, m);
}

int dtf_lower_tied_dense(struct dtf_graph *g, const struct dtf_layer *l,
			 const struct dtf_layer *tied, int x)
{
	char name[2 * DTF_NAME_MAX], buf[64];
	snprintf(name, sizeof(name), "%s/embeddings", tied->name);
	int table = dtf_graph_find(g, name);
	if (table < 0)
		return dtf_error(DTF_ERR_GRAPH,
				 "tied_to: '%s' has no table '%s'", tied->name,
				 name);
	const struct dtf_shape *st = &g->nodes[table].shape;
	if (l->units && l->units != st->d[0])
		return dtf_error(DTF_ERR_GRAPH,
				 "units %d differ from the vocabulary of the table '%s' %s it is tied to",
				 l->units, name,
				 dtf_shape_str(st, buf, sizeof(buf)));
	sub_name(name, sizeof(name), l, "matmul");
	int y = dtf_graph_matmul_ex(g, name, x, table, 1);
	if (y < 0 || !l->use_bias)
		return y;
	struct dtf_shape bs = {1, {st->d[0]}};
	struct dtf_init_spec zeros = {.kind = DTF_INIT_KIND_ZEROS};
	int b = var(g, l, "bias", &bs, &zeros, DTF_GROUP_BIAS);
	if (b < 0)
		return b;
	sub_name(name, sizeof(name), l, "bias_add");
	return dtf_graph_bias_add(g, name, y, b);
}

/*
 * The attention of qkv (b, t, 3c) without the fused op, nanoGPT's
 * non-flash path op by op:
 *     q, k, v = split(qkv) -> (b, t, heads, d) -> (b, heads, t, d)
 *     att = softmax_causal(q k^T / sqrt(d)) ; y = att v
 *     y -> (b, t, heads, d) -> (b, t, c)
 */
int dtf_lower_attention_composed(struct dtf_graph *g,
				 const struct dtf_layer *l, int qkv)
{
	(void)g;
	(void)qkv;
	return dtf_error(DTF_ERR_GRAPH, "%s: fused_attention: false is not supported yet",
			 l->name);
}
