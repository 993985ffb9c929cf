/*
 * straggler.c - the straggler verdicts and their streaks (straggler.h).
 *
 * Medians of "the others" come from one sorted copy: removing one value
 * from a sorted array shifts the elements after it by one, so the
 * others' median is read at an index, O(n log n) per window in all.
 */
#include "obs/straggler.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

const char *dtf_straggler_cause_name(enum dtf_straggler_cause c)
{
	switch (c) {
	case DTF_STRAGGLER_COMPUTE:
		return "compute";
	case DTF_STRAGGLER_DATA_WAIT:
		return "data_wait";
	case DTF_STRAGGLER_NETWORK:
		return "network";
	case DTF_STRAGGLER_NONE:
		break;
	}
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The median of sorted s[0..n-1] without one element equal to x (n >= 2). */
static double median_without(const double *s, int n, double x)
{
	int p = 0;
	while (p < n - 1 && s[p] != x)
		p++;
	int m = n - 1;
#define OTHER(j) ((j) < p ? s[(j)] : s[(j) + 1])
	if (m % 2)
		return OTHER(m / 2);
	return 0.5 * (OTHER(m / 2 - 1) + OTHER(m / 2));
#undef OTHER
}

static double median_of(double *s, int n)
{
	qsort(s, (size_t)n, sizeof(*s), cmp_double);
	return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* Every rank's busy time (data wait + compute) against the others'. */
static void judge_busy(const struct dtf_straggler_times *t, int n,
		       double factor, double floor, double *s,
		       struct dtf_straggler_verdict *v)
{
	for (int r = 0; r < n; r++)
		s[r] = t[r].busy_median;
	qsort(s, (size_t)n, sizeof(*s), cmp_double);
	for (int r = 0; r < n; r++) {
		double busy = t[r].busy_median;
		double med = median_without(s, n, busy);
		if (!(busy > factor * med && busy - med >= floor))
			continue;
		v[r].value = busy;
		v[r].median = med;
		/* which part is slow: the larger excess over the others'
		 * median of that part (sorted into s + n) */
		double *part = s + n;
		for (int q = 0; q < n; q++)
			part[q] = t[q].data_wait_median;
		qsort(part, (size_t)n, sizeof(*part), cmp_double);
		double data_x = t[r].data_wait_median -
				median_without(part, n, t[r].data_wait_median);
		for (int q = 0; q < n; q++)
			part[q] = t[q].compute_median;
		qsort(part, (size_t)n, sizeof(*part), cmp_double);
		double comp_x = t[r].compute_median -
				median_without(part, n, t[r].compute_median);
		v[r].cause = data_x > comp_x ? DTF_STRAGGLER_DATA_WAIT
					     : DTF_STRAGGLER_COMPUTE;
	}
}

/* Each host's shortest cross-host round trip against the other hosts'. */
static void judge_links(const struct dtf_straggler_times *t, const int *host,
			int n, double factor, double floor, double *s,
			struct dtf_straggler_verdict *v)
{
	double *score = s, *sorted = s + n; /* per host index */
	int nh = 0;
	for (int h = 0; h < n; h++)
		score[h] = -1; /* no cross-host link (yet) */
	for (int r = 0; r < n; r++) {
		int a = host[r], b = host[(r + 1) % n];
		if (a >= nh)
			nh = a + 1;
		if (a == b)
			continue; /* shared memory */
		double rtt = t[r].link_rtt;
		if (score[a] < 0 || rtt < score[a])
			score[a] = rtt;
		if (score[b] < 0 || rtt < score[b])
			score[b] = rtt;
	}
	int m = 0;
	for (int h = 0; h < nh; h++)
		if (score[h] >= 0)
			sorted[m++] = score[h];
	if (m < 3)
		return; /* two hosts: a slow link is both hosts' */
	qsort(sorted, (size_t)m, sizeof(*sorted), cmp_double);
	for (int r = 0; r < n; r++) {
		double x = score[host[r]];
		if (x < 0 || v[r].cause != DTF_STRAGGLER_NONE)
			continue;
		double med = median_without(sorted, m, x);
		if (x > factor * med && x - med >= floor) {
			v[r].cause = DTF_STRAGGLER_NETWORK;
			v[r].value = x;
			v[r].median = med;
		}
	}
}

void dtf_straggler_judge(const struct dtf_straggler_times *t, const int *host,
			 int n, double factor, double *scratch,
			 struct dtf_straggler_verdict *v)
{
	for (int r = 0; r < n; r++) {
		v[r].cause = DTF_STRAGGLER_NONE;
		v[r].value = v[r].median = 0;
	}
	if (n < 2)
		return;
	for (int r = 0; r < n; r++)
		scratch[r] = t[r].step;
	double step = median_of(scratch, n);
	judge_busy(t, n, factor, DTF_STRAGGLER_MIN_SHARE * step, scratch, v);
	judge_links(t, host, n, factor, DTF_STRAGGLER_MIN_LINK_SHARE * step,
		    scratch, v);
}

struct dtf_straggler {
	int n, windows;
	double factor;
	double *scratch; /* 3 n */
	enum dtf_straggler_cause *last; /* the streak's cause per rank */
	int *streak, *was_named;
};

int dtf_straggler_new(int n, double factor, int windows,
		      struct dtf_straggler **out)
{
	*out = NULL;
	struct dtf_straggler *s = dtf_calloc(1, sizeof(*s));
	if (!s)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	s->n = n;
	s->factor = factor;
	s->windows = windows < 1 ? 1 : windows;
	s->scratch = dtf_calloc((size_t)n * 3, sizeof(double));
	s->last = dtf_calloc((size_t)n, sizeof(*s->last));
	s->streak = dtf_calloc((size_t)n, sizeof(int));
	s->was_named = dtf_calloc((size_t)n, sizeof(int));
	if (!s->scratch || !s->last || !s->streak || !s->was_named) {
		dtf_straggler_free(s);
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	}
	*out = s;
	return 0;
}

void dtf_straggler_free(struct dtf_straggler *s)
{
	if (!s)
		return;
	dtf_free(s->scratch);
	dtf_free(s->last);
	dtf_free(s->streak);
	dtf_free(s->was_named);
	dtf_free(s);
}

void dtf_straggler_update(struct dtf_straggler *s,
			  const struct dtf_straggler_times *t, const int *host,
			  struct dtf_straggler_verdict *v)
{
	dtf_straggler_judge(t, host, s->n, s->factor, s->scratch, v);
	for (int r = 0; r < s->n; r++) {
		enum dtf_straggler_cause c = v[r].cause;
		v[r].named = v[r].cleared = 0;
		if (c != s->last[r]) {
			/* a new cause (or none) ends the streak */
			if (s->was_named[r] && c == DTF_STRAGGLER_NONE)
				v[r].cleared = 1;
			s->was_named[r] = 0;
			s->streak[r] = 0;
			s->last[r] = c;
		}
		if (c == DTF_STRAGGLER_NONE) {
			v[r].streak = 0;
			continue;
		}
		v[r].streak = ++s->streak[r];
		if (!s->was_named[r] && s->streak[r] >= s->windows) {
			v[r].named = 1;
			s->was_named[r] = 1;
		}
	}
}
