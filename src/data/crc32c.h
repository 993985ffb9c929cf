/*
 * crc32c.h - CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected
 * 0x82F63B78), the checksum of TFRecord framing and of checkpoints.
 *
 * The check value is crc32c("123456789") = 0xE3069283 (RFC 3720 B.4 lists
 * more vectors).  On x86-64 CPUs with SSE4.2 the crc32 instruction is used
 * (chosen at run time); elsewhere a slice-by-8 table.  Both give identical
 * results.  Pure functions: thread-safe.
 */
#ifndef DTF_DATA_CRC32C_H
#define DTF_DATA_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/*
 * Extend `crc` (a finished CRC-32C of earlier bytes, 0 for none) over
 * data[0..n): dtf_crc32c(dtf_crc32c(0, a, na), b, nb) equals the CRC of a
 * followed by b.  The pre/post inversion is done inside (LevelDB's
 * crc32c::Extend convention).
 */
uint32_t dtf_crc32c(uint32_t crc, const void *data, size_t n);

/* The portable table implementation (for tests comparing the two paths). */
uint32_t dtf_crc32c_sw(uint32_t crc, const void *data, size_t n);

/* 1 if the hardware (SSE4.2) path is in use on this CPU, else 0. */
int dtf_crc32c_hw_available(void);

/* Masked CRC as stored in TFRecord files (TensorFlow's crc32c::Mask): a CRC
 * of data that itself contains CRCs is weak, so it is rotated right by 15
 * bits and offset by a constant. */
#define DTF_CRC32C_MASK_DELTA 0xa282ead8u

static inline uint32_t dtf_crc32c_mask(uint32_t crc)
{
	return ((crc >> 15) | (crc << 17)) + DTF_CRC32C_MASK_DELTA;
}

static inline uint32_t dtf_crc32c_unmask(uint32_t masked)
{
	uint32_t rot = masked - DTF_CRC32C_MASK_DELTA;
	return (rot >> 17) | (rot << 15);
}

#endif
