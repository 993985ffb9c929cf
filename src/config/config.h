/*
 * config.h - read a job file (YAML 1.1 through libyaml) into struct dtf_job.
 *
 * Errors are DTF_ERR_CONFIG with a message "FILE:LINE:COL: KEY: what is
 * wrong" (line and column 1-based, as editors count), and for an unknown key
 * a "did you mean 'x'?" suggestion (Levenshtein distance <= 2).  Overrides
 * ("--set train.epochs=1") are applied to the YAML tree before the schema is
 * read, so an override is checked exactly as if it were in the file; an
 * error in an override names "--set KEY" instead of a position.
 */
#ifndef DTF_CONFIG_CONFIG_H
#define DTF_CONFIG_CONFIG_H

#include "config/job.h"

/*
 * Parse `path` with overrides[0..noverrides) ("a.b.c=value"; the value is
 * read as a YAML scalar or flow collection, e.g. "[1, 2]").  On success *out
 * is a heap job to free with dtf_job_free().  Errors: DTF_ERR_CONFIG (bad
 * YAML, schema), DTF_ERR_USAGE (malformed override), DTF_ERR_IO (unreadable
 * file), DTF_ERR_NOMEM.
 */
int dtf_job_load(const char *path, const char *const *overrides,
		 int noverrides, struct dtf_job **out);

/* Same, from a string in memory; `name` is used in messages as the file. */
int dtf_job_load_string(const char *name, const char *text,
			const char *const *overrides, int noverrides,
			struct dtf_job **out);

/* dtf_job_free(NULL) is a no-op. */
void dtf_job_free(struct dtf_job *job);

/* "sgd", "conv2d", "multi_worker_mirrored", ... for messages and summaries. */
const char *dtf_layer_kind_name(enum dtf_layer_kind k);
const char *dtf_strategy_name(enum dtf_strategy_kind k);

#endif
