/*
 * window.c - the TF padding rule: output size and padding of a window
 * (window.h).
 */
#include "graph/window.h"

int dtf_window_geom_finish(struct dtf_window_geom *g, enum dtf_padding padding)
{
	if (g->kh < 1 || g->kw < 1 || g->stride_h < 1 || g->stride_w < 1 ||
	    g->dilation_h < 1 || g->dilation_w < 1 || g->h < 0 || g->w < 0)
		return -1;
	/* Effective (dilated) window extent. */
	int eh = (g->kh - 1) * g->dilation_h + 1;
	int ew = (g->kw - 1) * g->dilation_w + 1;
	if (padding == DTF_PAD_SAME) {
		g->oh = (g->h + g->stride_h - 1) / g->stride_h;
		g->ow = (g->w + g->stride_w - 1) / g->stride_w;
		int th = (g->oh - 1) * g->stride_h + eh - g->h;
		int tw = (g->ow - 1) * g->stride_w + ew - g->w;
		th = th > 0 ? th : 0;
		tw = tw > 0 ? tw : 0;
		/* TF puts the odd row/column of padding after, not before. */
		g->pad_top = th / 2;
		g->pad_left = tw / 2;
		g->pad_bottom = th - g->pad_top;
		g->pad_right = tw - g->pad_left;
	} else if (padding == DTF_PAD_EXPLICIT) {
		if (g->pad_top < 0 || g->pad_left < 0 || g->pad_bottom < 0 ||
		    g->pad_right < 0)
			return -1;
		int ph = g->h + g->pad_top + g->pad_bottom;
		int pw = g->w + g->pad_left + g->pad_right;
		g->oh = ph >= eh ? (ph - eh) / g->stride_h + 1 : 0;
		g->ow = pw >= ew ? (pw - ew) / g->stride_w + 1 : 0;
	} else {
		g->oh = g->h >= eh ? (g->h - eh) / g->stride_h + 1 : 0;
		g->ow = g->w >= ew ? (g->w - ew) / g->stride_w + 1 : 0;
		g->pad_top = g->pad_left = g->pad_bottom = g->pad_right = 0;
	}
	return g->oh > 0 && g->ow > 0 ? 0 : -1;
}
