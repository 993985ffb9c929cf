/*
 * tfevents.h - TensorBoard event files, written as TensorFlow's
 * EventsWriter does: a TFRecord file (data/tfrecord.h framing) of
 * serialized Event protos, named
 *
 *     <dir>/events.out.tfevents.<seconds, 10 digits>.<host>
 *
 * whose first record is Event{wall_time, file_version: "brain.Event:2"}.
 * Messages, from tensorboard/compat/proto/{event,summary}.proto:
 *
 *     Event   { double wall_time = 1; int64 step = 2;
 *               oneof what { string file_version = 3; Summary summary = 5;
 *                            SessionLog session_log = 7; ... } }
 *     Summary { repeated Value value = 1; }
 *     Value   { string tag = 1; oneof value { float simple_value = 2; ... } }
 *     SessionLog { SessionStatus status = 1; }   START = 1
 *
 * Scalars use simple_value, which TensorBoard's scalar dashboard reads
 * (it migrates them to its tensor form on load).  Encoding goes into a
 * buffer inside the writer: nothing is allocated after open.
 * Not thread-safe: one writer per thread.
 */
#ifndef DTF_OBS_TFEVENTS_H
#define DTF_OBS_TFEVENTS_H

#include <stdint.h>

/* Most scalars per event, and longest tag in bytes. */
#define DTF_TFEVENTS_MAX_SCALARS 32
#define DTF_TFEVENTS_MAX_TAG 96

struct dtf_tfevents;

struct dtf_tfevents_scalar {
	const char *tag; /* e.g. "loss", "step_time_ms/forward" */
	float value;
};

/*
 * Create a new event file in `dir` (which must exist) for `host`, named
 * from `wall_time` (seconds since the epoch); if that name exists (a
 * restart within the same second), ".1", ".2", ... is appended so an
 * earlier file is never truncated.  Writes the file_version record.
 * Errors: DTF_ERR_IO naming the path, DTF_ERR_NOMEM.
 */
int dtf_tfevents_open(const char *dir, const char *host, double wall_time,
		      struct dtf_tfevents **out);

/* The file's path (owned by the writer). */
const char *dtf_tfevents_path(const struct dtf_tfevents *w);

/*
 * One Event at `step` with a Summary of n scalar values (n at most
 * DTF_TFEVENTS_MAX_SCALARS, tags at most DTF_TFEVENTS_MAX_TAG bytes).
 * Errors: DTF_ERR_IO, DTF_ERR_RUNTIME (too many scalars, tag too long).
 */
int dtf_tfevents_scalars(struct dtf_tfevents *w, int64_t step,
			 double wall_time,
			 const struct dtf_tfevents_scalar *v, int n);

/*
 * Event{step, session_log: {status: START}}: written when a run resumes at
 * `step`, so TensorBoard drops the events of the earlier run past that step
 * (its "orphaned data" purge) instead of drawing both.  Errors: DTF_ERR_IO.
 */
int dtf_tfevents_session_start(struct dtf_tfevents *w, int64_t step,
			       double wall_time);

/* Push written events to the file.  Errors: DTF_ERR_IO. */
int dtf_tfevents_flush(struct dtf_tfevents *w);

/* Flush, close and free (NULL is a no-op returning 0).  Errors: DTF_ERR_IO. */
int dtf_tfevents_close(struct dtf_tfevents *w);

#endif
