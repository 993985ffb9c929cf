/*
 * test_export.c - the protobuf writer (data/pb.h) and the exporters
 * (export/export.h) on hand-made graphs; tests/export_models.sh holds the
 * exports of real jobs against onnx, onnxruntime and safetensors.
 */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "data/pb.h"
#include "export/export.h"
#include "graph/lower.h"
#include "testutil.h"

/* A varint at *p, advancing it. */
static uint64_t get_varint(const uint8_t **p)
{
	uint64_t v = 0;
	for (int s = 0;; s += 7) {
		uint8_t b = *(*p)++;
		v |= (uint64_t)(b & 0x7f) << s;
		if (!(b & 0x80))
			return v;
	}
}

START_TEST(pb_nested_messages_get_their_lengths)
{
	/* outer(1) { inner(2) { bytes(3) of n } , varint(4) 300 }, for
	 * bodies whose length varint is 1, 2 and 3 bytes */
	static const size_t sizes[] = {5, 200, 20000};
	for (int k = 0; k < 3; k++) {
		size_t n = sizes[k];
		uint8_t *blob = dtf_malloc(n);
		ck_assert_ptr_nonnull(blob);
		for (size_t i = 0; i < n; i++)
			blob[i] = (uint8_t)(i * 7 + 1);
		struct dtf_pb_writer w;
		dtf_pb_writer_init(&w);
		dtf_pb_begin(&w, 1);
		dtf_pb_begin(&w, 2);
		dtf_pb_bytes(&w, 3, blob, n);
		dtf_pb_end(&w);
		dtf_pb_varint(&w, 4, 300);
		dtf_pb_end(&w);
		ck_assert_int_eq(dtf_pb_writer_error(&w), 0);
		const uint8_t *p = w.buf, *end = w.buf + w.len;
		ck_assert_uint_eq(get_varint(&p), 1 << 3 | 2);
		uint64_t outer = get_varint(&p);
		ck_assert_uint_eq(outer, (uint64_t)(end - p));
		ck_assert_uint_eq(get_varint(&p), 2 << 3 | 2);
		uint64_t inner = get_varint(&p);
		const uint8_t *inner_end = p + inner;
		ck_assert_uint_eq(get_varint(&p), 3 << 3 | 2);
		ck_assert_uint_eq(get_varint(&p), n);
		ck_assert_int_eq(memcmp(p, blob, n), 0);
		p += n;
		ck_assert_ptr_eq(p, inner_end);
		ck_assert_uint_eq(get_varint(&p), 4 << 3 | 0);
		ck_assert_uint_eq(get_varint(&p), 300);
		ck_assert_ptr_eq(p, end);
		dtf_pb_writer_deinit(&w);
		dtf_free(blob);
	}
}
END_TEST

START_TEST(pb_errors_are_kept)
{
	struct dtf_pb_writer w;
	dtf_pb_writer_init(&w);
	for (int i = 0; i <= DTF_PB_MAX_DEPTH; i++)
		dtf_pb_begin(&w, 1);
	ck_assert_int_eq(dtf_pb_writer_error(&w), -DTF_ERR_RUNTIME);
	ck_assert_ptr_nonnull(strstr(dtf_error_msg(), "nested deeper"));
	dtf_pb_writer_deinit(&w);
	dtf_pb_writer_init(&w);
	dtf_pb_begin(&w, 1);
	ck_assert_int_eq(dtf_pb_writer_error(&w), -DTF_ERR_RUNTIME);
	ck_assert_ptr_nonnull(strstr(dtf_error_msg(), "left open"));
	dtf_pb_writer_deinit(&w);
}
END_TEST

static const char tiny_job[] =
	"name: tiny\n"
	"data:\n"
	"  train: {files: none}\n"
	"  features:\n"
	"    x: {type: float, shape: [3], scale: 2.0}\n"
	"    label: {type: int64, shape: []}\n"
	"model:\n"
	"  input: x\n"
	"  layers:\n"
	"    - {dense: {units: 4, activation: relu}}\n"
	"    - {dense: {units: 2, name: logits}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
	"train: {batch_size: 2}\n";

static struct dtf_job *load_tiny(struct dtf_graph *g, float **params)
{
	struct dtf_job *job = NULL;
	ck_assert_int_eq(dtf_job_load_string("tiny.yaml", tiny_job, NULL, 0, &job), 0);
	ck_assert_int_eq(dtf_graph_lower_model(job, 1, g, NULL), 0);
	*params = dtf_calloc(g->nparams, sizeof(float));
	ck_assert_ptr_nonnull(*params);
	for (size_t i = 0; i < g->nparams; i++)
		(*params)[i] = 0.25f * (float)i - 1.0f;
	return job;
}

/* The export of the nodes up to g->logits set to `logits`; returns the
 * status, *msg the error message. */
static int export_to(struct dtf_job *job, struct dtf_graph *g,
		     const float *params, int logits)
{
	g->logits = logits;
	uint8_t *out = NULL;
	size_t len = 0;
	int rc = dtf_export_onnx(job, g, params, &out, &len);
	ck_assert(rc < 0 || out != NULL);
	dtf_free(out);
	return rc;
}

START_TEST(onnx_names_an_op_it_cannot_export)
{
	struct dtf_graph g;
	float *params;
	struct dtf_job *job = load_tiny(&g, &params);
	int relu = dtf_graph_find(&g, "dense_1/relu");
	ck_assert_int_ge(relu, 0);
	ck_assert_int_eq(export_to(job, &g, params, relu), 0);
	/* a training-only op (one input, as relu) in its place */
	g.nodes[relu].op = DTF_OP_DROPOUT_GRAD;
	ck_assert_int_eq(export_to(job, &g, params, relu), -DTF_ERR_GRAPH);
	const char *msg = dtf_error_msg();
	ck_assert_msg(strstr(msg, "op 'dropout_grad' (node 'dense_1/relu')") &&
			      strstr(msg, "gradient op"),
		      "%s", msg);
	g.nodes[relu].op = DTF_OP_RELU;
	/* a gradient node as the output: the loss's gradient behind it is
	 * named (the labels, int64 ids, are an int32 input like any ids) */
	ck_assert_int_eq(dtf_graph_backward(&g), 0);
	int grad = -1;
	for (int i = g.nforward; i < g.nnodes && grad < 0; i++)
		if (g.nodes[i].op == DTF_OP_RELU_GRAD)
			grad = i;
	ck_assert_int_ge(grad, 0);
	ck_assert_int_eq(export_to(job, &g, params, grad), -DTF_ERR_GRAPH);
	ck_assert_msg(strstr(dtf_error_msg(), "gradient op") &&
			      strstr(dtf_error_msg(), "_grad'"),
		      "%s", dtf_error_msg());
	dtf_free(params);
	dtf_graph_deinit(&g);
	dtf_job_free(job);
}
END_TEST

START_TEST(onnx_holds_names_and_values_of_the_job)
{
	struct dtf_graph g;
	float *params;
	struct dtf_job *job = load_tiny(&g, &params);
	uint8_t *out = NULL;
	size_t len = 0;
	ck_assert_int_eq(dtf_export_onnx(job, &g, params, &out, &len), 0);
	/* the input, output and variable names as strings, the kernel's
	 * values as its raw little-endian bytes */
	static const char *const names[] = {"x", "logits", "dense_1/kernel",
					    "dense_1/bias", "logits/kernel",
					    "x:scale", "MatMul", "Relu"};
	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
		ck_assert_msg(memmem(out, len, names[k], strlen(names[k])),
			      "%s missing", names[k]);
	int kn = dtf_graph_find(&g, "logits/kernel");
	ck_assert_int_ge(kn, 0);
	ck_assert_ptr_nonnull(memmem(out, len, params + g.nodes[kn].a.var.offset,
				     8 * sizeof(float)));
	/* the same variables, the same bytes */
	uint8_t *again = NULL;
	size_t len2 = 0;
	ck_assert_int_eq(dtf_export_onnx(job, &g, params, &again, &len2), 0);
	ck_assert(len == len2 && !memcmp(out, again, len));
	params[g.nodes[kn].a.var.offset] += 1.0f;
	dtf_free(again);
	ck_assert_int_eq(dtf_export_onnx(job, &g, params, &again, &len2), 0);
	ck_assert(len == len2 && memcmp(out, again, len));
	dtf_free(again);
	dtf_free(out);
	dtf_free(params);
	dtf_graph_deinit(&g);
	dtf_job_free(job);
}
END_TEST

START_TEST(safetensors_layout)
{
	struct dtf_graph g;
	float *params;
	struct dtf_job *job = load_tiny(&g, &params);
	uint8_t *out = NULL;
	size_t len = 0;
	ck_assert_int_eq(dtf_export_safetensors(job, &g, params, &out, &len), 0);
	uint64_t n = 0;
	for (int b = 0; b < 8; b++)
		n |= (uint64_t)out[b] << (8 * b);
	ck_assert_uint_eq(n % 8, 0);
	ck_assert_uint_le(8 + n, len);
	json_error_t err;
	json_t *h = json_loadb((const char *)out + 8, n, 0, &err);
	ck_assert_msg(h != NULL, "%s", err.text);
	static const char *const vars[] = {"dense_1/kernel", "dense_1/bias",
					   "logits/kernel", "logits/bias"};
	size_t data = 0;
	for (int k = 0; k < 4; k++) {
		json_t *t = json_object_get(h, vars[k]);
		ck_assert_ptr_nonnull(t);
		ck_assert_str_eq(json_string_value(json_object_get(t, "dtype")), "F32");
		int id = dtf_graph_find(&g, vars[k]);
		const struct dtf_node *nd = &g.nodes[id];
		json_t *shape = json_object_get(t, "shape");
		ck_assert_int_eq((int)json_array_size(shape), nd->shape.rank);
		for (int d = 0; d < nd->shape.rank; d++)
			ck_assert_int_eq(json_integer_value(json_array_get(shape, (size_t)d)),
					 nd->shape.d[d]);
		json_t *offs = json_object_get(t, "data_offsets");
		size_t b = (size_t)json_integer_value(json_array_get(offs, 0));
		size_t e = (size_t)json_integer_value(json_array_get(offs, 1));
		size_t count = (size_t)dtf_shape_numel(&nd->shape);
		ck_assert_uint_eq(e - b, 4 * count);
		ck_assert_int_eq(memcmp(out + 8 + n + b, params + nd->a.var.offset,
					4 * count), 0);
		data += e - b;
	}
	ck_assert_uint_eq(json_object_size(h), 5); /* and __metadata__ */
	ck_assert_str_eq(json_string_value(json_object_get(
				 json_object_get(h, "__metadata__"), "job")), "tiny");
	ck_assert_uint_eq(len, 8 + n + data);
	json_decref(h);
	dtf_free(out);
	dtf_free(params);
	dtf_graph_deinit(&g);
	dtf_job_free(job);
}
END_TEST

static Suite *export_suite(void)
{
	Suite *s = suite_create("export");
	TCase *tc = tcase_create("protobuf");
	tcase_add_test(tc, pb_nested_messages_get_their_lengths);
	tcase_add_test(tc, pb_errors_are_kept);
	suite_add_tcase(s, tc);
	tc = tcase_create("exporters");
	tcase_add_test(tc, onnx_names_an_op_it_cannot_export);
	tcase_add_test(tc, onnx_holds_names_and_values_of_the_job);
	tcase_add_test(tc, safetensors_layout);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(export_suite(), 1);
}
