/*
 * testutil.h - scaffolding shared by the Check test programs: the job text
 * of the end-to-end tests, temporary directories, running the build's
 * binaries (tu_run; dtf-train under mpirun with tu_mpirun, the one runner),
 * small file helpers, exported variables, synthetic data, a deterministic
 * test-local random generator, a small trainable model, and the srunner
 * main.
 *
 * Conventions:
 *  - Helpers that set a test up (make a directory, write or read a file)
 *    abort the running test through ck_assert / ck_abort_msg when they
 *    cannot do it; they never return an error for the test to ignore.
 *    Helpers that observe (tu_run, tu_file_size, tu_exists) return what
 *    they saw, and the test asserts on it.
 *  - File helpers take (dir, name): the file is DIR/NAME, or NAME itself
 *    when dir is NULL.
 *  - Memory returned to the caller comes from malloc: free() it.
 * This code is the tests' own: it uses the library under test only where
 * it says so (tu_model_* builds a graph through src/graph).
 */
#ifndef DTF_TESTUTIL_H
#define DTF_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/exec.h"
#include "graph/graph.h"
#include "mem/plan.h"

/* ---- job text shared by the end-to-end tests ---------------------------- */

/* data.features of the synthetic records tu_synth writes with shape
 * 8,8,1: the uint8 image scaled to [0, 1] and the int64 label. */
#define TU_SYNTH_FEATURES_8X8                                                 \
	"  features:\n"                                                       \
	"    image: {type: bytes, decode: uint8, shape: [8, 8, 1], scale: "  \
	"0.00392156862745098}\n"                                              \
	"    label: {type: int64, shape: []}\n"

/* The tiny CNN (1 x 8x8 input, 4 classes) of the end-to-end tests, from
 * `model:` to its metrics. */
#define TU_TINY_CNN_MODEL                                                     \
	"model:\n"                                                            \
	"  input: image\n"                                                    \
	"  layers:\n"                                                         \
	"    - {conv2d: {filters: 4, kernel: 3, padding: same, activation: "  \
	"relu}}\n"                                                            \
	"    - {max_pool2d: {size: 2}}\n"                                     \
	"    - {conv2d: {filters: 6, kernel: 3, padding: valid, activation: " \
	"relu}}\n"                                                            \
	"    - flatten\n"                                                     \
	"    - {dense: {units: 16, activation: relu}}\n"                      \
	"    - {dropout: {rate: 0.25}}\n"                                     \
	"    - {dense: {units: 4, name: logits}}\n"                           \
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: "   \
	"label}}\n"                                                           \
	"  metrics: [accuracy]\n"

/* Writes DIR/NAME, the job of the end-to-end tests on tu_synth's 8x8x1
 * records: "name: tiny-cnn", "seed: 7", data.train on
 * DIR/train-*.tfrecord with shuffle_buffer `shuffle` (and data.eval on
 * DIR/test-*.tfrecord when `with_eval`), TU_SYNTH_FEATURES_8X8,
 * TU_TINY_CNN_MODEL, then `rest` as given: the test's own sections
 * (train:, strategy:, checkpoint:, logging:).  Aborts the test if it
 * cannot write the file. */
void tu_write_tiny_job(const char *dir, const char *name, int shuffle,
		       int with_eval, const char *rest);

/* ---- processes ---------------------------------------------------------- */

/* The build directory holding dtf-train and dtf-records: $DTF_BUILD_ROOT
 * (meson sets it), else ".".  Never NULL; not to be freed. */
const char *tu_build_root(void);

/* The source tree: $DTF_SOURCE_ROOT (meson sets it), else ".". */
const char *tu_source_root(void);

/* The command that runs the build's programs on this machine, followed by
 * a space: $DTF_TEST_EXE_WRAPPER (a cross build's emulator, e.g.
 * "qemu-aarch64"; tests/arm64.sh sets it), else "" (run them directly).
 * tu_mpirun and tu_synth put it before dtf-train and dtf-records; tests
 * that run a build program themselves do the same.  Never NULL; a static
 * buffer, not to be freed; a wrapper over 1022 bytes aborts the test. */
const char *tu_exe_wrapper(void);

/* Runs the printf-formatted shell command with system(3) and returns its
 * exit status, or 128 when it did not exit normally (killed by a signal,
 * or the shell could not run).  A command longer than 8191 bytes aborts
 * the test. */
int tu_run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The bound on every tu_mpirun, in seconds (timeout(1) ends the run with
 * status 124 past it). */
#define TU_MPIRUN_TIMEOUT_S 120

/*
 * Runs `ENV timeout TU_MPIRUN_TIMEOUT_S mpirun -np NP WRAPPER BUILD/dtf-train
 * ARGS >/dev/null 2>LOG` through tu_run and returns its exit status (that of
 * dtf-train's ranks as mpirun reports it, 124 on the timeout, 128 when it
 * did not exit).  WRAPPER is tu_exe_wrapper(), BUILD tu_build_root(); ARGS
 * is the printf-formatted rest of the command line (options, then the job
 * file); env is a shell prefix such as "DTF_FAULT=x" (NULL or "": none);
 * LOG, the file that gets the ranks' stderr, is DIR/LOG as for the file
 * helpers (log NULL: /dev/null).  A command that does not fit (8191 bytes) aborts the test.
 */
int tu_mpirun(int np, const char *env, const char *dir, const char *log,
	      const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Writes `count` synthetic records in `shards` files DIR/PREFIX-*.tfrecord
 * with `dtf-records synth` (images of `shape` "H,W,C", 4 classes, `seed`);
 * aborts the test if the tool fails. */
void tu_synth(const char *dir, const char *prefix, int count, int shards,
	      const char *shape, int seed);

/* ---- temporary directory ------------------------------------------------ */

/* Makes a fresh directory "$TMPDIR/TAG-XXXXXX" ($TMPDIR unset or empty:
 * /tmp) with mkdtemp(3) and writes its path into dir[size]; aborts the
 * test if it cannot. */
void tu_tmpdir_create(char *dir, size_t size, const char *tag);

/* Removes dir and everything below it (no-op for NULL or ""); errors are
 * ignored (teardown). */
void tu_tmpdir_remove(const char *dir);

/* Writes "DIR/NAME" (or NAME when dir is NULL) into buf[n] and returns
 * buf; a path that does not fit aborts the test. */
const char *tu_path(char *buf, size_t n, const char *dir, const char *name);

/* ---- files -------------------------------------------------------------- */

/* The whole file, NUL-terminated, in a malloc'd buffer the caller frees;
 * its length (without the NUL) in *len when len is not NULL.  A file that
 * cannot be read aborts the test ("cannot open PATH"). */
char *tu_read_file(const char *dir, const char *name, size_t *len);

/* As tu_read_file, in a buffer owned here that stays valid until the next
 * tu_slurp call (for logs searched with strstr). */
const char *tu_slurp(const char *dir, const char *name);

/* Writes the printf-formatted text to the file (created or truncated);
 * aborts the test if it cannot. */
void tu_write_file(const char *dir, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Writes b[n] as the whole file (created or truncated); aborts the test
 * if it cannot. */
void tu_write_bytes(const char *dir, const char *name, const void *b,
		    size_t n);

/* 1 if the file exists, else 0. */
int tu_exists(const char *dir, const char *name);

/* The file's size in bytes, or -1 when it does not exist. */
long tu_file_size(const char *dir, const char *name);

/* XORs the byte at offset `off` with `mask` and returns the byte it had;
 * aborts the test if the file cannot be opened or is shorter. */
int tu_patch_xor(const char *path, long off, int mask);

/* Overwrites n bytes at offset `off` with b[n]; aborts the test if it
 * cannot. */
void tu_patch_bytes(const char *path, long off, const void *b, size_t n);

/* Truncates (or extends with zeros) the file to `size` bytes; aborts the
 * test if it cannot. */
void tu_cut_file(const char *path, long size);

/* Asserts that the file DIR/NAME (a log) contains `text`; the failure
 * message shows the log's last 2000 bytes (Check's messages are
 * limited).  A macro, so the failure names the test's line. */
#define tu_assert_log(dir, name, text)                                    \
	do {                                                              \
		const char *l_ = tu_slurp(dir, name);                     \
		size_t n_ = strlen(l_);                                   \
		ck_assert_msg(strstr(l_, text) != NULL,                   \
			      "no '%s' in %s:\n...%s", text, name,        \
			      l_ + (n_ > 2000 ? n_ - 2000 : 0));          \
	} while (0)

/* Asserts that DIR/NAME does not contain `text` (shown where it is). */
#define tu_assert_not_log(dir, name, text)                                \
	do {                                                              \
		const char *l_ = tu_slurp(dir, name);                     \
		const char *h_ = strstr(l_, text);                        \
		ck_assert_msg(h_ == NULL, "'%s' in %s: ...%.300s", text,   \
			      name, h_ ? h_ : "");                        \
	} while (0)

/* The number of lines of DIR/NAME that contain `text`. */
int tu_count_lines(const char *dir, const char *name, const char *text);

/* ---- exported variables (dtf-train --export-variables) ------------------ */

/* Reads a "DTFVARS1" file (magic, uint64 count, count float32) into a
 * malloc'd array the caller frees, its length in *n; a missing or short
 * file aborts the test ("missing PATH"). */
float *tu_read_vars(const char *dir, const char *name, size_t *n);

/* max over i of |got[i] - ref[i]| / max(|ref[i]|, 1e-2) (a NaN makes it
 * infinite), and in *moved (if not NULL) how many ref[i] are not 0. */
double tu_max_rel_diff(const float *got, const float *ref, size_t n,
		       size_t *moved);

/* tu_max_rel_diff of two exported-variables files in dir (file names):
 * aborts the test unless both hold the same count, stored in *n; *moved as
 * above and *same_bits (1: the files' floats are bit-identical), each when
 * not NULL. */
double tu_vars_rel_diff(const char *dir, const char *got_name,
			const char *ref_name, size_t *n, size_t *moved,
			int *same_bits);

/* ---- random numbers and float buffers ----------------------------------- */

/* splitmix64: a test-local generator, independent of the code under test.
 * The state is the program's (each test program sets its own seed). */
void tu_rng_seed(uint64_t seed);
uint64_t tu_next_u64(void);
/* uniform in [lo, hi), 24 random bits */
float tu_frand(float lo, float hi);

/* n floats (at least 1 allocated) from malloc, uninitialised; the caller
 * frees; aborts the test when out of memory. */
float *tu_falloc(size_t n);
/* n floats filled with NaN, so unwritten outputs show */
float *tu_fnan(size_t n);
/* n floats uniform in [lo, hi) from tu_frand */
float *tu_frandom(size_t n, float lo, float hi);

/* ---- a small trainable model -------------------------------------------- */

#define TU_MODEL_MAX_BATCH 16

/* A job lowered to a graph with its backward pass, a memory plan, and
 * parameter and gradient vectors (dtf_alloc_aligned), ready for
 * dtf_exec_forward / dtf_exec_backward with ctx. */
struct tu_model {
	struct dtf_job *job;
	struct dtf_graph g;
	struct dtf_plan plan;
	float *params, *grads;
	uint64_t ids[TU_MODEL_MAX_BATCH];
	struct dtf_exec_ctx ctx;
};

/* Finishes m->g, a forward graph of `batch` examples (<=
 * TU_MODEL_MAX_BATCH): appends its backward pass, plans it with `planner`
 * over new parameter and gradient vectors, initialises the parameters
 * with seed 3, sets example ids id0 + r * id_stride and ctx (training,
 * step `step`, loss scale 1 / batch, dropout key (11, DTF_RNG_DROPOUT)).
 * Aborts the test (with dtf_error_msg()) if a step fails. */
void tu_model_plan(struct tu_model *m, int batch,
		   enum dtf_planner_kind planner, uint64_t id0,
		   uint64_t id_stride, uint64_t step);

/* Zeroes m, lowers `job`'s model (m takes ownership of the job) at
 * `batch` examples and finishes it with tu_model_plan. */
void tu_model_build(struct tu_model *m, struct dtf_job *job, int batch,
		    enum dtf_planner_kind planner, uint64_t id0,
		    uint64_t id_stride, uint64_t step);

/* Moves 1-D variables (biases) to uniform [-bias_range, bias_range) so
 * relu kinks are not all at 0, fills float inputs uniform [0, 1) (Philox
 * key (99, 1), counter node index) and sets label r of int32 inputs to
 * (r * label_mul + 1) % classes. */
void tu_model_randomize(struct tu_model *m, float bias_range, int label_mul,
			int classes);

/* Runs the forward pass; returns the loss sum times the loss scale. */
double tu_model_loss(struct tu_model *m);

/* Frees everything m holds (the job, if any, included). */
void tu_model_free(struct tu_model *m);

/* ---- TensorBoard event files ------------------------------------------- */

/* One scalar of a Summary: the event's step, its tag and simple_value. */
struct tu_event_scalar {
	int64_t step;
	char tag[64];
	float value;
};

#define TU_EVENTS_MAX 4096

/* What tu_events_read found in one events.out.tfevents.* file. */
struct tu_event_file {
	char version[32];      /* file_version of the first event */
	double first_wall;     /* its wall_time, seconds since 1970 */
	int nevents, session_starts;
	int64_t start_step;    /* step of the last SessionLog START */
	struct tu_event_scalar s[TU_EVENTS_MAX];
	int n;
};

/* Decodes every Event record of the file at `path` (TFRecord framing read
 * by the library's dtf_tfrecord_reader; the Event, Summary and
 * Summary.Value protobufs by a walker of the tests' own, following
 * tensorflow/core/util/event.proto and summary.proto) into *ef.  A record
 * that does not decode, a file_version other than "brain.Event:2", or more
 * than TU_EVENTS_MAX scalars aborts the test.  *ef is large: malloc it. */
void tu_events_read(const char *path, struct tu_event_file *ef);

/* The scalar with this step and tag, or NULL. */
const struct tu_event_scalar *tu_events_find(const struct tu_event_file *ef,
					     int64_t step, const char *tag);

/* The path of the only file matching the glob(3) pattern into out[size];
 * no match or several abort the test. */
void tu_one_file(const char *pattern, char *out, size_t size);

/* ---- main --------------------------------------------------------------- */

/* Runs every test of s (CK_NORMAL output) in forked children when `fork`
 * is non-zero, else in this process (tests that start MPI or a device
 * once); frees the runner and returns the exit status for main: 0 when
 * all passed, else 1. */
int tu_run_suite(Suite *s, int fork);

#endif
