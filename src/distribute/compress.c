/*
 * compress.c - 16-bit gradients on the wire (strategy.communication
 * compression fp16 or bf16): float32 <-> IEEE binary16 and bfloat16,
 * rounded to nearest even, and the MPI reduction operators that add
 * 16-bit values in float32.  The senders pre-divide by the number of
 * replicas so that the sum stays in range; the receivers multiply back.
 */
#include <mpi.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "distribute/strategy_impl.h"


/* ---- 16-bit floats -------------------------------------------------------- */

static uint32_t bits_of(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	return x;
}

static float float_of(uint32_t x)
{
	float f;
	memcpy(&f, &x, 4);
	return f;
}

uint16_t dtf_f32_to_f16(float f)
{
	uint32_t x = bits_of(f);
	uint32_t sign = (x >> 16) & 0x8000u;
	uint32_t e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
	if (e == 0xff) /* inf, nan (kept quiet) */
		return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));
	int he = (int)e - 127 + 15;
	if (he >= 31)
		return (uint16_t)(sign | 0x7c00u);
	if (he <= 0) { /* subnormal half, or zero */
		if (he < -10)
			return (uint16_t)sign;
		m |= 0x800000u;
		unsigned shift = (unsigned)(14 - he);
		uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1);
		uint32_t half = 1u << (shift - 1);
		if (rem > half || (rem == half && (hm & 1)))
			hm++;
		return (uint16_t)(sign | hm);
	}
	uint32_t h = sign | ((uint32_t)he << 10) | (m >> 13);
	uint32_t rem = m & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
		h++; /* a carry into the exponent is right, up to inf */
	return (uint16_t)h;
}

float dtf_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	if (e == 0) {
		float v = (float)m * 5.9604644775390625e-8f; /* 2^-24 */
		return sign ? -v : v;
	}
	if (e == 31)
		return float_of(sign | 0x7f800000u | (m << 13));
	return float_of(sign | ((e - 15 + 127) << 23) | (m << 13));
}

uint16_t dtf_f32_to_bf16(float f)
{
	uint32_t x = bits_of(f);
	if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu))
		return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
	x += 0x7fffu + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

float dtf_bf16_to_f32(uint16_t h)
{
	return float_of((uint32_t)h << 16);
}

/* MPI reduction operators: add 16-bit values in float32. */
static void sum_f16(void *in, void *inout, int *len, MPI_Datatype *type)
{
	const uint16_t *a = in;
	uint16_t *b = inout;
	for (int i = 0; i < *len; i++)
		b[i] = dtf_f32_to_f16(dtf_f16_to_f32(a[i]) +
				      dtf_f16_to_f32(b[i]));
}

static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *type)
{
	const uint16_t *a = in;
	uint16_t *b = inout;
	for (int i = 0; i < *len; i++)
		b[i] = dtf_f32_to_bf16(dtf_bf16_to_f32(a[i]) +
				       dtf_bf16_to_f32(b[i]));
}

void dtf_compress_pack(enum dtf_grad_compression c, const float *x,
		       uint16_t *h, size_t n, float scale)
{
	if (c == DTF_GRAD_COMPRESSION_FP16)
		for (size_t i = 0; i < n; i++)
			h[i] = dtf_f32_to_f16(x[i] * scale);
	else
		for (size_t i = 0; i < n; i++)
			h[i] = dtf_f32_to_bf16(x[i] * scale);
}

void dtf_compress_unpack(enum dtf_grad_compression c, const uint16_t *h,
			 float *x, size_t n, float scale)
{
	if (c == DTF_GRAD_COMPRESSION_FP16)
		for (size_t i = 0; i < n; i++)
			x[i] = dtf_f16_to_f32(h[i]) * scale;
	else
		for (size_t i = 0; i < n; i++)
			x[i] = dtf_bf16_to_f32(h[i]) * scale;
}

int dtf_strategy_allreduce_compressed(struct dtf_comm *c, float *buf,
				      uint16_t *scratch, size_t n,
				      enum dtf_grad_compression compression)
{
	if (compression == DTF_GRAD_COMPRESSION_NONE)
		return dtf_comm_allreduce_sum_f32(c, buf, n);
	MPI_Op op;
	MPI_TRY(MPI_Op_create(compression == DTF_GRAD_COMPRESSION_FP16 ? sum_f16
								  : sum_bf16,
			      1, &op));
	dtf_compress_pack(compression, buf, scratch, n, 1.0f / (float)c->size);
	int rc = 0;
	for (size_t off = 0; off < n && rc == 0; off += CHUNK) {
		size_t len = n - off < CHUNK ? n - off : CHUNK;
		int err = MPI_Allreduce(MPI_IN_PLACE, scratch + off, (int)len,
					MPI_UINT16_T, op, c->comm);
		if (err != MPI_SUCCESS)
			rc = dtf_comm_mpi_fail(err, "MPI_Allreduce");
	}
	MPI_Op_free(&op);
	if (rc == 0)
		dtf_compress_unpack(compression, scratch, buf, n, (float)c->size);
	return rc;
}

int dtf_compress_init(struct dtf_compress *c, enum dtf_grad_compression kind)
{
	c->kind = kind;
	c->op = MPI_OP_NULL;
	c->half = NULL;
	if (kind != DTF_GRAD_COMPRESSION_NONE)
		MPI_Op_create(kind == DTF_GRAD_COMPRESSION_FP16 ? sum_f16
							      : sum_bf16,
			      1, &c->op);
	return 0;
}

void dtf_compress_deinit(struct dtf_compress *c)
{
	int fin = 0;
	MPI_Finalized(&fin);
	if (!fin && c->op != MPI_OP_NULL)
		MPI_Op_free(&c->op);
	c->op = MPI_OP_NULL;
	dtf_free(c->half);
	c->half = NULL;
}
