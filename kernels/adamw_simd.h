/*
 * adamw_simd.h - the SIMD loop of the Adam/AdamW kernel and of its roofline,
 * written once over a few vector primitives that each SIMD file defines
 * before including this (internal to kernels/adamw_avx2.c and
 * kernels/adamw_avx512.c):
 *
 *   ADAMW_W                     floats per vector
 *   vf                          the vector type
 *   v_set1(x), v_add(a, b), v_mul(a, b), v_div(a, b), v_sqrt(a)
 *                               IEEE fp32, lane by lane (separate
 *                               multiplies and adds: no FMA)
 *   v_ld(dt, base, i)           ADAMW_W elements of dtype @dt at element
 *                               @i of @base, to fp32 (any alignment)
 *   v_st(dt, base, i, x)        the same back, rounded to nearest even
 *                               (bf16: NaN stays a quiet NaN, as
 *                               f32_to_bf16(); fp16: as f32_to_f16());
 *                               ADAMW_OUT_NONE stores nothing.  x is
 *                               always the result of an arithmetic
 *                               operation, so a NaN in it is quiet
 *                               (v_st may rely on that)
 *   vi                          the 32-bit integer vector type
 *   v_sr_bits(key, lo)          sr_hash32(key ^ (lo + lane)) in each lane
 *   v_sr_bits_al(key, lo)       the same, lo a multiple of ADAMW_W
 *   v_sr_bits_al_pre(key, lo), v_sr_fin(x)
 *                               the same before the hash's last step
 *                               (x ^= x >> 16), and that step
 *   v_lane_index(lo), v_sr_hash(key, x)
 *                               lo + lane; sr_hash32(key ^ x) in each lane
 *   v_lo16(r), v_hi16(r), v_out_bits(r)
 *                               r & 0xffff, r >> 16, sr_out_bits(r)
 *   v_st_bf16_sr(base, i, x, r) f32_to_bf16_sr() of each lane of x with
 *                               the bits of r (each lane < 2^16), stored
 *
 * and for q8 moments (adam_math.h, "q8 moments"):
 *
 *   v_ld_i32(base, i), v_st_i32(base, i, r)
 *                               ADAMW_W 32-bit lanes at element @i
 *   v_ld_u8(base, i), v_ld_s8(base, i)
 *                               ADAMW_W bytes at @i, zero- or
 *                               sign-extended into the 32-bit lanes of a vi
 *   v_bits(x)                   the bits of x
 *   v_st_u8(base, i, c)         the lanes of c (each <= 255) as bytes
 *   v_st_u8x4(base, i, a, b, c, d)
 *                               v_st_u8 of a, b, c and d at i, i + ADAMW_W,
 *                               i + 2 ADAMW_W, i + 3 ADAMW_W
 *   v_q8_dec_m(c, scale), v_q8_dec_v(c, scale)
 *                               q8_dec_m(), q8_dec_v() of each lane
 *   v_q8_enc_m(x, inv, rnd), v_q8_enc_v(x, inv, rnd)
 *                               q8_enc_m(), q8_enc_v() of each lane, with
 *                               the rounding bits of the lanes of rnd
 *   v_absbits(x), v_imax(a, b), v_hmax(a)
 *                               the bits of x with the sign cleared; the
 *                               lane by lane maximum of such bits (< 2^31);
 *                               the largest lane
 *   v_imin(a, b), v_hmin(a)     the same for the minimum
 *   v_iset1(k), v_xor1(c), v_iand(a, b)
 *                               k in each lane; c ^ 1; a & b
 *   v_q8_rnd_pre(x, &rm, &rv)   the rounding bits of the codes, (r & 0xffff)
 *                               << 4 and (r >> 16) << 4, of r = v_sr_fin(x)
 *   v_q8_dec_m_nrm(sc, scale2), v_q8_dec_v_nrm(c, scale2),
 *   v_q8_enc_nrm(x, inv2, rnd)  the same as the four above for normal
 *                               codes and values, the rebias (Q8_M_REBIAS,
 *                               Q8_V_REBIAS) folded into the scale or the
 *                               inverse (simd_q8_update)
 *                               (exp_avg's v_q8_enc_nrm code has its sign at
 *                               bit 11, stored by v_st_u8x4_sgn and
 *                               v_st_u8_sgn at bit 7)
 *   v_q8_codes_normal(cm, cv)   whether the TIER_Q8_BLOCK codes at cm and
 *                               cv all have a magnitude >= 8
 *   ADAMW_SIMD_KERNEL, ADAMW_SIMD_ROOFLINE
 *                               the names of the two bodies to define
 *
 * The vector update is adam_elem() of adam_math.h operation for operation,
 * in the same order, so it equals the scalar version bit for bit; the
 * ragged tail (fewer than ADAMW_W elements) is the scalar body itself.
 */
#ifndef ADAMW_W
#error "adamw_simd.h is included by a SIMD file after its primitives"
#endif

/*
 * ADAMW_SPECIALIZE: the flags a loop tests (L2 term, unit bias correction,
 * stochastic roundings) become constants, one copy of the loop for each
 * value, so that none is tested inside.  Without it (kernels/meson.build
 * turns it off under the sanitizers, where the copies took minutes to
 * compile; an unoptimized compile folds nothing anyway) one loop takes the
 * flags as variables: the same operations in the same order.
 */
#ifndef ADAMW_SPECIALIZE
#ifdef __OPTIMIZE__
#define ADAMW_SPECIALIZE 1
#else
#define ADAMW_SPECIALIZE 0
#endif
#endif

/* adam_consts as vectors: the per-step scalars every lane uses. */
struct simd_consts {
	vf grad_scale, l2c, decay, beta1, beta2, one_minus_beta1, one_minus_beta2;
	vf inv_bc2_sqrt, eps, neg_step_size;
};

ADAMW_INLINE struct simd_consts simd_consts_of(const struct adam_consts *c)
{
	struct simd_consts k;

	k.grad_scale = v_set1(c->grad_scale);
	k.l2c = v_set1(c->l2);
	k.decay = v_set1(c->decay);
	k.beta1 = v_set1(c->beta1);
	k.beta2 = v_set1(c->beta2);
	k.one_minus_beta1 = v_set1(c->one_minus_beta1);
	k.one_minus_beta2 = v_set1(c->one_minus_beta2);
	k.inv_bc2_sqrt = v_set1(c->inv_bc2_sqrt);
	k.eps = v_set1(c->eps);
	k.neg_step_size = v_set1(c->neg_step_size);
	return k;
}

/* adam_elem() on a vector of lanes, operation for operation (@l2 and
 * @unit_bc2 as simd_range() says). */
ADAMW_INLINE void simd_adam(const struct simd_consts *k, vf g, vf *p, vf *m, vf *v, bool l2,
			    bool unit_bc2)
{
	vf pp = *p, mm, vv, denom;

	g = v_mul(g, k->grad_scale);
	if (l2)
		g = v_add(g, v_mul(k->l2c, pp));
	pp = v_mul(pp, k->decay);
	mm = v_add(v_mul(*m, k->beta1), v_mul(k->one_minus_beta1, g));
	vv = v_add(v_mul(*v, k->beta2), v_mul(v_mul(k->one_minus_beta2, g), g));
	denom = unit_bc2 ? v_add(v_sqrt(vv), k->eps)
			 : v_add(v_mul(v_sqrt(vv), k->inv_bc2_sqrt), k->eps);
	*p = v_add(pp, v_mul(k->neg_step_size, v_div(mm, denom)));
	*m = mm;
	*v = vv;
}

/*
 * The update of elements [begin, end), for one dtype combination.  @sr:
 * the bf16 moments round stochastically (c->sr_moments, md bf16); @sro the
 * bf16 copy (c->sr_out, od bf16); @key: the random stream's key for the
 * elements' index >> 32, the same for all of them (the caller splits the
 * range where it changes).  @l2:
 * c->l2 != 0 (Adam's L2 term, as adam_elem() tests it).  @unit_bc2:
 * c->inv_bc2_sqrt == 1, which it becomes once beta2^step < 2^-24 (after
 * 16.6k steps with beta2 = 0.999, 325 with 0.95): x * 1 is x exactly (a
 * NaN from sqrt is already quiet), so the multiply is left out.
 */
ADAMW_INLINE void simd_range(const struct adam_consts *c, const struct tier_adam_tensors *a,
			     size_t begin, size_t end, int md, int gd, int od, bool l2,
			     bool unit_bc2, bool sr, bool sro, uint32_t key)
{
	const struct simd_consts k = simd_consts_of(c);
	/* In locals: the stores through them could alias *a otherwise. */
	void *const param = a->param, *const exp_avg = a->exp_avg, *const exp_avg_sq = a->exp_avg_sq;
	void *const param_out = a->param_out;
	const void *const grad = a->grad;
	const uint32_t lo0 = (uint32_t)a->index0;
	size_t i = begin;

	for (; end - i >= ADAMW_W; i += ADAMW_W) {
		vf g = v_ld(gd, grad, i);
		vf p = v_ld(TIER_FP32, param, i);
		vf m = v_ld(md, exp_avg, i);
		vf v = v_ld(md, exp_avg_sq, i);
		vi r;

		simd_adam(&k, g, &p, &m, &v, l2, unit_bc2);

		v_st(TIER_FP32, param, i, p);
		if (sr || sro)
			r = v_sr_bits(key, lo0 + (uint32_t)i);
		if (sr) {
			v_st_bf16_sr(exp_avg, i, m, v_lo16(r));
			v_st_bf16_sr(exp_avg_sq, i, v, v_hi16(r));
		} else {
			v_st(md, exp_avg, i, m);
			v_st(md, exp_avg_sq, i, v);
		}
		if (sro)
			v_st_bf16_sr(param_out, i, p, v_out_bits(r));
		else
			v_st(od, param_out, i, p);
	}
	adamw_scalar_range(c, a, i, end, md, gd, od);
}

/* simd_range() over [begin, end) in pieces whose elements' index >> 32
 * is the same (one piece unless the range crosses a multiple of 2^32). */
ADAMW_INLINE void simd_range_sr(const struct adam_consts *c, const struct tier_adam_tensors *a,
				size_t begin, size_t end, int md, int gd, int od, bool l2,
				bool unit_bc2)
{
	const bool sr = md == TIER_BF16 && c->sr_moments;
	const bool sro = od == TIER_BF16 && c->sr_out;

	if (ADAMW_SPECIALIZE && !sr && !sro) {
		simd_range(c, a, begin, end, md, gd, od, l2, unit_bc2, false, false, 0);
		return;
	}
	while (begin < end) {
		uint64_t idx = a->index0 + begin;
		uint64_t left = ((uint64_t)1 << 32) - (uint32_t)idx;
		size_t stop = end - begin > left ? begin + (size_t)left : end;
		uint32_t key = sr_key(c->sr_base, (uint32_t)(idx >> 32));

#if ADAMW_SPECIALIZE
		if (sr && sro)
			simd_range(c, a, begin, stop, md, gd, od, l2, unit_bc2, true, true, key);
		else if (sr)
			simd_range(c, a, begin, stop, md, gd, od, l2, unit_bc2, true, false, key);
		else
			simd_range(c, a, begin, stop, md, gd, od, l2, unit_bc2, false, true, key);
#else
		simd_range(c, a, begin, stop, md, gd, od, l2, unit_bc2, sr, sro, key);
#endif
		begin = stop;
	}
}

/* The roofline of elements [begin, end): the same loads and stores. */
ADAMW_INLINE void simd_roof_range(const struct tier_adam_tensors *a, size_t begin, size_t end,
				  int md, int gd, int od)
{
	void *const param = a->param, *const exp_avg = a->exp_avg, *const exp_avg_sq = a->exp_avg_sq;
	void *const param_out = a->param_out;
	const void *const grad = a->grad;
	size_t i = begin;

	for (; end - i >= ADAMW_W; i += ADAMW_W) {
		vf g = v_ld(gd, grad, i);
		vf p = v_add(v_ld(TIER_FP32, param, i), g);
		vf m = v_add(v_ld(md, exp_avg, i), g);
		vf v = v_add(v_ld(md, exp_avg_sq, i), g);

		v_st(TIER_FP32, param, i, p);
		v_st(md, exp_avg, i, m);
		v_st(md, exp_avg_sq, i, v);
		v_st(od, param_out, i, p);
	}
	adamw_scalar_roof_range(a, i, end, md, gd, od);
}

/* ------------------------------------------------------- q8 moments */

/*
 * Software prefetch, Q8_PREFETCH_BLOCKS q8 blocks ahead of the update: the
 * codes of a block at its start (simd_q8_range), the parameters, gradient
 * and copy one vector at a time inside pass 1, so that the requests are
 * spread over the block's arithmetic rather than issued in a burst.  The
 * addresses are formed as integers: past the end of an array a prefetch
 * is harmless, a pointer would not be.
 */
#define Q8_PREFETCH_BLOCKS 2

ADAMW_INLINE void q8_prefetch_at(const void *base, size_t byte)
{
	__builtin_prefetch((const void *)((uintptr_t)base + byte), 1, 3);
}

/* The lines of element @i of the parameters, the gradient and the copy
 * (the caller's locals: a load through *a each time could not be hoisted
 * past the stores). */
ADAMW_INLINE void q8_prefetch_elems(const void *param, const void *grad, const void *param_out,
				    size_t i, int gd, int od)
{
	q8_prefetch_at(param, 4 * i);
	q8_prefetch_at(grad, i * (gd == TIER_FP32 ? 4u : 2u));
	if (od != ADAMW_OUT_NONE)
		q8_prefetch_at(param_out, i * (od == TIER_FP32 ? 4u : 2u));
}

/* The lines of both codes of elements [b, b + TIER_Q8_BLOCK). */
ADAMW_INLINE void q8_prefetch_codes(const struct tier_adam_tensors *a, size_t b)
{
	for (size_t o = 0; o < TIER_Q8_BLOCK; o += 64) {
		q8_prefetch_at(a->exp_avg, b + o);
		q8_prefetch_at(a->exp_avg_sq, b + o);
	}
}

/* How pass 2 of a q8 block encodes (simd_q8_encode). */
enum q8_enc_mode {
	Q8_ENC_ANY,    /* v_q8_enc_m/v: any value */
	Q8_ENC_MASKED, /* the same, then a mask: a scale had no inverse */
	Q8_ENC_NORMAL, /* v_q8_enc_m/v_nrm: every x normal, the rebias in inv */
};

/* The codes of the vector at offset @o of the buffers, in *cm and *cv. */
ADAMW_INLINE void simd_q8_codes(const float *mb, const float *vb, const uint32_t *rb, size_t o,
				vf vinvm, vf vinvv, vi keepm, vi keepv, bool srm,
				enum q8_enc_mode mode, vi *cm, vi *cv)
{
	vf m = v_ld(TIER_FP32, mb, o), v = v_ld(TIER_FP32, vb, o);
	vi rm = v_iset1((int)Q8_RND_NEAREST), rv = rm;

	if (srm) /* the hash before its last step (simd_q8_pass1) */
		v_q8_rnd_pre(v_ld_i32(rb, o), &rm, &rv);
	if (mode == Q8_ENC_NORMAL) {
		*cm = v_q8_enc_nrm(m, vinvm, rm);
		*cv = v_q8_enc_nrm(v, vinvv, rv);
		return;
	}
	*cm = v_q8_enc_m(m, vinvm, rm);
	*cv = v_q8_enc_v(v, vinvv, rv);
	if (mode == Q8_ENC_MASKED) {
		*cm = v_iand(*cm, keepm);
		*cv = v_iand(*cv, keepv);
	}
}

/*
 * Pass 2 of a q8 block (simd_q8_store): the codes of the vectors of
 * [begin, end) from the buffers, as @mode says.  Q8_ENC_MASKED: a scale of
 * the block has no inverse (q8_scale: NaN, inf or below 2^-126), so that
 * moment's codes are 0, by the masks; Q8_ENC_NORMAL: @invm and @invv
 * carry the rebias (v_q8_enc_nrm).
 */
ADAMW_INLINE size_t simd_q8_encode(const struct tier_adam_tensors *a, size_t begin, size_t end,
				   const float *mb, const float *vb, const uint32_t *rb, float invm,
				   float invv, bool srm, enum q8_enc_mode mode)
{
	void *const exp_avg = a->exp_avg, *const exp_avg_sq = a->exp_avg_sq;
	const vf vinvm = v_set1(invm), vinvv = v_set1(invv);
	const vi keepm = v_iset1(invm != 0.0f ? -1 : 0), keepv = v_iset1(invv != 0.0f ? -1 : 0);
	size_t i;

	/* four vectors at a time, their codes stored by one v_st_u8x4 each */
	for (i = begin; end - i >= 4 * ADAMW_W; i += 4 * ADAMW_W) {
		vi cm[4], cv[4];

		for (int k = 0; k < 4; k++)
			simd_q8_codes(mb, vb, rb, i - begin + (size_t)k * ADAMW_W, vinvm, vinvv,
				      keepm, keepv, srm, mode, &cm[k], &cv[k]);
		if (mode == Q8_ENC_NORMAL) /* exp_avg's sign at bit 11 */
			v_st_u8x4_sgn(exp_avg, i, cm[0], cm[1], cm[2], cm[3]);
		else
			v_st_u8x4(exp_avg, i, cm[0], cm[1], cm[2], cm[3]);
		v_st_u8x4(exp_avg_sq, i, cv[0], cv[1], cv[2], cv[3]);
	}
	for (; end - i >= ADAMW_W; i += ADAMW_W) {
		vi cm, cv;

		simd_q8_codes(mb, vb, rb, i - begin, vinvm, vinvv, keepm, keepv, srm, mode, &cm,
			      &cv);
		if (mode == Q8_ENC_NORMAL)
			v_st_u8_sgn(exp_avg, i, cm);
		else
			v_st_u8(exp_avg, i, cm);
		v_st_u8(exp_avg_sq, i, cv);
	}
	return i;
}

/* A q8 block between its two passes (simd_q8_update, simd_q8_store). */
struct q8_block {
	float mb[TIER_Q8_BLOCK], vb[TIER_Q8_BLOCK]; /* the updated moments */
	uint32_t rb[TIER_Q8_BLOCK]; /* their random bits before the last step (v_sr_fin) */
	size_t begin, end;
	uint32_t key, lo;
	float invm, invv;    /* q8_scale()'s */
	enum q8_enc_mode mode;
};

/*
 * One q8 block, elements [begin, end) (adamw_q8_block_scalar() of
 * adamw_impl.h is the definition), in two passes.  simd_q8_update, pass
 * 1: the update in vectors (the ragged tail of a partial last block by
 * the scalar element), the new moments into @q's buffers, the largest and
 * smallest magnitudes as integers on the bits (order-free); then the
 * scales, stored, and how pass 2 encodes.  simd_q8_store, pass 2: the
 * codes from the buffers.  The random bits of an element are hashed once,
 * in pass 1, and kept for pass 2; a block whose scale has no inverse
 * (q8_scale) gets codes 0 by a mask, in a loop of its own.
 *
 * Two fast paths leave out the subnormal codes' arithmetic, with the same
 * bits:
 * - decode (@dn): a whole block whose codes are all normal
 *   (v_q8_codes_normal), whose exp_avg scale is in (0, 2^16) (the sign
 *   of a code applies before the multiply) and whose exp_avg_sq scale's
 *   magnitude is below 2^32, so that scale * Q8_M_REBIAS and scale *
 *   Q8_V_REBIAS are exact and finite: v_q8_dec_m_nrm, v_q8_dec_v_nrm.  (A
 *   subnormal code's value would come out right too, as the subnormal
 *   float with bits mag << 20, but not where the CPU reads subnormal
 *   inputs as zero);
 * - encode: a block whose smallest |m| * invm and v * invv are normal
 *   codes (>= 2^-14 and 2^-30), and so every x of its vectors (rounding
 *   a product is monotonic), whose exp_avg_sq values all have the sign
 *   clear, and whose inverses are >= 2^-14 and 2^-30, so that inv /
 *   Q8_M_REBIAS and inv / Q8_V_REBIAS are exact and normal, as every x /
 *   rebias is then: v_q8_enc_nrm.  x <= 1 there, so
 *   the clamp to 1 is left out (q8_enc_m clamps for a product of inv
 *   that rounds above 1: 1 + 2^-23 at most, whose code is 1's anyway).
 *
 * exp_avg_sq's maximum and minimum are taken on the bits as signed
 * integers (no sign to clear): when the minimum is negative, some value
 * has its sign set, and the maximum of the magnitudes is taken again.
 */
/* The vectors of pass 1 of a q8 block (simd_q8_update), from @begin:
 * returns where they stop; the maxima and minima in *@mx and *@mn. */
ADAMW_INLINE size_t simd_q8_pass1(const struct adam_consts *c, const struct tier_adam_tensors *a,
				  size_t begin, size_t end, int gd, int od, bool l2, bool unit_bc2,
				  bool srm, bool sro, bool dn, vf vsm, vf vsv, uint32_t key,
				  uint32_t lo, struct q8_block *q, vi mx[2], vi mn[2])
{
	const struct simd_consts k = simd_consts_of(c);
	void *const param = a->param, *const exp_avg = a->exp_avg, *const exp_avg_sq = a->exp_avg_sq;
	void *const param_out = a->param_out;
	const void *const grad = a->grad;
	float *const mb = q->mb, *const vb = q->vb;
	uint32_t *const rb = q->rb;
	vi mxm = v_iset1(0), mxv = v_iset1(0), mnm = v_iset1(0x7fffffff), mnv = mnm;
	size_t i = begin;

	for (; end - i >= ADAMW_W; i += ADAMW_W) {
		vf g, p, m, v;
		vi r, am, av;

		q8_prefetch_elems(param, grad, param_out, i + Q8_PREFETCH_BLOCKS * TIER_Q8_BLOCK, gd,
				  od);
		g = v_ld(gd, grad, i);
		p = v_ld(TIER_FP32, param, i);
		if (dn) {
			m = v_q8_dec_m_nrm(v_ld_s8(exp_avg, i), vsm);
			v = v_q8_dec_v_nrm(v_ld_u8(exp_avg_sq, i), vsv);
		} else {
			m = v_q8_dec_m(v_ld_u8(exp_avg, i), vsm);
			v = v_q8_dec_v(v_ld_u8(exp_avg_sq, i), vsv);
		}

		simd_adam(&k, g, &p, &m, &v, l2, unit_bc2);

		v_st(TIER_FP32, param, i, p);
		if (srm || sro) /* lo: a multiple of TIER_Q8_BLOCK (adamw_check) */
			r = v_sr_bits_al_pre(key, lo + (uint32_t)(i - begin));
		if (srm)
			v_st_i32(rb, i - begin, r);
		if (sro)
			v_st_bf16_sr(param_out, i, p, v_out_bits(v_sr_fin(r)));
		else
			v_st(od, param_out, i, p);
		v_st(TIER_FP32, mb, i - begin, m);
		v_st(TIER_FP32, vb, i - begin, v);
		am = v_absbits(m);
		av = v_bits(v); /* signed: below 0 where the sign is set */
		mxm = v_imax(mxm, am);
		mxv = v_imax(mxv, av);
		mnm = v_imin(mnm, am);
		mnv = v_imin(mnv, av);
	}
	mx[0] = mxm;
	mx[1] = mxv;
	mn[0] = mnm;
	mn[1] = mnv;
	return i;
}

ADAMW_INLINE void simd_q8_update(const struct adam_consts *c, const struct tier_adam_tensors *a,
				 size_t begin, size_t end, int gd, int od, bool l2, bool unit_bc2,
				 bool srm, bool sro, struct q8_block *q)
{
	const void *const exp_avg = a->exp_avg, *const exp_avg_sq = a->exp_avg_sq;
	const size_t blk = begin / TIER_Q8_BLOCK;
	const float sm = adamw_ld_f32(a->exp_avg_scale, blk), sv = adamw_ld_f32(a->exp_avg_sq_scale, blk);
	const bool dn = end - begin == TIER_Q8_BLOCK && sm > 0.0f && sm < 0x1p16f &&
			sv > -0x1p32f && sv < 0x1p32f &&
			v_q8_codes_normal((const char *)exp_avg + begin, (const char *)exp_avg_sq + begin);
	const vf vsm = v_set1(dn ? sm * Q8_M_REBIAS : sm), vsv = v_set1(dn ? sv * Q8_V_REBIAS : sv);
	const uint32_t key = srm || sro ? adamw_q8_key(c, a, begin) : 0;
	const uint32_t lo = (uint32_t)(a->index0 + begin);
	float *const mb = q->mb, *const vb = q->vb, invm, invv;
	vi mx[2], mn[2];
	uint32_t hm, hv, lv;
	size_t i;

	/* dn as a constant in each call: a loop each, fewer constants live */
	if (dn)
		i = simd_q8_pass1(c, a, begin, end, gd, od, l2, unit_bc2, srm, sro, true, vsm, vsv,
				  key, lo, q, mx, mn);
	else
		i = simd_q8_pass1(c, a, begin, end, gd, od, l2, unit_bc2, srm, sro, false, vsm, vsv,
				  key, lo, q, mx, mn);
	hm = v_hmax(mx[0]);
	hv = v_hmax(mx[1]);
	lv = v_hmin(mn[1]);
	if ((int32_t)lv < 0) {
		/* an exp_avg_sq with its sign set (NaN, -0, or from a negative
		 * scale): the maximum of the magnitudes, by the element */
		hv = 0;
		for (size_t j = begin; j < i; j++) {
			uint32_t uv = f32_bits(vb[j - begin]) & 0x7fffffffu;

			hv = uv > hv ? uv : hv;
		}
	}
	q->begin = begin;
	q->end = end;
	q->key = key;
	q->lo = lo;
	for (; i < end; i++) {
		uint32_t r = sro ? sr_hash32(key ^ (lo + (uint32_t)(i - begin))) : 0;
		uint32_t um, uv;

		adamw_q8_elem(c, a, i, sm, sv, r, gd, od, sro, &mb[i - begin], &vb[i - begin]);
		um = f32_bits(mb[i - begin]) & 0x7fffffffu;
		uv = f32_bits(vb[i - begin]) & 0x7fffffffu;
		hm = um > hm ? um : hm;
		hv = uv > hv ? uv : hv;
	}
	adamw_q8_scales(a, blk, hm, hv, &invm, &invv);
	q->invm = invm;
	q->invv = invv;
	if (invm == 0.0f || invv == 0.0f) {
		q->mode = Q8_ENC_MASKED;
	} else if (invm >= 0x1p-14f && invv >= 0x1p-30f &&
		   f32_from_bits(v_hmin(mn[0])) * invm >= 0x1p-14f && f32_from_bits(lv) * invv >= 0x1p-30f) {
		/* (a minimum with the sign set is a negative float or a NaN:
		 * the last test fails for it) */
		q->mode = Q8_ENC_NORMAL;
	} else {
		q->mode = Q8_ENC_ANY;
	}
}

ADAMW_INLINE void simd_q8_store(const struct tier_adam_tensors *a, const struct q8_block *q,
				bool srm)
{
	size_t i;

	/* the mode as a constant in each call: one loop each; the fast path
	 * takes the inverses with the rebias (v_q8_enc_nrm) */
	if (q->mode == Q8_ENC_NORMAL)
		i = simd_q8_encode(a, q->begin, q->end, q->mb, q->vb, q->rb, q->invm / Q8_M_REBIAS,
				   q->invv / Q8_V_REBIAS, srm, Q8_ENC_NORMAL);
	else if (q->mode == Q8_ENC_MASKED)
		i = simd_q8_encode(a, q->begin, q->end, q->mb, q->vb, q->rb, q->invm, q->invv, srm,
				   Q8_ENC_MASKED);
	else
		i = simd_q8_encode(a, q->begin, q->end, q->mb, q->vb, q->rb, q->invm, q->invv, srm,
				   Q8_ENC_ANY);
	for (; i < q->end; i++) {
		size_t o = i - q->begin;
		uint32_t r = srm ? sr_hash32(q->key ^ (q->lo + (uint32_t)o)) : 0;

		adamw_q8_store(a, i, q->mb[o], q->vb[o], q->invm, q->invv, srm, r);
	}
}

/*
 * Pass 2 as two functions of their own, with and without the random bits:
 * it depends on nothing else of the flags, and inlined into each of
 * simd_q8_blocks' copies (one per gradient and copy dtype and flag) its
 * three loops would double the compile time of the SIMD files, for a call
 * a block saved.
 */
__attribute__((noinline)) static void simd_q8_store_sr(const struct tier_adam_tensors *a,
							const struct q8_block *q)
{
	simd_q8_store(a, q, true);
}

__attribute__((noinline)) static void simd_q8_store_nr(const struct tier_adam_tensors *a,
							const struct q8_block *q)
{
	simd_q8_store(a, q, false);
}

ADAMW_INLINE void simd_q8_store_any(const struct tier_adam_tensors *a, const struct q8_block *q,
				    bool srm)
{
	if (srm)
		simd_q8_store_sr(a, q);
	else
		simd_q8_store_nr(a, q);
}

/*
 * The blocks of [begin, end) (begin a multiple of TIER_Q8_BLOCK, end too
 * or n), pipelined by one block: pass 1 of a block runs before pass 2 of
 * the one before it, so that the wait for a block's maximum, reduced
 * across the lanes, and its inverse scale, a division, is spent on the
 * next block's update.  The two touch different elements, codes and
 * scales.
 */
ADAMW_INLINE void simd_q8_blocks(const struct adam_consts *c, const struct tier_adam_tensors *a,
				 size_t begin, size_t end, int gd, int od, bool l2, bool unit_bc2,
				 bool srm, bool sro)
{
	struct q8_block q[2];
	int cur = 0;

	for (size_t b = begin; b < end; b += TIER_Q8_BLOCK) {
		size_t e = end - b < TIER_Q8_BLOCK ? end : b + TIER_Q8_BLOCK;
		size_t pb = b + Q8_PREFETCH_BLOCKS * TIER_Q8_BLOCK;

		if (pb < end)
			q8_prefetch_codes(a, pb);
		simd_q8_update(c, a, b, e, gd, od, l2, unit_bc2, srm, sro, &q[cur]);
		if (b > begin)
			simd_q8_store_any(a, &q[cur ^ 1], srm);
		cur ^= 1;
	}
	if (end > begin)
		simd_q8_store_any(a, &q[cur ^ 1], srm);
}

/* simd_q8_blocks with the flags as constants (ADAMW_SPECIALIZE): one loop
 * each, no branch on them inside. */
ADAMW_INLINE void simd_q8_range(const struct adam_consts *c, const struct tier_adam_tensors *a,
				size_t begin, size_t end, int gd, int od)
{
	const bool l2 = c->l2 != 0.0f, unit_bc2 = c->inv_bc2_sqrt == 1.0f;
	const bool srm = c->sr_moments != 0, sro = od == TIER_BF16 && c->sr_out;

#if ADAMW_SPECIALIZE
#define Q8_BLOCKS_SR(L2, BC2)                                                              \
	do {                                                                               \
		if (srm && sro)                                                            \
			simd_q8_blocks(c, a, begin, end, gd, od, L2, BC2, true, true);     \
		else if (srm)                                                              \
			simd_q8_blocks(c, a, begin, end, gd, od, L2, BC2, true, false);    \
		else if (sro)                                                              \
			simd_q8_blocks(c, a, begin, end, gd, od, L2, BC2, false, true);    \
		else                                                                       \
			simd_q8_blocks(c, a, begin, end, gd, od, L2, BC2, false, false);   \
	} while (0)
	if (l2 && unit_bc2)
		Q8_BLOCKS_SR(true, true);
	else if (l2)
		Q8_BLOCKS_SR(true, false);
	else if (unit_bc2)
		Q8_BLOCKS_SR(false, true);
	else
		Q8_BLOCKS_SR(false, false);
#undef Q8_BLOCKS_SR
#else
	simd_q8_blocks(c, a, begin, end, gd, od, l2, unit_bc2, srm, sro);
#endif
}

/* The roofline of q8 elements [begin, end): the same loads and stores. */
ADAMW_INLINE void simd_q8_roof_range(const struct tier_adam_tensors *a, size_t begin, size_t end,
				     int gd, int od)
{
	void *const param = a->param, *const exp_avg = a->exp_avg, *const exp_avg_sq = a->exp_avg_sq;
	void *const param_out = a->param_out;
	const void *const grad = a->grad;
	size_t i = begin;

	for (; end - i >= ADAMW_W; i += ADAMW_W) {
		vf g = v_ld(gd, grad, i);
		vf p = v_add(v_ld(TIER_FP32, param, i), g);

		v_st(TIER_FP32, param, i, p);
		v_st_u8(exp_avg, i, v_xor1(v_ld_u8(exp_avg, i)));
		v_st_u8(exp_avg_sq, i, v_xor1(v_ld_u8(exp_avg_sq, i)));
		v_st(od, param_out, i, p);
	}
	adamw_q8_roof_elems(a, i, end, gd, od);
	adamw_q8_roof_scales(a, begin, end);
}

/* simd_range_sr() with @l2 and @unit_bc2 as constants (ADAMW_SPECIALIZE). */
ADAMW_INLINE void simd_dense(const struct adam_consts *c, const struct tier_adam_tensors *a,
			     size_t begin, size_t end, int md, int gd, int od, bool l2,
			     bool unit_bc2)
{
#if ADAMW_SPECIALIZE
	if (l2 && unit_bc2)
		simd_range_sr(c, a, begin, end, md, gd, od, true, true);
	else if (l2)
		simd_range_sr(c, a, begin, end, md, gd, od, true, false);
	else if (unit_bc2)
		simd_range_sr(c, a, begin, end, md, gd, od, false, true);
	else
		simd_range_sr(c, a, begin, end, md, gd, od, false, false);
#else
	simd_range_sr(c, a, begin, end, md, gd, od, l2, unit_bc2);
#endif
}

/*
 * One function per dtype combination, not inlined into the dispatch: the
 * code is the same, but a compiler's cost grows faster than the size of a
 * function (one function of every loop took 6 minutes to compile under
 * the sanitizers, and over a minute at -O2).
 */
#define ADAMW_CASE_FN(M, G, O) simd_case_##M##_##G##_##O
#define ADAMW_ROOF_FN(M, G, O) simd_roof_##M##_##G##_##O
#define ADAMW_CASE(M, G, O)                                                            \
	static __attribute__((noinline)) void ADAMW_CASE_FN(M, G, O)(                  \
		const struct adam_consts *c, const struct tier_adam_tensors *a,        \
		size_t begin, size_t end, bool l2, bool unit_bc2)                      \
	{                                                                              \
		simd_dense(c, a, begin, end, M, G, O, l2, unit_bc2);                   \
	}                                                                              \
	static __attribute__((noinline)) void ADAMW_ROOF_FN(M, G, O)(                  \
		const struct tier_adam_tensors *a, size_t begin, size_t end)           \
	{                                                                              \
		simd_roof_range(a, begin, end, M, G, O);                               \
	}
ADAMW_DTYPE_CASES(ADAMW_CASE)
#undef ADAMW_CASE
#define ADAMW_CASE(M, G, O)                                                            \
	static __attribute__((noinline)) void ADAMW_CASE_FN(M, G, O)(                  \
		const struct adam_consts *c, const struct tier_adam_tensors *a,        \
		size_t begin, size_t end, bool l2, bool unit_bc2)                      \
	{                                                                              \
		(void)l2;                                                              \
		(void)unit_bc2;                                                        \
		simd_q8_range(c, a, begin, end, G, O);                                 \
	}                                                                              \
	static __attribute__((noinline)) void ADAMW_ROOF_FN(M, G, O)(                  \
		const struct tier_adam_tensors *a, size_t begin, size_t end)           \
	{                                                                              \
		simd_q8_roof_range(a, begin, end, G, O);                               \
	}
ADAMW_Q8_CASES(ADAMW_CASE)
#undef ADAMW_CASE

void ADAMW_SIMD_KERNEL(const struct adam_consts *c, const struct tier_adam_tensors *a,
		       size_t begin, size_t end)
{
	bool l2 = c->l2 != 0.0f; /* as adam_elem() decides */
	bool unit_bc2 = c->inv_bc2_sqrt == 1.0f;

	switch (adamw_key(a)) {
#define ADAMW_CASE(M, G, O)                                                    \
	case ADAMW_KEY(M, G, O):                                               \
		ADAMW_CASE_FN(M, G, O)(c, a, begin, end, l2, unit_bc2);        \
		break;
		ADAMW_DTYPE_CASES(ADAMW_CASE)
		ADAMW_Q8_CASES(ADAMW_CASE)
#undef ADAMW_CASE
	default:
		break;
	}
}

void ADAMW_SIMD_ROOFLINE(const struct adam_consts *c, const struct tier_adam_tensors *a,
			 size_t begin, size_t end)
{
	(void)c;
	switch (adamw_key(a)) {
#define ADAMW_CASE(M, G, O)                                                    \
	case ADAMW_KEY(M, G, O):                                               \
		ADAMW_ROOF_FN(M, G, O)(a, begin, end);                         \
		break;
		ADAMW_DTYPE_CASES(ADAMW_CASE)
		ADAMW_Q8_CASES(ADAMW_CASE)
#undef ADAMW_CASE
	default:
		break;
	}
}
