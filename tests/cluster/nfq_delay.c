/*
 * nfq_delay.c - a fixed delay on the packets of one netfilter queue, for
 * the namespace hosts of cluster.sh on kernels without netem:
 *
 *   nfq_delay QUEUE MICROSECONDS
 *
 * with, in the host's namespace, a rule sending its packets there, e.g.
 * `iptables -A OUTPUT -o eth0 -j NFQUEUE --queue-num 0 --queue-bypass`.
 * Each packet is accepted `MICROSECONDS` after it arrived, in arrival
 * order (one fixed delay keeps the order), so TCP sees a longer round
 * trip, not reordering.  Only the packet's metadata is copied to user
 * space.  The delay is kept in user space: a loaded machine adds its
 * scheduling latency on top.  Runs until SIGTERM or SIGINT; with
 * --queue-bypass the packets flow undelayed once it is gone.
 * Exit status: 0 after a signal, 1 when the queue cannot be used.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define RING 65536 /* packets held at once, at most (a power of 2) */

struct held {
	uint32_t id;
	int64_t due_ns;
};

static struct held ring[RING];
static unsigned head, tail; /* ring[tail..head) are held, oldest first */
static int64_t delay_ns;
static volatile sig_atomic_t stop;

static int64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

/* a packet arrived: hold it (a full ring lets it through at once) */
static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg,
		     struct nfq_data *nfa, void *data)
{
	(void)msg;
	(void)data;
	struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
	if (!ph)
		return 0;
	uint32_t id = ntohl(ph->packet_id);
	if (head - tail == RING)
		return nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL);
	ring[head % RING] = (struct held){id, now_ns() + delay_ns};
	head++;
	return 0;
}

/* accept the packets that are due; the nanoseconds until the next (at
 * most 100 ms) */
static int64_t release(struct nfq_q_handle *qh)
{
	int64_t t = now_ns();
	while (tail != head && ring[tail % RING].due_ns <= t) {
		nfq_set_verdict(qh, ring[tail % RING].id, NF_ACCEPT, 0, NULL);
		tail++;
	}
	int64_t wait = tail == head ? 100000000 : ring[tail % RING].due_ns - t;
	return wait < 100000000 ? wait : 100000000;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: nfq_delay QUEUE MICROSECONDS\n");
		return 2;
	}
	int queue = atoi(argv[1]);
	delay_ns = strtoll(argv[2], NULL, 10) * 1000;
	struct nfq_handle *h = nfq_open();
	if (!h) {
		perror("nfq_delay: nfq_open");
		return 1;
	}
	struct nfq_q_handle *qh = nfq_create_queue(h, (uint16_t)queue,
						   on_packet, NULL);
	if (!qh || nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0) {
		fprintf(stderr, "nfq_delay: cannot use queue %d\n", queue);
		nfq_close(h);
		return 1;
	}
	nfq_set_queue_maxlen(qh, RING);
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	int fd = nfq_fd(h);
	static char buf[65536] __attribute__((aligned));
	while (!stop) {
		/* wait for a packet or the next one due, to the nanosecond */
		int64_t wait = release(qh);
		struct timespec ts = {.tv_sec = wait / 1000000000,
				      .tv_nsec = wait % 1000000000};
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int n = ppoll(&p, 1, &ts, NULL);
		if (n > 0) {
			ssize_t len;
			while ((len = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
				nfq_handle_packet(h, buf, (int)len);
		} else if (n < 0 && errno != EINTR) {
			perror("nfq_delay: ppoll");
			break;
		}
	}
	while (tail != head) { /* let the held packets go */
		nfq_set_verdict(qh, ring[tail % RING].id, NF_ACCEPT, 0, NULL);
		tail++;
	}
	nfq_destroy_queue(qh);
	nfq_close(h);
	return 0;
}
