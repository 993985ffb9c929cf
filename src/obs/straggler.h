/*
 * straggler.h - naming the slow rank of a synchronous data-parallel job,
 * and why it is slow (DESIGN.md section 9).
 *
 * Every fault.straggler_window_steps steps the ranks gather their mean
 * times per step over the window (obs/obs.h does the gathering); this
 * module judges one window at a time and keeps, per rank, how many
 * windows in a row it was judged slow for the same cause.
 *
 * Why not the step time itself: in a synchronous step every rank's step
 * lasts as long as the slowest one's, because the others wait for it in
 * the collectives; the wait lands in THEIR communication time.  So each
 * rank is judged by its own work, busy = data_wait + compute (forward,
 * backward, optimizer), against the median of the OTHER ranks' (with two
 * ranks, the other one's): a rank is slow when busy > factor x that
 * median.  The cause is the part (data wait or compute) whose excess over
 * the others' median is larger.  Each rank's busy, data wait and compute
 * are the medians over the window's steps (struct dtf_straggler_times).
 *
 * A slow link does not show in the compute or data times, and it does not
 * single out a rank in the communication times either: a delayed link
 * slows every rank's collectives alike (measured on namespace hosts: one
 * host's packets 10 ms and 30 ms late gave every one of 3 ranks the same
 * communication time within 1%).  So the ranks also measure round trips
 * on the ring of ranks (distribute/comm.h dtf_comm_ring_rtt, the shortest
 * of 5 each window): link r goes from rank r to rank r + 1.  Only links between two different hosts
 * count (the others are shared memory); a host's score is the SHORTEST
 * round trip of its cross-host links, so a host is only slow when every
 * link it has is slow, and a healthy neighbour of a slow host (one slow
 * link, one fast) is not.  A host is slow on the network when its score
 * > factor x the median of the other hosts' scores.  With two hosts every
 * cross-host link touches both, and a slow link cannot be pinned on
 * either: no network verdict is given with fewer than three hosts.
 *
 * Every verdict also needs the excess to matter, as a share of the median
 * step time: at least 5% for busy, so noise in a part that is a small
 * share of the step is not named; at least 1% for a host's round trip,
 * whose excess costs a step many times over (every message round of every
 * collective pays it: a 5 ms delay on one host of three made the tiny CNN's
 * step 10 to 20 times longer, not 5 ms longer).
 * Nothing here allocates after dtf_straggler_new().
 */
#ifndef DTF_OBS_STRAGGLER_H
#define DTF_OBS_STRAGGLER_H

/* The smallest excess named, as a share of the median step time: of the
 * busy time, and of a host's round trip. */
#define DTF_STRAGGLER_MIN_SHARE 0.05
#define DTF_STRAGGLER_MIN_LINK_SHARE 0.01

/*
 * One rank's window, seconds per step: means over the window's steps (what
 * the report shows), and the medians over its steps that are judged, so
 * that a few steps disturbed (a rank descheduled once on a busy machine)
 * do not name a rank that is not slow step after step; link_rtt is the
 * shortest ring round trip from this rank to the next.
 */
struct dtf_straggler_times {
	double step;      /* mean whole step, t_end - t_begin */
	double data_wait; /* mean wait for the input pipeline */
	double compute;   /* mean forward + backward + optimizer */
	double comm;      /* mean collectives, waiting for others included */
	double busy_median;      /* median of data wait + compute */
	double data_wait_median; /* median of data wait */
	double compute_median;   /* median of compute */
	double link_rtt;  /* ring round trip to rank r + 1 */
};

enum dtf_straggler_cause {
	DTF_STRAGGLER_NONE = 0,
	DTF_STRAGGLER_COMPUTE,
	DTF_STRAGGLER_DATA_WAIT,
	DTF_STRAGGLER_NETWORK,
};

/* "compute", "data_wait", "network"; NULL for NONE. */
const char *dtf_straggler_cause_name(enum dtf_straggler_cause c);

/* One rank's verdict on a window. */
struct dtf_straggler_verdict {
	enum dtf_straggler_cause cause; /* this window's */
	double value;  /* the judged quantity, seconds: busy (compute,
			  data_wait) or the host's score (network) */
	double median; /* the others' median of it */
	int streak;    /* windows in a row with this cause, this one too */
	int named;     /* 1: this window completes `windows` in a row: warn */
	int cleared;   /* 1: named before, and not slow in this window */
};

/*
 * Judge one window of n ranks: t[r] rank r's times, host[r] its host's
 * index in [0, n) (equal for ranks on one host), factor > 1, scratch 3 * n
 * doubles.  Fills v[r].cause, value and median (streak, named and cleared
 * are left as they are).  A rank that is slow on both counts gets its own
 * cause (compute or data_wait).
 */
void dtf_straggler_judge(const struct dtf_straggler_times *t, const int *host,
			 int n, double factor, double *scratch,
			 struct dtf_straggler_verdict *v);

/* The streaks of n ranks.  windows >= 1: windows in a row before a rank is
 * named.  Errors: DTF_ERR_NOMEM. */
struct dtf_straggler;
int dtf_straggler_new(int n, double factor, int windows,
		      struct dtf_straggler **out);
void dtf_straggler_free(struct dtf_straggler *s); /* NULL: no-op */

/*
 * Judge a window (dtf_straggler_judge) and carry the streaks on: v[r]
 * gets the whole verdict.  A rank is named once when its streak of one
 * cause reaches `windows`; it is named again only after a window without
 * it (cleared) or with another cause.
 */
void dtf_straggler_update(struct dtf_straggler *s,
			  const struct dtf_straggler_times *t, const int *host,
			  struct dtf_straggler_verdict *v);

#endif
