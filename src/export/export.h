/*
 * export.h - a trained model out of dtf-train: the inference graph as ONNX
 * and the variables as safetensors (`dtf-train export`, dtf-train(1)).
 *
 * Both read the job (the graph, the feature decoding) and the variables of
 * one checkpoint (train/checkpoint.h: every variable under its graph node
 * name, whatever strategy and world size wrote it), and name everything
 * from the job, never from the strategy or the world size, so the same
 * variables give the same bytes.  Files are written as "<output>.tmp",
 * fsync'd and renamed over <output> (then the directory fsync'd): a kill
 * during an export leaves no file under the output name.
 */
#ifndef DTF_EXPORT_EXPORT_H
#define DTF_EXPORT_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "config/job.h"
#include "graph/graph.h"

enum dtf_export_format {
	DTF_EXPORT_ONNX = 0,
	DTF_EXPORT_SAFETENSORS,
};

/* ONNX: the opset and IR version written (opset 17 is IR version 8). */
#define DTF_ONNX_OPSET 17
#define DTF_ONNX_IR_VERSION 8

struct dtf_export_opts {
	enum dtf_export_format format;
	/* A checkpoint file, or a directory whose index names the newest
	 * (tf.train.latest_checkpoint); NULL: the job's checkpoint.dir. */
	const char *checkpoint;
	const char *output; /* the file to write */
};

/*
 * Build the job's forward graph, load the variables of the checkpoint and
 * write the export.  Errors: DTF_ERR_USAGE (no checkpoint given and no
 * checkpoint.dir), DTF_ERR_CHECKPOINT (none there, it does not verify, or
 * a variable of the graph is missing from it or has another shape),
 * DTF_ERR_GRAPH (an op or feature with no ONNX form, named), DTF_ERR_IO
 * (writing the output, naming the file and call), DTF_ERR_NOMEM.
 */
int dtf_export_run(const struct dtf_job *job, const struct dtf_export_opts *o);

/*
 * The variables of graph g (every VARIABLE node but constants: trainable
 * ones and batch-norm moving statistics) from the checkpoint at `path`
 * (file or directory, as dtf_export_opts.checkpoint) into params
 * (g->nparams floats; constants keep what is there).  *used gets the file
 * read (caller's buffer of `used_size` bytes).  Errors: DTF_ERR_CHECKPOINT
 * (naming the file and the variable), DTF_ERR_NOMEM.
 */
int dtf_export_load_variables(const struct dtf_graph *g, const char *path,
			      float *params, char *used, size_t used_size);

/*
 * The ONNX ModelProto (onnx/onnx.proto, opset DTF_ONNX_OPSET) of the
 * inference graph of g, from the job's model input features to the
 * logits node, into *out / *len (owned by the caller: dtf_free).  Inputs
 * are the features under their job names with the raw values the
 * records hold (uint8, int8, float16 or float32; dimension 0 "batch"),
 * decoded and scaled as the job says (raw * scale + offset) inside the
 * graph; the output is model.loss's logits under that name; the variables
 * are initializers under their job names (conv kernels keep TF's HWIO
 * layout, transposed inside the graph).  Dropout is removed, batch_norm
 * normalizes with its moving statistics.  NHWC tensors are transposed to
 * ONNX's NCHW around each conv and pool.  Every op of graph/graph.h has a
 * row in export/onnx.c's table; a forward op without an ONNX form is
 * DTF_ERR_GRAPH naming the op and the node.
 */
int dtf_export_onnx(const struct dtf_job *job, const struct dtf_graph *g,
		    const float *params, uint8_t **out, size_t *len);

/*
 * The safetensors file (huggingface/safetensors's layout: u64 little-
 * endian header size N, N bytes of JSON {"<name>": {"dtype": "F32",
 * "shape": [...], "data_offsets": [begin, end]}, ..., "__metadata__":
 * {...}} padded with spaces to a multiple of 8, then the little-endian
 * data) of every variable of g under its job name (trainable or not, and
 * the graph form's constants, as a checkpoint saves them), in graph order, into
 * *out / *len (caller frees with dtf_free).  Errors: DTF_ERR_NOMEM.
 */
int dtf_export_safetensors(const struct dtf_job *job,
			   const struct dtf_graph *g, const float *params,
			   uint8_t **out, size_t *len);

#endif
