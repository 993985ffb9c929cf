/*
 * alloc.h - every heap allocation the project makes goes through here.
 *
 * The counter lets tests prove the steady-state training step allocates
 * nothing (DESIGN.md section 7): read dtf_alloc_count() after the first step
 * and again after N more; the two must be equal.  Thread-safe (C11 atomics).
 */
#ifndef DTF_CORE_ALLOC_H
#define DTF_CORE_ALLOC_H

#include <stddef.h>
#include <stdint.h>

/* Alignment of dtf_alloc_aligned() blocks, bytes (one cache line, AVX-512). */
#define DTF_ALIGN 64

/* malloc/calloc/realloc that count calls.  NULL on failure (size 0 returns a
 * unique pointer).  Free with dtf_free(); dtf_free(NULL) is a no-op. */
void *dtf_malloc(size_t size);
void *dtf_calloc(size_t n, size_t size);
void *dtf_realloc(void *p, size_t size);
char *dtf_strdup(const char *s);
void dtf_free(void *p);

/* Zeroed block of `size` bytes aligned to DTF_ALIGN; free with dtf_free(). */
void *dtf_alloc_aligned(size_t size);

/* Number of successful allocation calls (malloc, calloc, realloc, strdup,
 * aligned) since the process started. */
uint64_t dtf_alloc_count(void);

#endif
