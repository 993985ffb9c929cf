/*
 * comm.c - MPI collectives with errors turned into DTF_ERR_MPI.
 *
 * MPI errors are returned, not fatal (MPI_ERRORS_RETURN on the world
 * communicator), so a failed call surfaces as a message naming the call.
 */
#include "distribute/comm.h"
#include "distribute/comm_impl.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <mpi.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"

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

static int check_slurm_pmi(void); /* below, with the other launch checks */

int dtf_comm_init(int *argc, char ***argv, struct dtf_comm **out)
{
	struct dtf_comm *c = dtf_calloc(1, sizeof(*c));
	if (!c)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	int inited = 0, provided;
	MPI_Initialized(&inited);
	if (!inited) {
		int rc = check_slurm_pmi();
		if (rc < 0) {
			dtf_free(c);
			return rc;
		}
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

/* ---- where the ranks run ------------------------------------------------ */

/* One rank's place as the others see it; exchanged by MPI_Allgather as
 * bytes (fixed size, NUL-terminated strings). */
struct place {
	char host[MPI_MAX_PROCESSOR_NAME];
	char iface[IF_NAMESIZE + 1];
	char addr[INET6_ADDRSTRLEN];
	int loopback; /* the host's name resolves to a loopback address */
	int resolved; /* the address is the name's (else the first interface's) */
};

static int is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		uint32_t a = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
		return (a >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_LOOPBACK(
			&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return 0;
}

static int same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return 0;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->sa_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			       &((const struct sockaddr_in6 *)b)->sin6_addr,
			       sizeof(struct in6_addr));
	return 0;
}

static void addr_text(const struct sockaddr *sa, char *buf, size_t n)
{
	const void *bin = sa->sa_family == AF_INET
				  ? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
				  : (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
	if (!inet_ntop(sa->sa_family, bin, buf, (socklen_t)n))
		snprintf(buf, n, "?");
}

/* This process's place: the address its host name resolves to (IPv4
 * first), and the interface that holds it ("lo" for any loopback
 * address); a name that does not resolve gets the first non-loopback
 * interface that is up, with resolved = 0. */
static void learn_address(const char *host, struct place *p)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->host, sizeof(p->host), "%s", host);
	snprintf(p->iface, sizeof(p->iface), "?");
	snprintf(p->addr, sizeof(p->addr), "?");
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM}, *res = NULL;
	const struct sockaddr *want = NULL;
	if (getaddrinfo(host, NULL, &hints, &res) == 0) {
		for (const struct addrinfo *ai = res; ai && !want; ai = ai->ai_next)
			if (ai->ai_family == AF_INET)
				want = ai->ai_addr;
		for (const struct addrinfo *ai = res; ai && !want; ai = ai->ai_next)
			if (ai->ai_family == AF_INET6)
				want = ai->ai_addr;
	}
	struct ifaddrs *ifs = NULL;
	if (getifaddrs(&ifs) != 0)
		ifs = NULL;
	if (want) {
		p->resolved = 1;
		p->loopback = is_loopback(want);
		addr_text(want, p->addr, sizeof(p->addr));
		for (const struct ifaddrs *i = ifs; i; i = i->ifa_next)
			if (i->ifa_addr && (same_addr(i->ifa_addr, want) ||
					    (p->loopback &&
					     (i->ifa_flags & IFF_LOOPBACK)))) {
				snprintf(p->iface, sizeof(p->iface), "%s",
					 i->ifa_name);
				break;
			}
	} else {
		for (const struct ifaddrs *i = ifs; i; i = i->ifa_next)
			if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
			    (i->ifa_flags & IFF_UP) &&
			    !(i->ifa_flags & IFF_LOOPBACK)) {
				snprintf(p->iface, sizeof(p->iface), "%s",
					 i->ifa_name);
				addr_text(i->ifa_addr, p->addr, sizeof(p->addr));
				break;
			}
	}
	if (ifs)
		freeifaddrs(ifs);
	if (res)
		freeaddrinfo(res);
}

/* The number of tasks Slurm started in this step (SLURM_STEP_NUM_TASKS, else
 * SLURM_NTASKS) when this process is one of them (SLURM_PROCID), else 0;
 * *name gets the variable's name. */
static long slurm_tasks(const char **name, const char **value)
{
	const char *n = getenv("SLURM_STEP_NUM_TASKS");
	*name = "SLURM_STEP_NUM_TASKS";
	if (!n || !*n) {
		n = getenv("SLURM_NTASKS");
		*name = "SLURM_NTASKS";
	}
	*value = n;
	if (!n || !getenv("SLURM_PROCID"))
		return 0;
	return strtol(n, NULL, 10);
}

static const char how_to_srun[] =
	"launch with `srun --mpi=pmix dtf-train ...` (Open MPI's PMIx; Debian's Open MPI has no PMI-2), or with mpirun inside the allocation";

/* Before MPI_Init: Slurm started several tasks but gave this one nothing
 * to join the others by (srun --mpi=none).  Open MPI's MPI_Init aborts such
 * a direct launch with a message of its own, or none when srun kills the
 * task first; say it here, the same on every task. */
static int check_slurm_pmi(void)
{
	const char *name, *n;
	long tasks = slurm_tasks(&name, &n);
	if (tasks <= 1)
		return 0;
	static const char *const joins[] = {"PMIX_RANK", "PMIX_NAMESPACE",
					    "PMI_RANK", "PMI_FD",
					    "OMPI_COMM_WORLD_SIZE"};
	for (size_t i = 0; i < sizeof(joins) / sizeof(joins[0]); i++)
		if (getenv(joins[i]))
			return 0;
	return dtf_error(DTF_ERR_USAGE,
			 "Slurm started %ld tasks (%s=%s) but gave this one no PMI to join the others by (none of PMIX_RANK, PMI_RANK, OMPI_COMM_WORLD_SIZE is set: srun --mpi=none, or MpiDefault=none): each task would train alone; %s",
			 tasks, name, n, how_to_srun);
}

/* After MPI_Init: Slurm started several tasks, and each is an MPI world of
 * one (a PMI this Open MPI does not speak). */
static int check_slurm(const struct dtf_comm *c)
{
	const char *name, *n;
	long tasks = slurm_tasks(&name, &n);
	if (c->size != 1 || tasks <= 1)
		return 0;
	return dtf_error(DTF_ERR_USAGE,
			 "MPI started a world of 1 rank, but Slurm started %ld tasks (%s=%s): each task would train alone; %s",
			 tasks, name, n, how_to_srun);
}

int dtf_comm_check_launch(struct dtf_comm *c)
{
	int rc = check_slurm(c);
	if (rc < 0 || c->size == 1)
		return rc;
	struct place me, *all = dtf_calloc((size_t)c->size, sizeof(*all));
	if (!all)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	learn_address(c->host, &me);
	int mpi = MPI_Allgather(&me, (int)sizeof(me), MPI_BYTE, all,
				(int)sizeof(me), MPI_BYTE, c->comm);
	if (mpi != MPI_SUCCESS) {
		dtf_free(all);
		return mpi_fail(mpi, "MPI_Allgather");
	}
	/* a cross-host run: the ranks name more than one host */
	int hosts = 0;
	for (int r = 0; r < c->size; r++) {
		int seen = 0;
		for (int q = 0; q < r && !seen; q++)
			seen = !strcmp(all[q].host, all[r].host);
		hosts += !seen;
	}
	if (hosts > 1) {
		for (int r = 0; r < c->size; r++)
			dtf_info("rank %d of %d: host %s, interface %s, address %s%s",
				 r, c->size, all[r].host, all[r].iface,
				 all[r].addr,
				 all[r].resolved ? ""
						 : " (the host name does not resolve; first interface)");
		for (int r = 0; r < c->size && rc == 0; r++)
			if (all[r].loopback)
				rc = dtf_error(DTF_ERR_USAGE,
					       "host %s (rank %d) resolves its own name to %s, a loopback address, in a job across %d hosts: the other hosts cannot reach it there; map %s to the address of its network interface in /etc/hosts or DNS on that host",
					       all[r].host, r, all[r].addr, hosts,
					       all[r].host);
	}
	dtf_free(all);
	return rc;
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

int dtf_comm_gather_f64(struct dtf_comm *c, const double *send, int n,
			double *recv, int root)
{
	if (!c || c->size == 1) {
		memcpy(recv, send, (size_t)n * sizeof(*send));
		return 0;
	}
	MPI_TRY(MPI_Gather(send, n, MPI_DOUBLE, recv, n, MPI_DOUBLE, root,
			   c->comm));
	return 0;
}

int dtf_comm_gather_bytes(struct dtf_comm *c, const void *send, int n,
			  void *recv, int root)
{
	if (!c || c->size == 1) {
		memcpy(recv, send, (size_t)n);
		return 0;
	}
	MPI_TRY(MPI_Gather(send, n, MPI_BYTE, recv, n, MPI_BYTE, root,
			   c->comm));
	return 0;
}

/* Tags of the ring's pings and pongs (see TAG_NOTICE below). */
#define TAG_PING 7202
#define TAG_PONG 7203

#define RING_ROUNDS_MAX 16

int dtf_comm_ring_rtt(struct dtf_comm *c, int rounds, double *rtt_seconds)
{
	*rtt_seconds = 0;
	if (!c || c->size == 1 || rounds < 1)
		return 0;
	if (rounds > RING_ROUNDS_MAX)
		rounds = RING_ROUNDS_MAX;
	int next = (c->rank + 1) % c->size;
	int prev = (c->rank + c->size - 1) % c->size;
	/* req[0 .. rounds-1]: prev's pings, all posted now and each
	 * answered the moment it comes, so that prev's round trips never
	 * wait for this rank's own (perhaps slow) rounds; req[rounds]: the
	 * pong of this rank's current round */
	MPI_Request req[RING_ROUNDS_MAX + 1];
	int64_t ping[RING_ROUNDS_MAX][2], pong[2], out[2] = {c->rank, 0};
	for (int k = 0; k < rounds; k++)
		MPI_TRY(MPI_Irecv(ping[k], 2, MPI_INT64_T, prev, TAG_PING,
				  c->comm, &req[k]));
	double best = -1, t0 = MPI_Wtime();
	int done = 0, answered = 0;
	MPI_TRY(MPI_Irecv(pong, 2, MPI_INT64_T, next, TAG_PONG, c->comm,
			  &req[rounds]));
	MPI_TRY(MPI_Send(out, 2, MPI_INT64_T, next, TAG_PING, c->comm));
	while (done < rounds || answered < rounds) {
		int idx, flag;
		MPI_TRY(MPI_Testany(rounds + 1, req, &idx, &flag,
				    MPI_STATUS_IGNORE));
		if (!flag) {
			/* sleep between polls: a rank that spins competes
			 * for the cores with the others, and on a busy
			 * machine the round trips would time the
			 * scheduler; a sleeper is woken at once */
			nanosleep(&(struct timespec){0, 20000}, NULL);
			continue;
		}
		if (idx == MPI_UNDEFINED)
			break;
		if (idx < rounds) {
			answered++;
			MPI_TRY(MPI_Send(ping[idx], 2, MPI_INT64_T, prev,
					 TAG_PONG, c->comm));
			continue;
		}
		double rtt = MPI_Wtime() - t0;
		if (best < 0 || rtt < best)
			best = rtt;
		if (++done < rounds) {
			out[1] = done;
			MPI_TRY(MPI_Irecv(pong, 2, MPI_INT64_T, next, TAG_PONG,
					  c->comm, &req[rounds]));
			t0 = MPI_Wtime();
			MPI_TRY(MPI_Send(out, 2, MPI_INT64_T, next, TAG_PING,
					 c->comm));
		}
	}
	*rtt_seconds = best < 0 ? 0 : best;
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

/* The backstop of dtf_comm_abort: MPI_Abort blocks in Open MPI until its
 * runtime took note (it sends its "MPI_ABORT was invoked" help text to
 * mpirun first, and a loaded or confused mpirun can leave that unanswered).
 * A rank that is gone ends the job just as well: mpirun ends the others
 * when one exits without MPI_Finalize, srun with --kill-on-bad-exit. */
#define ABORT_BACKSTOP_S 3

struct abort_backstop {
	int status;
	char line[256];
	size_t len;
};

static void *abort_backstop(void *arg)
{
	struct abort_backstop *b = arg;
	struct timespec ts = {ABORT_BACKSTOP_S, 0};
	while (nanosleep(&ts, &ts) != 0)
		;
	/* formatted before: stdio's locks may be held by a thread that
	 * MPI_Abort left stuck */
	if (write(STDERR_FILENO, b->line, b->len) < 0) {
		/* nothing left to tell */
	}
	_exit(b->status);
}

_Noreturn void dtf_comm_abort(struct dtf_comm *c, int status)
{
	(void)c;
	static struct abort_backstop b;
	b.status = status;
	int n = dtf_log_prefix(DTF_LOG_ERROR, b.line, sizeof(b.line));
	int m = snprintf(b.line + n, sizeof(b.line) - (size_t)n,
			 "MPI_Abort did not end this rank within %d s; "
			 "exiting with status %d\n",
			 ABORT_BACKSTOP_S, status);
	b.len = (size_t)n + (size_t)(m > 0 ? m : 0);
	if (b.len >= sizeof(b.line))
		b.len = sizeof(b.line) - 1;
	pthread_t t;
	sigset_t all, prev;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &prev);
	if (pthread_create(&t, NULL, abort_backstop, &b) == 0)
		pthread_detach(t);
	pthread_sigmask(SIG_SETMASK, &prev, NULL);
	fflush(stderr);
	MPI_Abort(MPI_COMM_WORLD, status);
	abort(); /* MPI_Abort does not return */
}
