/*
 * comm.c - MPI collectives with errors turned into DTF_ERR_MPI.
 *
 * MPI errors are returned, not fatal (MPI_ERRORS_RETURN on the world
 * communicator), so a failed call surfaces as a message naming the call.
 */
#include "distribute/comm.h"
#include "distribute/comm_impl.h"

#include <mpi.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

#define CHUNK ((size_t)4 << 20) /* floats per allreduce call */

int dtf_comm_mpi_fail(int err, const char *call)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;
	MPI_Error_string(err, msg, &len);
	return dtf_error(DTF_ERR_MPI, "%s failed: %s", call, msg);
}

#define mpi_fail dtf_comm_mpi_fail

int dtf_comm_split_node(MPI_Comm in, int rank, MPI_Comm *out)
{
	const char *fake = getenv("DTF_TEST_RANKS_PER_NODE");
	long per = fake ? strtol(fake, NULL, 10) : 0;
	int rc = per > 0 ? MPI_Comm_split(in, (int)(rank / per), rank, out)
			 : MPI_Comm_split_type(in, MPI_COMM_TYPE_SHARED, rank,
					       MPI_INFO_NULL, out);
	return rc == MPI_SUCCESS ? 0 : mpi_fail(rc, "MPI_Comm_split_type");
}

/* Fill rank, size and the node fields of c from c->comm (a collective). */
static int learn_place(struct dtf_comm *c)
{
	MPI_Comm local;
	MPI_Comm_rank(c->comm, &c->rank);
	MPI_Comm_size(c->comm, &c->size);
	int rc = dtf_comm_split_node(c->comm, c->rank, &local);
	if (rc < 0)
		return rc;
	MPI_Comm_rank(local, &c->local_rank);
	MPI_Comm_size(local, &c->local_size);
	MPI_Comm_free(&local);
	/* nodes = number of ranks that are local rank 0 */
	int leader = c->local_rank == 0;
	MPI_TRY(MPI_Allreduce(&leader, &c->num_nodes, 1, MPI_INT, MPI_SUM,
			      c->comm));
	return 0;
}

int dtf_comm_init(int *argc, char ***argv, struct dtf_comm **out)
{
	struct dtf_comm *c = dtf_calloc(1, sizeof(*c));
	if (!c)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	int inited = 0, provided;
	MPI_Initialized(&inited);
	if (!inited) {
		if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED,
				    &provided) != MPI_SUCCESS) {
			dtf_free(c);
			return dtf_error(DTF_ERR_MPI, "MPI_Init_thread failed");
		}
		c->started_mpi = 1;
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	c->comm = MPI_COMM_WORLD;
	int len = 0;
	MPI_Get_processor_name(c->host, &len);
	int rc = learn_place(c);
	if (rc < 0) {
		dtf_comm_finalize(c);
		return rc;
	}
	*out = c;
	return 0;
}

int dtf_comm_split(struct dtf_comm *c, int color, struct dtf_comm **out)
{
	*out = NULL;
	MPI_Comm sub;
	MPI_TRY(MPI_Comm_split(c->comm, color < 0 ? MPI_UNDEFINED : color,
			       c->rank, &sub));
	if (sub == MPI_COMM_NULL)
		return 0;
	struct dtf_comm *s = dtf_calloc(1, sizeof(*s));
	if (!s) {
		MPI_Comm_free(&sub);
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	}
	MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
	s->comm = sub;
	memcpy(s->host, c->host, sizeof(s->host));
	int rc = learn_place(s);
	if (rc < 0) {
		dtf_comm_finalize(s);
		return rc;
	}
	*out = s;
	return 0;
}

void dtf_comm_finalize(struct dtf_comm *c)
{
	if (!c)
		return;
	int finalized = 0;
	MPI_Finalized(&finalized);
	if (!finalized && c->comm != MPI_COMM_WORLD &&
	    c->comm != MPI_COMM_NULL)
		MPI_Comm_free(&c->comm);
	if (c->started_mpi && !finalized)
		MPI_Finalize();
	dtf_free(c);
}

int dtf_comm_rank(const struct dtf_comm *c) { return c->rank; }
int dtf_comm_size(const struct dtf_comm *c) { return c->size; }
int dtf_comm_local_rank(const struct dtf_comm *c) { return c->local_rank; }
int dtf_comm_local_size(const struct dtf_comm *c) { return c->local_size; }
int dtf_comm_num_nodes(const struct dtf_comm *c) { return c->num_nodes; }
const char *dtf_comm_host(const struct dtf_comm *c) { return c->host; }

static int allreduce(MPI_Comm comm, void *buf, size_t n, size_t elem,
		     MPI_Datatype type, MPI_Op op)
{
	char *p = buf;
	for (size_t off = 0; off < n; off += CHUNK) {
		size_t len = n - off < CHUNK ? n - off : CHUNK;
		MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, p + off * elem, (int)len,
				      type, op, comm));
	}
	return 0;
}

int dtf_comm_allreduce_sum_f32(struct dtf_comm *c, float *buf, size_t n)
{
	if (!c || c->size == 1)
		return 0;
	return allreduce(c->comm, buf, n, sizeof(float), MPI_FLOAT, MPI_SUM);
}

int dtf_comm_allreduce_sum_f64(struct dtf_comm *c, double *buf, size_t n)
{
	if (!c || c->size == 1)
		return 0;
	return allreduce(c->comm, buf, n, sizeof(double), MPI_DOUBLE, MPI_SUM);
}

int dtf_comm_allreduce_min_i64(struct dtf_comm *c, int64_t *buf, size_t n)
{
	if (!c || c->size == 1)
		return 0;
	return allreduce(c->comm, buf, n, sizeof(int64_t), MPI_INT64_T, MPI_MIN);
}

int dtf_comm_allreduce_max_i64(struct dtf_comm *c, int64_t *buf, size_t n)
{
	if (!c || c->size == 1)
		return 0;
	return allreduce(c->comm, buf, n, sizeof(int64_t), MPI_INT64_T, MPI_MAX);
}

int dtf_comm_bcast_f32(struct dtf_comm *c, float *buf, size_t n, int root)
{
	if (!c || c->size == 1)
		return 0;
	for (size_t off = 0; off < n; off += CHUNK) {
		size_t len = n - off < CHUNK ? n - off : CHUNK;
		MPI_TRY(MPI_Bcast(buf + off, (int)len, MPI_FLOAT, root,
				  c->comm));
	}
	return 0;
}

int dtf_comm_bcast_bytes(struct dtf_comm *c, void *buf, size_t n, int root)
{
	if (!c || c->size == 1)
		return 0;
	char *p = buf;
	for (size_t off = 0; off < n; off += CHUNK) {
		size_t len = n - off < CHUNK ? n - off : CHUNK;
		MPI_TRY(MPI_Bcast(p + off, (int)len, MPI_BYTE, root,
				  c->comm));
	}
	return 0;
}

int dtf_comm_agree(struct dtf_comm *c, int status, int *worst, int *who)
{
	struct {
		int value, rank;
	} in = {status, c ? c->rank : 0}, out = in;
	if (c && c->size > 1)
		MPI_TRY(MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MAXLOC,
				      c->comm));
	*worst = out.value;
	*who = out.rank;
	return 0;
}

int dtf_comm_gather_i32(struct dtf_comm *c, const int32_t *send, int n,
			int32_t *recv, int root)
{
	if (!c || c->size == 1) {
		memcpy(recv, send, (size_t)n * sizeof(*send));
		return 0;
	}
	MPI_TRY(MPI_Gather(send, n, MPI_INT32_T, recv, n, MPI_INT32_T, root,
			   c->comm));
	return 0;
}

int dtf_comm_barrier(struct dtf_comm *c)
{
	if (c && c->size > 1)
		MPI_TRY(MPI_Barrier(c->comm));
	return 0;
}

/* ---- notices ------------------------------------------------------------ */

/* A tag no other message on the world communicator uses (the ps traffic
 * runs on a duplicate of it, collectives never match point-to-point). */
#define TAG_NOTICE 7201

struct dtf_comm_notice {
	MPI_Request req;
	int64_t msg[2];
	int arrived;
};

int dtf_comm_notice_post(struct dtf_comm *c, int from,
			 struct dtf_comm_notice **out)
{
	*out = NULL;
	struct dtf_comm_notice *n = dtf_calloc(1, sizeof(*n));
	if (!n)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	int rc = MPI_Irecv(n->msg, 2, MPI_INT64_T, from, TAG_NOTICE, c->comm,
			   &n->req);
	if (rc != MPI_SUCCESS) {
		dtf_free(n);
		return mpi_fail(rc, "MPI_Irecv");
	}
	*out = n;
	return 0;
}

int dtf_comm_notice_test(struct dtf_comm_notice *n, int *arrived,
			 int64_t msg[2])
{
	if (!n->arrived) {
		int flag = 0;
		MPI_TRY(MPI_Test(&n->req, &flag, MPI_STATUS_IGNORE));
		n->arrived = flag;
	}
	*arrived = n->arrived;
	if (n->arrived) {
		msg[0] = n->msg[0];
		msg[1] = n->msg[1];
	}
	return 0;
}

void dtf_comm_notice_free(struct dtf_comm_notice *n)
{
	if (!n)
		return;
	int finalized = 0;
	MPI_Finalized(&finalized);
	if (!n->arrived && !finalized) {
		MPI_Cancel(&n->req);
		MPI_Wait(&n->req, MPI_STATUS_IGNORE);
	}
	dtf_free(n);
}

int dtf_comm_notice_send(struct dtf_comm *c, int to, const int64_t msg[2])
{
	MPI_TRY(MPI_Send(msg, 2, MPI_INT64_T, to, TAG_NOTICE, c->comm));
	return 0;
}

_Noreturn void dtf_comm_abort(struct dtf_comm *c, int status)
{
	(void)c;
	MPI_Abort(MPI_COMM_WORLD, status);
	abort(); /* MPI_Abort does not return */
}
