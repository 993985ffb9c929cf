/*
 * tf_config.c - TF_CONFIG (JSON, read as a YAML flow mapping) -> cluster.
 *
 * Every check happens here, in one process, before MPI is asked anything,
 * so a bad TF_CONFIG on any rank becomes an error that the ranks agree on
 * (dtf_comm_agree) instead of a rank missing from a collective.
 */
#include "config/tf_config.h"

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"

static const char *const type_names[DTF_TASK_COUNT_] = {
	[DTF_TASK_CHIEF] = "chief",
	[DTF_TASK_WORKER] = "worker",
	[DTF_TASK_PS] = "ps",
	[DTF_TASK_EVALUATOR] = "evaluator",
};

const char *dtf_task_type_name(enum dtf_task_type t)
{
	return (unsigned)t < DTF_TASK_COUNT_ ? type_names[t] : "?";
}

static int type_from_name(const char *s)
{
	for (int t = 0; t < DTF_TASK_COUNT_; t++)
		if (!strcmp(s, type_names[t]))
			return t;
	return -1;
}

void dtf_cluster_deinit(struct dtf_cluster *c)
{
	if (!c)
		return;
	dtf_free(c->tasks);
	memset(c, 0, sizeof(*c));
}

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return dtf_error(DTF_ERR_CONFIG, "TF_CONFIG: %s", msg);
}

static yaml_node_t *node(yaml_document_t *d, int id)
{
	return yaml_document_get_node(d, id);
}

static yaml_node_t *get(yaml_document_t *d, const yaml_node_t *map,
			const char *key)
{
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
	     p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = node(d, p->key);
		if (k->type == YAML_SCALAR_NODE &&
		    !strcmp((const char *)k->data.scalar.value, key))
			return node(d, p->value);
	}
	return NULL;
}

static const char *text(const yaml_node_t *n)
{
	return n && n->type == YAML_SCALAR_NODE
		       ? (const char *)n->data.scalar.value
		       : NULL;
}

/* Rank of (type, index): chief, workers, ps, evaluator. */
static int rank_of(const int count[DTF_TASK_COUNT_], int type, int index)
{
	int r = 0;
	for (int t = 0; t < type; t++)
		r += count[t];
	return r + index;
}

static int read_cluster(yaml_document_t *d, const yaml_node_t *cl,
			struct dtf_cluster *c)
{
	if (cl->type != YAML_MAPPING_NODE)
		return bad("\"cluster\" must be an object mapping task types to lists of \"host:port\"");
	const yaml_node_t *lists[DTF_TASK_COUNT_] = {0};
	for (yaml_node_pair_t *p = cl->data.mapping.pairs.start;
	     p < cl->data.mapping.pairs.top; p++) {
		const char *k = text(node(d, p->key));
		yaml_node_t *v = node(d, p->value);
		int t = k ? type_from_name(k) : -1;
		if (t < 0)
			return bad("unknown task type '%s' in \"cluster\" (known: chief, worker, ps, evaluator)",
				   k ? k : "?");
		if (lists[t])
			return bad("task type '%s' appears twice in \"cluster\"", k);
		if (v->type != YAML_SEQUENCE_NODE)
			return bad("cluster.%s must be a list of \"host:port\" strings", k);
		lists[t] = v;
		c->count[t] = (int)(v->data.sequence.items.top -
				    v->data.sequence.items.start);
	}
	if (c->count[DTF_TASK_CHIEF] > 1)
		return bad("at most one chief is allowed, cluster.chief has %d",
			   c->count[DTF_TASK_CHIEF]);
	if (c->count[DTF_TASK_EVALUATOR] > 1)
		return bad("at most one evaluator is allowed, cluster.evaluator has %d",
			   c->count[DTF_TASK_EVALUATOR]);
	for (int t = 0; t < DTF_TASK_COUNT_; t++)
		c->ntasks += c->count[t];
	if (c->count[DTF_TASK_CHIEF] + c->count[DTF_TASK_WORKER] == 0)
		return bad("the cluster has no chief and no worker");
	c->tasks = dtf_calloc((size_t)c->ntasks, sizeof(*c->tasks));
	if (!c->tasks)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	for (int t = 0; t < DTF_TASK_COUNT_; t++) {
		for (int i = 0; i < c->count[t]; i++) {
			const char *a = text(node(
				d, lists[t]->data.sequence.items.start[i]));
			if (!a || !a[0])
				return bad("cluster.%s[%d] must be a \"host:port\" string",
					   type_names[t], i);
			if (strlen(a) >= DTF_ADDR_MAX)
				return bad("cluster.%s[%d] is longer than %d bytes",
					   type_names[t], i, DTF_ADDR_MAX - 1);
			struct dtf_task *task =
				&c->tasks[rank_of(c->count, t, i)];
			task->type = (enum dtf_task_type)t;
			task->index = i;
			strcpy(task->addr, a);
		}
	}
	for (int i = 0; i < c->ntasks; i++)
		for (int j = 0; j < i; j++)
			if (!strcmp(c->tasks[i].addr, c->tasks[j].addr))
				return bad("duplicate address '%s': cluster.%s[%d] and cluster.%s[%d]",
					   c->tasks[i].addr,
					   type_names[c->tasks[j].type],
					   c->tasks[j].index,
					   type_names[c->tasks[i].type],
					   c->tasks[i].index);
	return 0;
}

static int read_task(yaml_document_t *d, const yaml_node_t *tk,
		     struct dtf_cluster *c)
{
	if (tk->type != YAML_MAPPING_NODE)
		return bad("\"task\" must be an object {\"type\": ..., \"index\": ...}");
	const char *type = text(get(d, tk, "type"));
	const char *index = text(get(d, tk, "index"));
	if (!type)
		return bad("task.type is missing or not a string");
	int t = type_from_name(type);
	if (t < 0)
		return bad("unknown task type '%s' (known: chief, worker, ps, evaluator)",
			   type);
	if (!index)
		return bad("task.index is missing or not a number");
	char *end;
	errno = 0;
	long v = strtol(index, &end, 10);
	if (end == index || *end || errno || v > INT_MAX || v < INT_MIN)
		return bad("task.index must be an integer, got '%s'", index);
	if (v < 0)
		return bad("task.index %ld is negative", v);
	if (c->count[t] == 0) {
		char have[128] = "";
		for (int u = 0; u < DTF_TASK_COUNT_; u++)
			if (c->count[u])
				snprintf(have + strlen(have),
					 sizeof(have) - strlen(have), "%s%s",
					 have[0] ? ", " : "", type_names[u]);
		return bad("task type '%s' is not in the cluster (it has: %s)",
			   type, have);
	}
	if (v >= c->count[t])
		return bad("task index %ld is out of range: cluster.%s has %d task%s",
			   v, type, c->count[t], c->count[t] == 1 ? "" : "s");
	c->self.type = (enum dtf_task_type)t;
	c->self.index = (int)v;
	strcpy(c->self.addr, c->tasks[rank_of(c->count, t, (int)v)].addr);
	c->self_rank = rank_of(c->count, t, (int)v);
	return 0;
}

int dtf_cluster_parse(const char *json, struct dtf_cluster *out)
{
	yaml_parser_t parser;
	yaml_document_t doc;
	int rc;

	memset(out, 0, sizeof(*out));
	out->from_tf_config = 1;
	if (!yaml_parser_initialize(&parser))
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	yaml_parser_set_input_string(&parser, (const unsigned char *)json,
				     strlen(json));
	if (!yaml_parser_load(&parser, &doc)) {
		yaml_mark_t m = parser.problem_mark;
		rc = bad("malformed JSON at byte offset %zu: %s%s%s",
			 m.index, parser.problem ? parser.problem : "syntax error",
			 parser.context ? " " : "",
			 parser.context ? parser.context : "");
		yaml_parser_delete(&parser);
		return rc;
	}
	yaml_parser_delete(&parser);
	yaml_node_t *root = yaml_document_get_root_node(&doc);
	const yaml_node_t *cl, *tk;
	if (!root || root->type != YAML_MAPPING_NODE) {
		rc = bad("expected a JSON object {\"cluster\": ..., \"task\": ...}");
		goto out;
	}
	if (!(cl = get(&doc, root, "cluster"))) {
		rc = bad("missing \"cluster\"");
		goto out;
	}
	if (!(tk = get(&doc, root, "task"))) {
		rc = bad("missing \"task\"");
		goto out;
	}
	if ((rc = read_cluster(&doc, cl, out)) < 0)
		goto out;
	rc = read_task(&doc, tk, out);
out:
	yaml_document_delete(&doc);
	if (rc < 0) {
		dtf_free(out->tasks);
		memset(out, 0, sizeof(*out));
	}
	return rc;
}

int dtf_cluster_from_job(const struct dtf_job *job, int world,
			 struct dtf_cluster *out)
{
	memset(out, 0, sizeof(*out));
	int nps = job->strategy.type == DTF_STRATEGY_PARAMETER_SERVER
			  ? job->strategy.num_ps
			  : 0;
	if (nps > 0 && nps >= world)
		return dtf_error(DTF_ERR_CONFIG,
				 "strategy.num_ps: %d ps rank%s leave%s no worker among the %d rank%s\n"
				 "HINT: start more ranks (mpirun -np %d or more), or lower num_ps",
				 nps, nps == 1 ? "" : "s", nps == 1 ? "s" : "",
				 world, world == 1 ? "" : "s", nps + 1);
	out->tasks = dtf_calloc((size_t)world, sizeof(*out->tasks));
	if (!out->tasks)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	out->ntasks = world;
	out->count[DTF_TASK_WORKER] = world - nps;
	out->count[DTF_TASK_PS] = nps;
	for (int r = 0; r < world; r++) {
		int ps = r >= world - nps;
		out->tasks[r].type = ps ? DTF_TASK_PS : DTF_TASK_WORKER;
		out->tasks[r].index = ps ? r - (world - nps) : r;
	}
	return 0;
}

int dtf_cluster_check(const struct dtf_cluster *c, const struct dtf_job *job,
		      int rank, int world)
{
	if (c->ntasks != world)
		return bad("the cluster has %d task%s but %d MPI rank%s started\n"
			   "HINT: run mpirun -np %d, one rank per task",
			   c->ntasks, c->ntasks == 1 ? "" : "s", world,
			   world == 1 ? " was" : "s were", c->ntasks);
	if (c->self_rank != rank)
		return bad("rank %d was given task %s %d, which is rank %d "
			   "(ranks go chief, workers, ps, evaluator)",
			   rank, type_names[c->self.type], c->self.index,
			   c->self_rank);
	int ps_strategy = job->strategy.type == DTF_STRATEGY_PARAMETER_SERVER;
	if (c->count[DTF_TASK_PS] && !ps_strategy)
		return bad("the cluster has ps tasks but strategy.type is %s\n"
			   "HINT: use strategy.type: parameter_server",
			   dtf_strategy_name(job->strategy.type));
	if (ps_strategy && !c->count[DTF_TASK_PS])
		return bad("strategy parameter_server needs ps tasks in the cluster");
	return 0;
}

int dtf_cluster_is_replica(const struct dtf_cluster *c, int rank)
{
	return rank >= 0 && rank < c->ntasks &&
	       (c->tasks[rank].type == DTF_TASK_CHIEF ||
		c->tasks[rank].type == DTF_TASK_WORKER);
}

void dtf_cluster_print(const struct dtf_cluster *c, FILE *out)
{
	for (int r = 0; r < c->ntasks; r++) {
		const struct dtf_task *t = &c->tasks[r];
		int chief = r == 0 && (t->type == DTF_TASK_CHIEF ||
				       t->type == DTF_TASK_WORKER);
		fprintf(out, "rank %d: %s %d%s%s%s\n", r, type_names[t->type],
			t->index, t->addr[0] ? " " : "", t->addr,
			chief && t->type == DTF_TASK_WORKER ? " (chief)" : "");
	}
}
