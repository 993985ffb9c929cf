/*
 * walk.c - the generic schema walk and its messages.
 *
 * Design: the schema is data (walk.h).  One generic walk reads any
 * section: it rejects unknown keys (suggesting a known key within
 * Levenshtein distance 2), duplicate keys and missing required keys, and
 * converts scalars with strict checks.  The shapes that are not plain
 * mappings (the feature map, the layer list, {kind: {attrs}} choices,
 * [h, w] pairs, shapes) have small custom readers (schema.c,
 * schema_layers.c) that call back into the walk.  Defaults come from the
 * same tables and are all written before anything is read.
 *
 * Messages: "WHERE: KEY.PATH: what is wrong", WHERE being "FILE:LINE:COL"
 * (1-based) or "--set KEY" for a value that came from an override.  List
 * items are written KEY[i], 0-based.
 */
#include "config/walk.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/error.h"

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

/* ---- messages ------------------------------------------------------------ */

/*
 * The deepest node of the document along key path `path` ("a.b[2].c", as
 * messages write it); NULL when not even the first key is there.
 */
const yaml_node_t *dtf_cfg_path_node(struct ctx *c, const char *path)
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
	const yaml_node_t *map = path && path[0] ? dtf_cfg_path_node(c, path)
						 : dtf_ytree_root(c->t);
	return dtf_ytree_removed_by(c->t, map, key);
}

int dtf_cfg_fail(struct ctx *c, const yaml_node_t *n, const char *path,
		 const char *fmt, ...)
{
	char where[DTF_WHERE_MAX], msg[768];
	va_list ap;

	/* a value given by --set is blamed on "--set KEY", not on the
	 * file's mapping it was grafted into */
	if (path && !dtf_ytree_is_override(c->t, n)) {
		const yaml_node_t *pn = dtf_cfg_path_node(c, path);
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
const char *dtf_cfg_describe(const yaml_node_t *n, char *buf, size_t size)
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

/* dtf_cfg_describe(), telling an empty list or mapping from a full one. */
const char *dtf_cfg_describe_empty(const yaml_node_t *n, char *buf,
				   size_t size)
{
	if (n->type == YAML_SEQUENCE_NODE &&
	    n->data.sequence.items.top == n->data.sequence.items.start)
		return "an empty list";
	if (n->type == YAML_MAPPING_NODE &&
	    n->data.mapping.pairs.top == n->data.mapping.pairs.start)
		return "an empty mapping";
	return dtf_cfg_describe(n, buf, size);
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

/* " (did you mean 'x'?)" for the closest name within distance 2, or "". */
const char *dtf_cfg_suggest(const char *word, const void *table, int n,
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
void dtf_cfg_path_fmt(char *out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out, PATH_MAX_, fmt, ap);
	va_end(ap);
}

void dtf_cfg_join_path(char *out, const char *path, const char *key)
{
	dtf_cfg_path_fmt(out, "%s%s%s", path, path[0] ? "." : "", key);
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
int dtf_cfg_read_int(struct ctx *c, const yaml_node_t *n, const char *path,
		     unsigned flags, int64_t lo, int64_t hi, int64_t *out)
{
	char buf[80];
	const char *s = dtf_ytree_text(n);
	if (!s || dtf_ytree_is_null(n) || !*s || isspace((unsigned char)*s))
		return dtf_cfg_fail(c, n, path, "expected %s, got %s", int_expect(flags),
				    dtf_cfg_describe(n, buf, sizeof(buf)));
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (*end)
		return dtf_cfg_fail(c, n, path, "expected %s, got %s", int_expect(flags),
				    dtf_cfg_describe(n, buf, sizeof(buf)));
	if (errno == ERANGE || v < lo || v > hi) {
		if ((flags & F_POS) && v <= 0 && errno != ERANGE)
			return dtf_cfg_fail(c, n, path, "expected %s, got %s",
					    int_expect(flags),
					    dtf_cfg_describe(n, buf, sizeof(buf)));
		if ((flags & F_NONNEG) && v < 0 && errno != ERANGE)
			return dtf_cfg_fail(c, n, path, "expected %s, got %s",
					    int_expect(flags),
					    dtf_cfg_describe(n, buf, sizeof(buf)));
		int over = errno == ERANGE ? v > 0 : v > hi;
		return dtf_cfg_fail(c, n, path, "expected %s, got %s (%s %lld)",
				    int_expect(flags),
				    dtf_cfg_describe(n, buf, sizeof(buf)),
				    over ? "at most" : "at least",
				    (long long)(over ? hi : lo));
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
		return dtf_cfg_fail(c, n, path, "expected a non-negative integer, got %s",
				    dtf_cfg_describe(n, buf, sizeof(buf)));
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end)
		return dtf_cfg_fail(c, n, path, "expected a non-negative integer, got %s",
				    dtf_cfg_describe(n, buf, sizeof(buf)));
	if (errno == ERANGE)
		return dtf_cfg_fail(c, n, path,
				    "expected a non-negative integer, got %s (out of "
				    "range)",
				    dtf_cfg_describe(n, buf, sizeof(buf)));
	*out = v;
	return 0;
}

int dtf_cfg_read_num(struct ctx *c, const yaml_node_t *n, const char *path,
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
	return dtf_cfg_fail(c, n, path, "expected %s, got %s", num_expect(flags),
			    dtf_cfg_describe(n, buf, sizeof(buf)));
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
	return dtf_cfg_fail(c, n, path,
			    "expected a boolean (true/false, yes/no, on/off), got %s",
			    dtf_cfg_describe(n, buf, sizeof(buf)));
}

/* A non-empty string that fits in `size` bytes (NUL included). */
int dtf_cfg_read_str(struct ctx *c, const yaml_node_t *n, const char *path,
		     size_t size, const char **out)
{
	char buf[80];
	const char *s = dtf_ytree_text(n);
	if (!s || dtf_ytree_is_null(n))
		return dtf_cfg_fail(c, n, path, "expected a string, got %s",
				    dtf_cfg_describe(n, buf, sizeof(buf)));
	if (!*s)
		return dtf_cfg_fail(c, n, path, "expected a non-empty string");
	if (strlen(s) != n->data.scalar.length)
		return dtf_cfg_fail(c, n, path, "the string contains a NUL byte");
	if (size && strlen(s) >= size)
		return dtf_cfg_fail(c, n, path, "longer than %zu characters", size - 1);
	*out = s;
	return 0;
}

int dtf_cfg_read_enum(struct ctx *c, const yaml_node_t *n, const char *path,
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
	return dtf_cfg_fail(c, n, path, "expected one of %s, got %s%s",
			    list_names(names, count, enum_name_at, all, sizeof(all)),
			    dtf_cfg_describe(n, buf, sizeof(buf)),
			    s ? dtf_cfg_suggest(s, names, count, enum_name_at, sug, sizeof(sug))
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
		rc = dtf_cfg_read_int(c, n, path, F_POS, 1, INT_MAX, &v[0]);
		if (rc)
			return rc;
		*h = *w = (int)v[0];
		return 0;
	}
	if (n->type != YAML_SEQUENCE_NODE ||
	    n->data.sequence.items.top - n->data.sequence.items.start != 2)
		return dtf_cfg_fail(c, n, path,
				    "expected a positive integer or a list [h, w] of "
				    "two, got %s",
				    dtf_cfg_describe(n, buf, sizeof(buf)));
	for (int i = 0; i < 2; i++) {
		dtf_cfg_path_fmt(ipath, "%s[%d]", path, i);
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, n->data.sequence.items.start[i]);
		rc = dtf_cfg_read_int(c, it, ipath, F_POS, 1, INT_MAX, &v[i]);
		if (rc)
			return rc;
	}
	*h = (int)v[0];
	*w = (int)v[1];
	return 0;
}

/* ---- the generic walk ---------------------------------------------------- */

void dtf_cfg_apply_defaults(const struct section *s, void *base)
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
			dtf_cfg_apply_defaults(f->sub, base);
			break;
		case T_STRDUP: /* NULL; the job is zeroed */
		case T_CUSTOM: /* the reader sets its own */
			break;
		}
	}
}

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
		rc = dtf_cfg_read_str(c, val, path, f->size, &s);
		if (!rc)
			snprintf(b + f->off, f->size, "%s", s);
		return rc;
	case T_STRDUP: {
		rc = dtf_cfg_read_str(c, val, path, 0, &s);
		if (rc)
			return rc;
		char **dst = (char **)(b + f->off);
		dtf_free(*dst);
		*dst = dtf_strdup(s);
		return *dst ? 0 : dtf_error(DTF_ERR_NOMEM, "out of memory");
	}
	case T_INT:
		rc = dtf_cfg_read_int(c, val, path, f->flags,
				      f->flags & F_POS ? 1 : f->flags & F_NONNEG ? 0
										 : INT_MIN,
				      f->max ? f->max : INT_MAX, &v);
		if (!rc)
			*(int *)(b + f->off) = (int)v;
		return rc;
	case T_I64:
		rc = dtf_cfg_read_int(c, val, path, f->flags,
				      f->flags & F_POS ? 1 : f->flags & F_NONNEG ? 0
										 : INT64_MIN,
				      f->max ? f->max : INT64_MAX, &v);
		if (!rc)
			*(int64_t *)(b + f->off) = v;
		return rc;
	case T_U64:
		return read_u64(c, val, path, (uint64_t *)(b + f->off));
	case T_DOUBLE:
	case T_FLOAT:
		rc = dtf_cfg_read_num(c, val, path, f->flags, f->type == T_FLOAT, &d);
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
		return dtf_cfg_read_enum(c, val, path, f->names, (int *)(b + f->off));
	case T_PAIR:
		return read_pair(c, val, path, (int *)(b + f->off),
				 (int *)(b + f->off2));
	case T_SECTION:
		return dtf_cfg_read_section(c, f->sub, base, key, val, path);
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
int dtf_cfg_read_section(struct ctx *c, const struct section *s, void *base,
			 const yaml_node_t *key, const yaml_node_t *map,
			 const char *path)
{
	const yaml_node_t *seen[FIELDS_MAX] = {0};
	char buf[80], sub[PATH_MAX_], sug[96], all[512];
	int rc;

	DTF_ASSERT(s->nfields <= FIELDS_MAX);
	if (map && !dtf_ytree_is_null(map) && map->type != YAML_MAPPING_NODE)
		return dtf_cfg_fail(c, map, path, "expected a mapping, got %s",
				    dtf_cfg_describe(map, buf, sizeof(buf)));
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
				return dtf_cfg_fail(c, k, path,
						    "expected a key name, got %s",
						    dtf_cfg_describe(k, buf, sizeof(buf)));
			dtf_cfg_join_path(sub, path, name);
			int i = 0;
			while (i < s->nfields && strcmp(s->fields[i].key, name))
				i++;
			if (i == s->nfields) {
				const char *hint =
					dtf_cfg_suggest(name, s->fields, s->nfields,
							field_name_at, sug, sizeof(sug));
				if (hint[0])
					return dtf_cfg_fail(c, k, sub,
							    "unknown key '%s'%s", name,
							    hint);
				return dtf_cfg_fail(c, k, sub,
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
				return dtf_cfg_fail(c, k, sub,
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
			return dtf_cfg_fail(c, key ? key : map, path,
					    "missing required key '%s'",
					    s->fields[i].key);
	}
	return s->check ? s->check(c, base, key, map, path) : 0;
}

/* ---- {kind: {attrs}} choices ---------------------------------------------- */

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

/* "a" or "an" before `word`. */
static const char *article(const char *word)
{
	return strchr("aeiou", word[0]) && word[0] ? "an" : "a";
}

/*
 * A --set inside a {kind: {attrs}} choice that names another kind than the
 * file's would switch it silently: with "optimizer: adam" (or {adam: {...}})
 * in the file, --set train.optimizer.sgd.learning_rate=0.1 grafts an sgd
 * key beside (or in place of) adam.  Refuse it, naming the override and the
 * file's choice; a value given whole (--set train.optimizer={sgd: {...}})
 * replaces the choice and is not caught here.  A name that is no kind
 * (--set train.optimizer.learning_rate=...) is said to be none, naming the
 * key that sets it in the job's kind when it is one of its settings.
 */
static int check_switch(struct ctx *c, const yaml_node_t *node,
			const char *path, const char *what,
			const struct choice *table, int n)
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
	const struct choice *now = NULL, *to = NULL;
	for (int i = 0; i < n; i++) {
		if (!strcmp(table[i].name, old_name))
			now = &table[i];
		if (!strcmp(table[i].name, name))
			to = &table[i];
	}
	if (now && !to) {
		/* not a kind at all: most likely a setting of the job's
		 * kind, written without it (train.optimizer.learning_rate) */
		int setting = 0;
		for (int i = 0; now->attrs && i < now->attrs->nfields; i++)
			setting |= !strcmp(now->attrs->fields[i].key, name);
		/* the override with the job's kind put in before `name` */
		char fixed[512] = "";
		size_t nlen = strlen(name);
		for (const char *k = ov; k && *k && *k != '='; k += strcspn(k, ".="),
				k += *k == '.')
			if (!strncmp(k, name, nlen) &&
			    (k[nlen] == '.' || k[nlen] == '=')) {
				snprintf(fixed, sizeof(fixed), "%.*s%s.%s",
					 (int)(k - ov), ov, old_name, k);
				break;
			}
		char all[256];
		list_names(table, n, choice_name_at, all, sizeof(all));
		if (setting)
			return dtf_cfg_fail(c, added, path,
					    "'%s' is not %s %s but a setting of one: "
					    "the job's %s is '%s'%s%s",
					    name, article(what), what, what, old_name,
					    fixed[0] ? "\nHINT: --set " : "", fixed);
		return dtf_cfg_fail(c, added, path,
				    "'%s' is not %s %s (known: %s); the job's %s is "
				    "'%s'%s%s",
				    name, article(what), what, all, what, old_name,
				    fixed[0] ? "\nHINT: for a setting of it: --set "
					     : "",
				    fixed);
	}
	dtf_ytree_where(c->t, old, where, sizeof(where));
	whole_value(ov, name, whole, sizeof(whole));
	return dtf_cfg_fail(c, added, path,
			    "this would switch the %s from '%s' (%s) to '%s'; a --set "
			    "inside %s only changes settings of the %s the job has\n"
			    "HINT: to switch, replace the whole key: --set %s='%s'",
			    what, old_name, where, name, path, what, path, whole);
}

int dtf_cfg_read_choice(struct ctx *c, const yaml_node_t *node,
			const char *path, const char *what,
			const struct choice *table, int n,
			const struct choice **out, const yaml_node_t **kind,
			const yaml_node_t **attrs)
{
	char buf[80], sug[96], all[256];

	*attrs = NULL;
	if (node->type == YAML_MAPPING_NODE) {
		int rc = check_switch(c, node, path, what, table, n);
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
		return dtf_cfg_fail(c, node, path,
				    "expected the %s as a name or a one-key mapping "
				    "{%s: {...}}, got %s",
				    what, what, dtf_cfg_describe(node, buf, sizeof(buf)));
	}
	const char *name = dtf_ytree_text(*kind);
	for (int i = 0; name && i < n; i++) {
		if (!strcmp(name, table[i].name)) {
			*out = &table[i];
			return 0;
		}
	}
	if (!name)
		return dtf_cfg_fail(c, *kind, path, "expected a %s name, got %s", what,
				    dtf_cfg_describe(*kind, buf, sizeof(buf)));
	const char *hint = dtf_cfg_suggest(name, table, n, choice_name_at, sug,
					   sizeof(sug));
	if (hint[0])
		return dtf_cfg_fail(c, *kind, path, "unknown %s '%s'%s", what, name,
				    hint);
	return dtf_cfg_fail(c, *kind, path, "unknown %s '%s' (known: %s)", what, name,
			    list_names(table, n, choice_name_at, all, sizeof(all)));
}

/* The number of pairs of the non-empty mapping `val`, or an error saying
 * what was expected ("expected WHAT, got ..."). */
static int mapping_size(struct ctx *c, const yaml_node_t *val,
			const char *path, const char *what, int *n)
{
	char buf[128];
	if (val->type != YAML_MAPPING_NODE ||
	    val->data.mapping.pairs.top == val->data.mapping.pairs.start)
		return dtf_cfg_fail(c, val, path, "expected %s, got %s", what,
				    dtf_cfg_describe_empty(val, buf, sizeof(buf)));
	*n = (int)(val->data.mapping.pairs.top - val->data.mapping.pairs.start);
	return 0;
}

/* The non-empty mapping `val` (else mapping_size's error) as an array of
 * one zeroed `size`-byte element per pair, dtf_calloc'd into *arr (the
 * caller stores it in the job, which frees it), the count in *n. */
int dtf_cfg_mapping_array(struct ctx *c, const yaml_node_t *val,
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
void dtf_cfg_mapping_pair(struct ctx *c, const yaml_node_t *map, int i,
			  const yaml_node_t **k, const yaml_node_t **v)
{
	const yaml_node_pair_t *pr = &map->data.mapping.pairs.start[i];
	*k = yaml_document_get_node(&c->t->doc, pr->key);
	*v = yaml_document_get_node(&c->t->doc, pr->value);
}
