/*
 * config.c - the job schema: YAML tree -> struct dtf_job.
 *
 * Design: the schema is data.  Each mapping of the job language is a
 * `struct section`, a table of fields (key, type, flags, default, offset
 * into the object the section fills); one generic walk reads any section:
 * it rejects unknown keys (suggesting a known key within Levenshtein
 * distance 2), duplicate keys and missing required keys, and converts
 * scalars with strict checks.  The shapes that are not plain mappings (the
 * feature map, the layer list, {kind: {attrs}} choices, [h, w] pairs,
 * shapes) have small custom readers that call back into the walk.  Defaults
 * come from the same tables and are all written before anything is read.
 * Checks that need the whole job (names of layers and features) run after
 * the walk, while the tree is still there to give positions.
 *
 * Messages: "WHERE: KEY.PATH: what is wrong", WHERE being "FILE:LINE:COL"
 * (1-based) or "--set KEY" for a value that came from an override.  List
 * items are written KEY[i], 0-based.
 */
#include "config/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/ytree.h"
#include "data/example.h"
#include "core/alloc.h"
#include "core/error.h"

#define PATH_MAX_ 256
#define FIELDS_MAX 16

_Static_assert(sizeof(enum dtf_layer_kind) == sizeof(int) &&
		       sizeof(enum dtf_activation) == sizeof(int) &&
		       sizeof(enum dtf_strategy_kind) == sizeof(int) &&
		       sizeof(enum dtf_device_kind) == sizeof(int) &&
		       sizeof(enum dtf_precision) == sizeof(int) &&
		       sizeof(enum dtf_feature_type) == sizeof(int) &&
		       sizeof(enum dtf_decode) == sizeof(int) &&
		       sizeof(enum dtf_shard_policy) == sizeof(int) &&
		       sizeof(enum dtf_compression) == sizeof(int) &&
		       sizeof(enum dtf_on_error) == sizeof(int),
	       "enum fields are written through int *");

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

/* ---- messages ------------------------------------------------------------ */

static int fail(struct ctx *c, const yaml_node_t *n, const char *path,
		const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/*
 * The deepest node of the document along key path `path` ("a.b[2].c", as
 * messages write it); NULL when not even the first key is there.
 */
static const yaml_node_t *path_node(struct ctx *c, const char *path)
{
	const yaml_node_t *n = dtf_ytree_root(c->t), *deepest = NULL;
	char key[PATH_MAX_];
	const char *p = path;

	while (n && p && *p) {
		if (*p == '[') {
			char *end;
			long i = strtol(p + 1, &end, 10);
			if (*end != ']' || n->type != YAML_SEQUENCE_NODE ||
			    i < 0 || i >= n->data.sequence.items.top -
						  n->data.sequence.items.start)
				break;
			n = yaml_document_get_node(
				&c->t->doc, n->data.sequence.items.start[i]);
			p = end + 1;
		} else {
			size_t len = strcspn(p, ".[");
			if (len >= sizeof(key))
				break;
			memcpy(key, p, len);
			key[len] = '\0';
			n = dtf_ytree_get(c->t, n, key);
			p += len;
		}
		if (n)
			deepest = n;
		if (*p == '.')
			p++;
	}
	return deepest;
}

/*
 * For a "missing required key 'K'..." message about the mapping at `path`:
 * the override ("a.b.K") whose empty value removed K from it, else NULL.
 */
static const char *removed_required(struct ctx *c, const char *path,
				    const char *msg)
{
	static const char lead[] = "missing required key '";
	char key[PATH_MAX_];

	if (strncmp(msg, lead, sizeof(lead) - 1))
		return NULL;
	const char *name = msg + sizeof(lead) - 1;
	size_t len = strcspn(name, "'");
	if (len >= sizeof(key))
		return NULL;
	memcpy(key, name, len);
	key[len] = '\0';
	const yaml_node_t *map = path && path[0] ? path_node(c, path)
						 : dtf_ytree_root(c->t);
	return dtf_ytree_removed_by(c->t, map, key);
}

static int fail(struct ctx *c, const yaml_node_t *n, const char *path,
		const char *fmt, ...)
{
	char where[DTF_WHERE_MAX], msg[768];
	va_list ap;

	/* a value given by --set is blamed on "--set KEY", not on the
	 * file's mapping it was grafted into */
	if (path && !dtf_ytree_is_override(c->t, n)) {
		const yaml_node_t *pn = path_node(c, path);
		if (dtf_ytree_is_override(c->t, pn))
			n = pn;
	}
	dtf_ytree_where(c->t, n, where, sizeof(where));
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* a required key unset by "--set KEY=" is that override's doing */
	const char *by = removed_required(c, path, msg);
	if (by) {
		snprintf(where, sizeof(where), "--set %s", by);
		size_t used = strlen(msg);
		snprintf(msg + used, sizeof(msg) - used,
			 "; the empty value of --set %s= removed it, and a "
			 "required key has no default",
			 by);
	}
	if (path && path[0])
		return dtf_error(DTF_ERR_CONFIG, "%s: %s: %s", where, path, msg);
	return dtf_error(DTF_ERR_CONFIG, "%s: %s", where, msg);
}

/* What a node is, for "got ...": 'text', null, a mapping, a list. */
static const char *describe(const yaml_node_t *n, char *buf, size_t size)
{
	if (dtf_ytree_is_null(n))
		return "null";
	if (n->type == YAML_MAPPING_NODE)
		return "a mapping";
	if (n->type == YAML_SEQUENCE_NODE)
		return "a list";
	const char *s = dtf_ytree_text(n);
	if (strlen(s) > 60)
		snprintf(buf, size, "'%.57s...'", s);
	else
		snprintf(buf, size, "'%s'", s);
	return buf;
}

/* describe(), telling an empty list or mapping from a full one. */
static const char *describe_empty(const yaml_node_t *n, char *buf,
				  size_t size)
{
	if (n->type == YAML_SEQUENCE_NODE &&
	    n->data.sequence.items.top == n->data.sequence.items.start)
		return "an empty list";
	if (n->type == YAML_MAPPING_NODE &&
	    n->data.mapping.pairs.top == n->data.mapping.pairs.start)
		return "an empty mapping";
	return describe(n, buf, size);
}

static int levenshtein(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	int row[64];

	if (la >= 64 || lb >= 64)
		return 99;
	for (size_t j = 0; j <= lb; j++)
		row[j] = (int)j;
	for (size_t i = 1; i <= la; i++) {
		int diag = row[0];
		row[0] = (int)i;
		for (size_t j = 1; j <= lb; j++) {
			int up = row[j];
			int best = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			diag = up;
			row[j] = best;
		}
	}
	return row[lb];
}

/* Names are read through a callback so one helper serves every table. */
typedef const char *(*name_at_fn)(const void *table, int i);

/* " (did you mean 'x'?)" for the closest name within distance 2, or "". */
static const char *suggest(const char *word, const void *table, int n,
			   name_at_fn name_at, char *buf, size_t size)
{
	int best = 3;
	const char *pick = NULL;
	for (int i = 0; i < n; i++) {
		const char *cand = name_at(table, i);
		int d = levenshtein(word, cand);
		if (d < best) {
			best = d;
			pick = cand;
		}
	}
	if (!pick)
		return "";
	snprintf(buf, size, " (did you mean '%s'?)", pick);
	return buf;
}

/* "a, b, c" */
static const char *list_names(const void *table, int n, name_at_fn name_at,
			      char *buf, size_t size)
{
	size_t used = 0;
	buf[0] = '\0';
	for (int i = 0; i < n && used < size; i++)
		used += (size_t)snprintf(buf + used, size - used, "%s%s",
					 i ? ", " : "", name_at(table, i));
	return buf;
}

static const char *field_name_at(const void *table, int i)
{
	return ((const struct field *)table)[i].key;
}

static const char *enum_name_at(const void *table, int i)
{
	return ((const struct enum_name *)table)[i].name;
}

static int enum_count(const struct enum_name *e)
{
	int n = 0;
	while (e[n].name)
		n++;
	return n;
}

/* Key paths are for messages: a long one is cut, never overflows. */
static void path_fmt(char *out, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void path_fmt(char *out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out, PATH_MAX_, fmt, ap);
	va_end(ap);
}

static void join_path(char *out, const char *path, const char *key)
{
	path_fmt(out, "%s%s%s", path, path[0] ? "." : "", key);
}

/* ---- scalars -------------------------------------------------------------- */

static const char *int_expect(unsigned flags)
{
	return flags & F_POS      ? "a positive integer"
	       : flags & F_NONNEG ? "a non-negative integer"
				  : "an integer";
}

static const char *num_expect(unsigned flags)
{
	return flags & F_POS      ? "a positive number"
	       : flags & F_UNIT   ? "a number in [0, 1)"
	       : flags & F_NONNEG ? "a non-negative number"
				  : "a number";
}

/* A scalar to a checked int64 in [lo, hi]. */
static int read_int(struct ctx *c, const yaml_node_t *n, const char *path,
		    unsigned flags, int64_t lo, int64_t hi, int64_t *out)
{
	char buf[80];
	const char *s = dtf_ytree_text(n);
	if (!s || dtf_ytree_is_null(n) || !*s || isspace((unsigned char)*s))
		return fail(c, n, path, "expected %s, got %s", int_expect(flags),
			    describe(n, buf, sizeof(buf)));
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (*end)
		return fail(c, n, path, "expected %s, got %s", int_expect(flags),
			    describe(n, buf, sizeof(buf)));
	if (errno == ERANGE || v < lo || v > hi) {
		if ((flags & F_POS) && v <= 0 && errno != ERANGE)
			return fail(c, n, path, "expected %s, got %s",
				    int_expect(flags),
				    describe(n, buf, sizeof(buf)));
		if ((flags & F_NONNEG) && v < 0 && errno != ERANGE)
			return fail(c, n, path, "expected %s, got %s",
				    int_expect(flags),
				    describe(n, buf, sizeof(buf)));
		return fail(c, n, path, "expected %s, got %s (out of range)",
			    int_expect(flags), describe(n, buf, sizeof(buf)));
	}
	*out = v;
	return 0;
}

static int read_u64(struct ctx *c, const yaml_node_t *n, const char *path,
		    uint64_t *out)
{
	char buf[80];
	const char *s = dtf_ytree_text(n);
	if (!s || dtf_ytree_is_null(n) || !isdigit((unsigned char)*s))
		return fail(c, n, path, "expected a non-negative integer, got %s",
			    describe(n, buf, sizeof(buf)));
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end)
		return fail(c, n, path, "expected a non-negative integer, got %s",
			    describe(n, buf, sizeof(buf)));
	if (errno == ERANGE)
		return fail(c, n, path,
			    "expected a non-negative integer, got %s (out of "
			    "range)",
			    describe(n, buf, sizeof(buf)));
	*out = v;
	return 0;
}

static int read_num(struct ctx *c, const yaml_node_t *n, const char *path,
		    unsigned flags, int as_float, double *out)
{
	char buf[80];
	const char *s = dtf_ytree_text(n);
	if (!s || dtf_ytree_is_null(n) || !*s || isspace((unsigned char)*s))
		goto bad;
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (*end || !isfinite(v) || (as_float && !isfinite((float)v)))
		goto bad;
	if (((flags & F_POS) && !(v > 0)) || ((flags & F_NONNEG) && v < 0) ||
	    ((flags & F_UNIT) && !(v >= 0 && v < 1)))
		goto bad;
	*out = v;
	return 0;
bad:
	return fail(c, n, path, "expected %s, got %s", num_expect(flags),
		    describe(n, buf, sizeof(buf)));
}

static int read_bool(struct ctx *c, const yaml_node_t *n, const char *path,
		     int *out)
{
	static const char *const yes[] = {"true", "yes", "on"};
	static const char *const no[] = {"false", "no", "off"};
	char buf[80];
	const char *s = dtf_ytree_text(n);
	for (int i = 0; s && i < 3; i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = 1;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*out = 0;
			return 0;
		}
	}
	return fail(c, n, path,
		    "expected a boolean (true/false, yes/no, on/off), got %s",
		    describe(n, buf, sizeof(buf)));
}

/* A non-empty string that fits in `size` bytes (NUL included). */
static int read_str(struct ctx *c, const yaml_node_t *n, const char *path,
		    size_t size, const char **out)
{
	char buf[80];
	const char *s = dtf_ytree_text(n);
	if (!s || dtf_ytree_is_null(n))
		return fail(c, n, path, "expected a string, got %s",
			    describe(n, buf, sizeof(buf)));
	if (!*s)
		return fail(c, n, path, "expected a non-empty string");
	if (strlen(s) != n->data.scalar.length)
		return fail(c, n, path, "the string contains a NUL byte");
	if (size && strlen(s) >= size)
		return fail(c, n, path, "longer than %zu characters", size - 1);
	*out = s;
	return 0;
}

static int read_enum(struct ctx *c, const yaml_node_t *n, const char *path,
		     const struct enum_name *names, int *out)
{
	char buf[80], sug[96], all[256];
	const char *s = dtf_ytree_text(n);
	int count = enum_count(names);
	if (s && !dtf_ytree_is_null(n)) {
		for (int i = 0; i < count; i++) {
			if (!strcmp(s, names[i].name)) {
				*out = names[i].value;
				return 0;
			}
		}
	}
	return fail(c, n, path, "expected one of %s, got %s%s",
		    list_names(names, count, enum_name_at, all, sizeof(all)),
		    describe(n, buf, sizeof(buf)),
		    s ? suggest(s, names, count, enum_name_at, sug, sizeof(sug))
		      : "");
}

/* "5" or [5, 3] into two positive ints. */
static int read_pair(struct ctx *c, const yaml_node_t *n, const char *path,
		     int *h, int *w)
{
	char buf[80], ipath[PATH_MAX_];
	int64_t v[2] = {0, 0};
	int rc;

	if (n->type == YAML_SCALAR_NODE && !dtf_ytree_is_null(n)) {
		rc = read_int(c, n, path, F_POS, 1, INT_MAX, &v[0]);
		if (rc)
			return rc;
		*h = *w = (int)v[0];
		return 0;
	}
	if (n->type != YAML_SEQUENCE_NODE ||
	    n->data.sequence.items.top - n->data.sequence.items.start != 2)
		return fail(c, n, path,
			    "expected a positive integer or a list [h, w] of "
			    "two, got %s",
			    describe(n, buf, sizeof(buf)));
	for (int i = 0; i < 2; i++) {
		path_fmt(ipath, "%s[%d]", path, i);
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, n->data.sequence.items.start[i]);
		rc = read_int(c, it, ipath, F_POS, 1, INT_MAX, &v[i]);
		if (rc)
			return rc;
	}
	*h = (int)v[0];
	*w = (int)v[1];
	return 0;
}

/* ---- the generic walk ---------------------------------------------------- */

static void apply_defaults(const struct section *s, void *base)
{
	char *b = base;
	for (int i = 0; i < s->nfields; i++) {
		const struct field *f = &s->fields[i];
		switch (f->type) {
		case T_STR:
			snprintf(b + f->off, f->size, "%s",
				 f->def_str ? f->def_str : "");
			break;
		case T_INT:
		case T_BOOL:
		case T_ENUM:
			*(int *)(b + f->off) = (int)f->def;
			break;
		case T_PAIR:
			*(int *)(b + f->off) = (int)f->def;
			*(int *)(b + f->off2) = (int)f->def;
			break;
		case T_I64:
			*(int64_t *)(b + f->off) = (int64_t)f->def;
			break;
		case T_U64:
			*(uint64_t *)(b + f->off) = (uint64_t)f->def;
			break;
		case T_DOUBLE:
			*(double *)(b + f->off) = f->def;
			break;
		case T_FLOAT:
			*(float *)(b + f->off) = (float)f->def;
			break;
		case T_SECTION:
			apply_defaults(f->sub, base);
			break;
		case T_STRDUP: /* NULL; the job is zeroed */
		case T_CUSTOM: /* the reader sets its own */
			break;
		}
	}
}

static int read_section(struct ctx *c, const struct section *s, void *base,
			const yaml_node_t *key, const yaml_node_t *map,
			const char *path);

static int read_field(struct ctx *c, const struct field *f, void *base,
		      const yaml_node_t *key, const yaml_node_t *val,
		      const char *path)
{
	char *b = base;
	const char *s = NULL;
	int64_t v = 0;
	double d = 0;
	int rc = 0;

	if (f->slot)
		c->slot[f->slot] = f->flags & F_SLOT_KEY ? key : val;
	switch (f->type) {
	case T_STR:
		rc = read_str(c, val, path, f->size, &s);
		if (!rc)
			snprintf(b + f->off, f->size, "%s", s);
		return rc;
	case T_STRDUP: {
		rc = read_str(c, val, path, 0, &s);
		if (rc)
			return rc;
		char **dst = (char **)(b + f->off);
		dtf_free(*dst);
		*dst = dtf_strdup(s);
		return *dst ? 0 : dtf_error(DTF_ERR_NOMEM, "out of memory");
	}
	case T_INT:
		rc = read_int(c, val, path, f->flags,
			      f->flags & F_POS ? 1 : f->flags & F_NONNEG ? 0
									 : INT_MIN,
			      INT_MAX, &v);
		if (!rc)
			*(int *)(b + f->off) = (int)v;
		return rc;
	case T_I64:
		rc = read_int(c, val, path, f->flags,
			      f->flags & F_POS ? 1 : f->flags & F_NONNEG ? 0
									 : INT64_MIN,
			      INT64_MAX, &v);
		if (!rc)
			*(int64_t *)(b + f->off) = v;
		return rc;
	case T_U64:
		return read_u64(c, val, path, (uint64_t *)(b + f->off));
	case T_DOUBLE:
	case T_FLOAT:
		rc = read_num(c, val, path, f->flags, f->type == T_FLOAT, &d);
		if (rc)
			return rc;
		if (f->type == T_FLOAT)
			*(float *)(b + f->off) = (float)d;
		else
			*(double *)(b + f->off) = d;
		return 0;
	case T_BOOL:
		return read_bool(c, val, path, (int *)(b + f->off));
	case T_ENUM:
		return read_enum(c, val, path, f->names, (int *)(b + f->off));
	case T_PAIR:
		return read_pair(c, val, path, (int *)(b + f->off),
				 (int *)(b + f->off2));
	case T_SECTION:
		return read_section(c, f->sub, base, key, val, path);
	case T_CUSTOM:
		return f->read(c, base, key, val, path);
	}
	return 0;
}

/*
 * Read mapping `map` (NULL or null: empty) with table s into base.  `key` is
 * the node naming the mapping (its key, or the list item), where a missing
 * required key is reported; NULL at the top level.
 */
static int read_section(struct ctx *c, const struct section *s, void *base,
			const yaml_node_t *key, const yaml_node_t *map,
			const char *path)
{
	const yaml_node_t *seen[FIELDS_MAX] = {0};
	char buf[80], sub[PATH_MAX_], sug[96], all[512];
	int rc;

	DTF_ASSERT(s->nfields <= FIELDS_MAX);
	if (map && !dtf_ytree_is_null(map) && map->type != YAML_MAPPING_NODE)
		return fail(c, map, path, "expected a mapping, got %s",
			    describe(map, buf, sizeof(buf)));
	if (s->where_off >= 0 && key)
		dtf_ytree_where(c->t, dtf_ytree_blame(c->t, key, map),
				(char *)base + s->where_off, DTF_WHERE_MAX);
	if (map && map->type == YAML_MAPPING_NODE) {
		for (yaml_node_pair_t *pr = map->data.mapping.pairs.start;
		     pr < map->data.mapping.pairs.top; pr++) {
			const yaml_node_t *k =
				yaml_document_get_node(&c->t->doc, pr->key);
			const yaml_node_t *v =
				yaml_document_get_node(&c->t->doc, pr->value);
			const char *name = dtf_ytree_text(k);
			if (!name || dtf_ytree_is_null(k))
				return fail(c, k, path,
					    "expected a key name, got %s",
					    describe(k, buf, sizeof(buf)));
			join_path(sub, path, name);
			int i = 0;
			while (i < s->nfields && strcmp(s->fields[i].key, name))
				i++;
			if (i == s->nfields) {
				const char *hint =
					suggest(name, s->fields, s->nfields,
						field_name_at, sug, sizeof(sug));
				if (hint[0])
					return fail(c, k, sub,
						    "unknown key '%s'%s", name,
						    hint);
				return fail(c, k, sub,
					    "unknown key '%s' (known keys: %s)",
					    name,
					    list_names(s->fields, s->nfields,
						       field_name_at, all,
						       sizeof(all)));
			}
			if (seen[i]) {
				char first[DTF_WHERE_MAX];
				dtf_ytree_where(c->t, seen[i], first,
						sizeof(first));
				return fail(c, k, sub,
					    "duplicate key (first given at %s)",
					    first);
			}
			seen[i] = k;
			rc = read_field(c, &s->fields[i], base, k, v, sub);
			if (rc)
				return rc;
		}
	}
	for (int i = 0; i < s->nfields; i++) {
		if ((s->fields[i].flags & F_REQUIRED) && !seen[i])
			return fail(c, key ? key : map, path,
				    "missing required key '%s'",
				    s->fields[i].key);
	}
	return s->check ? s->check(c, base, key, map, path) : 0;
}

/* ---- {kind: {attrs}} choices ---------------------------------------------- */

struct choice {
	const char *name;
	int value;
	const struct section *attrs; /* NULL: no attributes */
};

static const char *choice_name_at(const void *table, int i)
{
	return ((const struct choice *)table)[i].name;
}

/*
 * `node` is a bare name ("flatten") or a one-key mapping {name: attrs}.
 * Finds the choice; *kind gets the node naming it (for positions), *attrs
 * the attribute node or NULL.
 */
/*
 * For the hint of check_switch(): override `ov` ("a.b.kind.x.y=v") from
 * component `kind` on, as one value "{kind: {x: {y: v}}}"; "{kind: {...}}"
 * when `kind` is not among its components or the value does not fit.
 */
static void whole_value(const char *ov, const char *kind, char *buf,
			size_t size)
{
	snprintf(buf, size, "{%s: {...}}", kind);
	const char *eq = ov ? strchr(ov, '=') : NULL;
	size_t klen = strlen(kind), at = 0;
	const char *k = ov;
	while (eq && k < eq &&
	       !(!strncmp(k, kind, klen) && (k[klen] == '.' || k[klen] == '='))) {
		k += strcspn(k, ".=");
		k += *k == '.'; /* the next component, or stop at '=' */
		if (*k == '=')
			return;
	}
	if (!eq || k >= eq)
		return;
	int depth = 0;
	for (; k < eq && at < size; depth++) {
		size_t len = strcspn(k, ".=");
		at += (size_t)snprintf(buf + at, size - at, "{%.*s: ", (int)len, k);
		k += len + 1;
	}
	if (at < size)
		at += (size_t)snprintf(buf + at, size - at, "%s", eq + 1);
	for (; depth > 0 && at + 1 < size; depth--)
		buf[at++] = '}';
	if (depth > 0 || at >= size) {
		snprintf(buf, size, "{%s: {...}}", kind);
		return;
	}
	buf[at] = '\0';
}

/*
 * A --set inside a {kind: {attrs}} choice that names another kind than the
 * file's would switch it silently: with "optimizer: adam" (or {adam: {...}})
 * in the file, --set train.optimizer.sgd.learning_rate=0.1 grafts an sgd
 * key beside (or in place of) adam.  Refuse it, naming the override and the
 * file's choice; a value given whole (--set train.optimizer={sgd: {...}})
 * replaces the choice and is not caught here.
 */
static int check_switch(struct ctx *c, const yaml_node_t *node,
			const char *path, const char *what)
{
	const yaml_node_t *old = dtf_ytree_replaced(c->t, node);
	const char *old_name = old ? dtf_ytree_text(old) : NULL;
	const yaml_node_t *added = NULL;
	if (old && (!old_name || dtf_ytree_is_null(old)))
		return 0; /* a list or null made a mapping: nothing chosen */
	for (yaml_node_pair_t *pr = node->data.mapping.pairs.start;
	     pr < node->data.mapping.pairs.top; pr++) {
		const yaml_node_t *k = yaml_document_get_node(&c->t->doc,
							      pr->key);
		const char *name = dtf_ytree_text(k);
		if (!name)
			continue;
		if (!old) { /* the first key: the job's choice */
			old = k;
			old_name = name;
		} else if (!added && strcmp(name, old_name) &&
			   dtf_ytree_is_override(c->t, k) &&
			   dtf_ytree_override_text(c->t, k) !=
				   dtf_ytree_override_text(c->t, old)) {
			added = k; /* grafted beside it by a later override */
		}
	}
	if (!old || !added || !strcmp(dtf_ytree_text(added), old_name))
		return 0;
	const char *name = dtf_ytree_text(added);
	const char *ov = dtf_ytree_override_text(c->t, added);
	char where[DTF_WHERE_MAX], whole[512];
	dtf_ytree_where(c->t, old, where, sizeof(where));
	whole_value(ov, name, whole, sizeof(whole));
	return fail(c, added, path,
		    "this would switch the %s from '%s' (%s) to '%s'; a --set "
		    "inside %s only changes settings of the %s the job has\n"
		    "HINT: to switch, replace the whole key: --set %s='%s'",
		    what, old_name, where, name, path, what, path, whole);
}

static int read_choice(struct ctx *c, const yaml_node_t *node,
		       const char *path, const char *what,
		       const struct choice *table, int n,
		       const struct choice **out, const yaml_node_t **kind,
		       const yaml_node_t **attrs)
{
	char buf[80], sug[96], all[256];

	*attrs = NULL;
	if (node->type == YAML_MAPPING_NODE) {
		int rc = check_switch(c, node, path, what);
		if (rc)
			return rc;
	}
	if (node->type == YAML_SCALAR_NODE && !dtf_ytree_is_null(node)) {
		*kind = node;
	} else if (node->type == YAML_MAPPING_NODE &&
		   node->data.mapping.pairs.top -
				   node->data.mapping.pairs.start ==
			   1) {
		yaml_node_pair_t *pr = node->data.mapping.pairs.start;
		*kind = yaml_document_get_node(&c->t->doc, pr->key);
		*attrs = yaml_document_get_node(&c->t->doc, pr->value);
	} else {
		return fail(c, node, path,
			    "expected the %s as a name or a one-key mapping "
			    "{%s: {...}}, got %s",
			    what, what, describe(node, buf, sizeof(buf)));
	}
	const char *name = dtf_ytree_text(*kind);
	for (int i = 0; name && i < n; i++) {
		if (!strcmp(name, table[i].name)) {
			*out = &table[i];
			return 0;
		}
	}
	if (!name)
		return fail(c, *kind, path, "expected a %s name, got %s", what,
			    describe(*kind, buf, sizeof(buf)));
	const char *hint = suggest(name, table, n, choice_name_at, sug,
				   sizeof(sug));
	if (hint[0])
		return fail(c, *kind, path, "unknown %s '%s'%s", what, name,
			    hint);
	return fail(c, *kind, path, "unknown %s '%s' (known: %s)", what, name,
		    list_names(table, n, choice_name_at, all, sizeof(all)));
}

/* ---- data.features ---------------------------------------------------------- */

#define FEAT(m) offsetof(struct dtf_feature_spec, m)

static const struct enum_name feature_types[] = {
	{"bytes", DTF_FEATURE_BYTES},
	{"float", DTF_FEATURE_FLOAT},
	{"int64", DTF_FEATURE_INT64},
	{NULL, 0},
};

static const struct enum_name decodes[] = {
	{"uint8", DTF_DECODE_UINT8},
	{"int8", DTF_DECODE_INT8},
	{"float32", DTF_DECODE_FLOAT32},
	{"float16", DTF_DECODE_FLOAT16},
	{NULL, 0},
};

static int read_shape(struct ctx *c, void *base, const yaml_node_t *key,
		      const yaml_node_t *val, const char *path)
{
	struct dtf_feature_spec *f = base;
	char buf[80], ipath[PATH_MAX_];

	if (val->type != YAML_SEQUENCE_NODE)
		return fail(c, val, path,
			    "expected a list of positive integers ([] for a "
			    "scalar), got %s",
			    describe(val, buf, sizeof(buf)));
	long n = val->data.sequence.items.top - val->data.sequence.items.start;
	if (n > DTF_MAX_RANK)
		return fail(c, val, path, "at most %d dimensions, got %ld",
			    DTF_MAX_RANK, n);
	int64_t numel = 1;
	for (long i = 0; i < n; i++) {
		int64_t d = 0;
		path_fmt(ipath, "%s[%ld]", path, i);
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		int rc = read_int(c, it, ipath, F_POS, 1, INT32_MAX, &d);
		if (rc)
			return rc;
		numel *= d;
		if (numel > INT32_MAX)
			return fail(c, it, ipath,
				    "one example of the feature would have more "
				    "than 2^31 elements");
		f->shape[i] = d;
	}
	f->rank = (int)n;
	return 0;
}

static int check_feature(struct ctx *c, void *base, const yaml_node_t *key,
			 const yaml_node_t *map, const char *path)
{
	struct dtf_feature_spec *f = base;
	char sub[PATH_MAX_];

	if (f->type == DTF_FEATURE_BYTES && f->decode == DTF_DECODE_NONE)
		return fail(c, key, path,
			    "missing required key 'decode' (a bytes feature "
			    "needs one of uint8, int8, float16, float32)");
	if (f->type != DTF_FEATURE_BYTES && f->decode != DTF_DECODE_NONE) {
		join_path(sub, path, "decode");
		return fail(c, dtf_ytree_get(c->t, map, "decode"), sub,
			    "only a bytes feature has a decode");
	}
	f->dtype = f->type == DTF_FEATURE_INT64 ? DTF_INT32 : DTF_FLOAT32;
	if (f->max_length > 0) {
		join_path(sub, path, "max_length");
		const yaml_node_t *ml = dtf_ytree_get(c->t, map, "max_length");
		if (f->type == DTF_FEATURE_BYTES)
			return fail(c, ml, sub,
				    "only a float or int64 list can have a "
				    "variable length");
		if (f->max_length > INT32_MAX)
			return fail(c, ml, sub, "at most %d", INT32_MAX);
		if (f->rank < 0) {
			f->rank = 1;
			f->shape[0] = f->max_length;
		} else if (f->rank != 1 || f->shape[0] != f->max_length) {
			join_path(sub, path, "shape");
			return fail(c, dtf_ytree_get(c->t, map, "shape"), sub,
				    "a variable-length feature has shape "
				    "[max_length] ([%lld]); leave shape out",
				    (long long)f->max_length);
		}
	} else if (f->rank < 0) {
		return fail(c, key, path, "missing required key 'shape'");
	}
	if (f->has_default && f->type == DTF_FEATURE_INT64 &&
	    f->default_value != (double)(int32_t)f->default_value) {
		join_path(sub, path, "default");
		return fail(c, dtf_ytree_get(c->t, map, "default"), sub,
			    "an int64 feature's default must be an integer "
			    "in the int32 range");
	}
	return 0;
}

static int read_default(struct ctx *c, void *base, const yaml_node_t *key,
			const yaml_node_t *val, const char *path)
{
	struct dtf_feature_spec *f = base;
	double d = 0;
	int rc = read_num(c, val, path, 0, 1, &d);
	if (rc)
		return rc;
	f->has_default = 1;
	f->default_value = d;
	return 0;
}

static const struct field feature_fields[] = {
	{.key = "type", .type = T_ENUM, .flags = F_REQUIRED,
	 .off = FEAT(type), .names = feature_types},
	{.key = "decode", .type = T_ENUM, .off = FEAT(decode),
	 .def = DTF_DECODE_NONE, .names = decodes},
	{.key = "shape", .type = T_CUSTOM, .read = read_shape},
	{.key = "scale", .type = T_FLOAT, .off = FEAT(scale), .def = 1.0},
	{.key = "offset", .type = T_FLOAT, .off = FEAT(offset), .def = 0.0},
	{.key = "max_length", .type = T_I64, .flags = F_NONNEG,
	 .off = FEAT(max_length), .def = 0},
	{.key = "pad_value", .type = T_FLOAT, .off = FEAT(pad_value),
	 .def = 0.0},
	{.key = "default", .type = T_CUSTOM, .read = read_default},
};

static const struct section feature_section = {
	feature_fields, NFIELDS(feature_fields), -1, check_feature};


/* The number of pairs of the non-empty mapping `val`, or an error saying
 * what was expected ("expected WHAT, got ..."). */
static int mapping_size(struct ctx *c, const yaml_node_t *val,
			const char *path, const char *what, int *n)
{
	char buf[128];
	if (val->type != YAML_MAPPING_NODE ||
	    val->data.mapping.pairs.top == val->data.mapping.pairs.start)
		return fail(c, val, path, "expected %s, got %s", what,
			    describe_empty(val, buf, sizeof(buf)));
	*n = (int)(val->data.mapping.pairs.top - val->data.mapping.pairs.start);
	return 0;
}

/* The non-empty mapping `val` (else mapping_size's error) as an array of
 * one zeroed `size`-byte element per pair, dtf_calloc'd into *arr (the
 * caller stores it in the job, which frees it), the count in *n. */
static int mapping_array(struct ctx *c, const yaml_node_t *val,
			 const char *path, const char *what, size_t size,
			 void **arr, int *n)
{
	int rc = mapping_size(c, val, path, what, n);
	if (rc < 0)
		return rc;
	*arr = dtf_calloc((size_t)*n, size);
	if (!*arr)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	return 0;
}

/* The key and value nodes of pair i of the mapping `map`. */
static void mapping_pair(struct ctx *c, const yaml_node_t *map, int i,
			 const yaml_node_t **k, const yaml_node_t **v)
{
	const yaml_node_pair_t *pr = &map->data.mapping.pairs.start[i];
	*k = yaml_document_get_node(&c->t->doc, pr->key);
	*v = yaml_document_get_node(&c->t->doc, pr->value);
}

static int read_features(struct ctx *c, void *base, const yaml_node_t *key,
			 const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;

	char sub[PATH_MAX_];
	void *arr;
	int n = 0;
	int rc_ = mapping_array(c, val, path,
				"a mapping of feature names to {type, shape, ...}",
				sizeof(*job->data.features), &arr, &n);
	if (rc_ < 0)
		return rc_;
	job->data.features = arr;
	job->data.nfeatures = n;
	if (n > DTF_EXAMPLE_MAX_FEATURES)
		return fail(c, val, path, "%d features; at most %d are supported",
			    n, DTF_EXAMPLE_MAX_FEATURES);
	for (int i = 0; i < n; i++) {
		const yaml_node_t *k, *v;
		mapping_pair(c, val, i, &k, &v);
		struct dtf_feature_spec *f = &job->data.features[i];
		const char *name;
		int rc = read_str(c, k, path, DTF_NAME_MAX, &name);
		if (rc)
			return rc;
		join_path(sub, path, name);
		for (int j = 0; j < i; j++)
			if (!strcmp(job->data.features[j].name, name))
				return fail(c, k, sub, "duplicate feature name");
		snprintf(f->name, sizeof(f->name), "%s", name);
		apply_defaults(&feature_section, f);
		f->rank = -1; /* "shape not given" until read_shape */
		rc = read_section(c, &feature_section, f, k, v, sub);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- model.layers and model.graph ---------------------------------------- */

#define LAY(m) offsetof(struct dtf_layer, m)

static const struct enum_name paddings[] = {
	{"valid", 0}, /* DTF_PAD_VALID */
	{"same", 1},  /* DTF_PAD_SAME */
	{NULL, 0},
};

static const struct enum_name activations[] = {
	{"none", DTF_ACT_NONE},
	{"linear", DTF_ACT_NONE},
	{"relu", DTF_ACT_RELU},
	{"leaky_relu", DTF_ACT_LEAKY_RELU},
	{"elu", DTF_ACT_ELU},
	{"gelu", DTF_ACT_GELU},
	{"tanh", DTF_ACT_TANH},
	{"sigmoid", DTF_ACT_SIGMOID},
	{"softmax", DTF_ACT_SOFTMAX},
	{NULL, 0},
};

static const struct enum_name dtypes[] = {
	{"float32", 0},
	{NULL, 0},
};

static const struct enum_name groups[] = {
	{"auto", DTF_GROUP_AUTO},
	{"kernel", DTF_GROUP_KERNEL},
	{"bias", DTF_GROUP_BIAS},
	{"norm", DTF_GROUP_NORM},
	{NULL, 0},
};

/* Explicit padding: [pad_h, pad_w] (both sides) or [top, bottom, left,
 * right] (TF's explicit paddings without the batch and channel pairs). */
#define DTF_PAD_EXPLICIT_ 2

static int read_padding(struct ctx *c, void *base, const yaml_node_t *key,
			const yaml_node_t *val, const char *path)
{
	struct dtf_layer *l = base;
	char buf[80], ipath[PATH_MAX_];

	if (val->type != YAML_SEQUENCE_NODE)
		return read_enum(c, val, path, paddings, &l->padding);
	long n = val->data.sequence.items.top - val->data.sequence.items.start;
	if (n != 2 && n != 4)
		return fail(c, val, path,
			    "expected valid, same, [pad_h, pad_w] or [top, "
			    "bottom, left, right], got %s",
			    describe(val, buf, sizeof(buf)));
	int64_t v[4];
	for (long i = 0; i < n; i++) {
		path_fmt(ipath, "%s[%ld]", path, i);
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		int rc = read_int(c, it, ipath, F_NONNEG, 0, 1 << 16, &v[i]);
		if (rc)
			return rc;
	}
	if (n == 2) {
		v[3] = v[2] = v[1];
		v[1] = v[0];
	}
	for (int i = 0; i < 4; i++)
		l->pads[i] = (int)v[i];
	l->padding = DTF_PAD_EXPLICIT_;
	return 0;
}

/* inputs: [a, b] (or one name): earlier layers, graph nodes or features. */
static int read_inputs(struct ctx *c, void *base, const yaml_node_t *key,
		       const yaml_node_t *val, const char *path)
{
	struct dtf_layer *l = base;
	char buf[80], ipath[PATH_MAX_];
	const char *s;

	if (val->type == YAML_SCALAR_NODE && !dtf_ytree_is_null(val)) {
		int rc = read_str(c, val, path, DTF_NAME_MAX, &s);
		if (rc)
			return rc;
		snprintf(l->inputs[0], DTF_NAME_MAX, "%s", s);
		dtf_ytree_where(c->t, val, l->input_where[0], DTF_WHERE_MAX);
		l->ninputs = 1;
		return 0;
	}
	long n = val->type == YAML_SEQUENCE_NODE
			 ? val->data.sequence.items.top -
				   val->data.sequence.items.start
			 : 0;
	if (n < 1 || n > DTF_LAYER_MAX_INPUTS)
		return fail(c, val, path,
			    "expected a list of 1 to %d node names, got %s",
			    DTF_LAYER_MAX_INPUTS,
			    describe(val, buf, sizeof(buf)));
	for (long i = 0; i < n; i++) {
		path_fmt(ipath, "%s[%ld]", path, i);
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		int rc = read_str(c, it, ipath, DTF_NAME_MAX, &s);
		if (rc)
			return rc;
		snprintf(l->inputs[i], DTF_NAME_MAX, "%s", s);
		dtf_ytree_where(c->t, it, l->input_where[i], DTF_WHERE_MAX);
	}
	l->ninputs = (int)n;
	return 0;
}

/* A shape: list of positive integers; `reshape` allows one -1, variables
 * and constants allow [] (a scalar). */
static int read_layer_shape(struct ctx *c, void *base, const yaml_node_t *key,
			    const yaml_node_t *val, const char *path)
{
	struct dtf_layer *l = base;
	char buf[80], ipath[PATH_MAX_];
	int allow_infer = l->kind == DTF_LAYER_RESHAPE, inferred = 0;

	if (val->type != YAML_SEQUENCE_NODE)
		return fail(c, val, path,
			    "expected a list of positive integers, got %s",
			    describe(val, buf, sizeof(buf)));
	long n = val->data.sequence.items.top - val->data.sequence.items.start;
	if (n > DTF_MAX_RANK - (allow_infer ? 1 : 0))
		return fail(c, val, path, "at most %d dimensions, got %ld",
			    DTF_MAX_RANK - (allow_infer ? 1 : 0), n);
	int64_t numel = 1;
	for (long i = 0; i < n; i++) {
		int64_t d = 0;
		path_fmt(ipath, "%s[%ld]", path, i);
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		const char *s = dtf_ytree_text(it);
		if (allow_infer && s && !strcmp(s, "-1")) {
			if (inferred++)
				return fail(c, it, ipath,
					    "only one dimension may be -1");
			l->shape[i] = -1;
			continue;
		}
		int rc = read_int(c, it, ipath, F_POS, 1, INT32_MAX, &d);
		if (rc)
			return rc;
		numel *= d;
		if (numel > ((int64_t)1 << 34))
			return fail(c, it, ipath,
				    "the shape has more than 2^34 elements");
		l->shape[i] = d;
	}
	l->shape_rank = (int)n;
	return 0;
}

/* initializer: a name, or {constant: {value: v}} / {truncated_normal:
 * {mean: m, stddev: s}}. */
static const struct field init_constant_fields[] = {
	{.key = "value", .type = T_FLOAT, .off = LAY(init.value), .def = 0},
};
static const struct field init_normal_fields[] = {
	{.key = "mean", .type = T_FLOAT, .off = LAY(init.mean), .def = 0},
	{.key = "stddev", .type = T_FLOAT, .flags = F_POS,
	 .off = LAY(init.stddev), .def = 0.05},
};
static const struct section init_constant_section = {
	init_constant_fields, NFIELDS(init_constant_fields), -1, NULL};
static const struct section init_normal_section = {
	init_normal_fields, NFIELDS(init_normal_fields), -1, NULL};

static const struct choice initializers[] = {
	{"zeros", DTF_INIT_KIND_ZEROS, NULL},
	{"ones", DTF_INIT_KIND_ONES, NULL},
	{"constant", DTF_INIT_KIND_CONSTANT, &init_constant_section},
	{"glorot_uniform", DTF_INIT_KIND_GLOROT_UNIFORM, NULL},
	{"glorot_normal", DTF_INIT_KIND_GLOROT_NORMAL, NULL},
	{"he_normal", DTF_INIT_KIND_HE_NORMAL, NULL},
	{"he_uniform", DTF_INIT_KIND_HE_UNIFORM, NULL},
	{"truncated_normal", DTF_INIT_KIND_TRUNCATED_NORMAL,
	 &init_normal_section},
};

static int read_initializer(struct ctx *c, void *base, const yaml_node_t *key,
			    const yaml_node_t *val, const char *path)
{
	struct dtf_layer *l = base;
	const yaml_node_t *kind, *attrs;
	const struct choice *ch;
	char sub[PATH_MAX_];
	int rc = read_choice(c, val, path, "initializer", initializers,
			     NFIELDS(initializers), &ch, &kind, &attrs);
	if (rc)
		return rc;
	l->init.kind = (enum dtf_init_kind)ch->value;
	l->init_given = 1;
	if (!ch->attrs) {
		if (attrs && !dtf_ytree_is_null(attrs))
			return fail(c, attrs, path,
				    "initializer '%s' takes no attributes",
				    ch->name);
		return 0;
	}
	apply_defaults(ch->attrs, l);
	join_path(sub, path, ch->name);
	return read_section(c, ch->attrs, l, kind, attrs, sub);
}

/* constant value: a number or a flat list of numbers (owned by the job) */
static int read_values(struct ctx *c, void *base, const yaml_node_t *key,
		       const yaml_node_t *val, const char *path)
{
	struct dtf_layer *l = base;
	char buf[80], ipath[PATH_MAX_];
	long n = 1;
	int list = val->type == YAML_SEQUENCE_NODE;
	if (list)
		n = val->data.sequence.items.top - val->data.sequence.items.start;
	else if (val->type != YAML_SCALAR_NODE)
		return fail(c, val, path,
			    "expected a number or a list of numbers, got %s",
			    describe(val, buf, sizeof(buf)));
	if (n < 1 || n > (1 << 24))
		return fail(c, val, path, "expected 1 to 2^24 numbers, got %ld",
			    n);
	dtf_free(l->values);
	l->values = dtf_malloc((size_t)n * sizeof(float));
	if (!l->values)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	l->nvalues = n;
	for (long i = 0; i < n; i++) {
		const yaml_node_t *it =
			list ? yaml_document_get_node(
				       &c->t->doc,
				       val->data.sequence.items.start[i])
			     : val;
		double d = 0;
		path_fmt(ipath, list ? "%s[%ld]" : "%s", path, i);
		int rc = read_num(c, it, ipath, 0, 1, &d);
		if (rc)
			return rc;
		l->values[i] = (float)d;
	}
	return 0;
}

#define NAME_FIELD                                                     \
	{.key = "name", .type = T_STR, .off = LAY(name),               \
	 .size = DTF_NAME_MAX}
#define INPUTS_FIELD {.key = "inputs", .type = T_CUSTOM, .read = read_inputs}
#define INPUTS_REQ                                                     \
	{.key = "inputs", .type = T_CUSTOM, .flags = F_REQUIRED,       \
	 .read = read_inputs}
#define STRIDES_FIELD(d)                                               \
	{.key = "strides", .type = T_PAIR, .off = LAY(stride_h),       \
	 .off2 = LAY(stride_w), .def = d}
#define DILATION_FIELD                                                 \
	{.key = "dilation", .type = T_PAIR, .off = LAY(dilation_h),    \
	 .off2 = LAY(dilation_w), .def = 1}
#define PADDING_FIELD                                                  \
	{.key = "padding", .type = T_CUSTOM, .read = read_padding}
#define USE_BIAS_FIELD                                                 \
	{.key = "use_bias", .type = T_BOOL, .off = LAY(use_bias), .def = 1}
#define ACTIVATION_FIELD                                               \
	{.key = "activation", .type = T_ENUM, .off = LAY(activation),  \
	 .def = DTF_ACT_NONE, .names = activations}
#define KERNEL_INIT_FIELD                                              \
	{.key = "kernel_initializer", .type = T_CUSTOM,                \
	 .read = read_initializer}
#define KERNEL_FIELD                                                   \
	{.key = "kernel", .type = T_PAIR, .flags = F_REQUIRED,         \
	 .off = LAY(kernel_h), .off2 = LAY(kernel_w)}
#define POOL_FIELDS                                                    \
	{.key = "size", .type = T_PAIR, .off = LAY(size_h),            \
	 .off2 = LAY(size_w), .def = 2},                               \
		STRIDES_FIELD(0), PADDING_FIELD

static const struct field conv2d_fields[] = {
	{.key = "filters", .type = T_INT, .flags = F_REQUIRED | F_POS,
	 .off = LAY(filters)},
	KERNEL_FIELD, STRIDES_FIELD(1), DILATION_FIELD, PADDING_FIELD,
	USE_BIAS_FIELD, ACTIVATION_FIELD, KERNEL_INIT_FIELD, NAME_FIELD,
	INPUTS_FIELD,
};

static const struct field depthwise_fields[] = {
	KERNEL_FIELD, STRIDES_FIELD(1), DILATION_FIELD, PADDING_FIELD,
	{.key = "depth_multiplier", .type = T_INT, .flags = F_POS,
	 .off = LAY(depth_multiplier), .def = 1},
	USE_BIAS_FIELD, ACTIVATION_FIELD, KERNEL_INIT_FIELD, NAME_FIELD,
	INPUTS_FIELD,
};

/* strides default to the window size: 0 until then */
static const struct field pool_fields[] = {POOL_FIELDS, NAME_FIELD,
					   INPUTS_FIELD};

static const struct field dense_fields[] = {
	{.key = "units", .type = T_INT, .flags = F_REQUIRED | F_POS,
	 .off = LAY(units)},
	USE_BIAS_FIELD, ACTIVATION_FIELD, KERNEL_INIT_FIELD, NAME_FIELD,
	INPUTS_FIELD,
};

static const struct field dropout_fields[] = {
	{.key = "rate", .type = T_FLOAT, .flags = F_REQUIRED | F_UNIT,
	 .off = LAY(rate)},
	NAME_FIELD, INPUTS_FIELD,
};

#define NORM_FIELDS                                                    \
	{.key = "epsilon", .type = T_FLOAT, .flags = F_POS,            \
	 .off = LAY(epsilon), .def = 1e-3},                            \
		{.key = "center", .type = T_BOOL, .off = LAY(center),  \
		 .def = 1},                                            \
		{.key = "scale", .type = T_BOOL, .off = LAY(scale),    \
		 .def = 1}

static const struct field batch_norm_fields[] = {
	{.key = "momentum", .type = T_FLOAT, .flags = F_UNIT,
	 .off = LAY(momentum), .def = 0.99},
	NORM_FIELDS, NAME_FIELD, INPUTS_FIELD,
};

static const struct field layer_norm_fields[] = {NORM_FIELDS, NAME_FIELD,
						 INPUTS_FIELD};

static const struct field axis_fields[] = {
	{.key = "axis", .type = T_INT, .off = LAY(axis), .def = -1},
	NAME_FIELD, INPUTS_FIELD,
};

static const struct field reshape_fields[] = {
	{.key = "shape", .type = T_CUSTOM, .flags = F_REQUIRED,
	 .read = read_layer_shape},
	NAME_FIELD, INPUTS_FIELD,
};

static const struct field leaky_relu_fields[] = {
	{.key = "alpha", .type = T_FLOAT, .flags = F_NONNEG,
	 .off = LAY(alpha), .def = 0.3},
	NAME_FIELD, INPUTS_FIELD,
};

static const struct field elu_fields[] = {
	{.key = "alpha", .type = T_FLOAT, .flags = F_NONNEG,
	 .off = LAY(alpha), .def = 1.0},
	NAME_FIELD, INPUTS_FIELD,
};

static const struct field gelu_fields[] = {
	{.key = "approximate", .type = T_BOOL, .off = LAY(approximate),
	 .def = 0},
	NAME_FIELD, INPUTS_FIELD,
};

static const struct field plain_fields[] = {NAME_FIELD, INPUTS_FIELD};

/* graph form: the mapping key is the name; ops take explicit inputs */
static const struct field op_conv_fields[] = {
	INPUTS_REQ, STRIDES_FIELD(1), DILATION_FIELD, PADDING_FIELD,
};
static const struct field op_pool_fields[] = {INPUTS_REQ, POOL_FIELDS};
static const struct field op_plain_fields[] = {INPUTS_REQ};
static const struct field op_dropout_fields[] = {
	INPUTS_REQ,
	{.key = "rate", .type = T_FLOAT, .flags = F_REQUIRED | F_UNIT,
	 .off = LAY(rate)},
};
static const struct field op_batch_norm_fields[] = {
	INPUTS_REQ,
	{.key = "momentum", .type = T_FLOAT, .flags = F_UNIT,
	 .off = LAY(momentum), .def = 0.99},
	NORM_FIELDS,
};
static const struct field op_layer_norm_fields[] = {INPUTS_REQ,
						    NORM_FIELDS};
static const struct field op_axis_fields[] = {
	INPUTS_REQ, {.key = "axis", .type = T_INT, .off = LAY(axis), .def = -1},
};
static const struct field op_reshape_fields[] = {
	INPUTS_REQ, {.key = "shape", .type = T_CUSTOM, .flags = F_REQUIRED,
		     .read = read_layer_shape},
};
static const struct field op_leaky_relu_fields[] = {
	INPUTS_REQ, {.key = "alpha", .type = T_FLOAT, .flags = F_NONNEG,
		     .off = LAY(alpha), .def = 0.3},
};
static const struct field op_elu_fields[] = {
	INPUTS_REQ, {.key = "alpha", .type = T_FLOAT, .flags = F_NONNEG,
		     .off = LAY(alpha), .def = 1.0},
};
static const struct field op_gelu_fields[] = {
	INPUTS_REQ, {.key = "approximate", .type = T_BOOL,
		     .off = LAY(approximate), .def = 0},
};
static const struct field variable_fields[] = {
	{.key = "shape", .type = T_CUSTOM, .flags = F_REQUIRED,
	 .read = read_layer_shape},
	{.key = "dtype", .type = T_ENUM, .names = dtypes,
	 .off = LAY(approximate) /* scratch: float32 only */},
	{.key = "initializer", .type = T_CUSTOM, .read = read_initializer},
	{.key = "trainable", .type = T_BOOL, .off = LAY(trainable), .def = 1},
	{.key = "group", .type = T_ENUM, .off = LAY(group),
	 .def = DTF_GROUP_AUTO, .names = groups},
};
static const struct field constant_fields[] = {
	{.key = "shape", .type = T_CUSTOM, .read = read_layer_shape},
	{.key = "dtype", .type = T_ENUM, .names = dtypes,
	 .off = LAY(approximate)},
	{.key = "value", .type = T_CUSTOM, .read = read_values},
	{.key = "fill", .type = T_FLOAT, .off = LAY(fill), .def = 0},
};

static int check_pool(struct ctx *c, void *base, const yaml_node_t *key,
		      const yaml_node_t *map, const char *path)
{
	struct dtf_layer *l = base;
	if (!l->stride_h) {
		l->stride_h = l->size_h;
		l->stride_w = l->size_w;
	}
	return 0;
}

static int check_constant(struct ctx *c, void *base, const yaml_node_t *key,
			  const yaml_node_t *map, const char *path)
{
	struct dtf_layer *l = base;
	const yaml_node_t *vn = dtf_ytree_get(c->t, map, "value");
	const yaml_node_t *fn = dtf_ytree_get(c->t, map, "fill");
	const yaml_node_t *sn = dtf_ytree_get(c->t, map, "shape");
	if (vn && fn)
		return fail(c, fn, path, "give value or fill, not both");
	if (!vn && !fn)
		return fail(c, key, path, "missing required key 'value' (or "
			    "'fill' with a shape)");
	if (fn && !sn)
		return fail(c, key, path, "missing required key 'shape' "
			    "(fill needs one)");
	if (vn && !sn) {
		l->shape_rank = 1;
		l->shape[0] = l->nvalues;
		return 0;
	}
	if (vn) {
		int64_t numel = 1;
		for (int i = 0; i < l->shape_rank; i++)
			numel *= l->shape[i];
		if (numel != l->nvalues && l->nvalues != 1)
			return fail(c, vn, path,
				    "%lld values for a shape of %lld elements",
				    (long long)l->nvalues, (long long)numel);
	}
	return 0;
}

static int check_variable(struct ctx *c, void *base, const yaml_node_t *key,
			  const yaml_node_t *map, const char *path)
{
	struct dtf_layer *l = base;
	if (!l->init_given)
		l->init.kind = l->shape_rank >= 2 ? DTF_INIT_KIND_GLOROT_UNIFORM
						  : DTF_INIT_KIND_ZEROS;
	return 0;
}

#define SECTION(id, fields, check)                                     \
	static const struct section id = {fields, NFIELDS(fields), -1, check}

SECTION(conv2d_section, conv2d_fields, NULL);
SECTION(depthwise_section, depthwise_fields, NULL);
SECTION(pool_section, pool_fields, check_pool);
SECTION(dense_section, dense_fields, NULL);
SECTION(dropout_section, dropout_fields, NULL);
SECTION(batch_norm_section, batch_norm_fields, NULL);
SECTION(layer_norm_section, layer_norm_fields, NULL);
SECTION(axis_section, axis_fields, NULL);
SECTION(reshape_section, reshape_fields, NULL);
SECTION(leaky_relu_section, leaky_relu_fields, NULL);
SECTION(elu_section, elu_fields, NULL);
SECTION(gelu_section, gelu_fields, NULL);
SECTION(plain_section, plain_fields, NULL);
SECTION(op_conv_section, op_conv_fields, NULL);
SECTION(op_pool_section, op_pool_fields, check_pool);
SECTION(op_plain_section, op_plain_fields, NULL);
SECTION(op_dropout_section, op_dropout_fields, NULL);
SECTION(op_batch_norm_section, op_batch_norm_fields, NULL);
SECTION(op_layer_norm_section, op_layer_norm_fields, NULL);
SECTION(op_axis_section, op_axis_fields, NULL);
SECTION(op_reshape_section, op_reshape_fields, NULL);
SECTION(op_leaky_relu_section, op_leaky_relu_fields, NULL);
SECTION(op_elu_section, op_elu_fields, NULL);
SECTION(op_gelu_section, op_gelu_fields, NULL);
SECTION(variable_section, variable_fields, check_variable);
SECTION(constant_section, constant_fields, check_constant);

/* Names of every kind, indexed by enum dtf_layer_kind. */
static const char *const kind_names[] = {
	"conv2d", "max_pool2d", "flatten", "dense", "dropout", "relu",
	"depthwise_conv2d", "avg_pool2d", "global_avg_pool", "batch_norm",
	"layer_norm", "add", "multiply", "concat", "reshape", "leaky_relu",
	"elu", "gelu", "tanh", "sigmoid", "softmax", "identity", "variable",
	"constant", "matmul", "bias_add",
};
_Static_assert(sizeof(kind_names) / sizeof(kind_names[0]) ==
		       DTF_LAYER_COUNT_,
	       "kind_names out of step with enum dtf_layer_kind");

/* model.layers items */
static const struct choice layer_kinds[] = {
	{"conv2d", DTF_LAYER_CONV2D, &conv2d_section},
	{"depthwise_conv2d", DTF_LAYER_DEPTHWISE_CONV2D, &depthwise_section},
	{"max_pool2d", DTF_LAYER_MAX_POOL2D, &pool_section},
	{"avg_pool2d", DTF_LAYER_AVG_POOL2D, &pool_section},
	{"global_avg_pool", DTF_LAYER_GLOBAL_AVG_POOL, &plain_section},
	{"flatten", DTF_LAYER_FLATTEN, &plain_section},
	{"reshape", DTF_LAYER_RESHAPE, &reshape_section},
	{"dense", DTF_LAYER_DENSE, &dense_section},
	{"dropout", DTF_LAYER_DROPOUT, &dropout_section},
	{"batch_norm", DTF_LAYER_BATCH_NORM, &batch_norm_section},
	{"layer_norm", DTF_LAYER_LAYER_NORM, &layer_norm_section},
	{"add", DTF_LAYER_ADD, &plain_section},
	{"multiply", DTF_LAYER_MULTIPLY, &plain_section},
	{"concat", DTF_LAYER_CONCAT, &axis_section},
	{"relu", DTF_LAYER_RELU, &plain_section},
	{"leaky_relu", DTF_LAYER_LEAKY_RELU, &leaky_relu_section},
	{"elu", DTF_LAYER_ELU, &elu_section},
	{"gelu", DTF_LAYER_GELU, &gelu_section},
	{"tanh", DTF_LAYER_TANH, &plain_section},
	{"sigmoid", DTF_LAYER_SIGMOID, &plain_section},
	{"softmax", DTF_LAYER_SOFTMAX, &axis_section},
	{"identity", DTF_LAYER_IDENTITY, &plain_section},
};

/* model.graph nodes */
static const struct choice op_kinds[] = {
	{"variable", DTF_LAYER_VARIABLE, &variable_section},
	{"constant", DTF_LAYER_CONSTANT, &constant_section},
	{"conv2d", DTF_LAYER_CONV2D, &op_conv_section},
	{"depthwise_conv2d", DTF_LAYER_DEPTHWISE_CONV2D, &op_conv_section},
	{"matmul", DTF_LAYER_MATMUL, &op_plain_section},
	{"bias_add", DTF_LAYER_BIAS_ADD, &op_plain_section},
	{"max_pool2d", DTF_LAYER_MAX_POOL2D, &op_pool_section},
	{"avg_pool2d", DTF_LAYER_AVG_POOL2D, &op_pool_section},
	{"global_avg_pool", DTF_LAYER_GLOBAL_AVG_POOL, &op_plain_section},
	{"flatten", DTF_LAYER_FLATTEN, &op_plain_section},
	{"reshape", DTF_LAYER_RESHAPE, &op_reshape_section},
	{"dropout", DTF_LAYER_DROPOUT, &op_dropout_section},
	{"batch_norm", DTF_LAYER_BATCH_NORM, &op_batch_norm_section},
	{"layer_norm", DTF_LAYER_LAYER_NORM, &op_layer_norm_section},
	{"add", DTF_LAYER_ADD, &op_plain_section},
	{"multiply", DTF_LAYER_MULTIPLY, &op_plain_section},
	{"concat", DTF_LAYER_CONCAT, &op_axis_section},
	{"relu", DTF_LAYER_RELU, &op_plain_section},
	{"leaky_relu", DTF_LAYER_LEAKY_RELU, &op_leaky_relu_section},
	{"elu", DTF_LAYER_ELU, &op_elu_section},
	{"gelu", DTF_LAYER_GELU, &op_gelu_section},
	{"tanh", DTF_LAYER_TANH, &op_plain_section},
	{"sigmoid", DTF_LAYER_SIGMOID, &op_plain_section},
	{"softmax", DTF_LAYER_SOFTMAX, &op_axis_section},
	{"identity", DTF_LAYER_IDENTITY, &op_plain_section},
};

/* Defaults that are not in the attribute tables. */
static void layer_defaults(struct dtf_layer *l)
{
	l->use_bias = 1;
	l->trainable = 1;
	l->dilation_h = l->dilation_w = 1;
	l->depth_multiplier = 1;
	l->axis = -1;
	l->center = l->scale = 1;
	l->init.kind = DTF_INIT_KIND_GLOROT_UNIFORM;
	l->init.stddev = 0.05f;
}

/* The node a layer's name came from: its `name` value, else the item. */
static const yaml_node_t *layer_name_node(struct ctx *c, const yaml_node_t *item)
{
	if (item->type == YAML_MAPPING_NODE &&
	    item->data.mapping.pairs.top > item->data.mapping.pairs.start) {
		const yaml_node_t *attrs = yaml_document_get_node(
			&c->t->doc, item->data.mapping.pairs.start[0].value);
		const yaml_node_t *n = dtf_ytree_get(c->t, attrs, "name");
		if (n)
			return n;
	}
	return item;
}

static int read_layers(struct ctx *c, void *base, const yaml_node_t *key,
		       const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	char buf[80], ipath[PATH_MAX_], apath[PATH_MAX_];
	int count[DTF_LAYER_COUNT_] = {0};

	if (val->type != YAML_SEQUENCE_NODE ||
	    val->data.sequence.items.top == val->data.sequence.items.start)
		return fail(c, val, path, "expected a non-empty list of layers, "
			    "got %s", describe_empty(val, buf, sizeof(buf)));
	int n = (int)(val->data.sequence.items.top -
		      val->data.sequence.items.start);
	job->model.layers = dtf_calloc((size_t)n, sizeof(*job->model.layers));
	if (!job->model.layers)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	job->model.nlayers = n;
	for (int i = 0; i < n; i++) {
		const yaml_node_t *item = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		const yaml_node_t *kind, *attrs;
		const struct choice *ch;
		struct dtf_layer *l = &job->model.layers[i];

		path_fmt(ipath, "%s[%d]", path, i);
		int rc = read_choice(c, item, ipath, "layer kind", layer_kinds,
				     NFIELDS(layer_kinds), &ch, &kind, &attrs);
		if (rc)
			return rc;
		l->kind = (enum dtf_layer_kind)ch->value;
		dtf_ytree_where(c->t, item, l->where, sizeof(l->where));
		layer_defaults(l);
		apply_defaults(ch->attrs, l);
		join_path(apath, ipath, ch->name);
		rc = read_section(c, ch->attrs, l, kind, attrs, apath);
		if (rc)
			return rc;
		/* Keras numbering: the n-th layer of a kind is <kind>_<n>,
		 * whether or not the others are named */
		count[l->kind]++;
		if (!l->name[0])
			snprintf(l->name, sizeof(l->name), "%s_%d", ch->name,
				 count[l->kind]);
	}
	for (int i = 1; i < n; i++) {
		for (int j = 0; j < i; j++) {
			if (strcmp(job->model.layers[i].name,
				   job->model.layers[j].name))
				continue;
			path_fmt(ipath, "%s[%d]", path, i);
			const yaml_node_t *item = yaml_document_get_node(
				&c->t->doc, val->data.sequence.items.start[i]);
			return fail(c, layer_name_node(c, item), ipath,
				    "duplicate layer name '%s' (also layer %d "
				    "at %s)",
				    job->model.layers[i].name, j,
				    job->model.layers[j].where);
		}
	}
	return 0;
}

/* model.graph: {name: {op: {inputs: [...], attrs}}, ...} in any order. */
static int read_graph(struct ctx *c, void *base, const yaml_node_t *key,
		      const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;

	char npath[PATH_MAX_], apath[PATH_MAX_];
	void *arr;
	int n = 0;
	int rc_ = mapping_array(c, val, path,
				"a mapping of node names to {op: {inputs: [...], ...}}",
				sizeof(*job->model.nodes), &arr, &n);
	if (rc_ < 0)
		return rc_;
	job->model.nodes = arr;
	job->model.nnodes = n;
	for (int i = 0; i < n; i++) {
		const yaml_node_t *k, *v;
		mapping_pair(c, val, i, &k, &v);
		struct dtf_layer *l = &job->model.nodes[i];
		const yaml_node_t *kind, *attrs;
		const struct choice *ch;
		const char *name;
		int rc = read_str(c, k, path, DTF_NAME_MAX, &name);
		if (rc)
			return rc;
		join_path(npath, path, name);
		for (int j = 0; j < i; j++)
			if (!strcmp(job->model.nodes[j].name, name))
				return fail(c, k, npath,
					    "duplicate node name '%s' (also "
					    "at %s)",
					    name, job->model.nodes[j].where);
		snprintf(l->name, sizeof(l->name), "%s", name);
		dtf_ytree_where(c->t, k, l->where, sizeof(l->where));
		l->op_form = 1;
		rc = read_choice(c, v, npath, "op", op_kinds, NFIELDS(op_kinds),
				 &ch, &kind, &attrs);
		if (rc)
			return rc;
		l->kind = (enum dtf_layer_kind)ch->value;
		layer_defaults(l);
		apply_defaults(ch->attrs, l);
		join_path(apath, npath, ch->name);
		rc = read_section(c, ch->attrs, l, kind, attrs, apath);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- model.loss, model.metrics ------------------------------------------- */

#define JOB(m) offsetof(struct dtf_job, m)

static const struct field xent_fields[] = {
	{.key = "logits", .type = T_STR, .flags = F_REQUIRED,
	 .off = JOB(model.loss_logits), .size = DTF_NAME_MAX,
	 .slot = SLOT_LOGITS},
	{.key = "labels", .type = T_STR, .flags = F_REQUIRED,
	 .off = JOB(model.loss_labels), .size = DTF_NAME_MAX,
	 .slot = SLOT_LABELS},
};

static const struct field dense_xent_fields[] = {
	{.key = "logits", .type = T_STR, .flags = F_REQUIRED,
	 .off = JOB(model.loss_logits), .size = DTF_NAME_MAX,
	 .slot = SLOT_LOGITS},
	{.key = "labels", .type = T_STR, .flags = F_REQUIRED,
	 .off = JOB(model.loss_labels), .size = DTF_NAME_MAX,
	 .slot = SLOT_LABELS},
	{.key = "label_smoothing", .type = T_FLOAT, .flags = F_NONNEG,
	 .off = JOB(model.label_smoothing), .def = 0},
};

static const struct field mse_fields[] = {
	{.key = "predictions", .type = T_STR, .flags = F_REQUIRED,
	 .off = JOB(model.loss_logits), .size = DTF_NAME_MAX,
	 .slot = SLOT_LOGITS},
	{.key = "labels", .type = T_STR, .flags = F_REQUIRED,
	 .off = JOB(model.loss_labels), .size = DTF_NAME_MAX,
	 .slot = SLOT_LABELS},
};

static int check_smoothing(struct ctx *c, void *base, const yaml_node_t *key,
			   const yaml_node_t *map, const char *path)
{
	struct dtf_job *job = base;
	if (job->model.label_smoothing > 1)
		return fail(c, dtf_ytree_get(c->t, map, "label_smoothing"),
			    path, "label_smoothing must be in [0, 1], got %g",
			    (double)job->model.label_smoothing);
	return 0;
}

static const struct section xent_section = {
	xent_fields, NFIELDS(xent_fields), -1, NULL};
static const struct section dense_xent_section = {
	dense_xent_fields, NFIELDS(dense_xent_fields), -1, check_smoothing};
static const struct section sigmoid_xent_section = {
	xent_fields, NFIELDS(xent_fields), -1, NULL};
static const struct section mse_section = {
	mse_fields, NFIELDS(mse_fields), -1, NULL};

static const struct choice losses[] = {
	{"sparse_softmax_cross_entropy", DTF_LOSS_SPARSE_SOFTMAX_XENT,
	 &xent_section},
	{"softmax_cross_entropy", DTF_LOSS_SOFTMAX_XENT, &dense_xent_section},
	{"sigmoid_cross_entropy", DTF_LOSS_SIGMOID_XENT, &sigmoid_xent_section},
	{"mean_squared_error", DTF_LOSS_MSE, &mse_section},
};

static int read_loss(struct ctx *c, void *base, const yaml_node_t *key,
		     const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	const yaml_node_t *kind, *attrs;
	const struct choice *ch;
	char sub[PATH_MAX_];

	int rc = read_choice(c, val, path, "loss", losses, NFIELDS(losses),
			     &ch, &kind, &attrs);
	if (rc)
		return rc;
	job->model.loss = (enum dtf_loss_kind)ch->value;
	dtf_ytree_where(c->t, dtf_ytree_blame(c->t, key, val),
			job->model.loss_where,
			sizeof(job->model.loss_where));
	join_path(sub, path, ch->name);
	return read_section(c, ch->attrs, job, kind, attrs, sub);
}

static const struct field top_k_fields[] = {
	{.key = "k", .type = T_INT, .flags = F_POS, .off = JOB(model.metric_top_k),
	 .def = 5},
};

static const struct section top_k_section = {
	top_k_fields, NFIELDS(top_k_fields), -1, NULL};

static const struct choice metrics[] = {
	{"accuracy", 0, NULL},
	{"top_k_accuracy", 1, &top_k_section},
};

static int read_metrics(struct ctx *c, void *base, const yaml_node_t *key,
			const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	char buf[80], ipath[PATH_MAX_];

	if (val->type != YAML_SEQUENCE_NODE)
		return fail(c, val, path, "expected a list of metric names, "
			    "got %s", describe(val, buf, sizeof(buf)));
	long n = val->data.sequence.items.top - val->data.sequence.items.start;
	for (long i = 0; i < n; i++) {
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		const yaml_node_t *kind = NULL, *attrs = NULL;
		const struct choice *ch;
		path_fmt(ipath, "%s[%ld]", path, i);
		int rc = read_choice(c, it, ipath, "metric", metrics,
				     NFIELDS(metrics), &ch, &kind, &attrs);
		if (rc)
			return rc;
		if (ch->value == 0) {
			job->model.metric_accuracy = 1;
			continue;
		}
		char sub[PATH_MAX_];
		join_path(sub, ipath, ch->name);
		apply_defaults(ch->attrs, job);
		if ((rc = read_section(c, ch->attrs, job, kind, attrs, sub)))
			return rc;
	}
	return 0;
}

/* ---- train.optimizer ------------------------------------------------------- */

static const struct field sgd_fields[] = {
	{.key = "learning_rate", .type = T_DOUBLE, .flags = F_POS,
	 .off = JOB(train.learning_rate), .def = 0.01},
	{.key = "momentum", .type = T_DOUBLE, .flags = F_NONNEG,
	 .off = JOB(train.momentum), .def = 0.0},
	{.key = "nesterov", .type = T_BOOL, .off = JOB(train.nesterov),
	 .def = 0},
};

static const struct field adam_fields[] = {
	{.key = "learning_rate", .type = T_DOUBLE, .flags = F_POS,
	 .off = JOB(train.learning_rate), .def = 0.001},
	{.key = "beta_1", .type = T_DOUBLE, .flags = F_UNIT,
	 .off = JOB(train.beta_1), .def = 0.9},
	{.key = "beta_2", .type = T_DOUBLE, .flags = F_UNIT,
	 .off = JOB(train.beta_2), .def = 0.999},
	{.key = "epsilon", .type = T_DOUBLE, .flags = F_POS,
	 .off = JOB(train.epsilon), .def = 1e-7},
};

static const struct field adamw_fields[] = {
	{.key = "learning_rate", .type = T_DOUBLE, .flags = F_POS,
	 .off = JOB(train.learning_rate), .def = 0.001},
	{.key = "weight_decay", .type = T_DOUBLE, .flags = F_NONNEG,
	 .off = JOB(train.decoupled_decay), .def = 0.004},
	{.key = "beta_1", .type = T_DOUBLE, .flags = F_UNIT,
	 .off = JOB(train.beta_1), .def = 0.9},
	{.key = "beta_2", .type = T_DOUBLE, .flags = F_UNIT,
	 .off = JOB(train.beta_2), .def = 0.999},
	{.key = "epsilon", .type = T_DOUBLE, .flags = F_POS,
	 .off = JOB(train.epsilon), .def = 1e-7},
};

static const struct field rmsprop_fields[] = {
	{.key = "learning_rate", .type = T_DOUBLE, .flags = F_POS,
	 .off = JOB(train.learning_rate), .def = 0.001},
	{.key = "rho", .type = T_DOUBLE, .flags = F_UNIT,
	 .off = JOB(train.rho), .def = 0.9},
	{.key = "momentum", .type = T_DOUBLE, .flags = F_UNIT,
	 .off = JOB(train.momentum), .def = 0.0},
	{.key = "epsilon", .type = T_DOUBLE, .flags = F_POS,
	 .off = JOB(train.epsilon), .def = 1e-7},
	{.key = "centered", .type = T_BOOL, .off = JOB(train.centered),
	 .def = 0},
};

static const struct section sgd_section = {
	sgd_fields, NFIELDS(sgd_fields), -1, NULL};
static const struct section adam_section = {
	adam_fields, NFIELDS(adam_fields), -1, NULL};
static const struct section adamw_section = {
	adamw_fields, NFIELDS(adamw_fields), -1, NULL};
static const struct section rmsprop_section = {
	rmsprop_fields, NFIELDS(rmsprop_fields), -1, NULL};

static const struct choice optimizers[] = {
	{"sgd", DTF_OPT_SGD, &sgd_section},
	{"adam", DTF_OPT_ADAM, &adam_section},
	{"adamw", DTF_OPT_ADAMW, &adamw_section},
	{"rmsprop", DTF_OPT_RMSPROP, &rmsprop_section},
};

static int read_optimizer(struct ctx *c, void *base, const yaml_node_t *key,
			  const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	const yaml_node_t *kind, *attrs;
	const struct choice *ch;
	char sub[PATH_MAX_];

	int rc = read_choice(c, val, path, "optimizer", optimizers,
			     NFIELDS(optimizers), &ch, &kind, &attrs);
	if (rc)
		return rc;
	job->train.optimizer = (enum dtf_optimizer_kind)ch->value;
	/* each optimizer's own defaults (e.g. adam's learning rate) over
	 * those of another */
	job->train.momentum = 0;
	job->train.epsilon = 1e-7;
	apply_defaults(ch->attrs, job);
	join_path(sub, path, ch->name);
	return read_section(c, ch->attrs, job, kind, attrs, sub);
}

/* ---- train.schedule, train.weight_decay ------------------------------------ */

#define SCHED(m) JOB(train.schedule.m)

static int read_i64_list(struct ctx *c, const yaml_node_t *val,
			 const char *path, int max, int64_t *out, int *n)
{
	char buf[80], ipath[PATH_MAX_];
	long len = val->type == YAML_SEQUENCE_NODE
			   ? val->data.sequence.items.top -
				     val->data.sequence.items.start
			   : -1;
	if (len < 1 || len > max)
		return fail(c, val, path,
			    "expected a list of 1 to %d integers, got %s", max,
			    describe(val, buf, sizeof(buf)));
	for (long i = 0; i < len; i++) {
		path_fmt(ipath, "%s[%ld]", path, i);
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		int rc = read_int(c, it, ipath, F_POS, 1, INT64_MAX, &out[i]);
		if (rc)
			return rc;
		if (i && out[i] <= out[i - 1])
			return fail(c, it, ipath,
				    "boundaries must increase, got %lld after "
				    "%lld",
				    (long long)out[i], (long long)out[i - 1]);
	}
	*n = (int)len;
	return 0;
}

static int read_boundaries(struct ctx *c, void *base, const yaml_node_t *key,
			   const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	return read_i64_list(c, val, path, DTF_SCHED_MAX_PIECES,
			     job->train.schedule.boundaries,
			     &job->train.schedule.nboundaries);
}

static int read_sched_values(struct ctx *c, void *base,
			     const yaml_node_t *key, const yaml_node_t *val,
			     const char *path)
{
	struct dtf_job *job = base;
	struct dtf_schedule_spec *s = &job->train.schedule;
	char buf[80], ipath[PATH_MAX_];
	long len = val->type == YAML_SEQUENCE_NODE
			   ? val->data.sequence.items.top -
				     val->data.sequence.items.start
			   : -1;
	if (len < 2 || len > DTF_SCHED_MAX_PIECES + 1)
		return fail(c, val, path,
			    "expected a list of 2 to %d learning rates, got %s",
			    DTF_SCHED_MAX_PIECES + 1,
			    describe(val, buf, sizeof(buf)));
	for (long i = 0; i < len; i++) {
		path_fmt(ipath, "%s[%ld]", path, i);
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		int rc = read_num(c, it, ipath, F_NONNEG, 0, &s->values[i]);
		if (rc)
			return rc;
	}
	/* the count is checked against the boundaries afterwards */
	s->values[DTF_SCHED_MAX_PIECES] = (double)len;
	return 0;
}

#define WARMUP_FIELD                                                   	{.key = "warmup_steps", .type = T_I64, .flags = F_NONNEG,      	 .off = SCHED(warmup_steps), .def = 0}

static const struct field sched_constant_fields[] = {WARMUP_FIELD};
static const struct field sched_piecewise_fields[] = {
	{.key = "boundaries", .type = T_CUSTOM, .flags = F_REQUIRED,
	 .read = read_boundaries},
	{.key = "values", .type = T_CUSTOM, .flags = F_REQUIRED,
	 .read = read_sched_values},
	WARMUP_FIELD,
};
static const struct field sched_exponential_fields[] = {
	{.key = "decay_steps", .type = T_I64, .flags = F_REQUIRED | F_POS,
	 .off = SCHED(decay_steps)},
	{.key = "decay_rate", .type = T_DOUBLE, .flags = F_REQUIRED | F_POS,
	 .off = SCHED(decay_rate)},
	{.key = "staircase", .type = T_BOOL, .off = SCHED(staircase),
	 .def = 0},
	WARMUP_FIELD,
};
static const struct field sched_cosine_fields[] = {
	{.key = "decay_steps", .type = T_I64, .flags = F_NONNEG,
	 .off = SCHED(decay_steps), .def = 0},
	{.key = "alpha", .type = T_DOUBLE, .flags = F_NONNEG,
	 .off = SCHED(alpha), .def = 0},
	WARMUP_FIELD,
};

static int check_piecewise(struct ctx *c, void *base, const yaml_node_t *key,
			   const yaml_node_t *map, const char *path)
{
	struct dtf_schedule_spec *s = &((struct dtf_job *)base)->train.schedule;
	int nvalues = (int)s->values[DTF_SCHED_MAX_PIECES];
	s->values[DTF_SCHED_MAX_PIECES] = 0;
	if (nvalues != s->nboundaries + 1)
		return fail(c, dtf_ytree_get(c->t, map, "values"), path,
			    "%d values for %d boundaries (give one more value "
			    "than boundaries)",
			    nvalues, s->nboundaries);
	return 0;
}

static const struct section sched_constant_section = {
	sched_constant_fields, NFIELDS(sched_constant_fields), -1, NULL};
static const struct section sched_piecewise_section = {
	sched_piecewise_fields, NFIELDS(sched_piecewise_fields), -1,
	check_piecewise};
static const struct section sched_exponential_section = {
	sched_exponential_fields, NFIELDS(sched_exponential_fields), -1, NULL};
static const struct section sched_cosine_section = {
	sched_cosine_fields, NFIELDS(sched_cosine_fields), -1, NULL};

static const struct choice schedules[] = {
	{"constant", DTF_SCHED_CONSTANT, &sched_constant_section},
	{"piecewise_constant", DTF_SCHED_PIECEWISE_CONSTANT,
	 &sched_piecewise_section},
	{"exponential_decay", DTF_SCHED_EXPONENTIAL_DECAY,
	 &sched_exponential_section},
	{"cosine_decay", DTF_SCHED_COSINE_DECAY, &sched_cosine_section},
};

static int read_schedule(struct ctx *c, void *base, const yaml_node_t *key,
			 const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	const yaml_node_t *kind, *attrs;
	const struct choice *ch;
	char sub[PATH_MAX_];

	int rc = read_choice(c, val, path, "schedule", schedules,
			     NFIELDS(schedules), &ch, &kind, &attrs);
	if (rc)
		return rc;
	memset(&job->train.schedule, 0, sizeof(job->train.schedule));
	job->train.schedule.kind = (enum dtf_schedule_kind)ch->value;
	apply_defaults(ch->attrs, job);
	join_path(sub, path, ch->name);
	return read_section(c, ch->attrs, job, kind, attrs, sub);
}

static int read_decay_groups(struct ctx *c, void *base, const yaml_node_t *key,
			     const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	char buf[80], ipath[PATH_MAX_];
	static const struct enum_name names[] = {
		{"kernel", DTF_GROUP_KERNEL},
		{"bias", DTF_GROUP_BIAS},
		{"norm", DTF_GROUP_NORM},
		{NULL, 0},
	};
	if (val->type != YAML_SEQUENCE_NODE)
		return fail(c, val, path, "expected a list of groups (kernel, "
			    "bias, norm), got %s",
			    describe(val, buf, sizeof(buf)));
	long n = val->data.sequence.items.top - val->data.sequence.items.start;
	job->train.decay_groups = 0;
	for (long i = 0; i < n; i++) {
		int g;
		path_fmt(ipath, "%s[%ld]", path, i);
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		int rc = read_enum(c, it, ipath, names, &g);
		if (rc)
			return rc;
		job->train.decay_groups |= 1 << g;
	}
	return 0;
}

static const struct field weight_decay_fields[] = {
	{.key = "rate", .type = T_DOUBLE, .flags = F_NONNEG,
	 .off = JOB(train.weight_decay), .def = 0},
	{.key = "groups", .type = T_CUSTOM, .read = read_decay_groups},
};

static const struct section weight_decay_section = {
	weight_decay_fields, NFIELDS(weight_decay_fields), -1, NULL};

/* weight_decay: 1e-4, or {rate: 1e-4, groups: [kernel, norm]} */
static int read_weight_decay(struct ctx *c, void *base, const yaml_node_t *key,
			     const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	if (val->type == YAML_SCALAR_NODE)
		return read_num(c, val, path, F_NONNEG, 0,
				&job->train.weight_decay);
	return read_section(c, &weight_decay_section, job, key, val, path);
}

/* ---- top level -------------------------------------------------------------- */

static int check_train(struct ctx *c, void *base, const yaml_node_t *key,
		       const yaml_node_t *map, const char *path)
{
	struct dtf_job *job = base;
	int have_global = job->train.batch_size > 0;
	int have_replica = job->train.per_replica_batch_size > 0;
	if (have_global && have_replica)
		return fail(c, dtf_ytree_get(c->t, map,
					     "per_replica_batch_size"),
			    path,
			    "give batch_size (global) or "
			    "per_replica_batch_size, not both");
	if (!have_global && !have_replica)
		return fail(c, key, path,
			    "missing required key 'batch_size' (or "
			    "'per_replica_batch_size')");
	const yaml_node_t *b = dtf_ytree_get(
		c->t, map, have_replica ? "per_replica_batch_size" : "batch_size");
	if (job->train.per_replica_batch_size > DTF_BATCH_MAX) {
		char sub[PATH_MAX_];
		join_path(sub, path, "per_replica_batch_size");
		return fail(c, b, sub, "%lld is more than %d",
			    (long long)job->train.per_replica_batch_size,
			    DTF_BATCH_MAX);
	}
	/* the batch errors found later (they need the number of ranks)
	 * point at the batch size given */
	if (b)
		dtf_ytree_where(c->t, b, job->train.where,
				sizeof(job->train.where));
	return 0;
}

static const struct field augment_fields[] = {
	{.key = "feature", .type = T_STR, .flags = F_REQUIRED,
	 .off = JOB(data.augment.feature), .size = DTF_NAME_MAX},
	{.key = "crop_padding", .type = T_INT, .flags = F_NONNEG,
	 .off = JOB(data.augment.crop_padding), .def = 0},
	{.key = "flip_left_right", .type = T_BOOL,
	 .off = JOB(data.augment.flip_left_right), .def = 0},
};

static const struct section augment_section = {
	augment_fields, NFIELDS(augment_fields), -1, NULL};

static const struct enum_name compressions[] = {
	{"none", DTF_COMPRESSION_NONE},
	{"gzip", DTF_COMPRESSION_GZIP},
	{"zlib", DTF_COMPRESSION_ZLIB},
	{NULL, 0},
};

static const struct field data_train_fields[] = {
	{.key = "files", .type = T_STRDUP, .flags = F_REQUIRED,
	 .off = JOB(data.train_files)},
	{.key = "shuffle_buffer", .type = T_I64, .flags = F_NONNEG,
	 .off = JOB(data.shuffle_buffer), .def = 0},
	{.key = "drop_remainder", .type = T_BOOL,
	 .off = JOB(data.drop_remainder), .def = 1},
	{.key = "augment", .type = T_SECTION, .sub = &augment_section},
	/* -1: data.compression's (check_data) */
	{.key = "compression", .type = T_ENUM, .off = JOB(data.train_compression),
	 .def = -1, .names = compressions},
};

static const struct field data_eval_fields[] = {
	{.key = "files", .type = T_STRDUP, .flags = F_REQUIRED,
	 .off = JOB(data.eval_files)},
	{.key = "compression", .type = T_ENUM, .off = JOB(data.eval_compression),
	 .def = -1, .names = compressions},
};

static int check_data_train(struct ctx *c, void *base, const yaml_node_t *key,
			    const yaml_node_t *map, const char *path)
{
	struct dtf_job *job = base;
	char sub[PATH_MAX_];
	if (!job->data.drop_remainder) {
		join_path(sub, path, "drop_remainder");
		return fail(c, dtf_ytree_get(c->t, map, "drop_remainder"), sub,
			    "training needs full batches: only true is "
			    "supported (the last short batch of each epoch "
			    "is dropped); eval batches are never dropped");
	}
	return 0;
}

static const struct section data_train_section = {
	data_train_fields, NFIELDS(data_train_fields), -1, check_data_train};
static const struct section data_eval_section = {
	data_eval_fields, NFIELDS(data_eval_fields), -1, NULL};

static const struct enum_name shard_policies[] = {
	{"auto", DTF_SHARD_AUTO},
	{"file", DTF_SHARD_FILE},
	{"data", DTF_SHARD_DATA},
	{"off", DTF_SHARD_OFF},
	{NULL, 0},
};

static const struct enum_name on_errors[] = {
	{"fail", DTF_ON_ERROR_FAIL},
	{"skip", DTF_ON_ERROR_SKIP},
	{NULL, 0},
};

static const struct field data_fields[] = {
	{.key = "train", .type = T_SECTION, .flags = F_REQUIRED,
	 .sub = &data_train_section},
	{.key = "shard_policy", .type = T_ENUM, .off = JOB(data.read.shard_policy),
	 .def = DTF_SHARD_AUTO, .names = shard_policies},
	{.key = "cycle_length", .type = T_INT, .flags = F_POS,
	 .off = JOB(data.read.cycle_length), .def = 1},
	{.key = "block_length", .type = T_INT, .flags = F_POS,
	 .off = JOB(data.read.block_length), .def = 1},
	{.key = "compression", .type = T_ENUM, .off = JOB(data.read.compression),
	 .def = DTF_COMPRESSION_NONE, .names = compressions},
	{.key = "on_error", .type = T_ENUM, .off = JOB(data.read.on_error),
	 .def = DTF_ON_ERROR_FAIL, .names = on_errors},
	{.key = "prefetch", .type = T_INT, .flags = F_NONNEG,
	 .off = JOB(data.read.prefetch), .def = 2},
	{.key = "eval", .type = T_SECTION, .sub = &data_eval_section},
	{.key = "features", .type = T_CUSTOM, .flags = F_REQUIRED,
	 .read = read_features},
};

static const struct field model_fields[] = {
	{.key = "input", .type = T_STR, .off = JOB(model.input),
	 .size = DTF_NAME_MAX, .slot = SLOT_INPUT},
	{.key = "layers", .type = T_CUSTOM, .read = read_layers,
	 .slot = SLOT_LAYERS},
	{.key = "graph", .type = T_CUSTOM, .read = read_graph,
	 .slot = SLOT_GRAPH},
	{.key = "loss", .type = T_CUSTOM, .flags = F_REQUIRED,
	 .read = read_loss},
	{.key = "metrics", .type = T_CUSTOM, .read = read_metrics},
};

/* learning_rate_scaling: none | linear | {linear: {warmup_steps: N}} */
static const struct field linear_scaling_fields[] = {
	{.key = "warmup_steps", .type = T_I64, .flags = F_NONNEG,
	 .off = JOB(train.lr_warmup_steps), .def = 0},
};

static const struct section linear_scaling_section = {
	linear_scaling_fields, NFIELDS(linear_scaling_fields), -1, NULL};

static const struct choice lr_scalings[] = {
	{"none", DTF_LR_SCALING_NONE, NULL},
	{"linear", DTF_LR_SCALING_LINEAR, &linear_scaling_section},
};

static int read_lr_scaling(struct ctx *c, void *base, const yaml_node_t *key,
			   const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	const yaml_node_t *kind, *attrs;
	const struct choice *ch;
	char sub[PATH_MAX_];

	int rc = read_choice(c, val, path, "learning rate scaling",
			     lr_scalings, NFIELDS(lr_scalings), &ch, &kind,
			     &attrs);
	if (rc)
		return rc;
	job->train.lr_scaling = ch->value;
	if (!ch->attrs) {
		if (attrs && !dtf_ytree_is_null(attrs))
			return fail(c, attrs, path, "'%s' takes no settings",
				    ch->name);
		return 0;
	}
	join_path(sub, path, ch->name);
	return read_section(c, ch->attrs, job, kind, attrs, sub);
}

static const struct enum_name nonfinite_actions[] = {
	{"fail", DTF_NONFINITE_FAIL},
	{"skip", DTF_NONFINITE_SKIP},
	{NULL, 0},
};

static const struct field train_fields[] = {
	{.key = "batch_size", .type = T_I64, .flags = F_POS,
	 .off = JOB(train.batch_size), .def = 0},
	{.key = "per_replica_batch_size", .type = T_I64, .flags = F_POS,
	 .off = JOB(train.per_replica_batch_size), .def = 0},
	{.key = "epochs", .type = T_INT, .flags = F_POS,
	 .off = JOB(train.epochs), .def = 1},
	{.key = "max_steps", .type = T_I64, .flags = F_NONNEG,
	 .off = JOB(train.max_steps), .def = 0},
	{.key = "optimizer", .type = T_CUSTOM, .read = read_optimizer},
	{.key = "schedule", .type = T_CUSTOM, .read = read_schedule},
	{.key = "weight_decay", .type = T_CUSTOM, .read = read_weight_decay},
	{.key = "clipnorm", .type = T_DOUBLE, .flags = F_NONNEG,
	 .off = JOB(train.clipnorm), .def = 0},
	{.key = "eval_batch_size", .type = T_I64, .flags = F_NONNEG,
	 .off = JOB(train.eval_batch_size), .def = 0},
	{.key = "eval_every_steps", .type = T_I64, .flags = F_NONNEG,
	 .off = JOB(train.eval_every_steps), .def = 0},
	{.key = "stop_at_accuracy", .type = T_DOUBLE, .flags = F_UNIT,
	 .off = JOB(train.stop_at_accuracy), .def = 0},
	{.key = "accumulate_steps", .type = T_INT, .flags = F_POS,
	 .off = JOB(train.accumulate_steps), .def = 1},
	{.key = "learning_rate_scaling", .type = T_CUSTOM,
	 .read = read_lr_scaling},
	{.key = "on_nonfinite", .type = T_ENUM, .off = JOB(train.on_nonfinite),
	 .def = DTF_NONFINITE_FAIL, .names = nonfinite_actions},
};

static const struct enum_name strategies[] = {
	{"one_device", DTF_STRATEGY_ONE_DEVICE},
	{"mirrored", DTF_STRATEGY_MIRRORED},
	{"multi_worker_mirrored", DTF_STRATEGY_MULTI_WORKER_MIRRORED},
	{"central_storage", DTF_STRATEGY_CENTRAL_STORAGE},
	{"parameter_server", DTF_STRATEGY_PARAMETER_SERVER},
	{NULL, 0},
};

static const struct enum_name grad_compressions[] = {
	{"none", DTF_GRAD_COMPRESSION_NONE},
	{"fp16", DTF_GRAD_COMPRESSION_FP16},
	{"bf16", DTF_GRAD_COMPRESSION_BF16},
	{NULL, 0},
};

static const struct enum_name comm_implementations[] = {
	{"auto", DTF_COMM_IMPL_AUTO},
	{"mpi", DTF_COMM_IMPL_MPI},
	{"shared_memory", DTF_COMM_IMPL_SHARED_MEMORY},
	{NULL, 0},
};

static const struct field communication_fields[] = {
	{.key = "bucket_mb", .type = T_DOUBLE, .flags = F_POS,
	 .off = JOB(strategy.bucket_mb), .def = 25},
	{.key = "compression", .type = T_ENUM, .off = JOB(strategy.compression),
	 .def = DTF_GRAD_COMPRESSION_NONE, .names = grad_compressions},
	{.key = "overlap", .type = T_BOOL, .off = JOB(strategy.overlap),
	 .def = 1},
	{.key = "hierarchical", .type = T_BOOL,
	 .off = JOB(strategy.hierarchical), .def = 0},
	{.key = "implementation", .type = T_ENUM,
	 .off = JOB(strategy.implementation), .def = DTF_COMM_IMPL_AUTO,
	 .names = comm_implementations},
};

static const struct section communication_section = {
	communication_fields, NFIELDS(communication_fields), -1, NULL};

static const struct field strategy_fields[] = {
	{.key = "type", .type = T_ENUM, .off = JOB(strategy.type),
	 .def = DTF_STRATEGY_MULTI_WORKER_MIRRORED, .names = strategies},
	{.key = "num_ps", .type = T_INT, .flags = F_POS,
	 .off = JOB(strategy.num_ps), .def = 1},
	{.key = "sync", .type = T_BOOL, .off = JOB(strategy.sync), .def = 1},
	{.key = "max_staleness", .type = T_INT, .flags = F_NONNEG,
	 .off = JOB(strategy.max_staleness), .def = 4},
	{.key = "communication", .type = T_SECTION,
	 .sub = &communication_section},
};

static const struct enum_name planners[] = {
	{"liveness", DTF_PLANNER_LIVENESS},
	{"naive", DTF_PLANNER_NAIVE},
	{NULL, 0},
};

static const struct field memory_fields[] = {
	{.key = "planner", .type = T_ENUM, .off = JOB(memory.planner),
	 .def = DTF_PLANNER_LIVENESS, .names = planners},
	{.key = "poison", .type = T_BOOL, .off = JOB(memory.poison), .def = 0},
};

/* logging.trace_steps: [from, to], 1-based steps, from <= to. */
static int read_trace_steps(struct ctx *c, void *base, const yaml_node_t *key,
			    const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	char buf[80], ipath[PATH_MAX_];
	int64_t v[2];
	if (val->type != YAML_SEQUENCE_NODE ||
	    val->data.sequence.items.top - val->data.sequence.items.start != 2)
		return fail(c, val, path,
			    "expected a list [from, to] of two step numbers, got %s",
			    describe(val, buf, sizeof(buf)));
	for (int i = 0; i < 2; i++) {
		path_fmt(ipath, "%s[%d]", path, i);
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		int rc = read_int(c, it, ipath, F_POS, 1, INT64_MAX, &v[i]);
		if (rc)
			return rc;
	}
	if (v[1] < v[0])
		return fail(c, val, path,
			    "the last step %lld comes before the first %lld",
			    (long long)v[1], (long long)v[0]);
	job->logging.trace_steps[0] = v[0];
	job->logging.trace_steps[1] = v[1];
	return 0;
}

static const struct enum_name devices[] = {
	{"auto", DTF_DEVICE_AUTO},
	{"cpu", DTF_DEVICE_CPU},
	{"cuda", DTF_DEVICE_CUDA},
	{NULL, 0},
};

static const struct enum_name precisions[] = {
	{"fp32", DTF_PRECISION_FP32},
	{"tf32", DTF_PRECISION_TF32},
	{NULL, 0},
};

static const struct field logging_fields[] = {
	{.key = "every_steps", .type = T_I64, .flags = F_POS,
	 .off = JOB(logging.every_steps), .def = 100},
	{.key = "dir", .type = T_STRDUP, .off = JOB(logging.dir)},
	{.key = "tensorboard", .type = T_BOOL, .off = JOB(logging.tensorboard),
	 .def = 1},
	{.key = "trace", .type = T_STRDUP, .off = JOB(logging.trace)},
	{.key = "trace_steps", .type = T_CUSTOM, .read = read_trace_steps},
};

static const struct enum_name resume_modes[] = {
	{"never", 0}, {"auto", 1}, {NULL, 0},
};

static const struct field checkpoint_fields[] = {
	{.key = "dir", .type = T_STRDUP, .off = JOB(checkpoint.dir)},
	{.key = "every_steps", .type = T_I64, .flags = F_NONNEG,
	 .off = JOB(checkpoint.every_steps), .def = 0},
	{.key = "every_seconds", .type = T_DOUBLE, .flags = F_NONNEG,
	 .off = JOB(checkpoint.every_seconds), .def = 0},
	{.key = "keep", .type = T_INT, .flags = F_POS,
	 .off = JOB(checkpoint.keep), .def = 5},
	{.key = "resume", .type = T_ENUM, .off = JOB(checkpoint.resume),
	 .def = 0, .names = resume_modes},
};

static const struct field fault_fields[] = {
	{.key = "timeout_seconds", .type = T_DOUBLE, .flags = F_NONNEG,
	 .off = JOB(fault.timeout_seconds), .def = 300},
};

static const struct section checkpoint_section = {
	checkpoint_fields, NFIELDS(checkpoint_fields), -1, NULL};
static const struct section fault_section = {
	fault_fields, NFIELDS(fault_fields), -1, NULL};

/* data.train.compression and data.eval.compression default to
 * data.compression, whichever order the keys come in. */
static int check_data(struct ctx *c, void *base, const yaml_node_t *key,
		      const yaml_node_t *map, const char *path)
{
	struct dtf_job *job = base;
	if (job->data.train_compression < 0)
		job->data.train_compression = (int)job->data.read.compression;
	if (job->data.eval_compression < 0)
		job->data.eval_compression = (int)job->data.read.compression;
	return 0;
}

static const struct section data_section = {
	data_fields, NFIELDS(data_fields), -1, check_data};
static const struct section model_section = {
	model_fields, NFIELDS(model_fields), -1, NULL};
static const struct section train_section = {
	train_fields, NFIELDS(train_fields), (long)JOB(train.where),
	check_train};
/* strategy.communication.implementation shared_memory where the job alone
 * rules it out (distribute/strategy.c checks the rest, which depends on the
 * ranks: several nodes, device cuda, and names the position kept in
 * implementation_where): a job error at the key, caught by --dry-run as
 * well. */
static int check_strategy(struct ctx *c, void *base, const yaml_node_t *key,
			  const yaml_node_t *map, const char *path)
{
	struct dtf_job *job = base;
	const yaml_node_t *comm = map ? dtf_ytree_get(c->t, map, "communication") : NULL;
	const yaml_node_t *n = comm ? dtf_ytree_get(c->t, comm, "implementation") : NULL;
	const yaml_node_t *type = map ? dtf_ytree_get(c->t, map, "type") : NULL;
	if (n)
		dtf_ytree_where(c->t, n, job->strategy.implementation_where,
				sizeof(job->strategy.implementation_where));
	if (type)
		dtf_ytree_where(c->t, type, job->strategy.type_where,
				sizeof(job->strategy.type_where));
	const yaml_node_t *h = comm ? dtf_ytree_get(c->t, comm, "hierarchical") : NULL;
	if (job->strategy.hierarchical &&
	    job->strategy.type != DTF_STRATEGY_MULTI_WORKER_MIRRORED) {
		char sub[PATH_MAX_];
		path_fmt(sub, "%s.communication.hierarchical", path);
		return fail(c, h ? h : key, sub,
			    "applies to multi_worker_mirrored only, not %s\n"
			    "HINT: set strategy.type: multi_worker_mirrored, or remove hierarchical",
			    dtf_strategy_name(job->strategy.type));
	}
	if (job->strategy.implementation != DTF_COMM_IMPL_SHARED_MEMORY || !map)
		return 0;
	const char *why = NULL;
	if (job->strategy.type == DTF_STRATEGY_CENTRAL_STORAGE)
		why = "central_storage";
	else if (job->strategy.type == DTF_STRATEGY_PARAMETER_SERVER)
		why = "parameter_server";
	else if (job->strategy.compression != DTF_GRAD_COMPRESSION_NONE)
		why = "compression";
	else if (job->strategy.hierarchical)
		why = "hierarchical";
	if (!why)
		return 0;
	char sub[PATH_MAX_];
	path_fmt(sub, "%s.communication.implementation", path);
	return fail(c, n ? n : key, sub,
		    "shared_memory reduces the gradients of mirrored or multi_worker_mirrored replicas on one node, on the CPU, without compression or hierarchical; not with %s\n"
		    "HINT: use implementation auto (shared memory where it applies, MPI elsewhere) or mpi",
		    why);
}

static const struct section strategy_section = {
	strategy_fields, NFIELDS(strategy_fields), -1, check_strategy};
static const struct section memory_section = {
	memory_fields, NFIELDS(memory_fields), -1, NULL};
static const struct section logging_section = {
	logging_fields, NFIELDS(logging_fields), -1, NULL};

static const struct field job_fields[] = {
	{.key = "name", .type = T_STR, .off = JOB(name),
	 .size = sizeof(((struct dtf_job *)0)->name)},
	{.key = "seed", .type = T_U64, .off = JOB(seed), .def = 42},
	{.key = "data", .type = T_SECTION, .flags = F_REQUIRED,
	 .sub = &data_section},
	{.key = "model", .type = T_SECTION, .flags = F_REQUIRED | F_SLOT_KEY,
	 .sub = &model_section, .slot = SLOT_MODEL},
	{.key = "train", .type = T_SECTION, .flags = F_REQUIRED,
	 .sub = &train_section},
	{.key = "strategy", .type = T_SECTION, .sub = &strategy_section},
	{.key = "memory", .type = T_SECTION, .sub = &memory_section},
	{.key = "logging", .type = T_SECTION, .sub = &logging_section},
	{.key = "device", .type = T_ENUM, .off = JOB(device.kind),
	 .def = DTF_DEVICE_AUTO, .names = devices},
	{.key = "precision", .type = T_ENUM, .off = JOB(device.precision),
	 .def = DTF_PRECISION_FP32, .names = precisions},
	{.key = "allow_gpu_sharing", .type = T_BOOL,
	 .off = JOB(device.allow_gpu_sharing), .def = 0},
	{.key = "checkpoint", .type = T_SECTION, .sub = &checkpoint_section},
	{.key = "fault", .type = T_SECTION, .sub = &fault_section},
};

static const struct section job_section = {
	job_fields, NFIELDS(job_fields), -1, NULL};

/* ---- checks across sections ---------------------------------------------------- */

static const char *feature_name_at(const void *table, int i)
{
	return ((const struct dtf_feature_spec *)table)[i].name;
}

static const char *layer_name_at(const void *table, int i)
{
	return ((const struct dtf_layer *)table)[i].name;
}

static const struct dtf_feature_spec *find_feature(const struct dtf_job *job,
						   const char *name)
{
	for (int i = 0; i < job->data.nfeatures; i++)
		if (!strcmp(job->data.features[i].name, name))
			return &job->data.features[i];
	return NULL;
}

/* Layers (or graph nodes) [0, nl) and then the features, as one table
 * for suggestions. */
struct name_space {
	const struct dtf_layer *l;
	int nl;
	const struct dtf_feature_spec *f;
	int nf;
};

static const char *space_name_at(const void *table, int i)
{
	const struct name_space *ns = table;
	return i < ns->nl ? ns->l[i].name : ns->f[i - ns->nl].name;
}

/* Like fail() but at a position kept as text ("FILE:LINE:COL"). */
static int fail_at(const char *where, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail_at(const char *where, const char *path, const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return dtf_error(DTF_ERR_CONFIG, "%s: %s: %s", where, path, msg);
}

/* Every input of every layer / node names something that exists: for
 * layers an earlier layer or a feature, for graph nodes any node or a
 * feature (cycles are found when the graph is built). */
static int check_inputs(const struct dtf_job *job, const struct dtf_layer *ls,
			int n, int graph)
{
	char sug[96], path[PATH_MAX_];
	for (int i = 0; i < n; i++) {
		const struct dtf_layer *l = &ls[i];
		for (int k = 0; k < l->ninputs; k++) {
			const char *want = l->inputs[k];
			int found = find_feature(job, want) != NULL, later = 0;
			for (int j = 0; j < n && !found; j++) {
				if (strcmp(ls[j].name, want))
					continue;
				if (graph || j < i)
					found = 1;
				else
					later = j;
			}
			if (found)
				continue;
			if (graph)
				path_fmt(path, "model.graph.%s.%s.inputs[%d]",
					 l->name, dtf_layer_kind_name(l->kind),
					 k);
			else
				path_fmt(path, "model.layers[%d].%s.inputs[%d]",
					 i, dtf_layer_kind_name(l->kind), k);
			if (later || (!graph && !strcmp(want, l->name)))
				return fail_at(l->input_where[k], path,
					       "'%s' is not an earlier layer "
					       "(layers may only take inputs "
					       "from layers above them; use "
					       "model.graph for other orders)",
					       want);
			struct name_space ns = {ls, graph ? n : i,
						job->data.features,
						job->data.nfeatures};
			return fail_at(l->input_where[k], path,
				       "'%s' names no %s or feature%s", want,
				       graph ? "node" : "earlier layer",
				       suggest(want, &ns, ns.nl + ns.nf,
					       space_name_at, sug,
					       sizeof(sug)));
		}
	}
	return 0;
}

/* data.train.augment names a float image feature [H, W, C] that a crop
 * padding fits (the pipeline checks the same; here it has a position). */
static int check_augment(struct ctx *c)
{
	const struct dtf_augment_spec *a = &c->job->data.augment;
	if (!a->feature[0] || (!a->crop_padding && !a->flip_left_right))
		return 0;
	char sug[96];
	const struct dtf_feature_spec *f = find_feature(c->job, a->feature);
	if (!f)
		return fail(c, path_node(c, "data.train.augment.feature"),
			    "data.train.augment.feature",
			    "no feature named '%s' in data.features%s",
			    a->feature,
			    suggest(a->feature, c->job->data.features,
				    c->job->data.nfeatures, feature_name_at,
				    sug, sizeof(sug)));
	if (f->rank != 3 || f->dtype != DTF_FLOAT32)
		return fail(c, path_node(c, "data.train.augment.feature"),
			    "data.train.augment.feature",
			    "feature '%s' is not a float image of shape "
			    "[H, W, C]",
			    f->name);
	if (a->crop_padding > f->shape[0] || a->crop_padding > f->shape[1])
		return fail(c, path_node(c, "data.train.augment.crop_padding"),
			    "data.train.augment.crop_padding",
			    "%d is larger than the image '%s' (%lld x %lld)",
			    a->crop_padding, f->name, (long long)f->shape[0],
			    (long long)f->shape[1]);
	return 0;
}

static int check_job(struct ctx *c)
{
	const struct dtf_job *job = c->job;
	char sug[96];
	int rc;
	int graph = job->model.nnodes > 0;

	if (job->model.nlayers && graph)
		return fail(c, c->slot[SLOT_GRAPH], "model.graph",
			    "give model.layers or model.graph, not both");
	if (!job->model.nlayers && !graph)
		return fail(c, c->slot[SLOT_MODEL], "model",
			    "missing required key 'layers' (or 'graph')");
	if (!graph && !job->model.input[0])
		return fail(c, c->slot[SLOT_MODEL], "model",
			    "missing required key 'input' (the feature fed "
			    "to the first layer)");
	if (job->model.input[0] && !find_feature(job, job->model.input))
		return fail(c, c->slot[SLOT_INPUT], "model.input",
			    "no feature named '%s' in data.features%s",
			    job->model.input,
			    suggest(job->model.input, job->data.features,
				    job->data.nfeatures, feature_name_at, sug,
				    sizeof(sug)));
	const struct dtf_feature_spec *in = find_feature(job, job->model.input);
	if (in && in->dtype != DTF_FLOAT32)
		return fail(c, c->slot[SLOT_INPUT], "model.input",
			    "feature '%s' is int64; the model input must be a "
			    "float or bytes feature",
			    in->name);
	if ((rc = check_augment(c)) < 0)
		return rc;
	if (job->checkpoint.dir &&
	    job->strategy.type == DTF_STRATEGY_PARAMETER_SERVER)
		return fail(c, path_node(c, "checkpoint.dir"), "checkpoint.dir",
			    "checkpoints are not supported with strategy "
			    "parameter_server yet (the ps ranks hold the "
			    "variables and optimizer state)");
	const struct dtf_layer *ls = graph ? job->model.nodes
					   : job->model.layers;
	int n = graph ? job->model.nnodes : job->model.nlayers;
	for (int i = 0; i < n; i++)
		if (find_feature(job, ls[i].name))
			return fail_at(ls[i].where,
				       graph ? "model.graph" : "model.layers",
				       "the name '%s' is both a %s and a "
				       "feature in data.features",
				       ls[i].name, graph ? "node" : "layer");
	if ((rc = check_inputs(job, ls, n, graph)) < 0)
		return rc;
	char lpath[PATH_MAX_], ypath[PATH_MAX_];
	const char *lname = losses[job->model.loss].name;
	path_fmt(lpath, "model.loss.%s.%s", lname,
		 job->model.loss == DTF_LOSS_MSE ? "predictions" : "logits");
	path_fmt(ypath, "model.loss.%s.labels", lname);
	int found = 0;
	for (int i = 0; i < n; i++)
		found |= !strcmp(ls[i].name, job->model.loss_logits);
	if (!found)
		return fail(c, c->slot[SLOT_LOGITS], lpath,
			    "no %s named '%s'%s", graph ? "node" : "layer",
			    job->model.loss_logits,
			    suggest(job->model.loss_logits, ls, n,
				    layer_name_at, sug, sizeof(sug)));
	const struct dtf_feature_spec *lab =
		find_feature(job, job->model.loss_labels);
	if (!lab)
		return fail(c, c->slot[SLOT_LABELS], ypath,
			    "no feature named '%s' in data.features%s",
			    job->model.loss_labels,
			    suggest(job->model.loss_labels, job->data.features,
				    job->data.nfeatures, feature_name_at, sug,
				    sizeof(sug)));
	int sparse = job->model.loss == DTF_LOSS_SPARSE_SOFTMAX_XENT;
	if (sparse && lab->type != DTF_FEATURE_INT64)
		return fail(c, c->slot[SLOT_LABELS], ypath,
			    "feature '%s' is not an int64 feature (class "
			    "labels are)",
			    lab->name);
	if (!sparse && lab->type == DTF_FEATURE_INT64)
		return fail(c, c->slot[SLOT_LABELS], ypath,
			    "feature '%s' is int64; %s needs float labels "
			    "(one-hot or targets; use "
			    "sparse_softmax_cross_entropy for class ids)",
			    lab->name, lname);
	return 0;
}

/* ---- entry points -------------------------------------------------------------- */

/* Defaults not in a table: the name, and sgd's settings over adam's. */
static int job_defaults(struct dtf_job *job, const char *file)
{
	job->path = dtf_strdup(file);
	if (!job->path)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	apply_defaults(&job_section, job);
	apply_defaults(&adam_section, job);
	apply_defaults(&sgd_section, job);
	job->train.optimizer = DTF_OPT_SGD;
	job->train.rho = 0.9;
	job->train.decoupled_decay = 0.004;
	job->train.decay_groups = 1 << DTF_GROUP_KERNEL;

	const char *base = strrchr(file, '/');
	base = base ? base + 1 : file;
	size_t len = strlen(base);
	const char *dot = strrchr(base, '.');
	if (dot && dot != base)
		len = (size_t)(dot - base);
	if (len >= sizeof(job->name))
		len = sizeof(job->name) - 1;
	memcpy(job->name, base, len);
	job->name[len] = '\0';
	return 0;
}

static int load_text(const char *file, const char *text, size_t len,
		     const char *const *overrides, int noverrides,
		     struct dtf_job **out)
{
	struct dtf_ytree t;
	struct ctx c;
	struct dtf_job *job = NULL;
	int rc;

	*out = NULL;
	memset(&t, 0, sizeof(t));
	/* a bad command line is reported before a bad file */
	rc = dtf_ytree_check_overrides(overrides, noverrides);
	if (rc)
		return rc;
	rc = dtf_ytree_load(&t, file, text, len);
	if (rc)
		goto out_tree;
	rc = dtf_ytree_apply_overrides(&t, overrides, noverrides);
	if (rc)
		goto out_tree;

	job = dtf_calloc(1, sizeof(*job));
	if (!job) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out_tree;
	}
	rc = job_defaults(job, file);
	if (rc)
		goto out_job;
	memset(&c, 0, sizeof(c));
	c.t = &t;
	c.job = job;
	rc = read_section(&c, &job_section, job, NULL, dtf_ytree_root(&t), "");
	if (rc)
		goto out_job;
	rc = check_job(&c);
	if (rc)
		goto out_job;
	*out = job;
	job = NULL;
out_job:
	dtf_job_free(job);
out_tree:
	dtf_ytree_deinit(&t);
	return rc;
}

int dtf_job_load_string(const char *name, const char *text,
			const char *const *overrides, int noverrides,
			struct dtf_job **out)
{
	return load_text(name, text, strlen(text), overrides, noverrides, out);
}

int dtf_job_load(const char *path, const char *const *overrides,
		 int noverrides, struct dtf_job **out)
{
	char *text = NULL;
	size_t len = 0, cap = 0;
	int rc;

	*out = NULL;
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return dtf_error(DTF_ERR_IO, "%s: cannot open job file: %s",
				 path, strerror(errno));
	for (;;) {
		if (cap - len < 4096) {
			cap = cap ? cap * 2 : 8192;
			char *grown = dtf_realloc(text, cap);
			if (!grown) {
				rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
				goto out_text;
			}
			text = grown;
		}
		size_t got = fread(text + len, 1, cap - len, fp);
		len += got;
		if (got == 0)
			break;
	}
	if (ferror(fp)) {
		rc = dtf_error(DTF_ERR_IO, "%s: cannot read job file: %s", path,
			       strerror(errno));
		goto out_text;
	}
	rc = load_text(path, text, len, overrides, noverrides, out);
out_text:
	dtf_free(text);
	fclose(fp);
	return rc;
}

void dtf_job_free(struct dtf_job *job)
{
	if (!job)
		return;
	dtf_free(job->path);
	dtf_free(job->data.train_files);
	dtf_free(job->data.eval_files);
	dtf_free(job->data.features);
	for (int i = 0; i < job->model.nlayers; i++)
		dtf_free(job->model.layers[i].values);
	for (int i = 0; i < job->model.nnodes; i++)
		dtf_free(job->model.nodes[i].values);
	dtf_free(job->model.layers);
	dtf_free(job->model.nodes);
	dtf_free(job->logging.dir);
	dtf_free(job->logging.trace);
	dtf_free(job->checkpoint.dir);
	dtf_free(job);
}

const char *dtf_layer_kind_name(enum dtf_layer_kind k)
{
	return (unsigned)k < DTF_LAYER_COUNT_ ? kind_names[k] : "?";
}

const char *dtf_strategy_name(enum dtf_strategy_kind k)
{
	for (int i = 0; strategies[i].name; i++)
		if (strategies[i].value == (int)k)
			return strategies[i].name;
	return "?";
}
