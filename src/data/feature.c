/*
 * feature.c - helpers on the feature schema of feature.h.
 */
#include "data/feature.h"
#include "data/input.h"

int64_t dtf_feature_numel(const struct dtf_feature_spec *f)
{
	int64_t n = 1;
	for (int i = 0; i < f->rank && i < DTF_MAX_RANK; i++)
		n *= f->shape[i];
	return n;
}

const char *dtf_shard_policy_name(enum dtf_shard_policy p)
{
	switch (p) {
	case DTF_SHARD_AUTO: return "auto";
	case DTF_SHARD_FILE: return "file";
	case DTF_SHARD_DATA: return "data";
	case DTF_SHARD_OFF: return "off";
	}
	return "?";
}

const char *dtf_compression_name(enum dtf_compression c)
{
	switch (c) {
	case DTF_COMPRESSION_NONE: return "none";
	case DTF_COMPRESSION_GZIP: return "gzip";
	case DTF_COMPRESSION_ZLIB: return "zlib";
	}
	return "?";
}
