/*
 * fast_exec.h - the fast CPU path of the executor: fusion plan, thread
 * pool and workspace for a planned graph.
 *
 * dtf_fast_plan_init() looks at the graph once and decides, per node,
 * which fast kernel (ops/cpu/fast.h) runs it and which neighbours it
 * absorbs:
 *   conv2d | matmul -> bias_add -> relu      one kernel, writes relu's buffer
 *     [conv2d: -> max_pool2d with tiling windows, each image pooled as
 *      soon as it is written (the conv2d output is still stored)]
 *   bias_add -> relu                         one pass
 *   max_pool2d_grad -> relu_grad -> bias_add_grad   one pass over dx
 *     [-> conv2d_backprop_filter, when that is dx's only other reader:
 *      dx is formed per image and never stored]
 *   relu_grad -> bias_add_grad               one pass
 * A node is absorbed only when its producer is its sole input of that kind
 * and it is the producer's only consumer in the whole graph (forward and
 * backward), so no other node ever reads the buffers that fusion leaves
 * unwritten.  Everything else runs on the pool where a fast kernel exists
 * (conv2d and its gradients, matmul, max pooling, add, dropout,
 * causal_self_attention and its gradient) and on the reference
 * kernel otherwise (the REFERENCE entries of fast_exec.c's kernel table,
 * indexed by the op).  The executor asks dtf_fast_exec_node() first
 * (ops/cpu/exec.c); with no plan (ctx->fast == NULL) every node runs the
 * reference kernel, which is how the tests compare the two.
 */
#ifndef DTF_OPS_CPU_FAST_EXEC_H
#define DTF_OPS_CPU_FAST_EXEC_H

#include <stddef.h>

#include "ops/cpu/exec.h"
#include "graph/graph.h"
#include "ops/cpu/fast.h"

struct dtf_fast_plan {
	struct dtf_pool *pool; /* not owned */
	int nnodes;
	unsigned char *action; /* per node: enum in fast_exec.c */
	int *out;              /* per node: node whose buffer gets the result */
	int *bias;             /* per node: bias variable, bias grad node, or -1 */
	int *next;             /* per node: a later node it also computes (the
				  max_pool2d after a conv2d, the filter
				  gradient after a pool gradient), or -1 */
	float *workspace;      /* owned; ws_floats */
	size_t ws_floats;
	int fused;             /* number of nodes absorbed into another */
};

/* Plan `g` (after dtf_plan_graph) for `pool` (NULL: one thread).
 * Errors: DTF_ERR_NOMEM. */
int dtf_fast_plan_init(struct dtf_fast_plan *fp, const struct dtf_graph *g,
		       struct dtf_pool *pool);
void dtf_fast_plan_deinit(struct dtf_fast_plan *fp);

/* Run node i the fast way: 1 when done (or absorbed by an earlier node),
 * 0 when the caller must run the reference kernel. */
int dtf_fast_exec_node(const struct dtf_fast_plan *fp,
		       const struct dtf_graph *g, int i,
		       const struct dtf_exec_ctx *ctx);

#endif
