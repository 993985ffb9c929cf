/*
 * lower_priv.h - the GPT layers' lowering (graph/lower_gpt.c), called by
 * graph/lower.c's layer walk.  Not a public interface.
 *
 * Each function appends the nodes of one layer `l` of the layers form to
 * `g`, its input node x, and returns the layer's output node (>= 0) or a
 * negative DTF_ERR_GRAPH / DTF_ERR_NOMEM (lower.c adds the layer's
 * position to the message).  Variable names are GPT-2's as nanoGPT
 * writes them, prefixed by the layer's name (dtf-train-job(5), "The GPT
 * layers").
 */
#ifndef DTF_GRAPH_LOWER_PRIV_H
#define DTF_GRAPH_LOWER_PRIV_H

#include "config/job.h"
#include "graph/graph.h"

/* embedding: ids int32 (batch, ...) -> (batch, ..., output_dim); the
 * table "<name>/embeddings" (input_dim, output_dim). */
int dtf_lower_embedding(struct dtf_graph *g, const struct dtf_layer *l,
			int x);

/* position_embedding: x (batch, t, c) + "<name>/embeddings" (t, c), t =
 * `length` (which must then be x's t) or x's dimension 1. */
int dtf_lower_position_embedding(struct dtf_graph *g,
				 const struct dtf_layer *l, int x);

/* transformer_block: x (batch, t, c) -> (batch, t, c), GPT-2's pre-norm
 * block; `nblocks` (the model's count of transformer_block layers)
 * scales the two residual projections' initial stddev by
 * 1 / sqrt(2 nblocks). */
int dtf_lower_transformer_block(struct dtf_graph *g,
				const struct dtf_layer *l, int x, int nblocks);

/* dense with tied_to: x (batch, ..., d) times the embedding table
 * (vocab, d) of the layer `tied` (an earlier embedding layer), transposed
 * -> (batch, ..., vocab), plus a bias "<name>/bias" (vocab) if use_bias. */
int dtf_lower_tied_dense(struct dtf_graph *g, const struct dtf_layer *l,
			 const struct dtf_layer *tied, int x);

#endif
