/*
 * window.h - the geometry of a 2-D convolution or pooling window, shared
 * by the graph (a node records it when it is built) and every backend
 * (the kernels read it).  Graph-level on purpose: graph/ includes nothing
 * from ops/, and ops/ includes this.
 */
#ifndef DTF_GRAPH_WINDOW_H
#define DTF_GRAPH_WINDOW_H

/*
 * Geometry of a 2-D convolution or pooling window, TensorFlow semantics.
 * Input x: (n, h, w, c).  Filter (conv2d): (kh, kw, c, o), TF's HWIO layout.
 * Output y: (n, oh, ow, o) for conv2d, (n, oh, ow, c) for pooling.
 * padding "same": oh = ceil(h / stride_h), pad_total = max((oh-1)*stride_h +
 * (kh-1)*dilation_h + 1 - h, 0), pad_top = pad_total / 2 (the extra row goes
 * at the bottom, as in TF).  "valid": oh = ceil((h - (kh-1)*dil - 1 + 1) /
 * stride_h), no padding.  "explicit" (TF's padding=[[0,0],[t,b],[l,r],[0,0]]
 * of tf.nn.conv2d): the caller sets pad_top/left/bottom/right (>= 0, may be
 * asymmetric) and oh = floor((h + t + b - (kh-1)*dil - 1) / stride_h) + 1.
 * Fill it with dtf_window_geom_finish().  The kernels read only pad_top and
 * pad_left: padding after the input is implied by oh/ow, so every kernel
 * that takes a geometry supports all three kinds.
 */
struct dtf_window_geom {
	int n, h, w, c;       /* input */
	int kh, kw, o;        /* window / filter; o unused by pooling */
	int stride_h, stride_w;
	int dilation_h, dilation_w;
	int pad_top, pad_left; /* padding before */
	int oh, ow;            /* output spatial size */
	int pad_bottom, pad_right; /* padding after (informative for same and
				      valid; an input for explicit) */
};

enum dtf_padding { DTF_PAD_VALID = 0, DTF_PAD_SAME = 1, DTF_PAD_EXPLICIT = 2 };

/* Fill g->oh, ow and the padding from the other fields and `padding` (for
 * DTF_PAD_EXPLICIT the four pad_* fields are inputs and must be >= 0).
 * Returns 0, or -1 when the output would be empty (window larger than the
 * padded input) or a field is out of range. */
int dtf_window_geom_finish(struct dtf_window_geom *g, enum dtf_padding padding);

#endif
