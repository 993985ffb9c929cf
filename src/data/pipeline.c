/*
 * pipeline.c - TFRecord shards -> decoded, shuffled, batched examples for
 * one replica (the contract is in pipeline.h).
 *
 * Design: `struct stream` runs every stage for one epoch at a time and is
 * strictly sequential: interleave over cycle_length readers (allocated at
 * open, reopened per file, keeping their buffers), the DATA record filter,
 * decoding, the shuffle buffer (decoded examples, `example_bytes` each, one
 * block allocated at open), augmentation and batching.  Its output is a
 * pure function of (options, epoch), so the exact position is just (epoch,
 * examples taken) and restoring is a replay.
 *
 * With prefetch N > 0 the stream belongs to one producer thread that fills
 * a ring of N batch buffers; the caller's thread only posts commands
 * (start epoch e, skipping k examples) and copies ready batches out.  Every
 * command bumps a generation number; a batch produced for an older
 * generation is thrown away, so begin_epoch/restore never see stale data.
 * One mutex guards the ring and the command; the producer works on a slot
 * outside the lock (no one else touches a slot between claim and publish).
 *
 * After the first epoch has opened every file once nothing is allocated by
 * the project (stdio's fopen per file aside).
 */
#include "data/pipeline.h"

#include <glob.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "data/example.h"
#include "data/tfrecord.h"

#define MSG_MAX 1024
/* Bad records logged by name at open (on_error SKIP); the rest counted. */
#define SKIP_LOG_MAX 5

/* One open file of the interleave cycle. */
struct cyc {
	struct dtf_tfrecord_reader *rd;
	int file; /* index into paths, -1 when the slot is empty */
};

/* Every stage for one epoch; owned by one thread at a time. */
struct stream {
	struct dtf_pipeline *p;
	struct cyc *cycle; /* ncycle */
	int cycle_index, block_index, num_open;
	int next_mine;        /* next entry of p->mine to open */
	int64_t global_index; /* records out of the interleave this epoch */
	int epoch;
	/* shuffle buffer */
	uint8_t *slots;     /* shuf_cap * example_bytes */
	uint64_t *slot_ids; /* shuf_cap */
	size_t shuf_n;      /* filled slots */
	int filled;         /* the buffer had its initial fill */
	uint64_t draws;
	uint8_t *scratch;   /* one example: augmentation, replay */
	int done;           /* the epoch's input and buffer are exhausted */
	/* on_error SKIP bookkeeping of this pass */
	int64_t skipped, cut;
	uint64_t cut_bytes;
	int logging; /* log skipped records by name (the open pass) */
	int logged;
	/* sticky error */
	int err;
	char msg[MSG_MAX];
};

/* A batch buffer of the prefetch ring. */
struct rslot {
	uint8_t *data;  /* per feature: batch * feat_bytes[f] at blk_off[f] */
	uint64_t *ids;  /* batch */
	int count;      /* examples, 0 = end of epoch */
	int rc;         /* 0 or a negative DTF_ERR_* */
	char msg[MSG_MAX];
};

struct ring {
	int n;
	struct rslot *slots;
	uint8_t *mem;
	int head, used;       /* oldest ready slot, ready slots */
	int claimed;          /* the producer is filling slot (head+used)%n */
	pthread_t thread;
	int have_thread;
	pthread_mutex_t mu;
	pthread_cond_t cv_prod, cv_cons;
	uint64_t gen;         /* of the current command */
	uint64_t done_gen;    /* last generation the producer finished */
	int cmd_epoch;
	int64_t cmd_skip;
	int quit;
	int busy; /* the producer is away from its idle wait */
};

struct dtf_pipeline {
	char **paths; /* nfiles paths, pointers and strings in one block */
	int nfiles;
	int *mine; /* indices of the files this rank reads, in order */
	int nmine;
	int rank, world;
	enum dtf_shard_policy policy; /* resolved: FILE, DATA or OFF */
	struct dtf_read_spec read;
	int drop_remainder;
	struct dtf_feature_spec *features;
	int nfeatures;
	size_t feat_bytes[DTF_EXAMPLE_MAX_FEATURES]; /* per example */
	size_t feat_off[DTF_EXAMPLE_MAX_FEATURES];   /* within a slot */
	size_t blk_off[DTF_EXAMPLE_MAX_FEATURES];    /* within a batch */
	size_t example_bytes;                        /* one decoded example */
	size_t batch_bytes;                          /* one batch */
	int batch;
	size_t shuf_cap; /* slots; 0 = no shuffle */
	size_t shuffle_requested;
	uint64_t seed;
	struct dtf_philox_key key, aug_key;
	int aug_feature; /* -1 = none */
	struct dtf_augment_spec aug;
	uint64_t fingerprint;
	const char *label;
	int quiet; /* opts->quiet: open logs nothing */
	/* record filter (elastic resume); the active one is read by the
	 * stream, so it changes only while the producer is idle */
	int (*exclude)(void *ctx, uint64_t id);
	void *exclude_ctx;
	int (*exclude_next)(void *ctx, uint64_t id); /* set_exclude's */
	void *exclude_next_ctx;
	int exclude_pending;

	struct dtf_pipeline_stats stats;
	struct stream s;
	struct ring ring; /* ring.n == 0: no prefetch */

	/* caller's view */
	int epoch;
	int64_t consumed; /* examples returned this epoch */
	int fresh;        /* at the start of `epoch`, nothing asked yet */
};

/* ---- helpers ------------------------------------------------------------ */

static int is_mine_file(const struct dtf_pipeline *p, int file)
{
	return p->policy != DTF_SHARD_FILE || file % p->world == p->rank;
}

/* Prefix the current (feature) error with file, record and offset. */
static int wrap_error(int rc, const char *path, int64_t idx, uint64_t off)
{
	if (rc != -DTF_ERR_DATA)
		return rc;
	char msg[MSG_MAX];
	snprintf(msg, sizeof(msg), "%s", dtf_error_msg());
	return dtf_error(DTF_ERR_DATA,
			 "%s: record %" PRId64 " at byte offset %" PRIu64
			 ": %s",
			 path, idx, off, msg);
}

static void slot_ptrs(const struct dtf_pipeline *p, uint8_t *base,
		      void **ptrs)
{
	for (int f = 0; f < p->nfeatures; f++)
		ptrs[f] = base + p->feat_off[f];
}

/* ---- interleave ----------------------------------------------------------- */

static void stream_close_files(struct stream *s)
{
	for (int i = 0; i < s->p->read.cycle_length; i++)
		s->cycle[i].file = -1;
	s->num_open = 0;
}

static void advance_cycle(struct stream *s)
{
	s->block_index = 0;
	s->cycle_index = (s->cycle_index + 1) % s->p->read.cycle_length;
}

/* A skipped record or file tail: count it, log the first few by name. */
static void note_skip(struct stream *s, int tail, uint64_t bytes)
{
	if (tail) {
		s->cut++;
		s->cut_bytes += bytes;
	} else {
		s->skipped++;
	}
	if (s->logging && s->logged++ < SKIP_LOG_MAX)
		dtf_warn("skipping %s (data.on_error: skip): %s",
			 tail ? "the rest of the file" : "a bad record",
			 dtf_error_msg());
}

/*
 * The next record of this rank out of the interleave, read and checked, not
 * decoded: 1 with data, len, file, idx and off set, 0 at the end of the
 * epoch's input, or an error (on_error FAIL; with SKIP only non-data errors
 * come back).
 */
static int next_record(struct stream *s, const uint8_t **data, size_t *len,
		       int *file, int64_t *idx, uint64_t *off)
{
	struct dtf_pipeline *p = s->p;
	int skip = p->read.on_error == DTF_ON_ERROR_SKIP;
	int rc;
	while (s->num_open > 0 || s->next_mine < p->nmine) {
		struct cyc *c = &s->cycle[s->cycle_index];
		if (c->file < 0) {
			if (s->next_mine >= p->nmine) {
				advance_cycle(s);
				continue;
			}
			int f = p->mine[s->next_mine++];
			rc = dtf_tfrecord_reader_reopen(c->rd, p->paths[f]);
			if (rc < 0) {
				if (!skip || rc != -DTF_ERR_DATA)
					return rc;
				note_skip(s, 1, 0);
				continue; /* the next file takes the slot */
			}
			c->file = f;
			s->num_open++;
			continue;
		}
		int keep = p->policy != DTF_SHARD_DATA ||
			   s->global_index % p->world == p->rank;
		*idx = dtf_tfrecord_reader_index(c->rd);
		*off = dtf_tfrecord_reader_offset(c->rd);
		if (keep)
			rc = dtf_tfrecord_reader_next(c->rd, data, len);
		else
			rc = dtf_tfrecord_reader_skip(c->rd, NULL);
		if (rc > 0) {
			s->global_index++;
			if (++s->block_index >= p->read.block_length)
				advance_cycle(s);
			if (!keep)
				continue;
			*file = c->file;
			return 1;
		}
		if (rc < 0) {
			if (!skip || rc != -DTF_ERR_DATA)
				return rc;
			if (dtf_tfrecord_reader_resumable(c->rd)) {
				/* a bad record inside sound framing: it still
				 * takes its place in the global order */
				s->global_index++;
				note_skip(s, 0, 0);
				if (++s->block_index >= p->read.block_length)
					advance_cycle(s);
				continue;
			}
			long long size = dtf_tfrecord_reader_size(c->rd);
			note_skip(s, 1,
				  size >= 0 && (uint64_t)size > *off
					  ? (uint64_t)size - *off
					  : 0);
		}
		/* end of this file (or its trustworthy part) */
		c->file = -1;
		s->num_open--;
		advance_cycle(s);
	}
	return 0;
}

/* The next decoded example into out[f]: 1, 0 at the end of input, or an
 * error. */
static int next_input(struct stream *s, void *const *out, uint64_t *id)
{
	struct dtf_pipeline *p = s->p;
	for (;;) {
		const uint8_t *data;
		size_t len;
		int file;
		int64_t idx;
		uint64_t off;
		int rc = next_record(s, &data, &len, &file, &idx, &off);
		if (rc <= 0)
			return rc;
		if (p->exclude &&
		    p->exclude(p->exclude_ctx, (uint64_t)file << 40 | (uint64_t)idx))
			continue;
		rc = dtf_example_decode(data, len, p->features, p->nfeatures,
					out);
		if (rc) {
			rc = wrap_error(rc, p->paths[file], idx, off);
			if (p->read.on_error == DTF_ON_ERROR_SKIP &&
			    rc == -DTF_ERR_DATA) {
				note_skip(s, 0, 0);
				continue;
			}
			return rc;
		}
		*id = (uint64_t)file << 40 | (uint64_t)idx;
		return 1;
	}
}

/* ---- shuffle ---------------------------------------------------------------- */

/* A uniform index in [0, n) from the next draw of this epoch's stream. */
static size_t draw(struct stream *s, size_t n)
{
	struct dtf_pipeline *p = s->p;
	uint32_t ctr[4] = {(uint32_t)s->draws, (uint32_t)p->rank,
			   (uint32_t)s->epoch, (uint32_t)(s->draws >> 32)};
	uint32_t w[4];
	dtf_philox4x32(p->key, ctr, w);
	s->draws++;
	uint64_t r = (uint64_t)w[0] << 32 | w[1];
	return (size_t)(r % n);
}

static void stream_begin(struct stream *s, int epoch)
{
	stream_close_files(s);
	s->epoch = epoch;
	s->cycle_index = 0;
	s->block_index = 0;
	s->next_mine = 0;
	s->global_index = 0;
	s->shuf_n = 0;
	s->filled = 0;
	s->draws = 0;
	s->done = 0;
	s->err = 0;
	s->msg[0] = 0;
}

/*
 * The next example of the epoch in shuffled order: returns 1 with *src
 * pointing at its decoded bytes (valid until the next call) and *id set,
 * 0 at the end of the epoch, or an error.
 */
static int next_example(struct stream *s, const uint8_t **src, uint64_t *id)
{
	struct dtf_pipeline *p = s->p;
	void *ptrs[DTF_EXAMPLE_MAX_FEATURES];
	int rc;
	if (s->done)
		return 0;
	if (!p->shuf_cap) {
		slot_ptrs(p, s->scratch, ptrs);
		rc = next_input(s, ptrs, id);
		if (rc == 0)
			s->done = 1;
		*src = s->scratch;
		return rc;
	}
	if (!s->filled) {
		while (s->shuf_n < p->shuf_cap) {
			slot_ptrs(p, s->slots + s->shuf_n * p->example_bytes,
				  ptrs);
			rc = next_input(s, ptrs, &s->slot_ids[s->shuf_n]);
			if (rc < 0)
				return rc;
			if (rc == 0)
				break;
			s->shuf_n++;
		}
		s->filled = 1;
	}
	if (!s->shuf_n) {
		s->done = 1;
		return 0;
	}
	size_t j = draw(s, s->shuf_n);
	uint8_t *slot = s->slots + j * p->example_bytes;
	memcpy(s->scratch, slot, p->example_bytes);
	*id = s->slot_ids[j];
	*src = s->scratch;
	slot_ptrs(p, slot, ptrs);
	rc = next_input(s, ptrs, &s->slot_ids[j]);
	if (rc < 0)
		return rc;
	if (rc == 0) {
		/* Input done: the last slot fills the hole. */
		size_t last = --s->shuf_n;
		if (j != last) {
			memcpy(slot, s->slots + last * p->example_bytes,
			       p->example_bytes);
			s->slot_ids[j] = s->slot_ids[last];
		}
	}
	return 1;
}

/* ---- augmentation ------------------------------------------------------------- */

/* Copy feature f of one example from src to dst, cropping a zero-padded
 * copy at a random offset and mirroring it, keyed by (id, epoch). */
static void augment_copy(const struct dtf_pipeline *p, int epoch,
			 uint64_t id, const float *src, float *dst)
{
	const struct dtf_feature_spec *fs = &p->features[p->aug_feature];
	int64_t h = fs->shape[0], w = fs->shape[1], c = fs->shape[2];
	int pad = p->aug.crop_padding;
	uint32_t ctr[4] = {(uint32_t)id, (uint32_t)(id >> 32),
			   (uint32_t)epoch, 0};
	uint32_t r[4];
	dtf_philox4x32(p->aug_key, ctr, r);
	int64_t dy = pad ? (int64_t)(r[0] % (uint32_t)(2 * pad + 1)) - pad : 0;
	int64_t dx = pad ? (int64_t)(r[1] % (uint32_t)(2 * pad + 1)) - pad : 0;
	int flip = p->aug.flip_left_right && (r[2] & 1);
	for (int64_t y = 0; y < h; y++) {
		int64_t sy = y + dy;
		for (int64_t x = 0; x < w; x++) {
			int64_t sx = (flip ? w - 1 - x : x) + dx;
			float *o = dst + (y * w + x) * c;
			if (sy < 0 || sy >= h || sx < 0 || sx >= w) {
				for (int64_t k = 0; k < c; k++)
					o[k] = 0.0f;
			} else {
				memcpy(o, src + (sy * w + sx) * c,
				       (size_t)c * sizeof(float));
			}
		}
	}
}

/* ---- batching ---------------------------------------------------------------- */

/*
 * Fill dst[f] (per feature, batch rows) and ids with the next batch:
 * *count examples (0 at the end of the epoch; a short batch only without
 * drop_remainder).  Errors are sticky in the stream.
 */
static int stream_next_batch(struct stream *s, void *const *dst,
			     uint64_t *ids, int *count)
{
	struct dtf_pipeline *p = s->p;
	*count = 0;
	if (s->err)
		return dtf_error((enum dtf_err) - s->err, "%s", s->msg);
	int n = 0, rc = 0;
	void *ptrs[DTF_EXAMPLE_MAX_FEATURES];
	for (; n < p->batch && !p->shuf_cap; n++) {
		/* No shuffle buffer: decode straight into the batch. */
		if (s->done) {
			rc = 0;
			break;
		}
		for (int f = 0; f < p->nfeatures; f++)
			ptrs[f] = (uint8_t *)dst[f] + (size_t)n * p->feat_bytes[f];
		rc = next_input(s, ptrs, &ids[n]);
		if (rc <= 0) {
			if (rc == 0)
				s->done = 1;
			break;
		}
		if (p->aug_feature >= 0) {
			int f = p->aug_feature;
			memcpy(s->scratch, ptrs[f], p->feat_bytes[f]);
			augment_copy(p, s->epoch, ids[n],
				     (const float *)s->scratch, ptrs[f]);
		}
	}
	for (; n < p->batch && p->shuf_cap; n++) {
		const uint8_t *src;
		rc = next_example(s, &src, &ids[n]);
		if (rc <= 0)
			break;
		for (int f = 0; f < p->nfeatures; f++) {
			uint8_t *o = (uint8_t *)dst[f] + (size_t)n * p->feat_bytes[f];
			if (f == p->aug_feature)
				augment_copy(p, s->epoch, ids[n],
					     (const float *)(src + p->feat_off[f]),
					     (float *)o);
			else
				memcpy(o, src + p->feat_off[f], p->feat_bytes[f]);
		}
	}
	if (rc < 0) {
		s->err = rc;
		snprintf(s->msg, sizeof(s->msg), "%s", dtf_error_msg());
		return rc;
	}
	if (n < p->batch && p->drop_remainder)
		n = 0;
	*count = n;
	return 0;
}

/* Take k examples of the epoch and throw them away (replay). */
static int stream_discard(struct stream *s, int64_t k, const uint64_t *gen,
			  struct ring *ring)
{
	for (int64_t i = 0; i < k; i++) {
		const uint8_t *src;
		uint64_t id;
		int rc = next_example(s, &src, &id);
		if (rc < 0) {
			s->err = rc;
			snprintf(s->msg, sizeof(s->msg), "%s", dtf_error_msg());
			return rc;
		}
		if (rc == 0)
			return dtf_error(DTF_ERR_CHECKPOINT,
					 "pipeline position: epoch %d has only "
					 "%" PRId64 " examples for this rank, "
					 "not %" PRId64,
					 s->epoch, i, k);
		/* a newer command makes the rest of the replay pointless */
		if (gen && (i & 255) == 0 &&
		    __atomic_load_n(&ring->gen, __ATOMIC_RELAXED) != *gen)
			return 0;
	}
	return 0;
}

/* ---- prefetch ------------------------------------------------------------------- */

static void batch_ptrs(const struct dtf_pipeline *p, uint8_t *data,
		       void **ptrs)
{
	for (int f = 0; f < p->nfeatures; f++)
		ptrs[f] = data + p->blk_off[f];
}

static void *producer(void *arg)
{
	struct dtf_pipeline *p = arg;
	struct ring *r = &p->ring;
	struct stream *s = &p->s;
	void *ptrs[DTF_EXAMPLE_MAX_FEATURES];
#ifdef SCHED_BATCH
	/* No wakeup preemption: when the training thread hands back a slot,
	 * this thread must not push it off its core in the middle of the
	 * step (it is mostly idle; a batch costs it well under a
	 * millisecond).  Best effort: a failure changes nothing else. */
	struct sched_param sp = {0};
	pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
#endif

	pthread_mutex_lock(&r->mu);
	for (;;) {
		r->busy = 0;
		pthread_cond_broadcast(&r->cv_cons); /* ring_pause waits */
		while (!r->quit && r->done_gen == r->gen)
			pthread_cond_wait(&r->cv_prod, &r->mu);
		if (r->quit)
			break;
		r->busy = 1;
		uint64_t gen = r->gen;
		int epoch = r->cmd_epoch;
		int64_t skip = r->cmd_skip;
		pthread_mutex_unlock(&r->mu);

		stream_begin(s, epoch);
		int rc = skip ? stream_discard(s, skip, &gen, r) : 0;
		int finished = 0;
		while (!finished) {
			pthread_mutex_lock(&r->mu);
			/* The training thread does not wake us when it
			 * frees a slot (a futex wake in the middle of its
			 * step cost it a reschedule: ~5 ms per step on a busy
			 * machine): look again after 0.25 ms, doubling up to
			 * 16 ms while the ring stays full.  Commands and an
			 * empty ring still signal. */
			long nap = 250000;
			while (!r->quit && r->gen == gen && r->used == r->n) {
				struct timespec until;
				clock_gettime(CLOCK_REALTIME, &until);
				until.tv_nsec += nap;
				if (until.tv_nsec >= 1000000000) {
					until.tv_sec++;
					until.tv_nsec -= 1000000000;
				}
				pthread_cond_timedwait(&r->cv_prod, &r->mu,
						       &until);
				if (nap < 16000000)
					nap *= 2;
			}
			if (r->quit || r->gen != gen)
				break; /* holding the lock */
			struct rslot *sl = &r->slots[(r->head + r->used) % r->n];
			r->claimed = 1;
			pthread_mutex_unlock(&r->mu);

			int count = 0;
			if (rc == 0) {
				batch_ptrs(p, sl->data, ptrs);
				rc = stream_next_batch(s, ptrs, sl->ids, &count);
			}
			if (rc < 0)
				snprintf(sl->msg, sizeof(sl->msg), "%s",
					 dtf_error_msg());
			sl->rc = rc;
			sl->count = count;
			finished = rc < 0 || count == 0;

			pthread_mutex_lock(&r->mu);
			r->claimed = 0;
			if (r->gen == gen) {
				r->used++;
				pthread_cond_signal(&r->cv_cons);
			}
			if (finished || r->gen != gen) {
				if (r->gen == gen)
					r->done_gen = gen;
				break; /* holding the lock */
			}
			pthread_mutex_unlock(&r->mu);
		}
		/* here with the lock held */
		if (r->gen == gen)
			r->done_gen = gen;
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

/* Stop the producer and wait until it is idle: the stream and the
 * pipeline's settings are then the caller's until the next command. */
static void ring_pause(struct dtf_pipeline *p)
{
	struct ring *r = &p->ring;
	pthread_mutex_lock(&r->mu);
	__atomic_store_n(&r->gen, r->gen + 1, __ATOMIC_RELAXED);
	r->done_gen = r->gen; /* no command: stay idle */
	r->head = 0;
	r->used = 0;
	pthread_cond_signal(&r->cv_prod);
	while (r->busy)
		pthread_cond_wait(&r->cv_cons, &r->mu);
	pthread_mutex_unlock(&r->mu);
}

/* Post a command: (re)start at `epoch` after `skip` examples. */
static void ring_command(struct dtf_pipeline *p, int epoch, int64_t skip)
{
	struct ring *r = &p->ring;
	pthread_mutex_lock(&r->mu);
	/* Wait out a slot being filled: it would land at the old tail. */
	while (r->claimed)
		pthread_cond_wait(&r->cv_cons, &r->mu);
	__atomic_store_n(&r->gen, r->gen + 1, __ATOMIC_RELAXED);
	r->cmd_epoch = epoch;
	r->cmd_skip = skip;
	r->head = 0;
	r->used = 0;
	pthread_cond_signal(&r->cv_prod);
	pthread_mutex_unlock(&r->mu);
}

static int ring_next(struct dtf_pipeline *p, void *const *dst, uint64_t *ids,
		     int *count)
{
	struct ring *r = &p->ring;
	pthread_mutex_lock(&r->mu);
	if (r->used == 0) /* waiting anyway: wake the producer now */
		pthread_cond_signal(&r->cv_prod);
	while (r->used == 0)
		pthread_cond_wait(&r->cv_cons, &r->mu);
	struct rslot *sl = &r->slots[r->head];
	pthread_mutex_unlock(&r->mu);
	if (sl->rc < 0) /* sticky: the slot stays */
		return dtf_error((enum dtf_err) - sl->rc, "%s", sl->msg);
	*count = sl->count;
	if (sl->count == 0) /* the end stays too */
		return 0;
	for (int f = 0; f < p->nfeatures; f++)
		memcpy(dst[f], sl->data + p->blk_off[f],
		       (size_t)sl->count * p->feat_bytes[f]);
	memcpy(ids, sl->ids, (size_t)sl->count * sizeof(uint64_t));
	pthread_mutex_lock(&r->mu);
	r->head = (r->head + 1) % r->n;
	r->used--; /* the producer looks within a millisecond */
	pthread_mutex_unlock(&r->mu);
	return 0;
}

static int ring_start(struct dtf_pipeline *p)
{
	struct ring *r = &p->ring;
	int n = p->read.prefetch;
	r->slots = dtf_calloc((size_t)n, sizeof(*r->slots));
	r->mem = dtf_alloc_aligned((size_t)n *
				   (p->batch_bytes +
				    (size_t)p->batch * sizeof(uint64_t)));
	if (!r->slots || !r->mem)
		return dtf_error(DTF_ERR_NOMEM,
				 "out of memory for %d prefetched batches", n);
	for (int i = 0; i < n; i++) {
		uint8_t *base = r->mem + (size_t)i * (p->batch_bytes +
						     (size_t)p->batch * 8);
		r->slots[i].data = base;
		r->slots[i].ids = (uint64_t *)(base + p->batch_bytes);
	}
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv_prod, NULL);
	pthread_cond_init(&r->cv_cons, NULL);
	r->n = n;
	r->gen = r->done_gen = 0;
	if (pthread_create(&r->thread, NULL, producer, p) != 0) {
		r->n = 0;
		pthread_mutex_destroy(&r->mu);
		pthread_cond_destroy(&r->cv_prod);
		pthread_cond_destroy(&r->cv_cons);
		return dtf_error(DTF_ERR_RUNTIME,
				 "cannot start the prefetch thread");
	}
	r->have_thread = 1;
	return 0;
}

static void ring_stop(struct dtf_pipeline *p)
{
	struct ring *r = &p->ring;
	if (r->have_thread) {
		pthread_mutex_lock(&r->mu);
		r->quit = 1;
		__atomic_store_n(&r->gen, r->gen + 1, __ATOMIC_RELAXED);
		pthread_cond_broadcast(&r->cv_prod);
		pthread_mutex_unlock(&r->mu);
		pthread_join(r->thread, NULL);
		pthread_mutex_destroy(&r->mu);
		pthread_cond_destroy(&r->cv_prod);
		pthread_cond_destroy(&r->cv_cons);
		r->have_thread = 0;
	}
	dtf_free(r->slots);
	dtf_free(r->mem);
	r->slots = NULL;
	r->mem = NULL;
	r->n = 0;
}

/* ---- public ---------------------------------------------------------------------- */

int dtf_pipeline_next(struct dtf_pipeline *p, void *const *dst,
		      uint64_t *example_ids, int *count)
{
	p->fresh = 0;
	int rc = p->ring.n ? ring_next(p, dst, example_ids, count)
			   : stream_next_batch(&p->s, dst, example_ids, count);
	if (rc == 0)
		p->consumed += *count;
	return rc;
}

/* With the producer idle: a filter given by set_exclude takes over. */
static void install_exclude(struct dtf_pipeline *p)
{
	if (!p->exclude_pending)
		return;
	p->exclude = p->exclude_next;
	p->exclude_ctx = p->exclude_next_ctx;
	p->exclude_pending = 0;
}

int dtf_pipeline_begin_epoch(struct dtf_pipeline *p, int epoch)
{
	/* Already there (e.g. the first epoch, started at open so the
	 * prefetch thread gets going early): nothing to redo. */
	if (p->fresh && p->epoch == epoch && p->consumed == 0 &&
	    !p->exclude_pending)
		return 0;
	p->fresh = 1;
	p->epoch = epoch;
	p->consumed = 0;
	if (p->ring.n) {
		ring_pause(p);
		install_exclude(p);
		ring_command(p, epoch, 0);
	} else {
		install_exclude(p);
		stream_begin(&p->s, epoch);
	}
	return 0;
}

void dtf_pipeline_set_exclude(struct dtf_pipeline *p,
			      int (*exclude)(void *ctx, uint64_t id),
			      void *ctx)
{
	p->exclude_next = exclude;
	p->exclude_next_ctx = ctx;
	p->exclude_pending = 1;
	/* nothing taken from this epoch yet: it starts over with the filter */
	if (p->fresh && p->consumed == 0)
		dtf_pipeline_begin_epoch(p, p->epoch);
}

void dtf_pipeline_save(const struct dtf_pipeline *p,
		       struct dtf_pipeline_state *st)
{
	st->epoch = p->epoch;
	st->consumed = p->consumed;
	st->fingerprint = p->fingerprint;
}

int dtf_pipeline_restore(struct dtf_pipeline *p,
			 const struct dtf_pipeline_state *st)
{
	if (st->fingerprint != p->fingerprint)
		return dtf_error(DTF_ERR_CHECKPOINT,
				 "pipeline position was saved under other data "
				 "settings (fingerprint %016" PRIx64 ", now "
				 "%016" PRIx64 "): seed, number of ranks, number "
				 "of files, shard_policy, cycle_length, "
				 "block_length and shuffle_buffer must match to "
				 "resume mid-epoch",
				 st->fingerprint, p->fingerprint);
	if (st->epoch < 0 || st->epoch > INT32_MAX || st->consumed < 0 ||
	    st->consumed > p->stats.records)
		return dtf_error(DTF_ERR_CHECKPOINT,
				 "pipeline position (epoch %" PRId64 ", %" PRId64
				 " examples) is outside the data (%" PRId64
				 " examples per epoch on this rank)",
				 st->epoch, st->consumed, p->stats.records);
	p->epoch = (int)st->epoch;
	p->consumed = st->consumed;
	p->fresh = 0;
	if (p->ring.n) {
		ring_pause(p);
		install_exclude(p);
		ring_command(p, p->epoch, st->consumed);
		return 0;
	}
	install_exclude(p);
	stream_begin(&p->s, p->epoch);
	return stream_discard(&p->s, st->consumed, NULL, NULL);
}

static void put64(uint8_t *o, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		o[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *b)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | b[i];
	return v;
}

void dtf_pipeline_state_encode(const struct dtf_pipeline_state *st,
			       uint8_t out[DTF_PIPELINE_STATE_BYTES])
{
	memcpy(out, "DTFPIPE1", 8);
	put64(out + 8, (uint64_t)st->epoch);
	put64(out + 16, (uint64_t)st->consumed);
	put64(out + 24, st->fingerprint);
}

int dtf_pipeline_state_decode(const uint8_t *in, size_t n,
			      struct dtf_pipeline_state *st)
{
	if (n != DTF_PIPELINE_STATE_BYTES || memcmp(in, "DTFPIPE1", 8))
		return dtf_error(DTF_ERR_CHECKPOINT,
				 "pipeline position: not a DTFPIPE1 record of "
				 "%d bytes (got %zu bytes)",
				 DTF_PIPELINE_STATE_BYTES, n);
	st->epoch = (int64_t)get64(in + 8);
	st->consumed = (int64_t)get64(in + 16);
	st->fingerprint = get64(in + 24);
	return 0;
}

const char *dtf_pipeline_file(const struct dtf_pipeline *p, int index)
{
	return index >= 0 && index < p->nfiles ? p->paths[index] : "?";
}

int dtf_pipeline_record_offset(const struct dtf_pipeline *p, uint64_t id,
			       uint64_t *offset)
{
	int file = (int)(id >> 40);
	int64_t idx = (int64_t)(id & ((1ull << 40) - 1));
	if (file < 0 || file >= p->nfiles)
		return dtf_error(DTF_ERR_DATA, "example id %#" PRIx64
			         ": no file %d in %s", id, file, p->label);
	struct dtf_tfrecord_reader *rd = NULL;
	int rc = dtf_tfrecord_reader_open_c(p->paths[file], p->read.compression,
					    &rd);
	while (rc == 0 && dtf_tfrecord_reader_index(rd) < idx) {
		rc = dtf_tfrecord_reader_skip(rd, NULL);
		if (rc == 0)
			rc = dtf_error(DTF_ERR_DATA,
				       "%s: has fewer than %" PRId64 " records",
				       p->paths[file], idx + 1);
		else if (rc > 0)
			rc = 0;
	}
	if (rc == 0)
		*offset = dtf_tfrecord_reader_offset(rd);
	dtf_tfrecord_reader_free(rd);
	return rc;
}

int64_t dtf_pipeline_num_records(const struct dtf_pipeline *p)
{
	return p->stats.records;
}

void dtf_pipeline_get_stats(const struct dtf_pipeline *p,
			    struct dtf_pipeline_stats *st)
{
	*st = p->stats;
}

void dtf_pipeline_log_skipped(const struct dtf_pipeline *p, int epoch)
{
	const struct dtf_pipeline_stats *st = &p->stats;
	if (!st->skipped_records && !st->cut_files)
		return;
	char what[256];
	size_t at = 0;
	if (st->skipped_records)
		dtf_log_append(what, sizeof(what), &at,
			       "%" PRId64 " bad record%s skipped",
			       st->skipped_records,
			       st->skipped_records == 1 ? "" : "s");
	if (st->cut_files)
		dtf_log_append(what, sizeof(what), &at,
			       "%sthe rest of %" PRId64 " file%s (%" PRIu64
			       " bytes) skipped",
			       at ? ", " : "", st->cut_files,
			       st->cut_files == 1 ? "" : "s", st->skipped_bytes);
	dtf_log(DTF_LOG_INFO, 1, "epoch %d: %s: %s (data.on_error: skip)",
		epoch + 1, p->label, what);
}

/* ---- open ------------------------------------------------------------------------ */

/* Copy the path list into one block: pointers, then the strings. */
static char **copy_paths(const char *const *files, int n)
{
	size_t bytes = (size_t)n * sizeof(char *);
	for (int i = 0; i < n; i++)
		bytes += strlen(files[i]) + 1;
	char **v = dtf_malloc(bytes);
	if (!v)
		return NULL;
	char *s = (char *)(v + n);
	for (int i = 0; i < n; i++) {
		size_t l = strlen(files[i]) + 1;
		memcpy(s, files[i], l);
		v[i] = s;
		s += l;
	}
	return v;
}

/* FNV-1a over 64-bit words. */
static uint64_t fnv(uint64_t h, uint64_t v)
{
	for (int i = 0; i < 8; i++) {
		h ^= (v >> (8 * i)) & 0xff;
		h *= 0x100000001b3ull;
	}
	return h;
}

int dtf_pipeline_file_shard_error(const char *where, const char *files,
				  int nfiles, int world)
{
	return dtf_error(
		DTF_ERR_CONFIG,
		"%s%sdata.shard_policy: file: %s%s%d file%s for %d ranks: every rank needs at least one file\n"
		"HINT: use shard_policy: auto or data (every rank reads every file and keeps every %d%s record), or split the data into at least %d files (dtf-records shard --shards %d)",
		where, where[0] ? ": " : "", files ? files : "",
		files ? " matches " : "", nfiles, nfiles == 1 ? "" : "s", world,
		world, world == 2 ? "nd" : world == 3 ? "rd" : "th", world, world);
}

static int resolve_policy(struct dtf_pipeline *p,
			  enum dtf_shard_policy asked)
{
	switch (asked) {
	case DTF_SHARD_AUTO:
		p->policy = p->nfiles >= p->world ? DTF_SHARD_FILE
						  : DTF_SHARD_DATA;
		return 0;
	case DTF_SHARD_FILE:
		if (p->nfiles < p->world)
			return dtf_pipeline_file_shard_error("", NULL, p->nfiles,
							    p->world);
		/* fall through */
	case DTF_SHARD_DATA:
	case DTF_SHARD_OFF:
		p->policy = asked;
		return 0;
	}
	return dtf_error(DTF_ERR_USAGE, "unknown shard policy %d", (int)asked);
}

static int check_augment(struct dtf_pipeline *p)
{
	p->aug_feature = -1;
	if (!p->aug.feature[0] ||
	    (!p->aug.crop_padding && !p->aug.flip_left_right))
		return 0;
	for (int f = 0; f < p->nfeatures; f++) {
		if (strcmp(p->features[f].name, p->aug.feature))
			continue;
		const struct dtf_feature_spec *fs = &p->features[f];
		if (fs->rank != 3 || fs->dtype != DTF_FLOAT32)
			return dtf_error(DTF_ERR_CONFIG,
					 "data.train.augment: feature '%s' is "
					 "not a float image of shape [H, W, C]",
					 fs->name);
		if (p->aug.crop_padding < 0 ||
		    p->aug.crop_padding > fs->shape[0] ||
		    p->aug.crop_padding > fs->shape[1])
			return dtf_error(DTF_ERR_CONFIG,
					 "data.train.augment: crop_padding %d "
					 "is larger than the image",
					 p->aug.crop_padding);
		p->aug_feature = f;
		return 0;
	}
	return dtf_error(DTF_ERR_CONFIG,
			 "data.train.augment: no feature named '%s'",
			 p->aug.feature);
}

/* Framing scan of this rank's files: record counts, the largest record,
 * empty files. */
static int scan_files(struct dtf_pipeline *p, uint64_t *max_record)
{
	int64_t total = 0;
	for (int i = 0; i < p->nmine; i++) {
		const char *path = p->paths[p->mine[i]];
		struct dtf_tfrecord_stats st;
		int rc = dtf_tfrecord_scan_c(path, p->read.compression, &st);
		if (rc == -DTF_ERR_DATA &&
		    p->read.on_error == DTF_ON_ERROR_SKIP) {
			/* the read-through pass counts and reports it */
			rc = 0;
		}
		if (rc)
			return rc;
		if (st.bytes == 0 && st.records == 0) {
			p->stats.empty_files++;
			if (!p->quiet)
				dtf_warn("%s: empty file (0 records); "
					 "reading on",
					 path);
		}
		total += st.records;
		if (st.max_record > *max_record)
			*max_record = st.max_record;
	}
	if (p->policy == DTF_SHARD_DATA)
		p->stats.records = total > p->rank
					   ? (total - p->rank + p->world - 1) /
						     p->world
					   : 0;
	else
		p->stats.records = total;
	return 0;
}

/* on_error SKIP: one pass over this rank's records, counting what an
 * epoch yields and what it leaves out. */
static int count_pass(struct dtf_pipeline *p)
{
	struct stream *s = &p->s;
	void *ptrs[DTF_EXAMPLE_MAX_FEATURES];
	stream_begin(s, 0);
	s->skipped = s->cut = 0;
	s->cut_bytes = 0;
	s->logging = !p->quiet;
	s->logged = 0;
	slot_ptrs(p, s->scratch, ptrs);
	int64_t n = 0;
	uint64_t id;
	int rc;
	while ((rc = next_input(s, ptrs, &id)) > 0)
		n++;
	s->logging = 0;
	if (rc < 0)
		return rc;
	if (s->logged > SKIP_LOG_MAX)
		dtf_warn("... and %d more bad records or files skipped",
			 s->logged - SKIP_LOG_MAX);
	p->stats.records = n;
	p->stats.skipped_records = s->skipped;
	p->stats.cut_files = s->cut;
	p->stats.skipped_bytes = s->cut_bytes;
	return 0;
}

/* Each feature's bytes and offsets in an example and in a batch block. */
static int layout_features(struct dtf_pipeline *p)
{
	for (int f = 0; f < p->nfeatures; f++) {
		int64_t numel = dtf_feature_numel(&p->features[f]);
		if (numel < 0)
			return dtf_error(DTF_ERR_CONFIG,
					 "feature '%s': negative shape",
					 p->features[f].name);
		/* float32 and int32 are both 4 bytes */
		p->feat_bytes[f] = (size_t)numel * 4;
		p->feat_off[f] = p->example_bytes;
		p->example_bytes += (p->feat_bytes[f] + 7) & ~(size_t)7;
		p->blk_off[f] = p->batch_bytes;
		p->batch_bytes += ((size_t)p->batch * p->feat_bytes[f] + 63) &
				  ~(size_t)63;
	}
	return 0;
}

/* The cycle's readers, with room for the largest record and the longest
 * path reserved, so that no reopen allocates, on any thread. */
static int open_readers(struct dtf_pipeline *p, uint64_t max_record)
{
	size_t longest = 0;
	for (int i = 0; i < p->nfiles; i++)
		if (strlen(p->paths[i]) > longest)
			longest = strlen(p->paths[i]);
	for (int i = 0; i < p->read.cycle_length; i++) {
		struct cyc *c = &p->s.cycle[i];
		int rc = dtf_tfrecord_reader_open_c(NULL, p->read.compression,
						    &c->rd);
		if (rc == 0)
			rc = dtf_tfrecord_reader_reserve(
				c->rd, max_record ? max_record : 1);
		if (rc == 0)
			rc = dtf_tfrecord_reader_reserve_path(c->rd, longest);
		if (rc)
			return rc;
		c->file = -1;
	}
	return 0;
}

/* The shuffle buffer: `requested` examples, at most the shard's records. */
static int alloc_shuffle(struct dtf_pipeline *p, size_t requested)
{
	size_t cap = requested;
	if ((uint64_t)cap > (uint64_t)p->stats.records)
		cap = p->stats.records > 0 ? (size_t)p->stats.records : 1;
	p->shuf_cap = cap;
	if (p->example_bytes && cap > SIZE_MAX / p->example_bytes)
		return dtf_error(DTF_ERR_NOMEM, "shuffle buffer too large");
	p->s.slots = dtf_malloc(cap * p->example_bytes);
	p->s.slot_ids = dtf_malloc(cap * sizeof(uint64_t));
	if (!p->s.slots || !p->s.slot_ids)
		return dtf_error(DTF_ERR_NOMEM,
				 "out of memory for a shuffle buffer of "
				 "%zu examples (%zu bytes each)",
				 cap, p->example_bytes);
	return 0;
}

int dtf_pipeline_open(const struct dtf_pipeline_opts *o,
		      struct dtf_pipeline **out)
{
	int rc;
	*out = NULL;
	if (o->nfiles <= 0)
		return dtf_error(DTF_ERR_DATA, "no input files");
	if (o->world < 1 || o->rank < 0 || o->rank >= o->world ||
	    o->batch < 1 || o->nfeatures < 1 ||
	    o->nfeatures > DTF_EXAMPLE_MAX_FEATURES)
		return dtf_error(DTF_ERR_USAGE,
				 "pipeline: bad options (rank %d of %d, batch "
				 "%d, %d features; at most %d)",
				 o->rank, o->world, o->batch, o->nfeatures,
				 DTF_EXAMPLE_MAX_FEATURES);
	struct dtf_read_spec rd = {DTF_SHARD_AUTO, 1, 1, DTF_COMPRESSION_NONE,
				   DTF_ON_ERROR_FAIL, 0};
	if (o->read)
		rd = *o->read;
	if (rd.cycle_length < 1 || rd.block_length < 1 || rd.prefetch < 0 ||
	    rd.cycle_length > DTF_READ_MAX || rd.prefetch > DTF_READ_MAX)
		return dtf_error(DTF_ERR_USAGE,
				 "pipeline: bad options (cycle_length %d, "
				 "block_length %d, prefetch %d; cycle_length "
				 "and prefetch at most %d)",
				 rd.cycle_length, rd.block_length, rd.prefetch,
				 DTF_READ_MAX);
	struct dtf_pipeline *p = dtf_calloc(1, sizeof(*p));
	if (!p)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	p->read = rd;
	p->nfiles = o->nfiles;
	p->rank = o->rank;
	p->world = o->world;
	p->nfeatures = o->nfeatures;
	p->batch = o->batch;
	p->seed = o->seed;
	p->drop_remainder = o->drop_remainder;
	p->label = o->label ? o->label : "data";
	p->quiet = o->quiet;
	p->shuffle_requested = o->shuffle_buffer;
	p->key = dtf_philox_make_key(o->seed, DTF_RNG_SHUFFLE);
	p->aug_key = dtf_philox_make_key(o->seed, DTF_RNG_AUGMENT);
	if (o->augment)
		p->aug = *o->augment;
	p->s.p = p;
	p->paths = copy_paths(o->files, o->nfiles);
	p->features = dtf_malloc((size_t)o->nfeatures * sizeof(*p->features));
	p->mine = dtf_malloc((size_t)o->nfiles * sizeof(int));
	p->s.cycle = dtf_calloc((size_t)rd.cycle_length, sizeof(struct cyc));
	if (!p->paths || !p->features || !p->mine || !p->s.cycle) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out_free;
	}
	memcpy(p->features, o->features,
	       (size_t)o->nfeatures * sizeof(*p->features));
	if ((rc = layout_features(p)) < 0 || (rc = check_augment(p)) < 0)
		goto out_free;
	if ((rc = resolve_policy(p, rd.shard_policy)) < 0)
		goto out_free;
	if (rd.shard_policy == DTF_SHARD_AUTO && p->world > 1 && !p->quiet)
		dtf_info("%s: %d file%s for %d rank%s: shard_policy auto "
			 "shards by %s",
			 p->label, p->nfiles, p->nfiles == 1 ? "" : "s",
			 p->world, p->world == 1 ? "" : "s",
			 p->policy == DTF_SHARD_FILE
				 ? "file (each rank reads its own files)"
				 : "record (every rank reads every file and "
				   "keeps its share of records)");
	p->stats.policy = p->policy;
	for (int i = 0; i < p->nfiles; i++)
		if (is_mine_file(p, i))
			p->mine[p->nmine++] = i;
	p->stats.files = p->nmine;
	p->fingerprint = 0xcbf29ce484222325ull;
	uint64_t words[] = {o->seed, (uint64_t)o->world, (uint64_t)o->nfiles,
			    (uint64_t)p->policy, (uint64_t)rd.cycle_length,
			    (uint64_t)rd.block_length, o->shuffle_buffer};
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		p->fingerprint = fnv(p->fingerprint, words[i]);

	uint64_t max_record = 0;
	if ((rc = scan_files(p, &max_record)) < 0)
		goto out_free;
	if (max_record > SIZE_MAX / 2) {
		rc = dtf_error(DTF_ERR_DATA, "record too large");
		goto out_free;
	}
	if ((rc = open_readers(p, max_record)) < 0)
		goto out_free;
	p->s.scratch = dtf_alloc_aligned(p->example_bytes ? p->example_bytes
							   : 1);
	if (!p->s.scratch) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out_free;
	}
	if (rd.on_error == DTF_ON_ERROR_SKIP && (rc = count_pass(p)) < 0)
		goto out_free;

	if (o->shuffle_buffer > 1 &&
	    (rc = alloc_shuffle(p, o->shuffle_buffer)) < 0)
		goto out_free;
	if (rd.prefetch > 0 && (rc = ring_start(p)) < 0)
		goto out_free;
	dtf_pipeline_begin_epoch(p, 0);
	*out = p;
	return 0;
out_free:
	dtf_pipeline_free(p);
	return rc;
}

void dtf_pipeline_free(struct dtf_pipeline *p)
{
	if (!p)
		return;
	ring_stop(p);
	if (p->s.cycle)
		for (int i = 0; i < p->read.cycle_length; i++)
			dtf_tfrecord_reader_free(p->s.cycle[i].rd);
	dtf_free(p->s.cycle);
	dtf_free(p->s.slots);
	dtf_free(p->s.slot_ids);
	dtf_free(p->s.scratch);
	dtf_free(p->mine);
	dtf_free(p->features);
	dtf_free(p->paths);
	dtf_free(p);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int dtf_glob_files(const char *pattern, char ***files, int *nfiles)
{
	glob_t g;
	*files = NULL;
	*nfiles = 0;
	int r = glob(pattern, 0, NULL, &g);
	if (r == GLOB_NOMATCH)
		return dtf_error(DTF_ERR_DATA, "no files match '%s'", pattern);
	if (r == GLOB_NOSPACE) {
		globfree(&g);
		return dtf_error(DTF_ERR_NOMEM, "out of memory expanding '%s'",
				 pattern);
	}
	if (r != 0) {
		globfree(&g);
		return dtf_error(DTF_ERR_DATA, "cannot read the files of '%s'",
				 pattern);
	}
	if (g.gl_pathc > (size_t)INT32_MAX) {
		globfree(&g);
		return dtf_error(DTF_ERR_DATA, "too many files match '%s'",
				 pattern);
	}
	int n = (int)g.gl_pathc;
	/* Byte order, not the locale's collation: every rank must agree. */
	qsort(g.gl_pathv, g.gl_pathc, sizeof(char *), cmp_str);
	char **v = copy_paths((const char *const *)g.gl_pathv, n);
	globfree(&g);
	if (!v)
		return dtf_error(DTF_ERR_NOMEM, "out of memory expanding '%s'",
				 pattern);
	*files = v;
	*nfiles = n;
	return 0;
}
