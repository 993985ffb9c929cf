/*
 * bench_read.c - read + verify + decode throughput of the input pipeline
 * beside the raw read speed of the same files, in one run.
 *
 *     bench_read H,W,C FILE...
 *
 * The files hold Examples of `image` (bytes, H*W*C uint8) and `label`
 * (int64), as `dtf-records synth` writes them.  Every file is read once
 * first so both measurements see a warm page cache.  Then, five times
 * each, alternating:
 *   raw:    read(2) of every file into a 1 MiB buffer;
 *   decode: one epoch of the pipeline on this thread (prefetch 0, no
 *           shuffle, batch 32): framing, both CRC-32Cs, Example parsing,
 *           uint8 -> float32 with scale 1/255, batching.
 * The best of the five of each is reported, in MB/s of file bytes (1 MB =
 * 1e6 bytes) and records/s, with the ratio decode / raw.
 * Not a unit test; tests/bench/run-read-bench.sh drives it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"
#include "data/pipeline.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t read_all(char **files, int n, char *buf, size_t cap)
{
	uint64_t total = 0;
	for (int i = 0; i < n; i++) {
		int fd = open(files[i], O_RDONLY);
		if (fd < 0) {
			fprintf(stderr, "bench_read: %s: %s\n", files[i],
				strerror(errno));
			exit(1);
		}
		ssize_t k;
		while ((k = read(fd, buf, cap)) > 0)
			total += (uint64_t)k;
		close(fd);
	}
	return total;
}

int main(int argc, char **argv)
{
	int64_t h, w, c;
	if (argc < 3 ||
	    sscanf(argv[1], "%" SCNd64 ",%" SCNd64 ",%" SCNd64, &h, &w, &c) != 3) {
		fprintf(stderr, "usage: bench_read H,W,C FILE...\n");
		return 2;
	}
	char **files = argv + 2;
	int nfiles = argc - 2;
	size_t cap = 1 << 20;
	char *buf = malloc(cap);
	uint64_t bytes = read_all(files, nfiles, buf, cap); /* warm up */

	struct dtf_feature_spec sp[2];
	memset(sp, 0, sizeof(sp));
	snprintf(sp[0].name, sizeof(sp[0].name), "image");
	sp[0].type = DTF_FEATURE_BYTES;
	sp[0].decode = DTF_DECODE_UINT8;
	sp[0].rank = 3;
	sp[0].shape[0] = h;
	sp[0].shape[1] = w;
	sp[0].shape[2] = c;
	sp[0].scale = 1.0f / 255.0f;
	sp[0].dtype = DTF_FLOAT32;
	snprintf(sp[1].name, sizeof(sp[1].name), "label");
	sp[1].type = DTF_FEATURE_INT64;
	sp[1].dtype = DTF_INT32;
	sp[1].scale = 1.0f;
	enum { BATCH = 32 };
	struct dtf_read_spec rd = {DTF_SHARD_AUTO, 1, 1, DTF_COMPRESSION_NONE,
				   DTF_ON_ERROR_FAIL, 0};
	struct dtf_pipeline_opts o = {
		.files = (const char *const *)files, .nfiles = nfiles,
		.world = 1, .features = sp, .nfeatures = 2, .batch = BATCH,
		.read = &rd};
	struct dtf_pipeline *p;
	if (dtf_pipeline_open(&o, &p)) {
		fprintf(stderr, "bench_read: %s\n", dtf_error_msg());
		return 3;
	}
	int64_t records = dtf_pipeline_num_records(p);
	float *img = dtf_alloc_aligned((size_t)(BATCH * h * w * c) * 4);
	int32_t *lab = dtf_alloc_aligned(BATCH * 4);
	uint64_t ids[BATCH];
	void *dst[2] = {img, lab};

	double best_raw = 1e30, best_dec = 1e30;
	double checksum = 0;
	for (int rep = 0; rep < 5; rep++) {
		double t0 = now();
		uint64_t got = read_all(files, nfiles, buf, cap);
		double t1 = now();
		if (got != bytes) {
			fprintf(stderr, "bench_read: files changed\n");
			return 1;
		}
		if (t1 - t0 < best_raw)
			best_raw = t1 - t0;

		t0 = now();
		dtf_pipeline_begin_epoch(p, rep);
		int64_t n = 0;
		int count;
		do {
			if (dtf_pipeline_next(p, dst, ids, &count)) {
				fprintf(stderr, "bench_read: %s\n",
					dtf_error_msg());
				return 3;
			}
			n += count;
			if (count)
				checksum += img[0] + lab[count - 1];
		} while (count);
		t1 = now();
		if (n != records) {
			fprintf(stderr, "bench_read: %" PRId64 " of %" PRId64
					" records\n",
				n, records);
			return 1;
		}
		if (t1 - t0 < best_dec)
			best_dec = t1 - t0;
	}
	double mb = (double)bytes / 1e6;
	printf("data: %d files, %.1f MB, %" PRId64 " records of %" PRId64
	       "x%" PRId64 "x%" PRId64 " uint8 + int64 label (page cache warm)\n",
	       nfiles, mb, records, h, w, c);
	printf("raw read():              %8.0f MB/s  %10.0f records/s  (%.3f s)\n",
	       mb / best_raw, (double)records / best_raw, best_raw);
	printf("read+verify+decode (1T): %8.0f MB/s  %10.0f records/s  (%.3f s)\n",
	       mb / best_dec, (double)records / best_dec, best_dec);
	printf("decode / raw: %.2f (acceptance: >= 0.50)   [checksum %g]\n",
	       best_raw / best_dec, checksum);
	dtf_pipeline_free(p);
	dtf_free(img);
	dtf_free(lab);
	free(buf);
	return best_raw / best_dec >= 0.5 ? 0 : 1;
}
