/*
 * tf_config.c - TF_CONFIG (strict JSON, read with Jansson) -> cluster.
 *
 * Every check happens here, in one process, before MPI is asked anything,
 * so a bad TF_CONFIG on any rank becomes an error that the ranks agree on
 * (dtf_comm_agree) instead of a rank missing from a collective.
 */
#include "config/tf_config.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <jansson.h>

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

/* Rank of (type, index): chief, workers, ps, evaluator. */
static int rank_of(const int count[DTF_TASK_COUNT_], int type, int index)
{
	int r = 0;
	for (int t = 0; t < type; t++)
		r += count[t];
	return r + index;
}

/* The host of "host:port", "[v6]:port" or a bare host into buf ("" when
 * it does not fit). */
static void addr_host(const char *addr, char *buf, size_t size)
{
	const char *h = addr, *end;
	if (*h == '[') {
		h++;
		end = strchr(h, ']');
		if (!end)
			end = h + strlen(h);
	} else {
		end = strrchr(h, ':');
		/* two colons or more, no brackets: a bare IPv6 address */
		if (!end || strchr(h, ':') != end)
			end = h + strlen(h);
	}
	size_t n = (size_t)(end - h);
	if (n >= size)
		n = 0;
	memcpy(buf, h, n);
	buf[n] = 0;
}

/* 1 for a loopback host: localhost (and names under .localhost, RFC
 * 6761), 127.0.0.0/8, ::1, ::ffff:127.x.x.x. */
static int is_loopback(const char *host)
{
	size_t n = strlen(host);
	if (!strcasecmp(host, "localhost") ||
	    (n > 10 && !strcasecmp(host + n - 10, ".localhost")))
		return 1;
	unsigned char a[16];
	if (inet_pton(AF_INET, host, a) == 1)
		return a[0] == 127;
	if (inet_pton(AF_INET6, host, a) == 1) {
		static const unsigned char one[16] = {[15] = 1};
		static const unsigned char v4[12] = {[10] = 0xff, [11] = 0xff};
		return !memcmp(a, one, 16) ||
		       (!memcmp(a, v4, 12) && a[12] == 127);
	}
	return 0;
}

/* A loopback address for a task of a cluster that names more than one
 * host (every loopback address counting as one host): the other hosts'
 * tasks cannot reach it there.  All tasks on loopback addresses (one
 * machine) is fine. */
static int check_loopback(const struct dtf_cluster *c)
{
	int loop = -1, other = -1;
	char h[DTF_ADDR_MAX];
	for (int i = 0; i < c->ntasks; i++) {
		addr_host(c->tasks[i].addr, h, sizeof(h));
		if (is_loopback(h)) {
			if (loop < 0)
				loop = i;
		} else if (other < 0) {
			other = i;
		}
	}
	if (loop < 0 || other < 0)
		return 0;
	const struct dtf_task *l = &c->tasks[loop], *o = &c->tasks[other];
	return bad("cluster.%s[%d] is '%s', a loopback address, but the cluster "
		   "spans more than one host (cluster.%s[%d] is '%s'): the "
		   "other hosts cannot reach it there\n"
		   "HINT: give every task its host's name or address as the "
		   "other hosts reach it",
		   type_names[l->type], l->index, l->addr,
		   type_names[o->type], o->index, o->addr);
}

static int read_cluster(json_t *cl, struct dtf_cluster *c)
{
	if (!json_is_object(cl))
		return bad("\"cluster\" must be an object mapping task types to lists of \"host:port\"");
	json_t *lists[DTF_TASK_COUNT_] = {0};
	const char *k;
	json_t *v;
	json_object_foreach(cl, k, v) {
		int t = type_from_name(k);
		if (t < 0)
			return bad("unknown task type '%s' in \"cluster\" (known: chief, worker, ps, evaluator)",
				   k);
		if (!json_is_array(v))
			return bad("cluster.%s must be a list of \"host:port\" strings", k);
		lists[t] = v;
		c->count[t] = (int)json_array_size(v);
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
			const char *a =
				json_string_value(json_array_get(lists[t], (size_t)i));
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
	return check_loopback(c);
}

static int read_task(json_t *tk, struct dtf_cluster *c)
{
	if (!json_is_object(tk))
		return bad("\"task\" must be an object {\"type\": ..., \"index\": ...}");
	const char *type = json_string_value(json_object_get(tk, "type"));
	json_t *index = json_object_get(tk, "index");
	if (!type)
		return bad("task.type is missing or not a string");
	int t = type_from_name(type);
	if (t < 0)
		return bad("unknown task type '%s' (known: chief, worker, ps, evaluator)",
			   type);
	if (!index)
		return bad("task.index is missing");
	if (json_is_string(index))
		return bad("task.index must be a JSON number, got the string \"%s\"",
			   json_string_value(index));
	if (json_is_real(index))
		return bad("task.index must be an integer, got %g (a JSON number with a fraction or an exponent is not one)",
			   json_real_value(index));
	if (!json_is_integer(index))
		return bad("task.index must be a JSON number (an integer)");
	json_int_t v = json_integer_value(index);
	if (v < 0)
		return bad("task.index %lld is negative", (long long)v);
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
		return bad("task index %lld is out of range: cluster.%s has %d task%s",
			   (long long)v, type, c->count[t],
			   c->count[t] == 1 ? "" : "s");
	c->self.type = (enum dtf_task_type)t;
	c->self.index = (int)v;
	strcpy(c->self.addr, c->tasks[rank_of(c->count, t, (int)v)].addr);
	c->self_rank = rank_of(c->count, t, (int)v);
	return 0;
}

/*
 * The byte (counting from 1) where Jansson's error is: its position is just
 * past the token the message names ("... near 'TOKEN'"), so step back to
 * the token's first byte when the text there is that token.
 */
static size_t error_byte(const char *json, const json_error_t *e)
{
	size_t pos = (size_t)e->position;
	const char *near = strstr(e->text, " near '");
	size_t n = near ? strlen(near + 7) : 0;
	if (n < 1 || near[7 + n - 1] != '\'')
		return pos;
	n--; /* the token, without the closing quote */
	if (n == 0 || n > pos || pos > strlen(json) ||
	    memcmp(json + pos - n, near + 7, n))
		return pos;
	return pos - n + 1;
}

int dtf_cluster_parse(const char *json, struct dtf_cluster *out)
{
	json_error_t e;
	int rc;

	memset(out, 0, sizeof(*out));
	out->from_tf_config = 1;
	/* strict RFC 8259: no trailing text (Jansson's default), no
	 * duplicate keys, no comments or single quotes (never accepted) */
	json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &e);
	if (!root)
		return bad("byte %zu: not valid JSON: %s", error_byte(json, &e),
			   e.text);
	json_t *cl, *tk;
	if (!json_is_object(root)) {
		rc = bad("expected a JSON object {\"cluster\": ..., \"task\": ...}");
		goto out;
	}
	if (!(cl = json_object_get(root, "cluster"))) {
		rc = bad("missing \"cluster\"");
		goto out;
	}
	if (!(tk = json_object_get(root, "task"))) {
		rc = bad("missing \"task\"");
		goto out;
	}
	if ((rc = read_cluster(cl, out)) < 0)
		goto out;
	rc = read_task(tk, out);
out:
	json_decref(root);
	if (rc < 0) {
		dtf_free(out->tasks);
		memset(out, 0, sizeof(*out));
	}
	return rc;
}

/* train.clipnorm scales by the norm over every gradient, which no ps of
 * several sees: each holds and updates only its own variables. */
static int check_ps_clipnorm(const struct dtf_job *job, int nps)
{
	if (nps <= 1 || !(job->train.clipnorm > 0))
		return 0;
	const char *w = job->train.clipnorm_where;
	return dtf_error(DTF_ERR_CONFIG,
			 "%s%strain.clipnorm: clipping by the global norm needs every gradient, and each of the %d ps ranks of strategy parameter_server updates only its own variables\n"
			 "HINT: use one ps rank (strategy.num_ps: 1, or one ps task in TF_CONFIG), or another strategy",
			 w, w[0] ? ": " : "", nps);
}

int dtf_cluster_from_job(const struct dtf_job *job, int world,
			 struct dtf_cluster *out)
{
	memset(out, 0, sizeof(*out));
	int nps = job->strategy.type == DTF_STRATEGY_PARAMETER_SERVER
			  ? job->strategy.num_ps
			  : 0;
	const char *w = job->strategy.num_ps_where[0]
				? job->strategy.num_ps_where
				: job->strategy.type_where;
	if (nps > 0 && nps >= world)
		return dtf_error(DTF_ERR_CONFIG,
				 "%s%sstrategy.num_ps: %d ps rank%s leave%s no worker among the %d rank%s\n"
				 "HINT: start more ranks (mpirun -np %d or more), or lower num_ps",
				 w, w[0] ? ": " : "", nps, nps == 1 ? "" : "s",
				 nps == 1 ? "s" : "", world, world == 1 ? "" : "s",
				 nps + 1);
	int rc = check_ps_clipnorm(job, nps);
	if (rc < 0)
		return rc;
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
	return check_ps_clipnorm(job, c->count[DTF_TASK_PS]);
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
