/*
 * optimizer_ops.h - an optimizer as the update a distribution strategy
 * drives (struct dtf_update_ops of distribute/strategy.h), so that
 * distribute/ applies updates without knowing train/.
 */
#ifndef DTF_TRAIN_OPTIMIZER_OPS_H
#define DTF_TRAIN_OPTIMIZER_OPS_H

#include "distribute/strategy.h"
#include "train/optimizer.h"

struct dtf_job;

/*
 * Fill *out with the update of opt (borrowed: it must outlive the
 * strategy; release deinitializes it).  part_new makes optimizers of the
 * job's train section (dtf_optimizer_init, one segment), for the ps ranks.
 * out->ctx is heap memory owned by whoever holds *out (dtf_strategy_setup
 * takes it), released by out->free.  Errors: DTF_ERR_NOMEM.
 */
int dtf_optimizer_ops(struct dtf_optimizer *opt, const struct dtf_job *job,
		      struct dtf_update_ops *out);

/*
 * The same, for a backend that keeps its own copy of the variables
 * (ops/backend.h: apply, the GPU's): apply counts the update in
 * opt->iterations and hands opt's settings, the learning rate and the
 * count to be->i->apply, which applies the strategy's sums of the host
 * gradient vector on the device (params and grads are the host vectors
 * the strategy was set up with); the NaN/Inf check reads the host vector.
 * Only plain updates (sgd with momentum/nesterov, adam; no weight decay or
 * clipping) and the strategies that apply on every replica reach here:
 * apply_ranges, release and part_new are absent.  be is borrowed.
 * Errors: DTF_ERR_NOMEM.
 */
struct dtf_backend;
int dtf_backend_update_ops(struct dtf_backend *be, struct dtf_optimizer *opt,
			   const struct dtf_job *job,
			   struct dtf_update_ops *out);

#endif
