/*
 * graph_priv.h - helpers shared by the files of the graph module (graph.c,
 * ops.c, autodiff.c); not part of the module's interface.
 */
#ifndef DTF_GRAPH_GRAPH_PRIV_H
#define DTF_GRAPH_GRAPH_PRIV_H

#include "graph/graph.h"

/* Append a forward node with inputs in[0 .. the op's input count), each an
 * existing node; output shape left empty for the caller.  Checks the name
 * is unique.  Returns the id or a negative DTF_ERR_*. */
int dtf_graph_append_node(struct dtf_graph *g, enum dtf_op op,
			  const char *name, const int *in);

/* DTF_ERR_GRAPH "what: 'a' has shape (..) but 'b' has shape (..)"
 * (b < 0: only a). */
int dtf_graph_shape_error(const struct dtf_graph *g, const char *what, int a,
			  int b);

#endif
