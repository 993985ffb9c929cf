/*
 * ytree.h - a libyaml document plus what config/ needs around it: where each
 * node came from, and "--set a.b.c=value" overrides grafted into the tree.
 *
 * Internal to config/ (the only module that includes <yaml.h>).  Nodes are
 * addressed by libyaml's 1-based ids while the tree is being changed,
 * because adding a node may move the node array; pointers are fine once the
 * overrides are in.  A node read from the file prints as "FILE:LINE:COL"
 * (1-based); a node made by an override prints as "--set a.b.c".
 */
#ifndef DTF_CONFIG_YTREE_H
#define DTF_CONFIG_YTREE_H

#include <stddef.h>
#include <yaml.h>

struct dtf_ytree {
	yaml_document_t doc;
	int loaded;       /* doc holds a document to delete */
	const char *file; /* name used in positions; not owned */
	int nbase;        /* node ids 1..nbase came from the file */
	int novr;         /* overrides applied so far */
	int *ovr_first;   /* [novr]: first node id made by override k */
	char **ovr_key;   /* [novr]: "a.b.c" of override k (owned) */
	int *ovr_removed; /* [novr]: id of the mapping that override k
			   * removed its key from ("a.b.c="), else 0 */
	char **ovr_text;  /* [novr]: override k as given, "a.b.c=value"
			   * (owned) */
	int *ovr_replaced; /* [novr]: id of the scalar or list that override
			    * k's key path went through and replaced by a
			    * mapping ("optimizer: adam" and --set
			    * train.optimizer.sgd.learning_rate=0.1), else 0;
			    * the node stays in the document */
	int *ovr_mapping; /* [novr]: id of that mapping, else 0 */
};

/*
 * Parse text[0..len) as one YAML document.  A syntax error is DTF_ERR_CONFIG
 * "FILE:LINE:COL: problem (context)".  On any return the tree may be passed
 * to dtf_ytree_deinit().
 */
int dtf_ytree_load(struct dtf_ytree *t, const char *file, const char *text,
		   size_t len);

/* Check the form "KEY.PATH=VALUE" of each override without applying any:
 * DTF_ERR_USAGE for a missing '=' or an empty key component. */
int dtf_ytree_check_overrides(const char *const *ov, int n);

/*
 * Apply ov[0..n) in order: walk mappings by key (a decimal component indexes
 * a list), create missing keys as mappings, and replace the last key's value
 * by the value text read as a small YAML document ("1", "[1, 2]",
 * "{sgd: {learning_rate: 0.1}}").  A scalar met on the way is replaced by
 * a mapping.  An empty value (nothing but blanks) removes the last key from
 * its mapping instead, creating nothing, so that the schema's default
 * applies (dtf_ytree_removed_by() tells which override removed a key).
 * Errors: DTF_ERR_USAGE (malformed override or value, more than 32 key
 * components, an empty value for a list item), DTF_ERR_CONFIG (top level
 * is not a mapping; a decimal component past the end of a list; an empty
 * value for a key the tree does not have), DTF_ERR_NOMEM.
 */
int dtf_ytree_apply_overrides(struct dtf_ytree *t, const char *const *ov,
			      int n);

void dtf_ytree_deinit(struct dtf_ytree *t);

/* Root node, NULL for an empty document. */
yaml_node_t *dtf_ytree_root(struct dtf_ytree *t);

/* "FILE:LINE:COL" or "--set a.b.c" of n; "FILE:1:1" for n == NULL. */
void dtf_ytree_where(const struct dtf_ytree *t, const yaml_node_t *n,
		     char *buf, size_t size);

/* 1 if n was made by a --set override (its position is "--set a.b.c"). */
int dtf_ytree_is_override(const struct dtf_ytree *t, const yaml_node_t *n);

/* The node a message should point at for a key whose key node is `key` and
 * value node `val`: `val` when an override made it, else `key`. */
const yaml_node_t *dtf_ytree_blame(const struct dtf_ytree *t,
				   const yaml_node_t *key,
				   const yaml_node_t *val);

/* The key path ("a.b.c", owned by t) of the last override that removed key
 * `key` from mapping `map` with an empty value, NULL if none did. */
const char *dtf_ytree_removed_by(const struct dtf_ytree *t,
				 const yaml_node_t *map, const char *key);

/* The override that made node n, as given ("a.b.c=value", owned by t);
 * NULL for a node of the file. */
const char *dtf_ytree_override_text(const struct dtf_ytree *t,
				    const yaml_node_t *n);

/* When mapping `map` was made by an override in place of a scalar or list
 * that the override's key path went through (see ovr_replaced), the node it
 * replaced (its text and position are the file's, or an earlier
 * override's); else NULL.  A value given whole ("--set
 * train.optimizer={sgd: {...}}") replaces nothing in this sense. */
const yaml_node_t *dtf_ytree_replaced(const struct dtf_ytree *t,
				      const yaml_node_t *map);

/* A plain "", "~" or "null" scalar (or NULL). */
int dtf_ytree_is_null(const yaml_node_t *n);

/* Scalar text (NUL-terminated), NULL if n is not a scalar. */
const char *dtf_ytree_text(const yaml_node_t *n);

/* The node of `key` in mapping `map`, NULL if absent or not a mapping. */
yaml_node_t *dtf_ytree_get(struct dtf_ytree *t, const yaml_node_t *map,
			   const char *key);

#endif
