/*
 * example.c - tf.train.Example wire decoding and encoding.
 *
 * Design: a cursor (`struct rd`) over the input with bounds-checked
 * varint / length readers; every nested message is a sub-cursor whose end
 * was checked against its parent's, so no read can leave the input.  The
 * decoder makes one pass over the map entries, matches each key against
 * the specs, and decodes the Feature's list straight into the caller's
 * output, counting values as it goes and writing only below the expected
 * count; a count mismatch is reported after the pass.  Nothing allocates.
 *
 * The builder writes the Features body after a reserved 11-byte gap and on
 * finish puts the Example header (tag + varint length) right-aligned into
 * the gap, so nothing is copied.
 */
#include "data/example.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "core/alloc.h"
#include "core/error.h"
#include "data/pb.h"

/* Protobuf wire types. */
enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

/* Reserved room in front of the builder's body for the Example header. */
#define HDR_GAP 11

struct rd {
	const uint8_t *p, *end;
};

static int get_varint(struct rd *r, uint64_t *v)
{
	uint64_t x = 0;
	for (int i = 0; i < 10; i++) {
		if (r->p >= r->end)
			return -1;
		uint8_t b = *r->p++;
		if (i == 9 && b > 1)
			return -1; /* more than 64 bits */
		x |= (uint64_t)(b & 0x7f) << (7 * i);
		if (!(b & 0x80)) {
			*v = x;
			return 0;
		}
	}
	return -1;
}

static int get_tag(struct rd *r, uint32_t *field, int *wt)
{
	uint64_t t;
	if (get_varint(r, &t) || (t >> 3) == 0 || (t >> 3) > 0x1fffffff)
		return -1;
	*field = (uint32_t)(t >> 3);
	*wt = (int)(t & 7);
	return 0;
}

/* A length-delimited field's payload as a sub-cursor. */
static int get_len(struct rd *r, struct rd *sub)
{
	uint64_t n;
	if (get_varint(r, &n) || n > (uint64_t)(r->end - r->p))
		return -1;
	sub->p = r->p;
	sub->end = r->p + n;
	r->p += n;
	return 0;
}

static int skip_field(struct rd *r, int wt)
{
	uint64_t v;
	struct rd sub;
	switch (wt) {
	case WT_VARINT:
		return get_varint(r, &v);
	case WT_I64:
		if (r->end - r->p < 8)
			return -1;
		r->p += 8;
		return 0;
	case WT_LEN:
		return get_len(r, &sub);
	case WT_I32:
		if (r->end - r->p < 4)
			return -1;
		r->p += 4;
		return 0;
	default:
		return -1; /* groups and invalid wire types */
	}
}

static float load_f32le(const uint8_t *p)
{
	uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
		     (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static const char *list_name(enum dtf_feature_type t)
{
	switch (t) {
	case DTF_FEATURE_BYTES: return "bytes_list";
	case DTF_FEATURE_FLOAT: return "float_list";
	case DTF_FEATURE_INT64: return "int64_list";
	}
	return "unknown list";
}

static const char *type_name(enum dtf_feature_type t)
{
	switch (t) {
	case DTF_FEATURE_BYTES: return "bytes";
	case DTF_FEATURE_FLOAT: return "float";
	case DTF_FEATURE_INT64: return "int64";
	}
	return "unknown";
}

static const char *decode_name(enum dtf_decode d)
{
	switch (d) {
	case DTF_DECODE_UINT8: return "uint8";
	case DTF_DECODE_INT8: return "int8";
	case DTF_DECODE_FLOAT32: return "float32";
	case DTF_DECODE_FLOAT16: return "float16";
	case DTF_DECODE_NONE: break;
	}
	return "none";
}

static size_t decode_size(enum dtf_decode d)
{
	return d == DTF_DECODE_FLOAT32 ? 4 : d == DTF_DECODE_FLOAT16 ? 2 : 1;
}

/* IEEE 754 binary16 (little-endian bytes) to float, exactly: normals,
 * subnormals, infinities and NaNs. */
static float load_f16le(const uint8_t *p)
{
	uint32_t h = (uint32_t)p[0] | (uint32_t)p[1] << 8;
	uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1f,
		 m = h & 0x3ff, u;
	if (e == 0x1f) {
		u = sign | 0x7f800000u | m << 13;
	} else if (e) {
		u = sign | (e + 112) << 23 | m << 13;
	} else if (m) { /* subnormal: m * 2^-24 */
		float f = (float)m * (1.0f / 16777216.0f);
		return sign ? -f : f;
	} else {
		u = sign;
	}
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* "[28, 28, 1]" into buf. */
static const char *shape_str(const struct dtf_feature_spec *s, char *buf,
			     size_t n)
{
	size_t k = 0;
	k += (size_t)snprintf(buf, n, "[");
	for (int i = 0; i < s->rank && i < DTF_MAX_RANK && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64,
				      i ? ", " : "", s->shape[i]);
	if (k < n)
		snprintf(buf + k, n - k, "]");
	return buf;
}

static int malformed(const struct dtf_feature_spec *s, const char *what)
{
	if (s)
		return dtf_error(DTF_ERR_DATA,
				 "feature '%s': malformed Example (%s)",
				 s->name, what);
	return dtf_error(DTF_ERR_DATA, "malformed Example (%s)", what);
}

static int count_error(const struct dtf_feature_spec *s, int64_t got,
		       int64_t numel)
{
	char sh[128];
	if (s->max_length > 0)
		return dtf_error(DTF_ERR_DATA,
				 "feature '%s' has %" PRId64 " values, more "
				 "than its max_length %" PRId64,
				 s->name, got, s->max_length);
	return dtf_error(DTF_ERR_DATA,
			 "feature '%s' has %" PRId64 " values but the job "
			 "declares shape %s (%" PRId64 " value%s)",
			 s->name, got, shape_str(s, sh, sizeof(sh)), numel,
			 numel == 1 ? "" : "s");
}

/* The hot loops of image decoding, written so the compiler vectorizes
 * them (restrict: the output never overlaps the record).  On x86-64 the
 * uint8 loop also has an AVX2 build chosen at run time: the output is
 * four times the input, so wide stores matter. */
#define U8_TO_F32_BODY                                                   \
	for (size_t i = 0; i < n; i++)                                   \
		out[i] = (float)in[i] * sc + off;

__attribute__((noinline)) static void
u8_to_f32_base(float *restrict out, const uint8_t *restrict in, size_t n,
	       float sc, float off)
{
	U8_TO_F32_BODY
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((noinline, target("avx2"))) static void
u8_to_f32_avx2(float *restrict out, const uint8_t *restrict in, size_t n,
	       float sc, float off)
{
	U8_TO_F32_BODY
}
#endif

#if defined(__x86_64__) && defined(__GNUC__)
/* 16 bytes in, 64 bytes out per step; the same arithmetic as the loop
 * above (a float multiply then a float add, not a fused multiply-add), so
 * every build gives the same bits. */
__attribute__((noinline, target("avx512f"))) static void
u8_to_f32_avx512(float *restrict out, const uint8_t *restrict in, size_t n,
		 float sc, float off)
{
	__m512 vs = _mm512_set1_ps(sc), vo = _mm512_set1_ps(off);
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m128i b = _mm_loadu_si128((const __m128i *)(in + i));
		__m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
		_mm512_storeu_ps(out + i,
				 _mm512_add_ps(_mm512_mul_ps(f, vs), vo));
	}
	for (; i < n; i++)
		out[i] = (float)in[i] * sc + off;
}
#endif

static void u8_to_f32(float *restrict out, const uint8_t *restrict in,
		      size_t n, float sc, float off)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (__builtin_cpu_supports("avx512f")) {
		u8_to_f32_avx512(out, in, n, sc, off);
		return;
	}
	if (__builtin_cpu_supports("avx2")) { /* a load of libgcc's flags */
		u8_to_f32_avx2(out, in, n, sc, off);
		return;
	}
#endif
	u8_to_f32_base(out, in, n, sc, off);
}

__attribute__((noinline)) static void
i8_to_f32(float *restrict out, const int8_t *restrict in, size_t n,
	  float sc, float off)
{
	for (size_t i = 0; i < n; i++)
		out[i] = (float)in[i] * sc + off;
}

static int decode_bytes(const struct dtf_feature_spec *s, struct rd list,
			int64_t numel, void *dst)
{
	struct rd val = {NULL, NULL};
	int64_t nvals = 0;
	while (list.p < list.end) {
		uint32_t field;
		int wt;
		if (get_tag(&list, &field, &wt))
			return malformed(s, "bad tag in bytes_list");
		if (field == 1 && wt == WT_LEN) {
			if (get_len(&list, &val))
				return malformed(s, "bytes value overruns");
			nvals++;
		} else if (skip_field(&list, wt)) {
			return malformed(s, "bad field in bytes_list");
		}
	}
	if (nvals != 1)
		return dtf_error(DTF_ERR_DATA,
				 "feature '%s' has %" PRId64 " bytes values but "
				 "the job expects 1",
				 s->name, nvals);
	size_t es = decode_size(s->decode);
	size_t have = (size_t)(val.end - val.p);
	if ((uint64_t)numel > SIZE_MAX / es || have != (size_t)numel * es) {
		char sh[128];
		return dtf_error(DTF_ERR_DATA,
				 "feature '%s' has %zu bytes but the job "
				 "declares shape %s of %s (%" PRId64 " bytes)",
				 s->name, have, shape_str(s, sh, sizeof(sh)),
				 decode_name(s->decode),
				 numel * (int64_t)es);
	}
	float *out = dst;
	const uint8_t *p = val.p;
	float sc = s->scale, off = s->offset;
	if (s->dtype == DTF_INT32) { /* ids: uint8 or int8 (check_specs) */
		int32_t *ids = dst;
		for (int64_t i = 0; i < numel; i++)
			ids[i] = s->decode == DTF_DECODE_INT8 ? (int8_t)p[i]
							     : (int32_t)p[i];
		return 0;
	}
	switch (s->decode) {
	case DTF_DECODE_UINT8:
		u8_to_f32(out, p, (size_t)numel, sc, off);
		break;
	case DTF_DECODE_INT8:
		i8_to_f32(out, (const int8_t *)p, (size_t)numel, sc, off);
		break;
	case DTF_DECODE_FLOAT32:
		for (int64_t i = 0; i < numel; i++)
			out[i] = load_f32le(p + 4 * i) * sc + off;
		break;
	case DTF_DECODE_FLOAT16:
		for (int64_t i = 0; i < numel; i++)
			out[i] = load_f16le(p + 2 * i) * sc + off;
		break;
	case DTF_DECODE_NONE:
		break;
	}
	return 0;
}

static int decode_floats(const struct dtf_feature_spec *s, struct rd list,
			 int64_t numel, void *dst)
{
	float *out = dst;
	int64_t n = 0;
	float sc = s->scale, off = s->offset;
	while (list.p < list.end) {
		uint32_t field;
		int wt;
		if (get_tag(&list, &field, &wt))
			return malformed(s, "bad tag in float_list");
		if (field == 1 && wt == WT_LEN) {
			struct rd pk;
			if (get_len(&list, &pk) || (pk.end - pk.p) % 4)
				return malformed(s, "bad packed float_list");
			for (; pk.p < pk.end; pk.p += 4, n++)
				if (n < numel)
					out[n] = load_f32le(pk.p) * sc + off;
		} else if (field == 1 && wt == WT_I32) {
			if (list.end - list.p < 4)
				return malformed(s, "float value overruns");
			if (n < numel)
				out[n] = load_f32le(list.p) * sc + off;
			list.p += 4;
			n++;
		} else if (skip_field(&list, wt)) {
			return malformed(s, "bad field in float_list");
		}
	}
	if (n < numel && s->max_length > 0) {
		for (int64_t i = n; i < numel; i++)
			out[i] = s->pad_value;
		return 0;
	}
	return n == numel ? 0 : count_error(s, n, numel);
}

/* Fill elements [from, numel) of a feature's output with `v` (an output
 * value: padding or a default). */
static void fill_value(const struct dtf_feature_spec *s, void *dst,
		       int64_t from, int64_t numel, double v)
{
	if (s->dtype == DTF_INT32)
		for (int64_t i = from; i < numel; i++)
			((int32_t *)dst)[i] = (int32_t)v;
	else
		for (int64_t i = from; i < numel; i++)
			((float *)dst)[i] = (float)v;
}

static int put_int64(const struct dtf_feature_spec *s, void *dst, int64_t i,
		     int64_t v)
{
	if (s->dtype == DTF_INT32) {
		if (v < INT32_MIN || v > INT32_MAX)
			return dtf_error(DTF_ERR_DATA,
					 "feature '%s' value %" PRId64
					 " at index %" PRId64
					 " is out of int32 range",
					 s->name, v, i);
		((int32_t *)dst)[i] = (int32_t)v;
	} else {
		((float *)dst)[i] = (float)v * s->scale + s->offset;
	}
	return 0;
}

static int decode_int64s(const struct dtf_feature_spec *s, struct rd list,
			 int64_t numel, void *dst)
{
	int64_t n = 0;
	uint64_t v;
	int rc;
	while (list.p < list.end) {
		uint32_t field;
		int wt;
		if (get_tag(&list, &field, &wt))
			return malformed(s, "bad tag in int64_list");
		if (field == 1 && wt == WT_LEN) {
			struct rd pk;
			if (get_len(&list, &pk))
				return malformed(s, "bad packed int64_list");
			while (pk.p < pk.end) {
				if (get_varint(&pk, &v))
					return malformed(s, "bad varint in "
							    "int64_list");
				if (n < numel &&
				    (rc = put_int64(s, dst, n, (int64_t)v)))
					return rc;
				n++;
			}
		} else if (field == 1 && wt == WT_VARINT) {
			if (get_varint(&list, &v))
				return malformed(s, "bad varint in int64_list");
			if (n < numel && (rc = put_int64(s, dst, n, (int64_t)v)))
				return rc;
			n++;
		} else if (skip_field(&list, wt)) {
			return malformed(s, "bad field in int64_list");
		}
	}
	if (n < numel && s->max_length > 0) {
		fill_value(s, dst, n, numel, s->pad_value);
		return 0;
	}
	return n == numel ? 0 : count_error(s, n, numel);
}

/* Decode one Feature message for spec s. */
static int decode_feature(const struct dtf_feature_spec *s, struct rd feat,
			  void *dst)
{
	struct rd list = {NULL, NULL};
	int kind = 0; /* field number of the list, 0 if none */
	while (feat.p < feat.end) {
		uint32_t field;
		int wt;
		if (get_tag(&feat, &field, &wt))
			return malformed(s, "bad tag in Feature");
		if (field >= 1 && field <= 3 && wt == WT_LEN) {
			if (get_len(&feat, &list))
				return malformed(s, "list overruns Feature");
			kind = (int)field;
		} else if (skip_field(&feat, wt)) {
			return malformed(s, "bad field in Feature");
		}
	}
	if (!kind)
		return dtf_error(DTF_ERR_DATA,
				 "feature '%s' has no value list (empty "
				 "Feature) but the job declares %s",
				 s->name, type_name(s->type));
	enum dtf_feature_type t = (enum dtf_feature_type)(kind - 1);
	if (t != s->type)
		return dtf_error(DTF_ERR_DATA,
				 "feature '%s' is a %s but the job declares %s",
				 s->name, list_name(t), type_name(s->type));
	int64_t numel = dtf_feature_numel(s);
	switch (t) {
	case DTF_FEATURE_BYTES: return decode_bytes(s, list, numel, dst);
	case DTF_FEATURE_FLOAT: return decode_floats(s, list, numel, dst);
	case DTF_FEATURE_INT64: return decode_int64s(s, list, numel, dst);
	}
	return 0;
}

static int check_specs(const struct dtf_feature_spec *specs, int nspecs)
{
	if (nspecs < 0 || nspecs > DTF_EXAMPLE_MAX_FEATURES)
		return dtf_error(DTF_ERR_CONFIG,
				 "%d features declared; at most %d supported",
				 nspecs, DTF_EXAMPLE_MAX_FEATURES);
	for (int i = 0; i < nspecs; i++) {
		const struct dtf_feature_spec *s = &specs[i];
		int bad = s->rank < 0 || s->rank > DTF_MAX_RANK;
		for (int d = 0; !bad && d < s->rank; d++)
			bad = s->shape[d] < 0;
		if (s->type == DTF_FEATURE_BYTES)
			bad |= s->decode == DTF_DECODE_NONE ||
			       (s->dtype != DTF_FLOAT32 &&
				!(s->dtype == DTF_INT32 &&
				  (s->decode == DTF_DECODE_UINT8 ||
				   s->decode == DTF_DECODE_INT8)));
		if (s->type == DTF_FEATURE_FLOAT)
			bad |= s->dtype != DTF_FLOAT32;
		if (s->max_length > 0)
			bad |= s->type == DTF_FEATURE_BYTES || s->rank != 1 ||
			       s->shape[0] != s->max_length;
		if (bad)
			return dtf_error(DTF_ERR_CONFIG,
					 "feature '%s': inconsistent spec "
					 "(type %s, decode %s, rank %d)",
					 s->name, type_name(s->type),
					 decode_name(s->decode), s->rank);
	}
	return 0;
}

/* The entries of an Example's feature map (Example.features, field 1;
 * Features.feature, field 1: map<string, Feature>) in record order,
 * other fields skipped: the walk shared by the decoder and the walker. */
struct entry_iter {
	struct rd ex; /* the rest of the Example */
	struct rd fs; /* the rest of the current Features */
};

/* The next map entry's key and value bytes in *key and *val ({NULL, NULL}
 * for a field the entry lacks); returns 1, 0 after the last entry, or
 * -DTF_ERR_DATA ("malformed Example (...)") for malformed bytes. */
static int next_entry(struct entry_iter *it, struct rd *key, struct rd *val)
{
	uint32_t field;
	int wt;
	for (;;) {
		while (it->fs.p >= it->fs.end) {
			if (it->ex.p >= it->ex.end)
				return 0;
			if (get_tag(&it->ex, &field, &wt))
				return malformed(NULL, "bad tag in Example");
			if (field != 1 || wt != WT_LEN) {
				if (skip_field(&it->ex, wt))
					return malformed(NULL, "bad field in "
							       "Example");
				continue;
			}
			if (get_len(&it->ex, &it->fs))
				return malformed(NULL, "Features overruns "
						       "the record");
		}
		struct rd entry;
		if (get_tag(&it->fs, &field, &wt))
			return malformed(NULL, "bad tag in Features");
		if (field != 1 || wt != WT_LEN) {
			if (skip_field(&it->fs, wt))
				return malformed(NULL, "bad field in Features");
			continue;
		}
		if (get_len(&it->fs, &entry))
			return malformed(NULL, "map entry overruns Features");
		*key = *val = (struct rd){NULL, NULL};
		while (entry.p < entry.end) {
			if (get_tag(&entry, &field, &wt))
				return malformed(NULL, "bad tag in map entry");
			struct rd *to = field == 1 ? key
				      : field == 2 ? val
						   : NULL;
			if (to && wt == WT_LEN) {
				if (get_len(&entry, to))
					return malformed(
						NULL, "map entry field overruns");
			} else if (skip_field(&entry, wt)) {
				return malformed(NULL, "bad field in map "
						       "entry");
			}
		}
		return 1;
	}
}

int dtf_example_decode(const uint8_t *buf, size_t len,
		       const struct dtf_feature_spec *specs, int nspecs,
		       void *const *dst)
{
	int rc = check_specs(specs, nspecs);
	if (rc)
		return rc;
	size_t name_len[DTF_EXAMPLE_MAX_FEATURES];
	for (int i = 0; i < nspecs; i++)
		name_len[i] = strnlen(specs[i].name, DTF_NAME_MAX);
	uint64_t found = 0;
	struct entry_iter it = {{buf, buf + len}, {NULL, NULL}};
	struct rd key, val;
	while ((rc = next_entry(&it, &key, &val)) > 0) {
		size_t kl = (size_t)(key.end - key.p);
		for (int i = 0; i < nspecs; i++) {
			if (name_len[i] != kl ||
			    (kl && memcmp(specs[i].name, key.p, kl)))
				continue;
			rc = decode_feature(&specs[i], val, dst[i]);
			if (rc)
				return rc;
			found |= (uint64_t)1 << i;
		}
	}
	if (rc < 0)
		return rc;
	for (int i = 0; i < nspecs; i++) {
		if (found & ((uint64_t)1 << i))
			continue;
		if (!specs[i].has_default)
			return dtf_error(DTF_ERR_DATA,
					 "feature '%s' is missing from the "
					 "Example",
					 specs[i].name);
		fill_value(&specs[i], dst[i], 0, dtf_feature_numel(&specs[i]),
			   specs[i].default_value);
	}
	return 0;
}

/* Walk a Feature for dtf_example_walk(). */
static int walk_feature(struct rd feat, struct dtf_example_feature_info *fi)
{
	struct rd list = {NULL, NULL};
	uint32_t field;
	int wt;
	while (feat.p < feat.end) {
		if (get_tag(&feat, &field, &wt))
			return -1;
		if (field >= 1 && field <= 3 && wt == WT_LEN) {
			if (get_len(&feat, &list))
				return -1;
			fi->has_list = 1;
			fi->type = (enum dtf_feature_type)(field - 1);
		} else if (skip_field(&feat, wt)) {
			return -1;
		}
	}
	if (!fi->has_list)
		return 0;
	while (list.p < list.end) {
		if (get_tag(&list, &field, &wt))
			return -1;
		if (field != 1) {
			if (skip_field(&list, wt))
				return -1;
			continue;
		}
		struct rd sub;
		uint64_t v;
		if (fi->type == DTF_FEATURE_BYTES && wt == WT_LEN) {
			if (get_len(&list, &sub))
				return -1;
			fi->count++;
			fi->bytes += (uint64_t)(sub.end - sub.p);
		} else if (fi->type == DTF_FEATURE_FLOAT && wt == WT_LEN) {
			if (get_len(&list, &sub) || (sub.end - sub.p) % 4)
				return -1;
			fi->count += (sub.end - sub.p) / 4;
		} else if (fi->type == DTF_FEATURE_INT64 && wt == WT_LEN) {
			if (get_len(&list, &sub))
				return -1;
			while (sub.p < sub.end) {
				if (get_varint(&sub, &v))
					return -1;
				fi->count++;
			}
		} else if ((fi->type == DTF_FEATURE_FLOAT && wt == WT_I32) ||
			   (fi->type == DTF_FEATURE_INT64 &&
			    wt == WT_VARINT)) {
			if (skip_field(&list, wt))
				return -1;
			fi->count++;
		} else if (skip_field(&list, wt)) {
			return -1;
		}
	}
	return 0;
}

int dtf_example_walk(const uint8_t *buf, size_t len, dtf_example_visit_fn fn,
		     void *ctx)
{
	struct entry_iter it = {{buf, buf + len}, {NULL, NULL}};
	struct rd key, val;
	int rc;
	while ((rc = next_entry(&it, &key, &val)) > 0) {
		struct dtf_example_feature_info fi;
		memset(&fi, 0, sizeof(fi));
		fi.name = (const char *)key.p;
		fi.name_len = (size_t)(key.end - key.p);
		if (val.p && walk_feature(val, &fi))
			return malformed(NULL, "bad Feature");
		int r = fn(ctx, &fi);
		if (r)
			return r;
	}
	return rc;
}

/* ---- encoder ---- */

void dtf_example_builder_init(struct dtf_example_builder *b)
{
	memset(b, 0, sizeof(*b));
	b->len = HDR_GAP;
}

void dtf_example_builder_deinit(struct dtf_example_builder *b)
{
	dtf_free(b->buf);
	memset(b, 0, sizeof(*b));
}

void dtf_example_builder_reset(struct dtf_example_builder *b)
{
	b->len = HDR_GAP;
	b->err = 0;
}

static int reserve(struct dtf_example_builder *b, size_t more)
{
	if (b->err)
		return b->err;
	if (more > SIZE_MAX / 2 - b->len)
		return b->err = dtf_error(DTF_ERR_NOMEM,
					  "Example too large");
	size_t need = b->len + more;
	if (need <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap *= 2;
	uint8_t *p = dtf_realloc(b->buf, cap);
	if (!p)
		return b->err = dtf_error(DTF_ERR_NOMEM,
					  "out of memory building an Example "
					  "of %zu bytes",
					  need);
	b->buf = p;
	b->cap = cap;
	return 0;
}

/* Write the map entry header up to (and including) the list's tag and
 * length; the caller appends `payload` bytes of list body. */
static int begin_entry(struct dtf_example_builder *b, const char *name,
		       int kind, size_t payload)
{
	size_t kl = strlen(name);
	size_t list = 1 + dtf_pb_varint_size(payload) + payload; /* in Feature */
	size_t entry = 1 + dtf_pb_varint_size(kl) + kl + 1 +
		       dtf_pb_varint_size(list) + list;
	int rc = reserve(b, 1 + 10 + entry);
	if (rc)
		return rc;
	uint8_t *p = b->buf + b->len;
	*p++ = 0x0a; /* Features.feature (1, LEN) */
	p += dtf_pb_put_varint(p, entry);
	*p++ = 0x0a; /* key (1, LEN) */
	p += dtf_pb_put_varint(p, kl);
	memcpy(p, name, kl);
	p += kl;
	*p++ = 0x12; /* value (2, LEN) */
	p += dtf_pb_put_varint(p, list);
	*p++ = (uint8_t)(kind << 3 | WT_LEN); /* the oneof list */
	p += dtf_pb_put_varint(p, payload);
	b->len = (size_t)(p - b->buf);
	return 0;
}

int dtf_example_builder_add_bytes(struct dtf_example_builder *b,
				  const char *name, const void *data, size_t n)
{
	size_t payload = 1 + dtf_pb_varint_size(n) + n;
	int rc = begin_entry(b, name, 1, payload);
	if (rc)
		return rc;
	uint8_t *p = b->buf + b->len;
	*p++ = 0x0a;
	p += dtf_pb_put_varint(p, n);
	if (n)
		memcpy(p, data, n);
	b->len = (size_t)(p - b->buf) + n;
	return 0;
}

int dtf_example_builder_add_floats(struct dtf_example_builder *b,
				   const char *name, const float *v, size_t n)
{
	if (n > SIZE_MAX / 8)
		return b->err = dtf_error(DTF_ERR_NOMEM, "Example too large");
	size_t payload = n ? 1 + dtf_pb_varint_size(4 * n) + 4 * n : 0;
	int rc = begin_entry(b, name, 2, payload);
	if (rc || !n)
		return rc;
	uint8_t *p = b->buf + b->len;
	*p++ = 0x0a;
	p += dtf_pb_put_varint(p, 4 * n);
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, &v[i], 4);
		for (int k = 0; k < 4; k++)
			*p++ = (uint8_t)(u >> (8 * k));
	}
	b->len = (size_t)(p - b->buf);
	return 0;
}

int dtf_example_builder_add_int64s(struct dtf_example_builder *b,
				   const char *name, const int64_t *v,
				   size_t n)
{
	size_t body = 0;
	for (size_t i = 0; i < n; i++)
		body += dtf_pb_varint_size((uint64_t)v[i]);
	size_t payload = n ? 1 + dtf_pb_varint_size(body) + body : 0;
	int rc = begin_entry(b, name, 3, payload);
	if (rc || !n)
		return rc;
	uint8_t *p = b->buf + b->len;
	*p++ = 0x0a;
	p += dtf_pb_put_varint(p, body);
	for (size_t i = 0; i < n; i++)
		p += dtf_pb_put_varint(p, (uint64_t)v[i]);
	b->len = (size_t)(p - b->buf);
	return 0;
}

int dtf_example_builder_finish(struct dtf_example_builder *b,
			       const uint8_t **data, size_t *len)
{
	int rc = reserve(b, 0);
	if (rc)
		return rc;
	if (!b->buf && (rc = reserve(b, 1)))
		return rc;
	size_t body = b->len - HDR_GAP;
	size_t h = 1 + dtf_pb_varint_size(body);
	uint8_t *p = b->buf + HDR_GAP - h;
	p[0] = 0x0a; /* Example.features (1, LEN) */
	dtf_pb_put_varint(p + 1, body);
	*data = p;
	*len = h + body;
	return 0;
}
