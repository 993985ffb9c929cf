/*
 * tfrecord.h - TFRecord files: reading, writing and counting records.
 *
 * Framing as in TensorFlow's record_writer / record_reader: each record is
 *
 *     uint64  length          little-endian
 *     uint32  masked CRC-32C of the 8 length bytes
 *     byte    data[length]
 *     uint32  masked CRC-32C of data
 *
 * (CRC-32C and masking in data/crc32c.h).  A file may be compressed as a
 * whole (TFRecordOptions compression_type GZIP or ZLIB, via zlib): the
 * framing is then that of the uncompressed stream, offsets in messages
 * count uncompressed bytes, and gzip members written one after another
 * read as one stream (as gzip -d does).  Corrupt compressed data reads as
 * "<path>: record <i> at byte offset <o>: corrupt gzip stream (zlib: <msg>)"
 * (for the stream's own checksum, which zlib reads at its end, record <i>
 * is where the stream ends, and a HINT names `dtf-records verify`, which
 * finds the first damaged record by its CRC);
 * a compressed stream cut short reads as truncated record data.  A gzip or
 * zlib file read as uncompressed fails on its first header with a second
 * line "HINT: ... set `compression: gzip` ...".
 *
 * Every reader error is DTF_ERR_DATA and its message reads
 * "<path>: record <i> at byte offset <o>: <what>", where i is the 0-based
 * record index and o the offset of the record's first byte, and <what> is
 * one of: "truncated record header (k of 12 bytes)", "length CRC mismatch
 * (corrupt length field)", "truncated record data (k of n bytes)", "data
 * CRC mismatch (corrupt record)", or an I/O error.  A length whose CRC does
 * not match is never used, so a corrupt length cannot cause a huge
 * allocation; a length beyond the end of a regular file is reported as
 * truncated data before anything is allocated.
 *
 * Not thread-safe: one reader or writer per thread.
 */
#ifndef DTF_DATA_TFRECORD_H
#define DTF_DATA_TFRECORD_H

#include <stddef.h>
#include <stdint.h>

#include "data/input.h"

/* Bytes of framing around each record: 8 length + 4 + 4 CRCs. */
#define DTF_TFRECORD_HEADER 12
#define DTF_TFRECORD_OVERHEAD 16

struct dtf_tfrecord_reader;

/*
 * Open `path` for reading (the path is copied, for messages).  The record
 * buffer starts empty and grows to the largest record read; reserve it with
 * dtf_tfrecord_reader_reserve() to avoid growth later.
 * Errors: DTF_ERR_DATA (cannot open), DTF_ERR_NOMEM.
 */
int dtf_tfrecord_reader_open(const char *path,
			     struct dtf_tfrecord_reader **out);

/* As dtf_tfrecord_reader_open() for a file compressed as `compression`
 * (every file the reader is reopened on is read the same way); a NULL path
 * makes a reader with no file yet (for dtf_tfrecord_reader_reopen()).  The
 * inflate state is allocated by zlib at the first open and reset, not
 * reallocated, by reopen.  Errors as open, DTF_ERR_USAGE for an unknown
 * compression. */
int dtf_tfrecord_reader_open_c(const char *path,
			       enum dtf_compression compression,
			       struct dtf_tfrecord_reader **out);

/*
 * Close the current file and open `path` in the same reader, keeping the
 * record buffer (no dtf_ allocation unless the path is longer than any
 * before).  Errors as open; after an error the reader has no file.
 */
int dtf_tfrecord_reader_reopen(struct dtf_tfrecord_reader *r,
			       const char *path);

/* Make room for paths of up to `len` bytes, so reopen allocates nothing
 * (e.g. on another thread, later).  Errors: DTF_ERR_NOMEM. */
int dtf_tfrecord_reader_reserve_path(struct dtf_tfrecord_reader *r,
				     size_t len);

/* Grow the record buffer to at least `bytes`.  Errors: DTF_ERR_NOMEM. */
int dtf_tfrecord_reader_reserve(struct dtf_tfrecord_reader *r, size_t bytes);

/*
 * Read the next record and check both CRCs.  On success returns 1 and sets
 * *data / *len to the record bytes, which live in the reader's buffer until
 * the next call; returns 0 at a clean end of file (between records).
 * Errors: DTF_ERR_DATA as in the file comment, DTF_ERR_NOMEM.
 */
int dtf_tfrecord_reader_next(struct dtf_tfrecord_reader *r,
			     const uint8_t **data, size_t *len);

/*
 * 1 if the last failed dtf_tfrecord_reader_next() was a data CRC mismatch:
 * the framing held and the reader stands at the next record (its index and
 * offset were advanced past the bad one), so a caller that skips bad records
 * may go on reading.  0 after any other error: the framing cannot be
 * trusted from there on.
 */
int dtf_tfrecord_reader_resumable(const struct dtf_tfrecord_reader *r);

/* Size of the open file in bytes, or -1 when unknown (compressed). */
long long dtf_tfrecord_reader_size(const struct dtf_tfrecord_reader *r);

/*
 * Step over the next record checking only its length CRC (the data is
 * seeked over, its CRC not read).  Returns 1, 0 at end of file, or an
 * error as dtf_tfrecord_reader_next().  *len (may be NULL) gets the data
 * length in bytes.
 */
int dtf_tfrecord_reader_skip(struct dtf_tfrecord_reader *r, uint64_t *len);

/* Go back to the first record. Errors: DTF_ERR_DATA (seek failed). */
int dtf_tfrecord_reader_rewind(struct dtf_tfrecord_reader *r);

/* Index (0-based) and byte offset of the next record to be read. */
int64_t dtf_tfrecord_reader_index(const struct dtf_tfrecord_reader *r);
uint64_t dtf_tfrecord_reader_offset(const struct dtf_tfrecord_reader *r);

/* The path being read (owned by the reader). */
const char *dtf_tfrecord_reader_path(const struct dtf_tfrecord_reader *r);

/* Close and free; dtf_tfrecord_reader_free(NULL) is a no-op. */
void dtf_tfrecord_reader_free(struct dtf_tfrecord_reader *r);

/* What a framing scan of one file found. */
struct dtf_tfrecord_stats {
	int64_t records;     /* number of records */
	uint64_t bytes;      /* bytes of records, framing included (of the
				uncompressed stream: the file size when the
				file is not compressed) */
	uint64_t max_record; /* largest record data, bytes */
};

/*
 * Count the records of `path` by reading each 12-byte header, checking the
 * length CRC and seeking over the data (data CRCs are not checked; use a
 * reader for that).  Errors: DTF_ERR_DATA naming file, record index and
 * byte offset (a truncated last record included), DTF_ERR_NOMEM.
 */
int dtf_tfrecord_scan(const char *path, struct dtf_tfrecord_stats *stats);

/* dtf_tfrecord_scan() of a compressed file (which is read through). */
int dtf_tfrecord_scan_c(const char *path, enum dtf_compression compression,
			struct dtf_tfrecord_stats *stats);

struct dtf_tfrecord_writer;

/*
 * Create (truncate) `path` for writing records; output is buffered.
 * Errors: DTF_ERR_IO naming the path, DTF_ERR_NOMEM.
 */
int dtf_tfrecord_writer_open(const char *path,
			     struct dtf_tfrecord_writer **out);

/* As dtf_tfrecord_writer_open(), compressing the whole file as one gzip or
 * zlib stream (zlib level Z_DEFAULT_COMPRESSION, window 15, as
 * TensorFlow's writer). Errors: also DTF_ERR_USAGE (unknown compression). */
int dtf_tfrecord_writer_open_c(const char *path,
			       enum dtf_compression compression,
			       struct dtf_tfrecord_writer **out);

/* Append one record of `len` bytes (0 allowed).  Errors: DTF_ERR_IO. */
int dtf_tfrecord_writer_write(struct dtf_tfrecord_writer *w, const void *data,
			      size_t len);

/*
 * Push buffered records to the file (fflush), so a reader that follows the
 * file (TensorBoard) sees them.  Errors: DTF_ERR_IO.
 */
int dtf_tfrecord_writer_flush(struct dtf_tfrecord_writer *w);

/*
 * Flush, close and free the writer (NULL is a no-op returning 0).  Returns
 * DTF_ERR_IO if any write, the flush or the close failed, so a caller that
 * checks only this call still learns of a full disk.
 */
int dtf_tfrecord_writer_close(struct dtf_tfrecord_writer *w);

#endif
