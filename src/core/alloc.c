/*
 * alloc.c - counted allocation.
 */
#include "core/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_uint_fast64_t n_allocs;

static void *counted(void *p)
{
	if (p)
		atomic_fetch_add_explicit(&n_allocs, 1, memory_order_relaxed);
	return p;
}

void *dtf_malloc(size_t size) { return counted(malloc(size ? size : 1)); }

void *dtf_calloc(size_t n, size_t size)
{
	return counted(calloc(n ? n : 1, size ? size : 1));
}

void *dtf_realloc(void *p, size_t size)
{
	return counted(realloc(p, size ? size : 1));
}

char *dtf_strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = dtf_malloc(n);
	if (d)
		memcpy(d, s, n);
	return d;
}

void dtf_free(void *p) { free(p); }

void *dtf_alloc_aligned(size_t size)
{
	size_t rounded = (size + DTF_ALIGN - 1) / DTF_ALIGN * DTF_ALIGN;
	void *p = aligned_alloc(DTF_ALIGN, rounded ? rounded : DTF_ALIGN);
	if (p)
		memset(p, 0, rounded ? rounded : DTF_ALIGN);
	return counted(p);
}

uint64_t dtf_alloc_count(void)
{
	return atomic_load_explicit(&n_allocs, memory_order_relaxed);
}
