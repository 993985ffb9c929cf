/*
 * lower.h - lower the job's high-level model (Keras-like layers) into graph
 * ops and variables.
 *
 * conv2d -> variable kernel (kh, kw, c, filters) [glorot_uniform] + conv2d
 *           + variable bias (filters) [zeros] + bias_add + activation;
 * dense  -> variable kernel (in, units) + matmul + bias + bias_add + act;
 * max_pool2d, flatten (reshape), dropout, relu -> one op each.
 * Variables are named "<layer>/kernel" and "<layer>/bias" (Keras names).
 * Every node records the index of the layer it lowers (node.layer).
 */
#ifndef DTF_GRAPH_LOWER_H
#define DTF_GRAPH_LOWER_H

#include "config/job.h"
#include "graph/graph.h"

/*
 * Build the forward graph for per-replica batch `batch` into `g` (which
 * this initialises), ending in the loss; `layer_out` (job->model.nlayers
 * entries, caller-owned) receives each layer's output node.  Errors:
 * DTF_ERR_CONFIG with the layer's file:line:col and name (shape errors
 * name both shapes), DTF_ERR_NOMEM.  On error g is deinitialised.
 */
int dtf_graph_lower_model(const struct dtf_job *job, int batch,
			  struct dtf_graph *g, int *layer_out);

#endif
