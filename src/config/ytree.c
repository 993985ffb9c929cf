/*
 * ytree.c - libyaml document loading, positions and overrides.
 *
 * Design: the whole file is loaded with yaml_parser_load() into one
 * yaml_document_t, which keeps the start mark of every node.  Overrides are
 * grafted into that same document before the schema is read, so the schema
 * walk sees one tree and checks an override exactly like a line of the file.
 * Each override's value is parsed as its own tiny document and its nodes are
 * copied in with yaml_document_add_*; libyaml gives added nodes a zero mark,
 * so the origin of a node is told by its id instead: ids above `nbase` were
 * made by overrides, and ovr_first[] says which one.  An empty value
 * ("--set a.b=") unsets: the pair is taken out of its mapping (its nodes
 * stay in the document, unreferenced), and ovr_removed[] remembers the
 * mapping so that a missing required key can be blamed on the override.
 */
#include "config/ytree.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

/* Deepest value an override may copy (guards against alias cycles). */
#define COPY_DEPTH_MAX 64
/* Longest override key path. */
#define OVR_KEYS_MAX 32

static yaml_node_t *node_of(struct dtf_ytree *t, int id)
{
	return yaml_document_get_node(&t->doc, id);
}

static int id_of(const struct dtf_ytree *t, const yaml_node_t *n)
{
	return (int)(n - t->doc.nodes.start) + 1;
}

static int node_count(const struct dtf_ytree *t)
{
	return (int)(t->doc.nodes.top - t->doc.nodes.start);
}

/* Deepest nesting of collections a job file may use (a job needs about 6). */
#define MAX_DEPTH 64

/*
 * The key nearest before a syntax error, for its message: the events of
 * text[len] (the part before the error) are walked, keeping the key path
 * of every open mapping ("model.layers.3.dense", sequence items by their
 * index as --set names them).  Writes the path of the last key read into
 * buf ("" when none) and returns 1 when that key's value was still being
 * read (the error is in it: no value yet, or a scalar reaching the end of
 * text[len]), 0 when it was complete (the error comes after it).
 */
struct key_frame {
	int map;      /* a mapping (else a sequence) */
	int want_key; /* mapping: the next node is a key */
	long index;   /* sequence: the next item's index */
	char key[64]; /* mapping: the current key */
};

/* The path of st[0..depth)'s current keys and items into buf[size]. */
static void key_path(const struct key_frame *st, int depth, char *buf,
		     size_t size)
{
	size_t at = 0;
	buf[0] = '\0';
	for (int i = 0; i < depth && at < size; i++) {
		const char *dot = i ? "." : "";
		int n = st[i].map ? snprintf(buf + at, size - at, "%s%s", dot,
					     st[i].key)
				  : snprintf(buf + at, size - at, "%s%ld", dot,
					     st[i].index - 1);
		at += n > 0 ? (size_t)n : 0;
	}
}

static int nearest_key(const char *text, size_t len, char *buf, size_t size)
{
	struct key_frame st[MAX_DEPTH + 2];
	int depth = 0, in_value = 0, done = 0;
	yaml_parser_t p;
	yaml_event_t ev;
	buf[0] = '\0';
	if (!yaml_parser_initialize(&p))
		return 0;
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	while (!done && yaml_parser_parse(&p, &ev)) {
		struct key_frame *top = depth ? &st[depth - 1] : NULL;
		switch (ev.type) {
		case YAML_SCALAR_EVENT:
		case YAML_ALIAS_EVENT:
			if (top && top->map && top->want_key) {
				const char *k = ev.type == YAML_SCALAR_EVENT
						? (const char *)ev.data.scalar.value
						: "*alias";
				snprintf(top->key, sizeof(top->key), "%s", k);
				top->want_key = 0;
				key_path(st, depth, buf, size);
				in_value = 1;
			} else if (top && top->map) {
				top->want_key = 1; /* the value is read, */
				/* unless it runs to the cut, where it may go on */
				in_value = ev.end_mark.index >= len;
			} else if (top) {
				top->index++;
			}
			break;
		case YAML_SEQUENCE_START_EVENT:
		case YAML_MAPPING_START_EVENT:
			if (top && !top->map)
				top->index++; /* this item's index: index - 1 */
			if (depth == MAX_DEPTH + 2) {
				done = 1;
				break;
			}
			st[depth++] = (struct key_frame){
				.map = ev.type == YAML_MAPPING_START_EVENT,
				.want_key = 1};
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			if (depth)
				depth--;
			top = depth ? &st[depth - 1] : NULL;
			if (top && top->map) {
				top->want_key = 1;
				/* an end the cut made up closes nothing read; a
				 * real one completes the value of top's key */
				if (ev.start_mark.index < len) {
					in_value = 0;
					key_path(st, depth, buf, size);
				}
			}
			break;
		case YAML_STREAM_END_EVENT:
			done = 1;
			break;
		default:
			break;
		}
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&p);
	if (size > 0)
		buf[size - 1] = '\0';
	return buf[0] && in_value;
}

/* "KEY: " or "after KEY: " (nearest_key of text[len]) into buf[size]. */
static const char *key_clause(const char *text, size_t len, char *buf,
			      size_t size)
{
	char key[256];
	int in = nearest_key(text, len, key, sizeof(key));
	if (!key[0])
		snprintf(buf, size, "%s", "");
	else
		snprintf(buf, size, "%s%s: ", in ? "" : "after ", key);
	return buf;
}

/*
 * The syntax error libyaml left in p, as a DTF error:
 * "FILE:LINE:COL: KEY: problem (context)", KEY the nearest key before it
 * (key_clause).  A reader error (a NUL or other control byte, bad UTF-8)
 * comes with a byte offset only: its line and column are counted here.
 */
static int parser_error(const yaml_parser_t *p, const char *file,
			const char *text, size_t len)
{
	if (p->error == YAML_MEMORY_ERROR)
		return dtf_error(DTF_ERR_NOMEM, "%s: out of memory reading YAML",
				 file);
	const char *problem = p->problem ? p->problem : "invalid YAML";
	char clause[300];
	if (p->error == YAML_READER_ERROR) {
		size_t off = p->problem_offset < len ? p->problem_offset : len;
		size_t line = 1, col = 1;
		for (size_t i = 0; i < off; i++) {
			unsigned char ch = (unsigned char)text[i];
			if (ch == '\n') {
				line++;
				col = 1;
			} else if ((ch & 0xc0) != 0x80) { /* a character's start */
				col++;
			}
		}
		key_clause(text, off, clause, sizeof(clause));
		if (p->problem_value >= 0 && off < len)
			return dtf_error(DTF_ERR_CONFIG,
					 "%s:%zu:%zu: %sbyte 0x%02x%s (byte offset %zu): %s",
					 file, line, col, clause,
					 (unsigned)(unsigned char)text[off],
					 text[off] == '\0' ? " (NUL)" : "", off,
					 problem);
		return dtf_error(DTF_ERR_CONFIG, "%s:%zu:%zu: %s%s (byte offset %zu)",
				 file, line, col, clause, problem, off);
	}
	size_t at = p->problem_mark.index < len ? p->problem_mark.index : len;
	key_clause(text, at, clause, sizeof(clause));
	if (p->context)
		return dtf_error(DTF_ERR_CONFIG, "%s:%zu:%zu: %s%s (%s)", file,
				 p->problem_mark.line + 1,
				 p->problem_mark.column + 1, clause, problem,
				 p->context);
	return dtf_error(DTF_ERR_CONFIG, "%s:%zu:%zu: %s%s", file,
			 p->problem_mark.line + 1, p->problem_mark.column + 1,
			 clause, problem);
}


/*
 * Reject nesting deeper than MAX_DEPTH before building the document: libyaml
 * spends time quadratic in the depth (its simple-key stack is walked for
 * every token), so 50000 nested brackets would take seconds to minutes.
 * This pass reads events only as far as the first too-deep collection
 * (1, *at set to where it starts; 0 otherwise); syntax errors are left to
 * the real load, which reports them.
 */
static int too_deep(const char *text, size_t len, yaml_mark_t *at)
{
	yaml_parser_t p;
	yaml_event_t ev;
	int depth = 0, deep = 0, done = 0;
	if (!yaml_parser_initialize(&p))
		return 0; /* the real load reports it */
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	while (!done && yaml_parser_parse(&p, &ev)) {
		switch (ev.type) {
		case YAML_SEQUENCE_START_EVENT:
		case YAML_MAPPING_START_EVENT:
			if (++depth > MAX_DEPTH) {
				*at = ev.start_mark;
				deep = done = 1;
			}
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			depth--;
			break;
		case YAML_STREAM_END_EVENT:
			done = 1;
			break;
		default:
			break;
		}
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&p);
	return deep;
}

int dtf_ytree_load(struct dtf_ytree *t, const char *file, const char *text,
		   size_t len)
{
	yaml_parser_t p;
	yaml_document_t extra;
	int rc = 0;

	memset(t, 0, sizeof(*t));
	t->file = file;
	yaml_mark_t at;
	if (too_deep(text, len, &at))
		return dtf_error(DTF_ERR_CONFIG,
				 "%s:%zu:%zu: collections nested deeper than "
				 "%d levels",
				 file, at.line + 1, at.column + 1, MAX_DEPTH);
	if (!yaml_parser_initialize(&p))
		return dtf_error(DTF_ERR_NOMEM, "%s: out of memory", file);
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	if (!yaml_parser_load(&p, &t->doc)) {
		/* libyaml has deleted the half-built document */
		rc = parser_error(&p, file, text, len);
		goto out_parser;
	}
	t->loaded = 1;
	t->nbase = node_count(t);

	/* A second document in the file is a mistake, not something to drop
	 * silently. */
	if (!yaml_parser_load(&p, &extra)) {
		rc = parser_error(&p, file, text, len);
		goto out_parser;
	}
	yaml_node_t *root2 = yaml_document_get_root_node(&extra);
	if (root2)
		rc = dtf_error(DTF_ERR_CONFIG,
			       "%s:%zu:%zu: a job file holds one YAML document; "
			       "found a second one",
			       file, root2->start_mark.line + 1,
			       root2->start_mark.column + 1);
	yaml_document_delete(&extra);
out_parser:
	yaml_parser_delete(&p);
	return rc;
}

void dtf_ytree_deinit(struct dtf_ytree *t)
{
	if (t->loaded)
		yaml_document_delete(&t->doc);
	for (int k = 0; k < t->novr; k++)
		dtf_free(t->ovr_key[k]);
	dtf_free(t->ovr_key);
	dtf_free(t->ovr_first);
	dtf_free(t->ovr_removed);
	for (int k = 0; t->ovr_text && k < t->novr; k++)
		dtf_free(t->ovr_text[k]);
	dtf_free(t->ovr_text);
	dtf_free(t->ovr_replaced);
	dtf_free(t->ovr_mapping);
	memset(t, 0, sizeof(*t));
}

yaml_node_t *dtf_ytree_root(struct dtf_ytree *t)
{
	return t->loaded ? yaml_document_get_root_node(&t->doc) : NULL;
}

void dtf_ytree_where(const struct dtf_ytree *t, const yaml_node_t *n,
		     char *buf, size_t size)
{
	if (!n) {
		snprintf(buf, size, "%s:1:1", t->file);
		return;
	}
	int id = id_of(t, n);
	if (id > t->nbase) {
		/* the last override that started at or before this id; an
		 * empty file's stand-in root precedes them all */
		int k = t->novr - 1;
		while (k >= 0 && t->ovr_first[k] > id)
			k--;
		if (k >= 0) {
			snprintf(buf, size, "--set %s", t->ovr_key[k]);
			return;
		}
	}
	snprintf(buf, size, "%s:%zu:%zu", t->file, n->start_mark.line + 1,
		 n->start_mark.column + 1);
}

/* The override that made node id `id`, or -1 (a node of the file, or an
 * empty file's stand-in root, which precedes them all). */
static int override_of(const struct dtf_ytree *t, int id)
{
	if (id <= t->nbase)
		return -1;
	int k = t->novr - 1;
	while (k >= 0 && t->ovr_first[k] > id)
		k--;
	return k;
}

const char *dtf_ytree_override_text(const struct dtf_ytree *t,
				    const yaml_node_t *n)
{
	if (!n || !t->loaded || !t->ovr_text)
		return NULL;
	int k = override_of(t, id_of(t, n));
	return k >= 0 ? t->ovr_text[k] : NULL;
}

const yaml_node_t *dtf_ytree_replaced(const struct dtf_ytree *t,
				      const yaml_node_t *map)
{
	if (!map || !t->loaded || !t->ovr_mapping)
		return NULL;
	int id = id_of(t, map);
	for (int k = 0; k < t->novr; k++)
		if (t->ovr_mapping[k] == id)
			return yaml_document_get_node(
				(yaml_document_t *)&t->doc, t->ovr_replaced[k]);
	return NULL;
}

int dtf_ytree_is_override(const struct dtf_ytree *t, const yaml_node_t *n)
{
	if (!n || !t->loaded)
		return 0;
	int id = id_of(t, n);
	return id > t->nbase && t->novr > 0 && id >= t->ovr_first[0];
}

const yaml_node_t *dtf_ytree_blame(const struct dtf_ytree *t,
				   const yaml_node_t *key,
				   const yaml_node_t *val)
{
	return dtf_ytree_is_override(t, val) || !key ? val : key;
}

const char *dtf_ytree_removed_by(const struct dtf_ytree *t,
				 const yaml_node_t *map, const char *key)
{
	if (!map || !t->loaded || !t->ovr_removed)
		return NULL;
	int id = id_of(t, map);
	for (int k = t->novr - 1; k >= 0; k--) {
		if (t->ovr_removed[k] != id)
			continue;
		const char *last = strrchr(t->ovr_key[k], '.');
		last = last ? last + 1 : t->ovr_key[k];
		if (!strcmp(last, key))
			return t->ovr_key[k];
	}
	return NULL;
}

int dtf_ytree_is_null(const yaml_node_t *n)
{
	if (!n)
		return 1;
	if (n->type != YAML_SCALAR_NODE ||
	    n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return 0;
	const char *s = (const char *)n->data.scalar.value;
	return !strcmp(s, "") || !strcmp(s, "~") || !strcmp(s, "null") ||
	       !strcmp(s, "Null") || !strcmp(s, "NULL");
}

const char *dtf_ytree_text(const yaml_node_t *n)
{
	if (!n || n->type != YAML_SCALAR_NODE)
		return NULL;
	return (const char *)n->data.scalar.value;
}

yaml_node_t *dtf_ytree_get(struct dtf_ytree *t, const yaml_node_t *map,
			   const char *key)
{
	if (!map || map->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *pr = map->data.mapping.pairs.start;
	     pr < map->data.mapping.pairs.top; pr++) {
		const char *k = dtf_ytree_text(node_of(t, pr->key));
		if (k && !strcmp(k, key))
			return node_of(t, pr->value);
	}
	return NULL;
}

/* ---- overrides ---------------------------------------------------------- */

/* Split "a.b.c=value" in place (s is a private copy): keys[] point into s.
 * Returns the number of keys, or -1 if malformed. */
static int split_override(char *s, char **keys, const char **value)
{
	char *eq = strchr(s, '=');
	if (!eq || eq == s)
		return -1;
	*eq = '\0';
	*value = eq + 1;
	int n = 0;
	for (char *k = s;;) {
		char *dot = strchr(k, '.');
		if (dot)
			*dot = '\0';
		if (!*k)
			return -1;
		if (n == OVR_KEYS_MAX)
			return -2;
		keys[n++] = k;
		if (!dot)
			break;
		k = dot + 1;
	}
	return n;
}

int dtf_ytree_check_overrides(const char *const *ov, int n)
{
	for (int i = 0; i < n; i++) {
		char *keys[OVR_KEYS_MAX];
		const char *value;
		char *s = dtf_strdup(ov[i]);
		if (!s)
			return dtf_error(DTF_ERR_NOMEM, "out of memory");
		int nk = split_override(s, keys, &value);
		dtf_free(s);
		if (nk == -2)
			return dtf_error(DTF_ERR_USAGE,
					 "--set '%s': the key has more than "
					 "%d components (the most a key path "
					 "may have)",
					 ov[i], OVR_KEYS_MAX);
		if (nk < 0)
			return dtf_error(DTF_ERR_USAGE,
					 "--set '%s': expected KEY.PATH=VALUE "
					 "(e.g. --set train.epochs=1)",
					 ov[i]);
	}
	return 0;
}

/* Copy node `sid` of src into t->doc; the new id, or 0 on failure. */
static int copy_node(struct dtf_ytree *t, yaml_document_t *src, int sid,
		     int depth)
{
	yaml_node_t *s = yaml_document_get_node(src, sid);
	int id = 0;

	if (!s || depth > COPY_DEPTH_MAX)
		return 0;
	switch (s->type) {
	case YAML_SCALAR_NODE:
		return yaml_document_add_scalar(&t->doc, s->tag,
						s->data.scalar.value,
						(int)s->data.scalar.length,
						s->data.scalar.style);
	case YAML_SEQUENCE_NODE:
		id = yaml_document_add_sequence(&t->doc, s->tag,
						s->data.sequence.style);
		if (!id)
			return 0;
		for (yaml_node_item_t *it = s->data.sequence.items.start;
		     it < s->data.sequence.items.top; it++) {
			int c = copy_node(t, src, *it, depth + 1);
			if (!c || !yaml_document_append_sequence_item(&t->doc,
								      id, c))
				return 0;
		}
		return id;
	case YAML_MAPPING_NODE:
		id = yaml_document_add_mapping(&t->doc, s->tag,
					       s->data.mapping.style);
		if (!id)
			return 0;
		for (yaml_node_pair_t *pr = s->data.mapping.pairs.start;
		     pr < s->data.mapping.pairs.top; pr++) {
			int k = copy_node(t, src, pr->key, depth + 1);
			int v = k ? copy_node(t, src, pr->value, depth + 1) : 0;
			if (!v || !yaml_document_append_mapping_pair(&t->doc,
								     id, k, v))
				return 0;
		}
		return id;
	default:
		return 0;
	}
}

/* Read `value` as a YAML document and copy it into t; *id gets the node. */
static int add_value(struct dtf_ytree *t, const char *key, const char *value,
		     int *id)
{
	yaml_parser_t p;
	yaml_document_t vdoc;
	int rc = 0;

	yaml_mark_t at;
	if (too_deep(value, strlen(value), &at))
		return dtf_error(DTF_ERR_USAGE,
				 "--set %s: bad value: collections nested "
				 "deeper than %d levels",
				 key, MAX_DEPTH);
	if (!yaml_parser_initialize(&p))
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	yaml_parser_set_input_string(&p, (const unsigned char *)value,
				     strlen(value));
	if (!yaml_parser_load(&p, &vdoc)) {
		/* a position inside a one-line value says little */
		if (p.error == YAML_MEMORY_ERROR)
			rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		else if (p.context)
			rc = dtf_error(DTF_ERR_USAGE,
				       "--set %s: bad value '%s': %s (%s)", key,
				       value, p.problem, p.context);
		else
			rc = dtf_error(DTF_ERR_USAGE,
				       "--set %s: bad value '%s': %s", key,
				       value, p.problem ? p.problem : "invalid");
		goto out_parser;
	}
	yaml_document_t extra;
	if (!yaml_parser_load(&p, &extra)) {
		rc = dtf_error(DTF_ERR_USAGE, "--set %s: bad value '%s': %s",
			       key, value, p.problem ? p.problem : "invalid");
		yaml_document_delete(&vdoc);
		goto out_parser;
	}
	int more = yaml_document_get_root_node(&extra) != NULL;
	yaml_document_delete(&extra);
	if (more) {
		rc = dtf_error(DTF_ERR_USAGE,
			       "--set %s: bad value '%s': it holds more than "
			       "one YAML document (quote a value that contains "
			       "'---')",
			       key, value);
		yaml_document_delete(&vdoc);
		goto out_parser;
	}
	if (yaml_document_get_root_node(&vdoc))
		*id = copy_node(t, &vdoc, 1, 0);
	else /* a comment alone: null, as "key: # ..." in the file */
		*id = yaml_document_add_scalar(&t->doc, NULL,
					       (yaml_char_t *)"", 0,
					       YAML_PLAIN_SCALAR_STYLE);
	if (!*id)
		rc = dtf_error(DTF_ERR_USAGE,
			       "--set %s: value '%s' cannot be copied (out of "
			       "memory or nested too deeply)",
			       key, value);
	yaml_document_delete(&vdoc);
out_parser:
	yaml_parser_delete(&p);
	return rc;
}

/* Where a node hangs: the root, a mapping pair's value or a list item. */
struct slot {
	int parent; /* node id; 0 for the root */
	int index;  /* pair or item index */
};

static void slot_set(struct dtf_ytree *t, struct slot s, int id)
{
	yaml_node_t *p = node_of(t, s.parent);
	if (p->type == YAML_MAPPING_NODE)
		p->data.mapping.pairs.start[s.index].value = id;
	else
		p->data.sequence.items.start[s.index] = id;
}

/* A list index: decimal digits only. */
static int list_index(const char *k, int n)
{
	long v = 0;
	for (const char *c = k; *c; c++) {
		if (*c < '0' || *c > '9' || v > 1000000)
			return -1;
		v = v * 10 + (*c - '0');
	}
	return v < n ? (int)v : -1;
}

static int index_out_of_range(char **keys, int i, const char *keypath,
			      int nitems)
{
	return dtf_error(DTF_ERR_CONFIG,
			 "--set %s: index %s is out of range: %.*s has %d "
			 "item%s",
			 keypath, keys[i], (int)(keys[i] - keys[0]) - 1,
			 keypath, nitems, nitems == 1 ? "" : "s");
}

/*
 * "--set a.b.c=": take key c out of mapping a.b, so that the schema reads
 * the job as if the file never had it and its default applies.  Nothing is
 * created on the way; a key that is not there is an error, so a misspelt
 * key is not ignored.  *from gets the mapping's id.
 */
static int remove_one(struct dtf_ytree *t, char **keys, int nk,
		      const char *keypath, int *from)
{
	int cur = 1;
	for (int i = 0; i < nk; i++) {
		int last = i == nk - 1;
		yaml_node_t *n = node_of(t, cur);
		if (n->type == YAML_SEQUENCE_NODE &&
		    keys[i][strspn(keys[i], "0123456789")] == '\0') {
			int nitems = (int)(n->data.sequence.items.top -
					   n->data.sequence.items.start);
			int ix = list_index(keys[i], nitems);
			if (ix < 0)
				return index_out_of_range(keys, i, keypath,
							  nitems);
			if (last)
				return dtf_error(
					DTF_ERR_USAGE,
					"--set %s: an empty value removes a "
					"key of a mapping; a list item cannot "
					"be removed (set the whole list "
					"instead)",
					keypath);
			cur = n->data.sequence.items.start[ix];
			continue;
		}
		if (n->type != YAML_MAPPING_NODE)
			break;
		yaml_node_pair_t *pr = n->data.mapping.pairs.start;
		while (pr < n->data.mapping.pairs.top) {
			const char *k = dtf_ytree_text(node_of(t, pr->key));
			if (k && !strcmp(k, keys[i]))
				break;
			pr++;
		}
		if (pr == n->data.mapping.pairs.top)
			break;
		if (!last) {
			cur = pr->value;
			continue;
		}
		/* every pair of that key: a duplicate left behind would
		 * silently take the removed one's place */
		yaml_node_pair_t *keep = pr;
		for (; pr < n->data.mapping.pairs.top; pr++) {
			const char *k = dtf_ytree_text(node_of(t, pr->key));
			if (!k || strcmp(k, keys[i]))
				*keep++ = *pr;
		}
		n->data.mapping.pairs.top = keep;
		*from = cur;
		return 0;
	}
	return dtf_error(DTF_ERR_CONFIG,
			 "--set %s: nothing to remove: the job has no key %s "
			 "(an empty value removes a key so that its default "
			 "applies)",
			 keypath, keypath);
}

/* Apply one override; *removed as ovr_removed, *replaced and *mapping as
 * ovr_replaced and ovr_mapping (ytree.h). */
static int apply_one(struct dtf_ytree *t, char **keys, int nk,
		     const char *keypath, const char *value, int *removed,
		     int *replaced, int *mapping)
{
	/* the caller made sure the root exists; it is node 1 */
	if (node_of(t, 1)->type != YAML_MAPPING_NODE)
		return dtf_error(DTF_ERR_CONFIG,
				 "--set %s: the job file's top level is not a "
				 "mapping",
				 keypath);
	if (value[strspn(value, " \t")] == '\0')
		return remove_one(t, keys, nk, keypath, removed);

	int val = 0;
	int rc = add_value(t, keypath, value, &val);
	if (rc)
		return rc;

	int cur = 1;
	struct slot where = {0, 0};
	for (int i = 0; i < nk; i++) {
		int last = i == nk - 1;
		yaml_node_t *n = node_of(t, cur);
		if (n->type == YAML_SEQUENCE_NODE) {
			int nitems = (int)(n->data.sequence.items.top -
					   n->data.sequence.items.start);
			int ix = list_index(keys[i], nitems);
			if (ix < 0 && keys[i][strspn(keys[i], "0123456789")] == '\0')
				return index_out_of_range(keys, i, keypath,
							  nitems);
			if (ix >= 0) {
				where = (struct slot){cur, ix};
				if (last)
					slot_set(t, where, val);
				else
					cur = n->data.sequence.items.start[ix];
				continue;
			}
		}
		if (n->type != YAML_MAPPING_NODE) {
			/* a scalar (e.g. "optimizer: adam") or a list
			 * addressed by name: make it a mapping */
			int m = yaml_document_add_mapping(
				&t->doc, NULL, YAML_BLOCK_MAPPING_STYLE);
			if (!m)
				return dtf_error(DTF_ERR_NOMEM, "out of memory");
			slot_set(t, where, m);
			*replaced = cur;
			*mapping = m;
			cur = m;
			n = node_of(t, cur);
		}
		int found = -1;
		for (yaml_node_pair_t *pr = n->data.mapping.pairs.start;
		     pr < n->data.mapping.pairs.top; pr++) {
			const char *k = dtf_ytree_text(node_of(t, pr->key));
			if (k && !strcmp(k, keys[i])) {
				found = (int)(pr - n->data.mapping.pairs.start);
				break;
			}
		}
		if (found < 0) {
			int k = yaml_document_add_scalar(
				&t->doc, NULL, (yaml_char_t *)keys[i], -1,
				YAML_PLAIN_SCALAR_STYLE);
			int v = last ? val
				     : yaml_document_add_mapping(
					       &t->doc, NULL,
					       YAML_BLOCK_MAPPING_STYLE);
			if (!k || !v ||
			    !yaml_document_append_mapping_pair(&t->doc, cur, k,
							       v))
				return dtf_error(DTF_ERR_NOMEM, "out of memory");
			n = node_of(t, cur);
			found = (int)(n->data.mapping.pairs.top -
				      n->data.mapping.pairs.start) - 1;
		}
		where = (struct slot){cur, found};
		if (last)
			slot_set(t, where, val);
		else
			cur = n->data.mapping.pairs.start[found].value;
	}
	return 0;
}

int dtf_ytree_apply_overrides(struct dtf_ytree *t, const char *const *ov,
			      int n)
{
	int rc = dtf_ytree_check_overrides(ov, n);
	if (rc || n == 0)
		return rc;
	t->ovr_first = dtf_calloc((size_t)n, sizeof(*t->ovr_first));
	t->ovr_key = dtf_calloc((size_t)n, sizeof(*t->ovr_key));
	t->ovr_removed = dtf_calloc((size_t)n, sizeof(*t->ovr_removed));
	t->ovr_text = dtf_calloc((size_t)n, sizeof(*t->ovr_text));
	t->ovr_replaced = dtf_calloc((size_t)n, sizeof(*t->ovr_replaced));
	t->ovr_mapping = dtf_calloc((size_t)n, sizeof(*t->ovr_mapping));
	if (!t->ovr_first || !t->ovr_key || !t->ovr_removed || !t->ovr_text ||
	    !t->ovr_replaced || !t->ovr_mapping)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	if (!t->loaded) {
		if (!yaml_document_initialize(&t->doc, NULL, NULL, NULL, 1, 1))
			return dtf_error(DTF_ERR_NOMEM, "out of memory");
		t->loaded = 1;
		t->nbase = 0;
	}
	/* An empty file gets an empty top-level mapping to graft into. */
	if (!dtf_ytree_root(t) &&
	    !yaml_document_add_mapping(&t->doc, NULL, YAML_BLOCK_MAPPING_STYLE))
		return dtf_error(DTF_ERR_NOMEM, "out of memory");

	for (int i = 0; i < n; i++) {
		char *keys[OVR_KEYS_MAX];
		const char *value;
		char *s = dtf_strdup(ov[i]);
		if (!s)
			return dtf_error(DTF_ERR_NOMEM, "out of memory");
		/* the key path as the user wrote it, for positions */
		size_t klen = strcspn(ov[i], "=");
		t->ovr_key[i] = dtf_malloc(klen + 1);
		if (!t->ovr_key[i]) {
			dtf_free(s);
			return dtf_error(DTF_ERR_NOMEM, "out of memory");
		}
		memcpy(t->ovr_key[i], ov[i], klen);
		t->ovr_key[i][klen] = '\0';
		t->ovr_text[i] = dtf_strdup(ov[i]);
		if (!t->ovr_text[i]) {
			dtf_free(s);
			return dtf_error(DTF_ERR_NOMEM, "out of memory");
		}
		t->ovr_first[i] = node_count(t) + 1;
		t->novr = i + 1;
		int nk = split_override(s, keys, &value);
		rc = nk < 0 ? dtf_error(DTF_ERR_USAGE, "--set '%s': malformed",
					ov[i])
			    : apply_one(t, keys, nk, t->ovr_key[i], value,
					&t->ovr_removed[i], &t->ovr_replaced[i],
					&t->ovr_mapping[i]);
		dtf_free(s);
		if (rc)
			return rc;
	}
	return 0;
}
