/*
 * summary.h - the Keras-style model summary of `dtf-train --dry-run`.
 *
 * One row per layer (model.layers) or per node (model.graph): name, op,
 * output shape (batch dimension written None, as Keras does), parameters,
 * forward FLOPs per example.  Then the totals: trainable and non-trainable
 * parameters, FLOPs per example for the forward pass and a training step,
 * and the activation memory per replica as the job's planner lays it out,
 * next to what one buffer per node (the naive plan) would take.
 *
 * FLOPs are dtf_graph_node_flops()'s: a multiply-add is 2 (conv2d:
 * 2 * oh*ow*o * kh*kw*c per example; dense: 2 * in * units), any other
 * arithmetic operation 1 per element.  A training step is taken as 3x the
 * forward pass (backward ~2x forward: a gradient for the input and one for
 * the weights), the usual convention.
 */
#ifndef DTF_TRAIN_SUMMARY_H
#define DTF_TRAIN_SUMMARY_H

#include <stdint.h>
#include <stdio.h>

#include "config/job.h"
#include "graph/graph.h"

/* Forward FLOPs of node i for the whole per-replica batch
 * (dtf_graph_node_flops). */
int64_t dtf_summary_node_flops(const struct dtf_graph *g, int i);

/* Print the summary of the forward+backward graph g built from job;
 * layer_out[k] is the output node of layer (or graph node) k.
 * Errors: DTF_ERR_NOMEM (measuring the plan). */
int dtf_summary_print(const struct dtf_job *job, const struct dtf_graph *g,
		      const int *layer_out, FILE *out);

#endif
