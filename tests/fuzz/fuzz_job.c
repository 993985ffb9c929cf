/*
 * fuzz_job.c - libFuzzer harness over the job language: parse the input as
 * a job file and, when it parses, build the model graph and its gradient,
 * measure both memory plans and print the summary, exactly what
 * `dtf-train --dry-run` does.  Any crash, leak, sanitizer report or hang
 * is a bug: every input must end in success or a clean error.
 *
 * Built with clang -fsanitize=fuzzer,address by tests/meson.build when
 * clang is there; run by tests/fuzz/run-fuzz.sh for a bounded time.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/error.h"
#include "graph/graph.h"
#include "graph/lower.h"
#include "mem/plan.h"
#include "ops/backend.h"
#include "train/summary.h"

static FILE *devnull;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 1 << 16)
		return 0;
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	if (!devnull)
		devnull = fopen("/dev/null", "w");
	struct dtf_job *job = NULL;
	if (dtf_job_load_string("fuzz.yaml", text, NULL, 0, &job) == 0) {
		struct dtf_graph g;
		int *out = calloc((size_t)(job->model.nlayers +
					   job->model.nnodes + 1),
				  sizeof(int));
		if (out && dtf_graph_lower_model(job, 2, &g, out) == 0) {
			if (dtf_graph_backward(&g) == 0) {
				struct dtf_plan_stats st;
				dtf_plan_measure(&g, DTF_PLANNER_NAIVE, 1, dtf_backend_cpu_workspace(&g), &st);
				dtf_summary_print(job, &g, out, devnull);
			}
			dtf_graph_deinit(&g);
		}
		free(out);
	}
	dtf_job_free(job);
	free(text);
	return 0;
}
