/*
 * checkpoint.c - the checkpoint format, the chief's background writer and
 * resume (contract and format in checkpoint.h).
 *
 * Design: at setup the chief lays out the whole file once (header with the
 * tensor table, then 64-byte aligned data) in a staging buffer allocated
 * once.  A save copies the parameters, optimizer slots and counters into
 * it on the training thread (memcpy speed: ~10 ms for 40 MB) and hands it
 * to a writer thread, which computes the CRCs and writes, fsyncs and
 * renames the file, then the index, then deletes checkpoints beyond
 * `keep`.  Training goes on meanwhile; it waits only when the next save
 * comes before the previous write has finished.  The writer thread makes
 * no MPI call and no counted allocation; its error travels back as a
 * message copied into the checkpointer and re-raised on the training
 * thread by poll/wait/save.
 */
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/lock.h"
#include "core/log.h"
#include "data/crc32c.h"
#include "distribute/comm.h"
#include "graph/graph.h"
#include "train/fault.h"
#include "train/optimizer.h"

static const char magic[8] = {'D', 'T', 'F', 'C', 'K', 'P', 'T', 0};

#define FIXED_HEADER 88
#define ALIGN 64
#define WRITE_CHUNK ((size_t)8 << 20)
#define MAX_LISTED 4096 /* checkpoint files considered in a directory */
#define PATH_BYTES 4352

/* Scalars saved as int64 tensors, in this order. */
enum {
	SC_ITERATIONS,   /* optimizer/iterations */
	SC_GLOBAL_STEP,  /* global_step */
	SC_RNG = 2,      /* rng/state [3] */
	SC_POSITION = 5, /* pipeline/position [5] */
	SC_SEGMENTS = 10, /* pipeline/segments [8, 3] */
	SC_COUNT_ = SC_SEGMENTS + 3 * DTF_CKPT_MAX_SEGMENTS
};

/* One tensor of the checkpoint: where it lives in memory and in the file. */
struct entry {
	char name[DTF_CKPT_NAME_MAX + 1];
	int dtype, rank;
	int64_t dims[DTF_MAX_RANK];
	void *mem;         /* the live tensor (params, slots, scalars) */
	uint64_t nbytes;   /* data bytes */
	uint64_t offset;   /* data offset in the file */
	size_t crc_at;     /* header offset of its CRC field */
};

struct dtf_checkpointer {
	char dir[PATH_MAX];
	int keep;
	double every_seconds;
	int chief;
	struct dtf_fault *fault;
	struct dtf_optimizer *opt;
	size_t nslots; /* floats of optimizer slots */
	struct entry *e;
	int n;
	int64_t scalars[SC_COUNT_];
	size_t header_bytes, file_bytes;
	uint8_t *staging; /* chief: the file image */
	uint64_t job_hash;

	pthread_t thread;
	int busy;         /* a writer thread was started and not joined */
	atomic_int done;  /* it has finished */
	int wstatus;      /* its result */
	char wmsg[1024];  /* its error message */
	int64_t wstep;    /* step it writes */
	double wseconds;  /* how long it took */
	double stage_seconds;
	double last_save; /* monotonic seconds */
	char path[PATH_BYTES]; /* newest saved or restored file */
	char wpath[PATH_BYTES]; /* file being written */
};

static double now_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- little-endian fields ---------------------------------------------- */

static void put_u16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get_u16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get_u32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t get_u64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Tensor data is written as the host holds it. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "checkpoint tensor data is little-endian");

static size_t dtype_size(int dtype)
{
	return dtype == DTF_CKPT_F32 ? 4 : dtype == DTF_CKPT_I64 ? 8 : 1;
}

static char *dims_str(int rank, const int64_t *d, char *buf, size_t size)
{
	int off = snprintf(buf, size, "(");
	for (int i = 0; i < rank && off < (int)size; i++)
		off += snprintf(buf + off, size - (size_t)off, "%s%lld",
				i ? ", " : "", (long long)d[i]);
	if (off < (int)size)
		snprintf(buf + off, size - (size_t)off, ")");
	return buf;
}

/* ---- reading and verifying --------------------------------------------- */

void dtf_ckpt_file_deinit(struct dtf_ckpt_file *f)
{
	dtf_free(f->data);
	dtf_free(f->tensors);
	memset(f, 0, sizeof(*f));
}

const struct dtf_ckpt_tensor *dtf_ckpt_file_find(const struct dtf_ckpt_file *f,
						 const char *name)
{
	for (int i = 0; i < f->ntensors; i++)
		if (!strcmp(f->tensors[i].name, name))
			return &f->tensors[i];
	return NULL;
}

static int bad(const char *path, const char *what)
{
	return dtf_error(DTF_ERR_CHECKPOINT, "%s: %s", path, what);
}

/* Parse and check the header of a verified-size image. */
static int parse(const char *path, struct dtf_ckpt_file *f)
{
	const uint8_t *d = f->data;
	char msg[600];
	if (f->size < FIXED_HEADER + 4 || memcmp(d, magic, 8) != 0)
		return bad(path, f->size < 8 ? "not a checkpoint (too short)"
					     : "not a checkpoint (bad magic)");
	f->version = get_u32(d + 8);
	if (f->version != DTF_CKPT_VERSION) {
		snprintf(msg, sizeof(msg),
			 "format version %u; this program reads version %d",
			 f->version, DTF_CKPT_VERSION);
		return bad(path, msg);
	}
	uint64_t hbytes = get_u32(d + 12), fbytes = get_u64(d + 16);
	if (f->size < fbytes) {
		snprintf(msg, sizeof(msg), "truncated: %zu of %llu bytes",
			 f->size, (unsigned long long)fbytes);
		return bad(path, msg);
	}
	if (f->size > fbytes) {
		snprintf(msg, sizeof(msg),
			 "%zu bytes where the header says %llu", f->size,
			 (unsigned long long)fbytes);
		return bad(path, msg);
	}
	if (hbytes < FIXED_HEADER + 4 || hbytes > fbytes)
		return bad(path, "header size out of range");
	uint32_t stored = get_u32(d + hbytes - 4);
	uint32_t crc = dtf_crc32c(0, d, hbytes - 4);
	if (stored != crc) {
		snprintf(msg, sizeof(msg),
			 "header CRC-32C mismatch (stored 0x%08x, computed 0x%08x)",
			 stored, crc);
		return bad(path, msg);
	}
	struct dtf_ckpt_position *p = &f->pos;
	p->step = (int64_t)get_u64(d + 24);
	p->epoch = (int64_t)get_u64(d + 32);
	p->step_in_epoch = (int64_t)get_u64(d + 40);
	p->job_hash = get_u64(d + 48);
	p->world = (int32_t)get_u32(d + 56);
	p->per_replica_batch = (int32_t)get_u32(d + 60);
	p->global_batch = (int64_t)get_u64(d + 64);
	p->seed = get_u64(d + 72);
	p->nprev = (int32_t)get_u32(d + 84);
	if (p->nprev < 0 || p->nprev > DTF_CKPT_MAX_SEGMENTS)
		return bad(path, "segment count out of range");
	uint32_t nt = get_u32(d + 80);
	if (nt > (hbytes - FIXED_HEADER) / 24)
		return bad(path, "tensor count out of range");
	f->tensors = dtf_calloc(nt ? nt : 1, sizeof(*f->tensors));
	if (!f->tensors)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	f->ntensors = (int)nt;
	size_t at = FIXED_HEADER, end = hbytes - 4;
	for (uint32_t i = 0; i < nt; i++) {
		struct dtf_ckpt_tensor *t = &f->tensors[i];
		if (at + 2 > end)
			return bad(path, "tensor table overruns the header");
		size_t len = get_u16(d + at);
		at += 2;
		if (len > DTF_CKPT_NAME_MAX || at + len + 4 > end)
			return bad(path, "tensor table overruns the header");
		memcpy(t->name, d + at, len);
		t->name[len] = 0;
		at += len;
		t->dtype = d[at];
		t->rank = d[at + 1];
		at += 4;
		if (t->rank > 8 || at + 8 * (size_t)t->rank + 20 > end)
			return bad(path, "tensor table overruns the header");
		uint64_t numel = 1;
		for (int k = 0; k < t->rank; k++, at += 8) {
			t->dims[k] = (int64_t)get_u64(d + at);
			numel *= (uint64_t)t->dims[k];
		}
		t->offset = get_u64(d + at);
		t->nbytes = get_u64(d + at + 8);
		t->crc = get_u32(d + at + 16);
		at += 20;
		if (t->dtype < DTF_CKPT_F32 || t->dtype > DTF_CKPT_U8 ||
		    t->nbytes != numel * dtype_size(t->dtype) ||
		    t->offset < hbytes || t->offset > fbytes ||
		    t->nbytes > fbytes - t->offset) {
			snprintf(msg, sizeof(msg),
				 "tensor '%s': bad type, shape or extent",
				 t->name);
			return bad(path, msg);
		}
	}
	for (uint32_t i = 0; i < nt; i++) {
		const struct dtf_ckpt_tensor *t = &f->tensors[i];
		crc = dtf_crc32c(0, d + t->offset, t->nbytes);
		if (crc != t->crc) {
			snprintf(msg, sizeof(msg),
				 "tensor '%s': CRC-32C mismatch (stored 0x%08x, computed 0x%08x)",
				 t->name, t->crc, crc);
			return bad(path, msg);
		}
	}
	return 0;
}

int dtf_ckpt_file_read(const char *path, struct dtf_ckpt_file *out)
{
	memset(out, 0, sizeof(*out));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return dtf_error(DTF_ERR_CHECKPOINT, "%s: cannot open: %s",
				 path, strerror(errno));
	struct stat st;
	int rc = 0;
	if (fstat(fd, &st) < 0) {
		rc = dtf_error(DTF_ERR_CHECKPOINT, "%s: %s", path,
			       strerror(errno));
		goto out_close;
	}
	out->size = (size_t)st.st_size;
	out->data = dtf_malloc(out->size ? out->size : 1);
	if (!out->data) {
		rc = dtf_error(DTF_ERR_NOMEM,
			       "%s: out of memory reading %zu bytes", path,
			       out->size);
		goto out_close;
	}
	size_t got = 0;
	while (got < out->size) {
		ssize_t r = read(fd, out->data + got, out->size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = dtf_error(DTF_ERR_CHECKPOINT, "%s: read failed: %s",
				       path, strerror(errno));
			goto out_close;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	out->size = got;
	rc = parse(path, out);
out_close:
	close(fd);
	if (rc < 0)
		dtf_ckpt_file_deinit(out);
	return rc;
}

uint64_t dtf_checkpoint_job_hash(const char *path)
{
	FILE *f = path ? fopen(path, "rb") : NULL;
	if (!f)
		return 0;
	uint8_t buf[8192];
	uint32_t crc = 0;
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		crc = dtf_crc32c(crc, buf, n);
	fclose(f);
	return crc;
}

/* ---- layout ------------------------------------------------------------ */

static int add_entry(struct dtf_checkpointer *ck, int cap, const char *prefix,
		     const char *name, int dtype, int rank, const int64_t *dims,
		     void *mem)
{
	if (ck->n == cap)
		return dtf_error(DTF_ERR_RUNTIME, "checkpoint table overflow");
	struct entry *e = &ck->e[ck->n];
	int len = snprintf(e->name, sizeof(e->name), "%s%s", prefix, name);
	if (len < 0 || len > DTF_CKPT_NAME_MAX)
		return dtf_error(DTF_ERR_CHECKPOINT,
				 "variable name '%s%s' is too long for a checkpoint (at most %d bytes)",
				 prefix, name, DTF_CKPT_NAME_MAX);
	e->dtype = dtype;
	e->rank = rank;
	uint64_t numel = 1;
	for (int i = 0; i < rank; i++) {
		e->dims[i] = dims[i];
		numel *= (uint64_t)dims[i];
	}
	e->nbytes = numel * dtype_size(dtype);
	e->mem = mem;
	ck->n++;
	return 0;
}

static int build_table(struct dtf_checkpointer *ck, const struct dtf_graph *g,
		       float *params)
{
	int nvars = 0;
	for (int i = 0; i < g->nnodes; i++)
		nvars += g->nodes[i].op == DTF_OP_VARIABLE;
	int cap = nvars * 4 + 5; /* variables and up to 3 slot kinds */
	ck->e = dtf_calloc((size_t)cap, sizeof(*ck->e));
	if (!ck->e)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	const struct dtf_optimizer *opt = ck->opt;
	int nslots = opt->slots ? opt->nslots : 0;
	ck->nslots = (size_t)nslots * opt->n;
	int rc = 0;
	/* variables, then each slot kind (dtf_optimizer_slot_name), in graph
	 * order */
	for (int pass = 0; pass <= nslots && rc == 0; pass++) {
		char prefix[64] = "";
		if (pass > 0)
			snprintf(prefix, sizeof(prefix), "optimizer/%s/",
				 dtf_optimizer_slot_name(opt, pass - 1));
		for (int i = 0; i < g->nnodes && rc == 0; i++) {
			const struct dtf_node *n = &g->nodes[i];
			if (n->op != DTF_OP_VARIABLE)
				continue;
			float *base = pass == 0 ? params
					       : opt->slots + (size_t)(pass - 1) *
								      opt->n;
			rc = add_entry(ck, cap, prefix, n->name, DTF_CKPT_F32,
				       n->shape.rank, n->shape.d,
				       base + n->a.var.offset);
		}
	}
	static const int64_t three = 3, five = 5,
			     segs[2] = {DTF_CKPT_MAX_SEGMENTS, 3};
	if (rc == 0)
		rc = add_entry(ck, cap, "", "optimizer/iterations",
			       DTF_CKPT_I64, 0, NULL,
			       &ck->scalars[SC_ITERATIONS]);
	if (rc == 0)
		rc = add_entry(ck, cap, "", "global_step", DTF_CKPT_I64, 0,
			       NULL, &ck->scalars[SC_GLOBAL_STEP]);
	if (rc == 0)
		rc = add_entry(ck, cap, "", "rng/state", DTF_CKPT_I64, 1,
			       &three, &ck->scalars[SC_RNG]);
	if (rc == 0)
		rc = add_entry(ck, cap, "", "pipeline/position", DTF_CKPT_I64,
			       1, &five, &ck->scalars[SC_POSITION]);
	if (rc == 0)
		rc = add_entry(ck, cap, "", "pipeline/segments", DTF_CKPT_I64,
			       2, segs, &ck->scalars[SC_SEGMENTS]);
	if (rc < 0)
		return rc;
	/* header size, then data offsets */
	size_t h = FIXED_HEADER;
	for (int i = 0; i < ck->n; i++)
		h += 2 + strlen(ck->e[i].name) + 4 + 8 * (size_t)ck->e[i].rank +
		     20;
	h += 4;
	ck->header_bytes = h;
	size_t off = (h + ALIGN - 1) / ALIGN * ALIGN;
	for (int i = 0; i < ck->n; i++) {
		ck->e[i].offset = off;
		off += (ck->e[i].nbytes + ALIGN - 1) / ALIGN * ALIGN;
	}
	ck->file_bytes = off;
	return 0;
}

/* Write the constant part of the header into the staging image. */
static void write_table(struct dtf_checkpointer *ck)
{
	uint8_t *d = ck->staging;
	memcpy(d, magic, 8);
	put_u32(d + 8, DTF_CKPT_VERSION);
	put_u32(d + 12, (uint32_t)ck->header_bytes);
	put_u64(d + 16, ck->file_bytes);
	put_u32(d + 80, (uint32_t)ck->n);
	size_t at = FIXED_HEADER;
	for (int i = 0; i < ck->n; i++) {
		struct entry *e = &ck->e[i];
		size_t len = strlen(e->name);
		put_u16(d + at, (uint16_t)len);
		memcpy(d + at + 2, e->name, len);
		at += 2 + len;
		d[at] = (uint8_t)e->dtype;
		d[at + 1] = (uint8_t)e->rank;
		at += 4;
		for (int k = 0; k < e->rank; k++, at += 8)
			put_u64(d + at, (uint64_t)e->dims[k]);
		put_u64(d + at, e->offset);
		put_u64(d + at + 8, e->nbytes);
		e->crc_at = at + 16;
		at += 20;
	}
}

/* mkdir -p `dir` (as logging.dir is made).  Errors: DTF_ERR_CHECKPOINT
 * naming the component that could not be made. */
static int make_dirs(const char *dir)
{
	char *buf = dtf_strdup(dir);
	int rc = 0;
	if (!buf)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	size_t n = strlen(buf);
	for (size_t i = 1; i <= n && rc == 0; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		char c = buf[i];
		buf[i] = '\0';
		struct stat st;
		if (mkdir(buf, 0777) < 0 && errno != EEXIST)
			rc = dtf_error(DTF_ERR_CHECKPOINT,
				       "%s: cannot create the checkpoint directory%s%s: %s",
				       dir, c ? " " : "", c ? buf : "",
				       strerror(errno));
		else if (stat(buf, &st) < 0 || !S_ISDIR(st.st_mode))
			rc = dtf_error(DTF_ERR_CHECKPOINT,
				       "%s: cannot create the checkpoint directory: %s is not a directory",
				       dir, buf);
		buf[i] = c;
	}
	dtf_free(buf);
	return rc;
}

int dtf_checkpointer_new(const struct dtf_job *job, const struct dtf_graph *g,
			 float *params, struct dtf_optimizer *opt, int chief,
			 struct dtf_fault *fault, struct dtf_checkpointer **out)
{
	*out = NULL;
	struct dtf_checkpointer *ck = dtf_calloc(1, sizeof(*ck));
	if (!ck)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	int rc;
	const char *dir = job->checkpoint.dir ? job->checkpoint.dir : "";
	if (snprintf(ck->dir, sizeof(ck->dir), "%s", dir) >=
	    (int)sizeof(ck->dir) - 64) {
		rc = dtf_error(DTF_ERR_CHECKPOINT,
			       "checkpoint.dir: path too long");
		goto fail;
	}
	ck->keep = job->checkpoint.keep;
	ck->every_seconds = job->checkpoint.every_seconds;
	ck->chief = chief;
	ck->fault = fault;
	ck->opt = opt;
	ck->job_hash = dtf_checkpoint_job_hash(job->path);
	if ((rc = build_table(ck, g, params)) < 0)
		goto fail;
	if (chief) {
		if ((rc = make_dirs(ck->dir)) < 0)
			goto fail;
		ck->staging = dtf_alloc_aligned(ck->file_bytes);
		if (!ck->staging) {
			rc = dtf_error(DTF_ERR_NOMEM,
				       "out of memory for a %zu-byte checkpoint staging buffer",
				       ck->file_bytes);
			goto fail;
		}
		write_table(ck);
	}
	ck->last_save = now_seconds();
	*out = ck;
	return 0;
fail:
	dtf_checkpointer_free(ck);
	return rc;
}

size_t dtf_checkpointer_file_bytes(const struct dtf_checkpointer *ck)
{
	return ck->file_bytes;
}

const char *dtf_checkpointer_path(const struct dtf_checkpointer *ck)
{
	return ck->path;
}

int dtf_checkpointer_time_due(const struct dtf_checkpointer *ck)
{
	return ck && ck->chief && ck->every_seconds > 0 &&
	       now_seconds() - ck->last_save >= ck->every_seconds;
}

/* ---- the directory ----------------------------------------------------- */

/* "ckpt-<step>.dtf" -> step, else -1: the step as this program writes it
 * (%lld: no sign, no leading zero), so that every name counted as a
 * checkpoint is the one its step opens ("ckpt-0018.dtf" is not one). */
static int64_t parse_name(const char *name)
{
	if (strncmp(name, "ckpt-", 5) != 0)
		return -1;
	const char *p = name + 5;
	if (p[0] == '0' && p[1] >= '0' && p[1] <= '9')
		return -1;
	int64_t v = 0;
	int digits = 0;
	for (; *p >= '0' && *p <= '9'; p++, digits++) {
		if (v > (INT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (*p - '0');
	}
	return digits && !strcmp(p, ".dtf") ? v : -1;
}

static int cmp_desc(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

/* Steps of the checkpoint files in dir, newest first; -1 if unreadable.
 * *corrupt (may be NULL): how many a restore set aside as ckpt-N.dtf.corrupt. */
static int list_steps(const char *dir, int64_t *steps, int cap, int *corrupt)
{
	if (corrupt)
		*corrupt = 0;
	DIR *d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -1;
	int n = 0;
	struct dirent *de;
	static const char aside[] = ".dtf.corrupt";
	while ((de = readdir(d)) != NULL) {
		int64_t s = parse_name(de->d_name);
		if (s >= 0 && n < cap)
			steps[n++] = s;
		size_t len = strlen(de->d_name);
		if (corrupt && strncmp(de->d_name, "ckpt-", 5) == 0 &&
		    len > sizeof(aside) - 1 &&
		    strcmp(de->d_name + len - (sizeof(aside) - 1), aside) == 0)
			(*corrupt)++;
	}
	closedir(d);
	qsort(steps, (size_t)n, sizeof(int64_t), cmp_desc);
	return n;
}

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int r = fsync(fd);
	close(fd);
	return r;
}

/* ---- start-up: one run owns the directory ------------------------------ */

#define UNWRITABLE_HINT                                                    \
	"HINT: let this user create files there, or set checkpoint.dir to a directory it can write"

/* Create, write, fsync and remove `probe`, then fsync `dir`: what every
 * save does.  Errors: DTF_ERR_CHECKPOINT naming the failing call. */
static int probe_writable(const char *dir, const char *probe)
{
	static const char text[] = "write test\n";
	int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return dtf_error(DTF_ERR_CHECKPOINT,
				 "checkpoint.dir %s is not writable: %s: cannot create: %s\n" UNWRITABLE_HINT,
				 dir, probe, strerror(errno));
	const char *what = NULL;
	int err = 0;
	ssize_t w;
	do
		w = write(fd, text, sizeof(text) - 1);
	while (w < 0 && errno == EINTR);
	if (w != (ssize_t)sizeof(text) - 1) {
		what = "write failed";
		err = w < 0 ? errno : ENOSPC;
	} else if (fsync(fd) < 0) {
		what = "fsync failed";
		err = errno;
	}
	if (close(fd) < 0 && !what) {
		what = "close failed";
		err = errno;
	}
	if (unlink(probe) < 0 && !what) {
		what = "cannot remove it";
		err = errno;
	}
	if (!what && fsync_dir(dir) < 0)
		return dtf_error(DTF_ERR_CHECKPOINT,
				 "checkpoint.dir %s is not writable: fsync of the directory failed: %s\n" UNWRITABLE_HINT,
				 dir, strerror(errno));
	if (what)
		return dtf_error(DTF_ERR_CHECKPOINT,
				 "checkpoint.dir %s is not writable: %s: %s: %s\n" UNWRITABLE_HINT,
				 dir, probe, what, strerror(err));
	return 0;
}

/* 1 when `name` is a file this program writes into checkpoint.dir, other
 * than the lock: the index and its temporary, a checkpoint, its
 * temporary, or one a restore set aside as corrupt. */
static int is_ours(const char *name)
{
	if (!strcmp(name, "checkpoint") || !strcmp(name, "checkpoint.tmp"))
		return 1;
	if (strncmp(name, "ckpt-", 5) != 0)
		return 0;
	char base[NAME_MAX + 1];
	snprintf(base, sizeof(base), "%s", name);
	size_t len = strlen(base);
	static const char *const tails[] = {".tmp", ".corrupt"};
	for (int i = 0; i < 2; i++) {
		size_t t = strlen(tails[i]);
		if (len > t && !strcmp(base + len - t, tails[i])) {
			base[len - t] = 0;
			break;
		}
	}
	return parse_name(base) >= 0;
}

/* --overwrite-checkpoints: delete every file is_ours() names, the index
 * first (so nothing names a file that is gone), then fsync the
 * directory. */
static int delete_earlier_run(const char *dir)
{
	char path[PATH_BYTES];
	snprintf(path, sizeof(path), "%s/checkpoint", dir);
	if (unlink(path) < 0 && errno != ENOENT)
		return dtf_error(DTF_ERR_CHECKPOINT, "%s: cannot delete: %s",
				 path, strerror(errno));
	DIR *d = opendir(dir);
	if (!d)
		return dtf_error(DTF_ERR_CHECKPOINT, "%s: cannot list: %s", dir,
				 strerror(errno));
	int rc = 0;
	struct dirent *de;
	while (rc == 0 && (de = readdir(d)) != NULL) {
		if (!is_ours(de->d_name))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (unlink(path) < 0 && errno != ENOENT)
			rc = dtf_error(DTF_ERR_CHECKPOINT,
				       "%s: cannot delete: %s", path,
				       strerror(errno));
	}
	closedir(d);
	if (rc == 0 && fsync_dir(dir) < 0)
		rc = dtf_error(DTF_ERR_CHECKPOINT, "%s: fsync failed: %s", dir,
			       strerror(errno));
	return rc;
}

int dtf_checkpoint_dir_open(const char *dir, enum dtf_ckpt_start start,
			    int *lock_fd)
{
	*lock_fd = -1;
	char lock[PATH_BYTES], probe[PATH_BYTES];
	if (strlen(dir) > PATH_MAX - 64)
		return dtf_error(DTF_ERR_CHECKPOINT,
				 "checkpoint.dir: path too long");
	int rc = make_dirs(dir);
	if (rc < 0)
		return rc;
	snprintf(lock, sizeof(lock), "%s/checkpoint.lock", dir);
	snprintf(probe, sizeof(probe), "%s/checkpoint.probe.tmp", dir);
	int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0) {
		int err = errno;
		struct stat st;
		return dtf_error(DTF_ERR_CHECKPOINT,
				 "checkpoint.dir %s is not writable: %s: %s: %s\n" UNWRITABLE_HINT,
				 dir, lock,
				 stat(lock, &st) == 0 ? "cannot open for writing"
						      : "cannot create",
				 strerror(err));
	}
	char busy[2 * PATH_BYTES];
	snprintf(busy, sizeof(busy),
		 "checkpoint.dir %s: another run is using it (%s is locked)\n"
		 "HINT: wait for that run to end, or give this one another checkpoint.dir",
		 dir, lock);
	if ((rc = dtf_lock_exclusive(fd, lock, DTF_ERR_CHECKPOINT, busy,
				     1)) < 0 ||
	    (rc = probe_writable(dir, probe)) < 0)
		goto fail;
	if (start == DTF_CKPT_START_RESUME) { /* restore reads them */
		*lock_fd = fd;
		return 0;
	}
	int64_t steps[MAX_LISTED];
	int aside = 0, n = list_steps(dir, steps, MAX_LISTED, &aside);
	if (n < 0) {
		rc = dtf_error(DTF_ERR_CHECKPOINT, "%s: cannot list: %s", dir,
			       strerror(errno));
		goto fail;
	}
	if (n > 0 && start == DTF_CKPT_START_FRESH) {
		rc = dtf_error(DTF_ERR_CHECKPOINT,
			       "checkpoint.dir %s holds %d checkpoint(s) of an earlier run, steps %lld to %lld "
			       "(the newest %s/ckpt-%lld.dtf); a new run would delete them\n"
			       "HINT: --resume continues that run from its newest checkpoint; "
			       "--overwrite-checkpoints deletes them and starts over from step 0; "
			       "or give this run another checkpoint.dir",
			       dir, n, (long long)steps[n - 1],
			       (long long)steps[0], dir, (long long)steps[0]);
		goto fail;
	}
	if (start == DTF_CKPT_START_OVERWRITE &&
	    (rc = delete_earlier_run(dir)) < 0)
		goto fail;
	if (start == DTF_CKPT_START_OVERWRITE && n > 0)
		dtf_info("deleted %d checkpoint(s) of an earlier run, steps %lld to %lld, from %s (--overwrite-checkpoints)",
			 n, (long long)steps[n - 1], (long long)steps[0], dir);
	if (start == DTF_CKPT_START_OVERWRITE && aside > 0)
		dtf_info("deleted %d file(s) an earlier resume set aside as *.corrupt from %s (--overwrite-checkpoints)",
			 aside, dir);
	*lock_fd = fd;
	return 0;
fail:
	close(fd);
	return rc;
}

/* Write `n` bytes to a new file `tmp`, fsync, rename to `final`, fsync
 * the directory.  `kill_half`: SIGKILL ourselves half way (injection). */
static int write_atomically(const char *dir, const char *tmp,
			    const char *final, const uint8_t *data, size_t n,
			    int kill_half)
{
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return dtf_error(DTF_ERR_CHECKPOINT, "%s: cannot create: %s",
				 tmp, strerror(errno));
	size_t done = 0;
	while (done < n) {
		size_t len = n - done < WRITE_CHUNK ? n - done : WRITE_CHUNK;
		if (kill_half && done + len > n / 2) {
			len = n / 2 - done;
			if (len == 0) {
				fsync(fd);
				raise(SIGKILL);
			}
		}
		ssize_t w = write(fd, data + done, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int err = w < 0 ? errno : ENOSPC;
			close(fd);
			unlink(tmp);
			return dtf_error(DTF_ERR_CHECKPOINT,
					 "%s: write failed after %zu of %zu bytes: %s",
					 tmp, done, n, strerror(err));
		}
		done += (size_t)w;
	}
	if (fsync(fd) < 0) {
		int err = errno;
		close(fd);
		unlink(tmp);
		return dtf_error(DTF_ERR_CHECKPOINT, "%s: fsync failed: %s",
				 tmp, strerror(err));
	}
	if (close(fd) < 0) {
		int err = errno;
		unlink(tmp);
		return dtf_error(DTF_ERR_CHECKPOINT, "%s: close failed: %s",
				 tmp, strerror(err));
	}
	if (rename(tmp, final) < 0) {
		int err = errno;
		unlink(tmp);
		return dtf_error(DTF_ERR_CHECKPOINT,
				 "cannot rename %s to %s: %s", tmp, final,
				 strerror(err));
	}
	if (fsync_dir(dir) < 0)
		return dtf_error(DTF_ERR_CHECKPOINT, "%s: fsync failed: %s",
				 dir, strerror(errno));
	return 0;
}

/* Index naming the kept files, newest as model_checkpoint_path; then
 * delete the files beyond `keep`. */
static int update_index(struct dtf_checkpointer *ck, int64_t newest)
{
	int64_t steps[MAX_LISTED];
	int n = list_steps(ck->dir, steps, MAX_LISTED, NULL);
	if (n < 0)
		return dtf_error(DTF_ERR_CHECKPOINT, "%s: cannot list: %s",
				 ck->dir, strerror(errno));
	/* Files newer than the one just written were not written by this
	 * run: a fresh run starts in a directory without checkpoints (or is
	 * refused), a resume starts from the newest that verifies (newer
	 * ones are set aside as *.corrupt), and the lock keeps
	 * other runs out (dtf_checkpoint_dir_open).  Whatever put them
	 * there, they are neither listed nor deleted. */
	int first = 0;
	while (first < n && steps[first] > newest)
		first++;
	if (first)
		dtf_warn("%s: %d checkpoint(s) newer than step %lld that this run did not write are left as they are (not in the index)",
			 ck->dir, first, (long long)newest);
	int kept = n - first < ck->keep ? n - first : ck->keep;
	char text[8192];
	int off = snprintf(text, sizeof(text),
			   "model_checkpoint_path: \"ckpt-%lld.dtf\"\n",
			   (long long)newest);
	for (int i = first + kept - 1; i >= first && off < (int)sizeof(text) - 80; i--)
		off += snprintf(text + off, sizeof(text) - (size_t)off,
				"all_model_checkpoint_paths: \"ckpt-%lld.dtf\"\n",
				(long long)steps[i]);
	char tmp[PATH_BYTES], final[PATH_BYTES];
	snprintf(tmp, sizeof(tmp), "%s/checkpoint.tmp", ck->dir);
	snprintf(final, sizeof(final), "%s/checkpoint", ck->dir);
	int rc = write_atomically(ck->dir, tmp, final, (const uint8_t *)text,
				  (size_t)off, 0);
	if (rc < 0)
		return rc;
	for (int i = first + kept; i < n; i++) { /* checkpoint.keep */
		snprintf(tmp, sizeof(tmp), "%s/ckpt-%lld.dtf", ck->dir,
			 (long long)steps[i]);
		if (unlink(tmp) != 0 && errno != ENOENT)
			dtf_warn("checkpoint.keep %d: cannot delete %s: %s; it stays (the index no longer lists it)",
				 ck->keep, tmp, strerror(errno));
	}
	return 0;
}

static int write_checkpoint(struct dtf_checkpointer *ck)
{
	uint8_t *d = ck->staging;
	for (int i = 0; i < ck->n; i++)
		put_u32(d + ck->e[i].crc_at,
			dtf_crc32c(0, d + ck->e[i].offset, ck->e[i].nbytes));
	put_u32(d + ck->header_bytes - 4,
		dtf_crc32c(0, d, ck->header_bytes - 4));
	char tmp[PATH_BYTES + 8];
	snprintf(tmp, sizeof(tmp), "%s.tmp", ck->wpath);
	int rc = write_atomically(ck->dir, tmp, ck->wpath, d, ck->file_bytes,
				  dtf_fault_kill_in_write(ck->fault, ck->wstep));
	if (rc == 0)
		rc = update_index(ck, ck->wstep);
	return rc;
}

static void *writer(void *arg)
{
	struct dtf_checkpointer *ck = arg;
	double t0 = now_seconds();
	ck->wstatus = write_checkpoint(ck);
	if (ck->wstatus < 0)
		snprintf(ck->wmsg, sizeof(ck->wmsg), "%s", dtf_error_msg());
	ck->wseconds = now_seconds() - t0;
	atomic_store(&ck->done, 1);
	return NULL;
}

/* Report a finished write: its error, or the saved file. */
static int finish_write(struct dtf_checkpointer *ck)
{
	if (ck->wstatus < 0) {
		const char *prev = ck->path[0] ? ck->path : NULL;
		return dtf_error(DTF_ERR_CHECKPOINT,
				 "saving the checkpoint of step %lld failed: %s; %s%s",
				 (long long)ck->wstep, ck->wmsg,
				 prev ? "the previous checkpoint is intact: "
				      : "no earlier checkpoint exists",
				 prev ? prev : "");
	}
	snprintf(ck->path, sizeof(ck->path), "%s", ck->wpath);
	double mb = (double)ck->file_bytes / 1e6;
	dtf_info("saved %s (%.1f MB: staged in %.1f ms, written in %.2f s, %.0f MB/s)",
		 ck->path, mb, ck->stage_seconds * 1e3, ck->wseconds,
		 mb / (ck->wseconds > 0 ? ck->wseconds : 1e-9));
	return 0;
}

/* Join a finished (or, with `block`, running) writer; its status. */
static int join_writer(struct dtf_checkpointer *ck, int block)
{
	if (!ck->busy || (!block && !atomic_load(&ck->done)))
		return 0;
	pthread_join(ck->thread, NULL);
	ck->busy = 0;
	return finish_write(ck);
}

int dtf_checkpointer_poll(struct dtf_checkpointer *ck)
{
	return ck && ck->chief ? join_writer(ck, 0) : 0;
}

int dtf_checkpointer_wait(struct dtf_checkpointer *ck)
{
	return ck && ck->chief ? join_writer(ck, 1) : 0;
}

int dtf_checkpointer_save(struct dtf_checkpointer *ck,
			  const struct dtf_ckpt_position *pos)
{
	if (!ck->chief)
		return 0;
	int rc = join_writer(ck, 1);
	if (rc < 0)
		return rc;
	double t0 = now_seconds();
	uint8_t *d = ck->staging;
	put_u64(d + 24, (uint64_t)pos->step);
	put_u64(d + 32, (uint64_t)pos->epoch);
	put_u64(d + 40, (uint64_t)pos->step_in_epoch);
	put_u64(d + 48, ck->job_hash);
	put_u32(d + 56, (uint32_t)pos->world);
	put_u32(d + 60, (uint32_t)pos->per_replica_batch);
	put_u64(d + 64, (uint64_t)pos->global_batch);
	put_u64(d + 72, pos->seed);
	put_u32(d + 84, (uint32_t)pos->nprev);
	int64_t *s = ck->scalars;
	memset(s + SC_SEGMENTS, 0, 3 * DTF_CKPT_MAX_SEGMENTS * sizeof(int64_t));
	for (int i = 0; i < pos->nprev; i++) {
		s[SC_SEGMENTS + 3 * i] = pos->prev[i].world;
		s[SC_SEGMENTS + 3 * i + 1] = pos->prev[i].per_replica_batch;
		s[SC_SEGMENTS + 3 * i + 2] = pos->prev[i].steps;
	}
	s[SC_ITERATIONS] = ck->opt->iterations;
	s[SC_GLOBAL_STEP] = pos->step;
	s[SC_RNG] = (int64_t)pos->seed;
	s[SC_RNG + 1] = pos->step;
	s[SC_RNG + 2] = pos->epoch;
	s[SC_POSITION] = pos->epoch;
	s[SC_POSITION + 1] = pos->step_in_epoch;
	s[SC_POSITION + 2] = pos->step_in_epoch * pos->global_batch;
	s[SC_POSITION + 3] = pos->world;
	s[SC_POSITION + 4] = pos->per_replica_batch;
	for (int i = 0; i < ck->n; i++)
		memcpy(d + ck->e[i].offset, ck->e[i].mem, ck->e[i].nbytes);
	ck->stage_seconds = now_seconds() - t0;
	ck->last_save = now_seconds();
	ck->wstep = pos->step;
	snprintf(ck->wpath, sizeof(ck->wpath), "%s/ckpt-%lld.dtf", ck->dir,
		 (long long)pos->step);
	atomic_store(&ck->done, 0);
	sigset_t all, prev;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &prev);
	int err = pthread_create(&ck->thread, NULL, writer, ck);
	pthread_sigmask(SIG_SETMASK, &prev, NULL);
	if (err) { /* no thread: write here instead */
		writer(ck);
		return finish_write(ck);
	}
	ck->busy = 1;
	return 0;
}

void dtf_checkpointer_free(struct dtf_checkpointer *ck)
{
	if (!ck)
		return;
	if (ck->busy) {
		pthread_join(ck->thread, NULL);
		ck->busy = 0;
	}
	dtf_free(ck->staging);
	dtf_free(ck->e);
	dtf_free(ck);
}

/* ---- restore ----------------------------------------------------------- */

/* Compare the file's table with ours; list the differences. */
static int match(const struct dtf_checkpointer *ck, const char *path,
		 const struct dtf_ckpt_file *f)
{
	char msg[900], a[96], b[96];
	int off = 0, ndiff = 0, shown = 0;
#define DIFF(...)                                                          \
	do {                                                               \
		ndiff++;                                                   \
		if (shown < 8 && off < (int)sizeof(msg) - 100) {           \
			off += snprintf(msg + off, sizeof(msg) - (size_t)off, \
					"\n  " __VA_ARGS__);               \
			shown++;                                           \
		}                                                          \
	} while (0)
	for (int i = 0; i < ck->n; i++) {
		const struct entry *e = &ck->e[i];
		const struct dtf_ckpt_tensor *t = dtf_ckpt_file_find(f, e->name);
		if (!t)
			DIFF("%s %s: in the job, not in the checkpoint",
			     e->name, dims_str(e->rank, e->dims, a, sizeof(a)));
		else if (t->dtype != e->dtype || t->rank != e->rank ||
			 memcmp(t->dims, e->dims,
				sizeof(int64_t) * (size_t)e->rank))
			DIFF("%s: shape %s in the checkpoint, %s in the job",
			     e->name, dims_str(t->rank, t->dims, a, sizeof(a)),
			     dims_str(e->rank, e->dims, b, sizeof(b)));
	}
	for (int i = 0; i < f->ntensors; i++) {
		int found = 0;
		for (int k = 0; k < ck->n && !found; k++)
			found = !strcmp(ck->e[k].name, f->tensors[i].name);
		if (!found)
			DIFF("%s %s: in the checkpoint, not in the job",
			     f->tensors[i].name,
			     dims_str(f->tensors[i].rank, f->tensors[i].dims, a,
				      sizeof(a)));
	}
#undef DIFF
	if (!ndiff)
		return 0;
	return dtf_error(DTF_ERR_CHECKPOINT,
			 "%s: the job's model differs from the checkpoint's (%d difference%s):%s%s\n"
			 "HINT: resume with the job file that wrote it, or use another checkpoint.dir",
			 path, ndiff, ndiff == 1 ? "" : "s", msg,
			 ndiff > shown ? "\n  ..." : "");
}

/* Copy the verified file f (read from `path`) into the variables and the
 * optimizer, and its position into *pos, when its table matches ours. */
static int load_file(struct dtf_checkpointer *ck, const char *path,
		     const struct dtf_ckpt_file *f,
		     struct dtf_ckpt_position *pos)
{
	int rc = match(ck, path, f);
	if (rc < 0)
		return rc;
	for (int k = 0; k < ck->n; k++) {
		const struct dtf_ckpt_tensor *t =
			dtf_ckpt_file_find(f, ck->e[k].name);
		memcpy(ck->e[k].mem, f->data + t->offset, t->nbytes);
	}
	ck->opt->iterations = ck->scalars[SC_ITERATIONS];
	*pos = f->pos;
	for (int k = 0; k < pos->nprev; k++) {
		const int64_t *sg = ck->scalars + SC_SEGMENTS + 3 * k;
		pos->prev[k] = (struct dtf_ckpt_segment){sg[0], sg[1], sg[2]};
	}
	snprintf(ck->path, sizeof(ck->path), "%s", path);
	if (f->pos.job_hash != ck->job_hash)
		dtf_info("notice: the job file differs from the one that wrote %s",
			 path);
	return 0;
}

int dtf_checkpointer_load(struct dtf_checkpointer *ck, const char *path,
			  struct dtf_ckpt_position *pos, int *verified)
{
	struct dtf_ckpt_file f;
	*verified = 0;
	int rc = dtf_ckpt_file_read(path, &f);
	if (rc < 0)
		return rc;
	*verified = 1;
	rc = load_file(ck, path, &f, pos);
	dtf_ckpt_file_deinit(&f);
	return rc;
}

/* list_steps of a directory that must hold a checkpoint: its steps, newest
 * first, or an error (it cannot be listed, or holds none). */
static int list_some(const char *dir, int64_t steps[MAX_LISTED])
{
	int n = list_steps(dir, steps, MAX_LISTED, NULL);
	if (n < 0)
		return dtf_error(DTF_ERR_CHECKPOINT, "%s: cannot list: %s", dir,
				 strerror(errno));
	if (n == 0)
		return dtf_error(DTF_ERR_CHECKPOINT,
				 "%s: no checkpoint (ckpt-<step>.dtf) in this directory",
				 dir);
	return n;
}

int dtf_ckpt_file_read_newest(const char *path, struct dtf_ckpt_file *out,
			      char *used, size_t used_size)
{
	struct stat st;
	memset(out, 0, sizeof(*out));
	if (stat(path, &st) != 0)
		return dtf_error(DTF_ERR_CHECKPOINT, "--checkpoint %s: %s", path,
				 strerror(errno));
	if (!S_ISDIR(st.st_mode)) {
		snprintf(used, used_size, "%s", path);
		return dtf_ckpt_file_read(path, out);
	}
	int64_t steps[MAX_LISTED];
	int n = list_some(path, steps);
	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		snprintf(used, used_size, "%s/ckpt-%lld.dtf", path,
			 (long long)steps[i]);
		int rc = dtf_ckpt_file_read(used, out);
		if (rc == 0 || rc == -DTF_ERR_NOMEM)
			return rc;
		dtf_warn("%s; %s", dtf_error_msg(),
			 i + 1 < n ? "trying the previous checkpoint"
				   : "no older checkpoint");
	}
	return dtf_error(DTF_ERR_CHECKPOINT,
			 "no checkpoint in %s verifies (%d tried)", path, n);
}

int dtf_checkpoint_latest(const char *dir, int64_t *step)
{
	*step = -1;
	char path[PATH_BYTES], text[256];
	snprintf(path, sizeof(path), "%s/checkpoint", dir);
	FILE *f = fopen(path, "r");
	if (!f) {
		if (errno == ENOENT)
			return 0;
		return dtf_error(DTF_ERR_CHECKPOINT, "%s: cannot open: %s",
				 path, strerror(errno));
	}
	/* the first line names the newest: model_checkpoint_path: "ckpt-N.dtf" */
	int ok = fgets(text, sizeof(text), f) != NULL;
	fclose(f);
	static const char key[] = "model_checkpoint_path: \"";
	char *q = ok ? strstr(text, key) : NULL;
	char *end = q ? strchr(q + sizeof(key) - 1, '"') : NULL;
	if (end) {
		*end = 0;
		*step = parse_name(q + sizeof(key) - 1);
	}
	if (*step < 0)
		return dtf_error(DTF_ERR_CHECKPOINT,
				 "%s: the first line is not model_checkpoint_path: \"ckpt-<step>.dtf\"",
				 path);
	return 0;
}

/*
 * Load the first of the checkpoints steps[0..n-1] (newest first) of `dir`
 * that verifies: 1 when one was loaded, 0 when none verifies (each that
 * fails is a warning; with `set_aside` renamed to <name>.corrupt), or an
 * error (DTF_ERR_NOMEM, the model's mismatch).
 */
static int load_newest(struct dtf_checkpointer *ck, const char *dir,
		       const int64_t *steps, int n, int set_aside,
		       struct dtf_ckpt_position *pos)
{
	char path[PATH_BYTES];
	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/ckpt-%lld.dtf", dir,
			 (long long)steps[i]);
		struct dtf_ckpt_file f;
		int rc = dtf_ckpt_file_read(path, &f);
		if (rc == -DTF_ERR_NOMEM)
			return rc;
		if (rc < 0) {
			dtf_warn("%s; %s", dtf_error_msg(),
				 i + 1 < n ? "trying the previous checkpoint"
					   : "no older checkpoint");
			char moved[PATH_BYTES + 16];
			snprintf(moved, sizeof(moved), "%s.corrupt", path);
			if (set_aside && rename(path, moved) == 0)
				dtf_warn("renamed it to %s", moved);
			continue;
		}
		rc = load_file(ck, path, &f, pos);
		dtf_ckpt_file_deinit(&f);
		return rc < 0 ? rc : 1;
	}
	return 0;
}

int dtf_checkpointer_load_newest(struct dtf_checkpointer *ck, const char *dir,
				 struct dtf_ckpt_position *pos)
{
	int64_t steps[MAX_LISTED];
	int n = list_some(dir, steps);
	if (n < 0)
		return n;
	int rc = load_newest(ck, dir, steps, n, 0, pos);
	if (rc == 0)
		rc = dtf_error(DTF_ERR_CHECKPOINT,
			       "no checkpoint in %s verifies (%d tried)", dir, n);
	return rc < 0 ? rc : 0;
}

int dtf_checkpointer_restore(struct dtf_checkpointer *ck, int allow_fresh,
			     struct dtf_ckpt_position *pos, int *found)
{
	*found = 0;
	int64_t steps[MAX_LISTED];
	int aside = 0;
	int n = list_steps(ck->dir, steps, MAX_LISTED, &aside);
	if (n < 0)
		return dtf_error(DTF_ERR_CHECKPOINT, "%s: cannot list: %s",
				 ck->dir, strerror(errno));
	if (n == 0 && aside > 0) {
		/* an earlier resume found none that verifies and set them
		 * aside: still nothing to resume from */
		if (allow_fresh) {
			dtf_warn("no checkpoint in %s verifies (%d set aside as *.corrupt): starting from step 0 (--allow-fresh-start)",
				 ck->dir, aside);
			return 0;
		}
		return dtf_error(DTF_ERR_CHECKPOINT,
				 "no checkpoint in %s verifies: %d set aside as *.corrupt by an earlier resume, none other\n"
				 "HINT: --allow-fresh-start trains from step 0 instead",
				 ck->dir, aside);
	}
	if (n == 0) {
		dtf_info("no checkpoint in %s: starting from step 0", ck->dir);
		return 0;
	}
	int rc = load_newest(ck, ck->dir, steps, n, 1, pos);
	if (rc != 0) {
		*found = rc > 0;
		return rc > 0 ? 0 : rc;
	}
	if (allow_fresh) {
		dtf_warn("no checkpoint in %s verifies: starting from step 0 (--allow-fresh-start)",
			 ck->dir);
		return 0;
	}
	return dtf_error(DTF_ERR_CHECKPOINT,
			 "no checkpoint in %s verifies (%d tried)\n"
			 "HINT: --allow-fresh-start trains from step 0 instead",
			 ck->dir, n);
}

int dtf_checkpointer_share(struct dtf_checkpointer *ck, struct dtf_comm *comm,
			   struct dtf_ckpt_position *pos, int *found)
{
	struct {
		struct dtf_ckpt_position pos;
		int64_t found, iterations;
	} msg;
	memset(&msg, 0, sizeof(msg));
	msg.pos = *pos;
	msg.found = *found;
	msg.iterations = ck->opt->iterations;
	int rc = dtf_comm_bcast_bytes(comm, &msg, sizeof(msg), 0);
	if (rc < 0)
		return rc;
	*pos = msg.pos;
	*found = (int)msg.found;
	ck->opt->iterations = msg.iterations;
	if (*found && ck->nslots)
		rc = dtf_comm_bcast_f32(comm, ck->opt->slots, ck->nslots, 0);
	return rc;
}
