/*
 * walk.h - the schema walk's types and entry points, internal to config/.
 *
 * The job language is data: each mapping is a `struct section`, a table of
 * fields (key, type, flags, default, offset into the object the section
 * fills), read by one generic walk (walk.c).  The tables themselves live in
 * schema.c (data, train, strategy, ...) and schema_layers.c (model.layers
 * and model.graph); the checks that need the whole job in checks.c; the
 * load entry points in config.c.
 *
 * Messages: "WHERE: KEY.PATH: what is wrong", WHERE being "FILE:LINE:COL"
 * (1-based) or "--set KEY" for a value that came from an override.  List
 * items are written KEY[i], 0-based.  Every reader below returns 0 or a
 * negative DTF_ERR_* (DTF_ERR_CONFIG for what the job got wrong, with the
 * message set through dtf_error(); DTF_ERR_NOMEM).
 */
#ifndef DTF_CONFIG_WALK_H
#define DTF_CONFIG_WALK_H

#include <stddef.h>
#include <stdint.h>

#include "config/job.h"
#include "config/ytree.h"

/* Capacity of a key path kept for messages ("model.layers[3].dense"); a
 * longer one is cut. */
#define PATH_MAX_ 256

/* Node ids remembered during the walk for the checks that follow it. */
enum slot {
	SLOT_NONE,
	SLOT_INPUT,
	SLOT_LOGITS,
	SLOT_LABELS,
	SLOT_LAYERS,
	SLOT_GRAPH,
	SLOT_MODEL,
	SLOT_COUNT_
};

struct ctx {
	struct dtf_ytree *t;
	struct dtf_job *job;
	const yaml_node_t *slot[SLOT_COUNT_];
};

enum ftype {
	T_STR,     /* char[size] */
	T_STRDUP,  /* char *, owned by the job; default NULL */
	T_INT,     /* int */
	T_I64,     /* int64_t */
	T_U64,     /* uint64_t */
	T_DOUBLE,  /* double, finite */
	T_FLOAT,   /* float, finite */
	T_BOOL,    /* int 0/1: true/false/yes/no/on/off */
	T_ENUM,    /* int from `names` */
	T_PAIR,    /* two positive ints at off, off2: "5" or [5, 3] */
	T_SECTION, /* a nested mapping filling the same object */
	T_CUSTOM,  /* `read` does it */
};

enum {
	F_REQUIRED = 1 << 0,
	F_POS = 1 << 1,    /* > 0 */
	F_NONNEG = 1 << 2, /* >= 0 */
	F_UNIT = 1 << 3,   /* in [0, 1) */
	F_SLOT_KEY = 1 << 4, /* the slot remembers the key, not the value */
};

struct enum_name {
	const char *name;
	int value;
};

struct section;

typedef int (*read_fn)(struct ctx *c, void *base, const yaml_node_t *key,
		       const yaml_node_t *val, const char *path);

struct field {
	const char *key;
	enum ftype type;
	unsigned flags;
	size_t off, off2; /* into the section's object; off2 for T_PAIR */
	size_t size;      /* T_STR capacity */
	double def;       /* numeric default */
	int64_t max;      /* T_INT, T_I64: the largest value (0: the type's) */
	const char *def_str;           /* T_STR default */
	const struct enum_name *names; /* T_ENUM, {NULL} terminated */
	const struct section *sub;     /* T_SECTION */
	read_fn read;                  /* T_CUSTOM */
	enum slot slot;                /* remember the value node */
};

struct section {
	const struct field *fields;
	int nfields;
	/* offset of a char[DTF_WHERE_MAX] to fill with the key's position,
	 * or -1 */
	long where_off;
	/* run after the keys are read; map may be NULL (empty section) */
	int (*check)(struct ctx *c, void *base, const yaml_node_t *key,
		     const yaml_node_t *map, const char *path);
};

#define NFIELDS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Names are read through a callback so one helper serves every table. */
typedef const char *(*name_at_fn)(const void *table, int i);

/* One alternative of a {kind: {attrs}} choice (layers, losses, ...). */
struct choice {
	const char *name;
	int value;
	const struct section *attrs; /* NULL: no attributes */
};

/* ---- messages ------------------------------------------------------------ */

/*
 * Fail with DTF_ERR_CONFIG at node `n` ("FILE:LINE:COL: PATH: message");
 * a value grafted by --set is blamed on "--set KEY", and a required key
 * removed by "--set KEY=" says so.  Returns DTF_ERR_CONFIG.
 */
int dtf_cfg_fail(struct ctx *c, const yaml_node_t *n, const char *path,
		 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The deepest node of the document along key path `path` ("a.b[2].c", as
 * messages write it); NULL when not even the first key is there. */
const yaml_node_t *dtf_cfg_path_node(struct ctx *c, const char *path);

/* What a node is, for "got ...": 'text', null, a mapping, a list; `buf`
 * (size bytes) holds the text when one is needed. */
const char *dtf_cfg_describe(const yaml_node_t *n, char *buf, size_t size);
/* dtf_cfg_describe(), telling an empty list or mapping from a full one. */
const char *dtf_cfg_describe_empty(const yaml_node_t *n, char *buf,
				   size_t size);

/* " (did you mean 'x'?)" for the closest of the n names of `table` within
 * Levenshtein distance 2 (written into buf), or "". */
const char *dtf_cfg_suggest(const char *word, const void *table, int n,
			    name_at_fn name_at, char *buf, size_t size);

/* Key paths for messages: `out` has PATH_MAX_ bytes; a long path is cut,
 * never overflows.  join_path writes "PATH.KEY" (or "KEY" at the top). */
void dtf_cfg_path_fmt(char *out, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void dtf_cfg_join_path(char *out, const char *path, const char *key);

/* ---- scalars -------------------------------------------------------------- */

/* A scalar to a checked int64 in [lo, hi]; flags F_POS / F_NONNEG word the
 * message. */
int dtf_cfg_read_int(struct ctx *c, const yaml_node_t *n, const char *path,
		     unsigned flags, int64_t lo, int64_t hi, int64_t *out);
/* A finite number (finite as a float too when as_float), checked against
 * F_POS / F_NONNEG / F_UNIT. */
int dtf_cfg_read_num(struct ctx *c, const yaml_node_t *n, const char *path,
		     unsigned flags, int as_float, double *out);
/* A non-empty string that fits in `size` bytes (NUL included; 0: any
 * length); *out points into the tree. */
int dtf_cfg_read_str(struct ctx *c, const yaml_node_t *n, const char *path,
		     size_t size, const char **out);
/* One of `names` ({NULL} terminated) to its value. */
int dtf_cfg_read_enum(struct ctx *c, const yaml_node_t *n, const char *path,
		      const struct enum_name *names, int *out);

/* ---- the generic walk ---------------------------------------------------- */

/* Write the defaults of every field of `s` (nested sections included) into
 * base. */
void dtf_cfg_apply_defaults(const struct section *s, void *base);

/*
 * Read mapping `map` (NULL or null: empty) with table s into base.  `key` is
 * the node naming the mapping (its key, or the list item), where a missing
 * required key is reported; NULL at the top level.  Unknown keys (with a
 * suggestion), duplicate keys and missing required keys are errors; the
 * section's check runs last.
 */
int dtf_cfg_read_section(struct ctx *c, const struct section *s, void *base,
			 const yaml_node_t *key, const yaml_node_t *map,
			 const char *path);

/*
 * `node` is a bare name ("flatten") or a one-key mapping {name: attrs}.
 * Finds the choice among table[0..n) (*out); *kind gets the node naming it
 * (for positions), *attrs the attribute node or NULL.  `what` ("layer",
 * "optimizer") words the messages; a --set that would switch the file's
 * choice is refused.
 */
int dtf_cfg_read_choice(struct ctx *c, const yaml_node_t *node,
			const char *path, const char *what,
			const struct choice *table, int n,
			const struct choice **out, const yaml_node_t **kind,
			const yaml_node_t **attrs);

/* The non-empty mapping `val` (else "expected WHAT, got ...") as an array
 * of one zeroed `size`-byte element per pair, dtf_calloc'd into *arr (the
 * caller stores it in the job, which frees it), the count in *n. */
int dtf_cfg_mapping_array(struct ctx *c, const yaml_node_t *val,
			  const char *path, const char *what, size_t size,
			  void **arr, int *n);
/* The key and value nodes of pair i of the mapping `map`. */
void dtf_cfg_mapping_pair(struct ctx *c, const yaml_node_t *map, int i,
			  const yaml_node_t **k, const yaml_node_t **v);

/* ---- the tables and the checks --------------------------------------------- */

/* model.layers (a list) and model.graph (a mapping of node names), into the
 * job at `base` (schema_layers.c; T_CUSTOM readers of model). */
int dtf_cfg_read_layers(struct ctx *c, void *base, const yaml_node_t *key,
			const yaml_node_t *val, const char *path);
int dtf_cfg_read_graph(struct ctx *c, void *base, const yaml_node_t *key,
		       const yaml_node_t *val, const char *path);

/* Every table's defaults, then those not in a table (job->path and the
 * name from `file`, sgd's settings over adam's; schema.c).  Errors:
 * DTF_ERR_NOMEM. */
int dtf_cfg_job_defaults(struct dtf_job *job, const char *file);
/* The whole document into c->job (schema.c). */
int dtf_cfg_read_job(struct ctx *c);
/* The name of loss `kind` as the job writes it ("mse", ...). */
const char *dtf_cfg_loss_name(int kind);

/* The checks across sections, after the walk (names of layers, nodes and
 * features; checks.c). */
int dtf_cfg_check_job(struct ctx *c);

#endif
