/*
 * trace.h - a timeline in Chrome's Trace Event Format (JSON array form),
 * which Perfetto (ui.perfetto.dev) and chrome://tracing open.
 *
 * Each rank writes its own file, one process per rank (pid = rank), with
 * complete events ("ph": "X", ts and dur in microseconds since the clock
 * origin every rank agreed on) and metadata events naming the process
 * ("rank N (host)") and its threads.  The file is a valid JSON array after
 * every flush: events are written before a closing "\n]\n" that the next
 * flush writes over (one pwrite of the new events and the bracket), so a
 * run killed at any point leaves a file that parses.  dtf_trace_merge()
 * joins the ranks' files into one.
 * Not thread-safe: one writer per thread.
 */
#ifndef DTF_OBS_TRACE_H
#define DTF_OBS_TRACE_H

#include <stddef.h>
#include <stdint.h>

struct dtf_trace;

/*
 * Create (truncate) `path` for this rank.  `origin` is the clock reading
 * (seconds, the caller's clock) that becomes ts 0.  Writes the metadata
 * events and the closing bracket.  Errors: DTF_ERR_IO naming the path,
 * DTF_ERR_NOMEM.
 */
int dtf_trace_open(const char *path, int rank, const char *host,
		   double origin, struct dtf_trace **out);

/*
 * Buffer a complete event `name` on thread `tid` from t0 to t1 (seconds, the
 * origin's clock), with args {"step": step} and, when index >= 0,
 * "index": index (e.g. an allreduce bucket).  Flushes by itself when the
 * buffer is nearly full.  Errors are kept for dtf_trace_flush/close.
 */
void dtf_trace_span(struct dtf_trace *t, const char *name, int tid,
		    double t0, double t1, int64_t step, int index);

/* Write buffered events (the file stays a valid JSON array).
 * Errors: DTF_ERR_IO (the first write error, also later). */
int dtf_trace_flush(struct dtf_trace *t);

/* Flush, close and free (NULL is a no-op returning 0). Errors: DTF_ERR_IO. */
int dtf_trace_close(struct dtf_trace *t);

/* The file of `rank` for the trace `path`: "<stem>.rank<N>.json" where stem
 * is path without a ".json" ending.  Truncated to size. */
void dtf_trace_rank_path(const char *path, int rank, char *buf, size_t size);

/*
 * Join the event arrays of the n files in[] into one array written to
 * `out` (through a temporary file renamed over it).  A missing input is
 * skipped with *missing counted (may be NULL); an input that is not a JSON
 * array as written here ("[" ... "]") is DTF_ERR_DATA naming it.
 * Errors: DTF_ERR_IO, DTF_ERR_DATA, DTF_ERR_NOMEM.
 */
int dtf_trace_merge(const char *out, const char *const *in, int n,
		    int *missing);

#endif
