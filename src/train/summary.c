/*
 * summary.c - the model summary (summary.h).
 */
#include "train/summary.h"

#include <string.h>

#include "config/config.h"
#include "core/error.h"
#include "mem/plan.h"
#include "ops/backend.h"

int64_t dtf_summary_node_flops(const struct dtf_graph *g, int i)
{
	return dtf_graph_node_flops(g, i);
}

static void human(double v, const char *unit, char *buf, size_t size)
{
	const char *pre[] = {"", "K", "M", "G", "T"};
	int p = 0;
	while (v >= 1000 && p < 4) {
		v /= 1000;
		p++;
	}
	if (p == 0)
		snprintf(buf, size, "%.0f%s%s", v, unit[0] ? " " : "", unit);
	else
		snprintf(buf, size, "%.2f %s%s", v, pre[p], unit);
}

static void mib(size_t bytes, char *buf, size_t size)
{
	snprintf(buf, size, "%.2f MiB", (double)bytes / (1024.0 * 1024.0));
}

/* "(None, 28, 28, 32)" */
static char *keras_shape(const struct dtf_shape *s, char *buf, size_t size)
{
	size_t off = (size_t)snprintf(buf, size, "(");
	for (int i = 0; i < s->rank && off < size; i++) {
		if (i == 0)
			off += (size_t)snprintf(buf + off, size - off, "None");
		else
			off += (size_t)snprintf(buf + off, size - off, ", %lld",
						(long long)s->d[i]);
	}
	if (off < size)
		snprintf(buf + off, size - off, s->rank == 1 ? ",)" : ")");
	return buf;
}

#define RULE "==================================================================================================="
#define WIDTH 99

static void row(FILE *out, const char *name, const char *op,
		const char *shape, size_t params, int64_t flops, int batch)
{
	char f[32];
	if (flops)
		human((double)flops / batch, "", f, sizeof(f));
	else
		snprintf(f, sizeof(f), "0");
	fprintf(out, "%-28s %-18s %-22s %12zu %14s\n", name, op, shape, params,
		f);
}

int dtf_summary_print(const struct dtf_job *job, const struct dtf_graph *g,
		      const int *layer_out, FILE *out)
{
	int graph = job->model.nnodes > 0;
	int nl = graph ? job->model.nnodes : job->model.nlayers;
	const struct dtf_layer *ls = graph ? job->model.nodes
					   : job->model.layers;
	char shape[96];
	int64_t fwd = 0;

	fprintf(out, "Model: \"%s\" (%s), per-replica batch %d\n", job->name,
		graph ? "model.graph" : "model.layers", g->batch);
	fprintf(out, "%-28s %-18s %-22s %12s %14s\n", "Layer (name)",
		graph ? "Op" : "Type", "Output shape", "Params",
		"FLOPs/example");
	fprintf(out, "%.*s\n", WIDTH, RULE);
	for (int i = 0; i < g->nforward; i++) {
		const struct dtf_node *n = &g->nodes[i];
		if (n->op == DTF_OP_INPUT)
			row(out, n->name, "input",
			    keras_shape(&n->shape, shape, sizeof(shape)), 0, 0,
			    g->batch);
	}
	/* rows in execution order (graph nodes may be declared in any) */
	int order[nl > 0 ? nl : 1];
	for (int i = 0; i < nl; i++) {
		int j = i;
		while (j > 0 && layer_out[order[j - 1]] > layer_out[i]) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = i;
	}
	for (int oi = 0; oi < nl; oi++) {
		int li = order[oi];
		const struct dtf_layer *l = &ls[li];
		const struct dtf_node *n = &g->nodes[layer_out[li]];
		size_t params = 0;
		int64_t flops = 0;
		for (int i = 0; i < g->nforward; i++) {
			const struct dtf_node *m = &g->nodes[i];
			if (m->layer != li)
				continue;
			if (m->op == DTF_OP_VARIABLE && !m->a.var.constant)
				params += (size_t)dtf_shape_numel(&m->shape);
			flops += dtf_summary_node_flops(g, i);
		}
		fwd += flops;
		const char *sh = n->op == DTF_OP_VARIABLE
					 ? dtf_shape_str(&n->shape, shape,
							 sizeof(shape))
					 : keras_shape(&n->shape, shape,
						       sizeof(shape));
		row(out, l->name, dtf_layer_kind_name(l->kind), sh, params,
		    flops, g->batch);
	}
	/* the loss */
	if (g->loss >= 0) {
		int64_t f = dtf_summary_node_flops(g, g->loss);
		fwd += f;
		row(out, g->nodes[g->loss].name, "loss", "()", 0, f, g->batch);
	}
	fprintf(out, "%.*s\n", WIDTH, RULE);
	size_t trainable = dtf_graph_num_params(g);
	size_t fixed = dtf_graph_num_nontrainable(g);
	char a[48], b[48], c[48];
	fprintf(out, "Total params: %zu (%.2f MB)\n", trainable + fixed,
		(double)(trainable + fixed) * 4 / 1e6);
	fprintf(out, "Trainable params: %zu\n", trainable);
	fprintf(out, "Non-trainable params: %zu\n", fixed);
	human((double)fwd / g->batch, "FLOPs", a, sizeof(a));
	human(3.0 * (double)fwd / g->batch, "FLOPs", b, sizeof(b));
	fprintf(out, "FLOPs per example: forward %s, training step %s "
		"(3x forward; a multiply-add is 2 FLOPs)\n", a, b);
	/* a sequence model (logits (n, t, classes)): per position too */
	const struct dtf_shape *lg = g->logits >= 0
					      ? &g->nodes[g->logits].shape
					      : NULL;
	if (lg && lg->rank >= 3 && lg->d[0] > 0 &&
	    lg->d[lg->rank - 1] > 0) {
		int64_t per = dtf_shape_numel(lg) / lg->d[0] /
			      lg->d[lg->rank - 1];
		double ft = (double)fwd / g->batch / (double)per;
		human(ft, "FLOPs", a, sizeof(a));
		human(3.0 * ft, "FLOPs", b, sizeof(b));
		fprintf(out, "FLOPs per token (%lld per example): forward %s, "
			"training step %s\n", (long long)per, a, b);
	}
	struct dtf_plan_stats st;
	int rc = dtf_plan_measure(g, job->memory.planner, 1,
				  dtf_backend_cpu_workspace(g), &st);
	if (rc < 0)
		return rc;
	mib(st.planned_bytes, a, sizeof(a));
	mib(st.naive_bytes, b, sizeof(b));
	mib(st.workspace_bytes, c, sizeof(c));
	fprintf(out, "Activation memory per replica (batch %d, forward + backward): "
		"planned %s (%s planner, %.1f%% of naive), naive %s; "
		"workspace %s included; %d ops in place\n",
		g->batch, a,
		job->memory.planner == DTF_PLANNER_NAIVE ? "naive" : "liveness",
		100.0 * (double)st.planned_bytes / (double)st.naive_bytes, b, c,
		st.inplace);
	fprintf(out, "Memory bytes: naive %zu, planned %zu\n", st.naive_bytes,
		st.planned_bytes);
	fprintf(out, "Graph: %d forward ops, %d backward ops\n", g->nforward,
		g->nnodes - g->nforward);
	return 0;
}
