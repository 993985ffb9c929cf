/*
 * safetensors.c - the variables as a safetensors file (export.h).
 *
 * Layout as huggingface/safetensors documents it: 8 bytes little-endian
 * header size N, N bytes of UTF-8 JSON (here padded with spaces to a
 * multiple of 8, so every tensor's data is 8-byte aligned), then the
 * tensors' bytes, each contiguous, row-major, little-endian, in header
 * order, without gaps.  The JSON is Jansson's (insertion order kept,
 * compact), so the same variables give the same bytes.
 */
#include "export/export.h"

#include <jansson.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

/* Variables and the graph form's constants: what a checkpoint saves of
 * the model, and what its forward pass needs besides the ops. */
static int is_variable(const struct dtf_node *n)
{
	return n->op == DTF_OP_VARIABLE;
}

int dtf_export_safetensors(const struct dtf_job *job,
			   const struct dtf_graph *g, const float *params,
			   uint8_t **out, size_t *len)
{
	*out = NULL;
	*len = 0;
	int rc = 0;
	char *text = NULL;
	json_t *root = json_object(), *meta = json_object();
	if (!root || !meta)
		goto nomem;
	size_t off = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const struct dtf_node *n = &g->nodes[i];
		if (!is_variable(n))
			continue;
		size_t bytes = (size_t)dtf_shape_numel(&n->shape) * 4;
		json_t *t = json_object(), *shape = json_array();
		if (!t || !shape || json_object_set_new(t, "dtype", json_string("F32")) ||
		    json_object_set_new(t, "shape", shape)) {
			json_decref(t);
			goto nomem;
		}
		for (int d = 0; d < n->shape.rank; d++)
			if (json_array_append_new(shape, json_integer(n->shape.d[d]))) {
				json_decref(t);
				goto nomem;
			}
		json_t *offs = json_pack("[II]", (json_int_t)off,
					 (json_int_t)(off + bytes));
		if (!offs || json_object_set_new(t, "data_offsets", offs) ||
		    json_object_set_new(root, n->name, t))
			goto nomem;
		off += bytes;
	}
	if (json_object_set_new(meta, "producer", json_string("dtf-train")) ||
	    json_object_set_new(meta, "job", json_string(job->name)))
		goto nomem;
	if (json_object_set_new(root, "__metadata__", meta))
		goto nomem_root;
	meta = NULL;
	if (!(text = json_dumps(root, JSON_COMPACT)))
		goto nomem_root;
	size_t hl = strlen(text), padded = (hl + 7) / 8 * 8;
	uint8_t *buf = dtf_malloc(8 + padded + off);
	if (!buf)
		goto nomem_root;
	for (int b = 0; b < 8; b++)
		buf[b] = (uint8_t)((uint64_t)padded >> (8 * b));
	memcpy(buf + 8, text, hl);
	memset(buf + 8 + hl, ' ', padded - hl);
	uint8_t *p = buf + 8 + padded;
	for (int i = 0; i < g->nnodes; i++) {
		const struct dtf_node *n = &g->nodes[i];
		if (!is_variable(n))
			continue;
		size_t count = (size_t)dtf_shape_numel(&n->shape);
		const float *v = params + n->a.var.offset;
		for (size_t k = 0; k < count; k++, p += 4) {
			uint32_t u;
			memcpy(&u, &v[k], 4);
			for (int b = 0; b < 4; b++)
				p[b] = (uint8_t)(u >> (8 * b));
		}
	}
	*out = buf;
	*len = 8 + padded + off;
	goto out;
nomem:
	json_decref(meta);
nomem_root:
	rc = dtf_error(DTF_ERR_NOMEM, "out of memory building the safetensors header");
out:
	free(text);
	json_decref(root);
	return rc;
}
