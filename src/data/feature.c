/*
 * feature.c - helpers on the feature schema of feature.h.
 */
#include "data/feature.h"

int64_t dtf_feature_numel(const struct dtf_feature_spec *f)
{
	int64_t n = 1;
	for (int i = 0; i < f->rank && i < DTF_MAX_RANK; i++)
		n *= f->shape[i];
	return n;
}
