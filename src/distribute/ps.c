/*
 * ps.c - strategy parameter_server: the ps ranks own the variables,
 * partitioned whole (largest first onto the least-loaded ps); workers
 * push gradients and get the variables back, point to point.
 *
 * Messages (tag MSG from a worker, tag REPLY from a ps) carry a header of
 * HDR floats before the packed values:
 *   worker -> ps: {GRAD, lr} + gradients | {PULL, 0} | {DONE, 0} |
 *                 {STOP, exit status}
 *   ps -> worker: {OK | SKIPPED | STOP | NONFINITE, status} + variables
 * The learning rate travels as the bits of its double (header floats 1
 * and 2): the ps applies the rate the worker computed, as one process
 * would, not its float rounding.
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/finite.h"
#include "core/log.h"
#include "distribute/strategy_impl.h"

#define HDR 3
#define TAG_MSG 7101
#define TAG_REPLY 7102

enum { MSG_GRAD = 1, MSG_PULL, MSG_DONE, MSG_STOP };
enum { REPLY_OK = 1, REPLY_SKIPPED, REPLY_STOP, REPLY_NONFINITE };

/* Greedy balanced partition: largest variable first onto the ps holding
 * the fewest floats so far (ties: lowest ps). */
static int partition(struct dtf_strategy *s)
{
	int *idx = dtf_calloc((size_t)s->nvars + 1, sizeof(int));
	size_t *load = dtf_calloc((size_t)s->ps.nps, sizeof(size_t));
	if (!idx || !load) {
		dtf_free(idx);
		dtf_free(load);
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	}
	for (int i = 0; i < s->nvars; i++)
		idx[i] = i;
	/* insertion sort by size, descending; variables are few */
	for (int i = 1; i < s->nvars; i++)
		for (int j = i; j > 0 && s->vars[idx[j]].n > s->vars[idx[j - 1]].n; j--) {
			int t = idx[j];
			idx[j] = idx[j - 1];
			idx[j - 1] = t;
		}
	for (int i = 0; i < s->nvars; i++) {
		int best = 0;
		for (int p = 1; p < s->ps.nps; p++)
			if (load[p] < load[best])
				best = p;
		s->vars[idx[i]].ps = best;
		load[best] += s->vars[idx[i]].n;
	}
	dtf_free(idx);
	dtf_free(load);
	return 0;
}

_Static_assert(2 * sizeof(float) == sizeof(double),
	       "the learning rate fills header floats 1 and 2");

/* The learning rate of a GRAD message (HDR floats). */
static double header_lr(const float *hdr)
{
	double lr;
	memcpy(&lr, hdr + 1, sizeof(lr));
	return lr;
}

static size_t ps_owned(const struct dtf_strategy *s, int p)
{
	size_t n = 0;
	for (int i = 0; i < s->nvars; i++)
		if (s->vars[i].ps == p)
			n += s->vars[i].n;
	return n;
}

int dtf_ps_setup(struct dtf_strategy *s)
{
	int rc = partition(s);
	if (rc < 0)
		return rc;
	if (s->role == DTF_TASK_PS) {
		s->ps.own_n = ps_owned(s, s->ps.ps_index);
		size_t row = HDR + s->ps.own_n;
		size_t bytes = s->ps.own_n * sizeof(float) + 4;
		s->ps.own_params = dtf_alloc_aligned(bytes);
		s->ps.own_sum = dtf_alloc_aligned(bytes);
		s->ps.own_reply = dtf_alloc_aligned(row * sizeof(float));
		s->ps.wbuf = dtf_alloc_aligned(row * (size_t)s->nreplicas *
					    sizeof(float));
		if (!s->ps.own_params || !s->ps.own_sum || !s->ps.own_reply ||
		    !s->ps.wbuf)
			return dtf_error(DTF_ERR_NOMEM, "out of memory on the ps");
		/* the variables it owns, in pack_own's order */
		struct dtf_update_range *from =
			dtf_malloc((size_t)(s->nvars + 1) * sizeof(*from));
		if (!from)
			return dtf_error(DTF_ERR_NOMEM, "out of memory on the ps");
		int nfrom = 0;
		for (int i = 0; i < s->nvars; i++)
			if (s->vars[i].ps == s->ps.ps_index)
				from[nfrom++] = (struct dtf_update_range){
					s->vars[i].off, s->vars[i].n};
		rc = s->upd.part_new(s->upd.ctx, from, nfrom, &s->ps.own_upd);
		dtf_free(from);
		return rc;
	}
	if (!s->replicas)
		return 0;
	s->ps.bufs = dtf_calloc((size_t)s->ps.nps, sizeof(*s->ps.bufs));
	size_t total = 0;
	for (int p = 0; s->ps.bufs && p < s->ps.nps; p++) {
		s->ps.bufs[p].n = ps_owned(s, p);
		s->ps.bufs[p].trigger = -1;
		total += 2 * (HDR + s->ps.bufs[p].n);
	}
	s->ps.mem = dtf_alloc_aligned(total * sizeof(float));
	if (!s->ps.bufs || !s->ps.mem)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	float *m = s->ps.mem;
	for (int p = 0; p < s->ps.nps; p++) {
		s->ps.bufs[p].send = m;
		m += HDR + s->ps.bufs[p].n;
		s->ps.bufs[p].recv = m;
		m += HDR + s->ps.bufs[p].n;
		s->ps.bufs[p].sreq = s->ps.bufs[p].rreq = MPI_REQUEST_NULL;
	}
	for (int i = 0; i < s->nvars; i++)
		if (s->vars[i].grad_node > s->ps.bufs[s->vars[i].ps].trigger)
			s->ps.bufs[s->vars[i].ps].trigger = s->vars[i].grad_node;
	if (s->o.accumulate_steps > 1 &&
	    !(s->acc = dtf_alloc_aligned(s->np * sizeof(float) + 4)))
		return dtf_error(DTF_ERR_NOMEM, "out of memory for accumulation");
	/* the ps rank keeps the optimizer state */
	s->upd.release(s->upd.ctx);
	return 0;
}

static int nonfinite(const float *x, size_t n)
{
	return dtf_nonfinite_body(n, x) != 0;
}

/* ---- parameter server: worker side ------------------------------------------ */

static int ps_send(struct dtf_strategy *s, int p)
{
	struct psbuf *b = &s->ps.bufs[p];
	float *out = b->send + HDR;
	for (int i = 0; i < s->nvars; i++) {
		const struct var *v = &s->vars[i];
		if (v->ps != p)
			continue;
		if (s->have_acc && s->acc)
			dtf_fusion_add_acc(s, v);
		memcpy(out, s->grads + v->off, v->n * sizeof(float));
		out += v->n;
	}
	b->send[0] = MSG_GRAD;
	memcpy(b->send + 1, &s->lr, sizeof(double));
	b->sent = 1;
	int dest = s->ps.first_ps + p;
	int err = MPI_Irecv(b->recv, (int)(HDR + b->n), MPI_FLOAT, dest,
			    TAG_REPLY, s->ps.pscomm, &b->rreq);
	if (err == MPI_SUCCESS)
		err = MPI_Isend(b->send, (int)(HDR + b->n), MPI_FLOAT, dest,
				TAG_MSG, s->ps.pscomm, &b->sreq);
	return err == MPI_SUCCESS ? 0 : dtf_comm_mpi_fail(err, "sending gradients to a ps");
}

int dtf_ps_finish(struct dtf_strategy *s, float *stats, int64_t step,
		  int *applied, double *comm_s)
{
	int rc, err;
	double t0 = now();
	/* the learning rate went with the gradients (dtf_strategy_backward) */
	for (int p = 0; p < s->ps.nps; p++)
		if (!s->ps.bufs[p].sent && (rc = ps_send(s, p)) < 0)
			return rc;
	s->have_acc = 0;
	int verdict = REPLY_OK, who = 0;
	for (int p = 0; p < s->ps.nps; p++) {
		struct psbuf *b = &s->ps.bufs[p];
		MPI_Wait(&b->sreq, MPI_STATUS_IGNORE);
		if ((err = MPI_Wait(&b->rreq, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
			return dtf_comm_mpi_fail(err, "receiving variables from a ps");
		int r = (int)b->recv[0];
		if (r > verdict || (r == REPLY_SKIPPED && verdict == REPLY_OK)) {
			verdict = r;
			who = (int)b->recv[1];
		}
		if (r != REPLY_OK)
			continue;
		const float *in = b->recv + HDR;
		for (int i = 0; i < s->nvars; i++) {
			const struct var *v = &s->vars[i];
			if (v->ps != p)
				continue;
			memcpy(s->params + v->off, in, v->n * sizeof(float));
			in += v->n;
		}
	}
	if (verdict == REPLY_STOP) {
		*comm_s += now() - t0;
		return dtf_error(who == 3   ? DTF_ERR_DATA
				 : who == 2 ? DTF_ERR_CONFIG
					    : DTF_ERR_REMOTE,
				 "stopping at step %lld: another worker failed",
				 (long long)step + 1);
	}
	if (verdict == REPLY_NONFINITE)
		return dtf_strategy_nonfinite_error(s, step);
	if (verdict == REPLY_SKIPPED) {
		dtf_strategy_note_skip(s, step);
		*applied = 0;
	}
	rc = comm_active(s) ? dtf_comm_allreduce_sum_f32(s->replicas, stats,
							 DTF_NSTATS)
			    : 0;
	*comm_s += now() - t0;
	return rc;
}

static int ps_message(struct dtf_strategy *s, float kind, float value)
{
	float hdr[HDR] = {kind, value};
	for (int p = 0; p < s->ps.nps; p++) {
		int err = MPI_Send(hdr, HDR, MPI_FLOAT, s->ps.first_ps + p,
				   TAG_MSG, s->ps.pscomm);
		if (err != MPI_SUCCESS)
			return dtf_comm_mpi_fail(err, "messaging a ps");
	}
	return 0;
}

int dtf_strategy_sync_params(struct dtf_strategy *s)
{
	if (s->kind != DTF_STRATEGY_PARAMETER_SERVER || !s->replicas ||
	    s->o.sync)
		return 0;
	int rc = dtf_comm_barrier(s->replicas);
	if (rc < 0)
		return rc;
	for (int p = 0; p < s->ps.nps; p++) {
		struct psbuf *b = &s->ps.bufs[p];
		float hdr[HDR] = {MSG_PULL, 0};
		int dest = s->ps.first_ps + p;
		MPI_TRY(MPI_Send(hdr, HDR, MPI_FLOAT, dest, TAG_MSG, s->ps.pscomm));
		MPI_TRY(MPI_Recv(b->recv, (int)(HDR + b->n), MPI_FLOAT, dest,
				 TAG_REPLY, s->ps.pscomm, MPI_STATUS_IGNORE));
		if ((int)b->recv[0] != REPLY_OK)
			return dtf_error(DTF_ERR_REMOTE,
					 "stopping: another worker failed");
		const float *in = b->recv + HDR;
		for (int i = 0; i < s->nvars; i++) {
			const struct var *v = &s->vars[i];
			if (v->ps != p)
				continue;
			memcpy(s->params + v->off, in, v->n * sizeof(float));
			in += v->n;
		}
	}
	return 0;
}

void dtf_strategy_end(struct dtf_strategy *s, int rc)
{
	if (!s || s->ps.ended || s->kind != DTF_STRATEGY_PARAMETER_SERVER ||
	    !s->replicas)
		return;
	s->ps.ended = 1;
	int status = rc < 0 ? dtf_error_exit_status(rc) : 0;
	ps_message(s, rc < 0 ? MSG_STOP : MSG_DONE,
		   (float)(status ? status : (rc < 0 ? 1 : 0)));
}

/* ---- parameter server: ps side ------------------------------------------------ */

struct serve {
	int nw, active, stop_status, pending;
	MPI_Request *req;
	int *waiting, *done;
	int64_t *steps;
};

static int reply(struct dtf_strategy *s, int w, int verdict, int status)
{
	float *r = s->ps.own_reply;
	r[0] = (float)verdict;
	r[1] = (float)status;
	memcpy(r + HDR, s->ps.own_params, s->ps.own_n * sizeof(float));
	int n = verdict == REPLY_OK ? (int)(HDR + s->ps.own_n) : HDR;
	MPI_TRY(MPI_Send(r, n, MPI_FLOAT, w, TAG_REPLY, s->ps.pscomm));
	return 0;
}

static int repost(struct dtf_strategy *s, struct serve *sv, int w)
{
	size_t row = HDR + s->ps.own_n;
	MPI_TRY(MPI_Irecv(s->ps.wbuf + row * (size_t)w, (int)row, MPI_FLOAT, w,
			  TAG_MSG, s->ps.pscomm, &sv->req[w]));
	return 0;
}

/* The worker's rows start with the header; pack vars into own order. */
static void pack_own(struct dtf_strategy *s, float *dst, const float *full)
{
	for (int i = 0; i < s->nvars; i++) {
		const struct var *v = &s->vars[i];
		if (v->ps != s->ps.ps_index)
			continue;
		memcpy(dst, full + v->off, v->n * sizeof(float));
		dst += v->n;
	}
}

/* Apply own_sum (or a worker's row) at lr; returns the reply verdict. */
static int update(struct dtf_strategy *s, float *grad, double lr,
		  int agree_ps)
{
	int bad = nonfinite(grad, s->ps.own_n);
	if (agree_ps && s->ps.nps > 1) /* the ps ranks decide together */
		MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX,
			      s->ps.ps_only);
	if (bad)
		return s->o.on_nonfinite == DTF_NONFINITE_FAIL
			       ? REPLY_NONFINITE
			       : REPLY_SKIPPED;
	s->ps.own_upd.apply(s->ps.own_upd.ctx, s->ps.own_params, grad, lr);
	return REPLY_OK;
}

static int64_t min_steps(const struct serve *sv)
{
	int64_t m = INT64_MAX;
	for (int w = 0; w < sv->nw; w++)
		if (!sv->done[w] && sv->steps[w] < m)
			m = sv->steps[w];
	return m;
}

static int serve_loop(struct dtf_strategy *s, struct serve *sv)
{
	size_t row = HDR + s->ps.own_n;
	int sync = s->o.sync, rc;
	int64_t staleness = s->o.max_staleness;
	for (int w = 0; w < sv->nw; w++)
		if ((rc = repost(s, sv, w)) < 0)
			return rc;
	while (sv->active > 0) {
		/* poll with short sleeps rather than MPI_Waitany, whose busy
		 * wait would take a core from the workers when ranks share
		 * cores */
		int w, flag = 0;
		for (;;) {
			MPI_TRY(MPI_Testany(sv->nw, sv->req, &w, &flag,
					    MPI_STATUS_IGNORE));
			if (flag)
				break;
			struct timespec nap = {0, 50000}; /* 50 us */
			nanosleep(&nap, NULL);
		}
		if (w == MPI_UNDEFINED)
			break;
		float *msg = s->ps.wbuf + row * (size_t)w;
		int kind = (int)msg[0];
		if (kind == MSG_PULL) {
			if ((rc = reply(s, w, REPLY_OK, 0)) < 0 ||
			    (rc = repost(s, sv, w)) < 0)
				return rc;
		} else if (kind == MSG_DONE || kind == MSG_STOP) {
			sv->active--;
			sv->done[w] = 1;
			if (kind == MSG_STOP && !sv->stop_status)
				sv->stop_status = msg[1] > 0 ? (int)msg[1] : 1;
		} else if (sv->stop_status) {
			if ((rc = reply(s, w, REPLY_STOP, sv->stop_status)) < 0 ||
			    (rc = repost(s, sv, w)) < 0)
				return rc;
		} else if (sync) {
			sv->waiting[w] = 1;
			sv->pending++;
		} else {
			int v = update(s, msg + HDR, header_lr(msg), 0);
			sv->steps[w]++;
			if (v == REPLY_NONFINITE)
				sv->stop_status = 1;
			if (v != REPLY_OK || sv->steps[w] - min_steps(sv) <= staleness) {
				if ((rc = reply(s, w, v, 1)) < 0 ||
				    (rc = repost(s, sv, w)) < 0)
					return rc;
			} else {
				sv->waiting[w] = 1; /* too far ahead: waits */
			}
		}
		if (sync && !sv->stop_status && sv->pending > 0 &&
		    sv->pending == sv->active) {
			/* one synchronous round: sum in worker order */
			double lr = 0;
			memset(s->ps.own_sum, 0, s->ps.own_n * sizeof(float));
			for (int u = 0; u < sv->nw; u++) {
				if (!sv->waiting[u])
					continue;
				const float *g = s->ps.wbuf + row * (size_t)u;
				lr = header_lr(g);
				for (size_t i = 0; i < s->ps.own_n; i++)
					s->ps.own_sum[i] += g[HDR + i];
			}
			int v = update(s, s->ps.own_sum, lr, 1);
			if (v == REPLY_NONFINITE)
				sv->stop_status = 1;
			for (int u = 0; u < sv->nw; u++) {
				if (!sv->waiting[u])
					continue;
				sv->waiting[u] = 0;
				if ((rc = reply(s, u, v, 1)) < 0 ||
				    (rc = repost(s, sv, u)) < 0)
					return rc;
			}
			sv->pending = 0;
		}
		/* release waiting workers: all of them after a failure, the
		 * ones back within max_staleness otherwise (async) */
		for (int u = 0; u < sv->nw; u++) {
			if (!sv->waiting[u])
				continue;
			int release = sv->stop_status ||
				      (!sync && sv->steps[u] - min_steps(sv) <=
							staleness);
			if (!release)
				continue;
			sv->waiting[u] = 0;
			if (sync)
				sv->pending--;
			if ((rc = reply(s, u, sv->stop_status ? REPLY_STOP : REPLY_OK,
					sv->stop_status)) < 0 ||
			    (rc = repost(s, sv, u)) < 0)
				return rc;
		}
	}
	return 0;
}

int dtf_strategy_serve(struct dtf_strategy *s)
{
	struct serve sv;
	memset(&sv, 0, sizeof(sv));
	sv.nw = s->nreplicas;
	sv.active = sv.nw;
	sv.req = dtf_calloc((size_t)sv.nw, sizeof(*sv.req));
	sv.waiting = dtf_calloc((size_t)sv.nw, sizeof(int));
	sv.done = dtf_calloc((size_t)sv.nw, sizeof(int));
	sv.steps = dtf_calloc((size_t)sv.nw, sizeof(int64_t));
	int rc = 0;
	if (!sv.req || !sv.waiting || !sv.done || !sv.steps) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (int w = 0; w < sv.nw; w++)
		sv.req[w] = MPI_REQUEST_NULL;
	pack_own(s, s->ps.own_params, s->params);
	dtf_log(DTF_LOG_DEBUG, 1, "ps %d: serving %zu floats to %d workers",
		s->ps.ps_index, s->ps.own_n, sv.nw);
	rc = serve_loop(s, &sv);
	for (int w = 0; w < sv.nw; w++)
		if (sv.req[w] != MPI_REQUEST_NULL) {
			MPI_Cancel(&sv.req[w]);
			MPI_Request_free(&sv.req[w]);
		}
	if (rc == 0 && sv.stop_status)
		rc = dtf_error(sv.stop_status == 3   ? DTF_ERR_DATA
			       : sv.stop_status == 2 ? DTF_ERR_CONFIG
						     : DTF_ERR_REMOTE,
			       "ps %d: stopping: a worker failed", s->ps.ps_index);
out:
	dtf_free(sv.req);
	dtf_free(sv.waiting);
	dtf_free(sv.done);
	dtf_free(sv.steps);
	return rc;
}

void dtf_ps_describe(const struct dtf_strategy *s, char *buf, size_t size)
{
	int n = snprintf(buf, size, "%d ps, %s; variables per ps (floats):",
			 s->ps.nps, s->o.sync ? "sync" : "async");
	for (int p = 0; p < s->ps.nps && n > 0 && (size_t)n < size; p++)
		n += snprintf(buf + n, size - (size_t)n, " %zu",
			      ps_owned(s, p));
}

/* A new step: nothing sent yet. */
void dtf_ps_begin(struct dtf_strategy *s)
{
	for (int p = 0; s->ps.bufs && p < s->ps.nps; p++)
		s->ps.bufs[p].sent = 0;
}

/* After backward node `node`: push each ps's gradients once they are all
 * final. */
void dtf_ps_after_node(struct dtf_strategy *s, int node)
{
	for (int p = 0; p < s->ps.nps; p++)
		if (!s->ps.bufs[p].sent && s->ps.bufs[p].trigger <= node) {
			int rc = ps_send(s, p);
			if (rc < 0 && !s->err)
				s->err = rc;
		}
}

/* dtf_strategy_reduce_buffer: one push and one pull through ps 0 (the
 * others idle). */
int dtf_ps_reduce_buffer(struct dtf_strategy *s, float *buf, size_t n)
{
	int ps = s->ps.first_ps;
	if (s->role == DTF_TASK_PS) {
		if (s->rank != ps)
			return 0;
		for (int w = 0; w < s->nreplicas; w++) {
			MPI_TRY(MPI_Recv(buf, (int)n, MPI_FLOAT, w, TAG_MSG,
					 s->ps.pscomm, MPI_STATUS_IGNORE));
			MPI_TRY(MPI_Send(buf, (int)n, MPI_FLOAT, w,
					 TAG_REPLY, s->ps.pscomm));
		}
		return 0;
	}
	MPI_TRY(MPI_Send(buf, (int)n, MPI_FLOAT, ps, TAG_MSG, s->ps.pscomm));
	MPI_TRY(MPI_Recv(buf, (int)n, MPI_FLOAT, ps, TAG_REPLY, s->ps.pscomm,
			 MPI_STATUS_IGNORE));
	return 0;
}

void dtf_ps_init(struct dtf_ps *ps)
{
	memset(ps, 0, sizeof(*ps));
	ps->pscomm = ps->ps_only = MPI_COMM_NULL;
}

void dtf_ps_deinit(struct dtf_ps *ps)
{
	dtf_strategy_free_comm(&ps->pscomm);
	dtf_strategy_free_comm(&ps->ps_only);
	if (ps->own_upd.free)
		ps->own_upd.free(ps->own_upd.ctx);
	dtf_free(ps->bufs);
	dtf_free(ps->mem);
	dtf_free(ps->own_params);
	dtf_free(ps->own_sum);
	dtf_free(ps->own_reply);
	dtf_free(ps->wbuf);
	memset(ps, 0, sizeof(*ps));
	ps->pscomm = ps->ps_only = MPI_COMM_NULL;
}
