/*
 * test_partition.c - the split of the optimizer state among ranks
 * (prefetch/partition.c): for a table of models (one parameter, many
 * small ones, one huge beside tiny ones, sizes not multiples of the
 * alignment, fewer elements than ranks x alignment) and every world size
 * from 1 to 9, the bounds cover the flat range in order, each rank owns
 * T / N elements to within the alignment, every piece starts on an
 * alignment boundary of its parameter, and the pieces (part_segments) and
 * the per-parameter counts (part_counts) say the same as a brute-force
 * walk of every element.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "prefetch/partition.h"
#include "t_helpers.h"

#define MAXP 8
#define MAXW 9

static const struct model {
	const char *name;
	uint32_t align;
	uint32_t np;
	uint64_t numel[MAXP];
} models[] = {
	{ "one parameter", 64, 1, { 1000003 } },
	{ "one, aligned", 64, 1, { 64 * 1000 } },
	{ "an MLP", 64, 6, { 64 * 512, 512, 512 * 512, 512, 512 * 10, 10 } },
	{ "embedding and tiny ones", 64, 5, { 50000000, 1, 3, 64, 65 } },
	{ "tiny first", 64, 4, { 1, 2, 3, 9999999 } },
	{ "fewer than ranks x align", 64, 3, { 10, 20, 30 } },
	{ "align 1", 1, 4, { 7, 11, 13, 17 } },
	{ "align 128, odd sizes", 128, 7, { 1, 127, 129, 255, 257, 1000, 100000 } },
	{ "many equal", 64, 8, { 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096 } },
};

/* The rank owning flat element @x (by the bounds). */
static uint32_t owner(const uint64_t *bound, uint32_t world, uint64_t x)
{
	uint32_t r = 0;

	while (r + 1 < world && bound[r + 1] <= x)
		r++;
	return r;
}

START_TEST(plan)
{
	const struct model *m = &models[_i];
	uint64_t t = 0, start[MAXP];

	for (uint32_t i = 0; i < m->np; i++) {
		start[i] = t;
		t += m->numel[i];
	}
	for (uint32_t world = 1; world <= MAXW; world++) {
		uint64_t bound[MAXW + 1];
		uint64_t covered = 0;

		ck_assert_int_eq(part_plan(m->numel, m->np, world, m->align, bound), 0);
		ck_assert_uint_eq(bound[0], 0);
		ck_assert_uint_eq(bound[world], t);
		for (uint32_t r = 0; r < world; r++) {
			struct part_seg seg[MAXP];
			size_t ns = part_segments(m->numel, m->np, bound, r, NULL);
			uint64_t own = bound[r + 1] - bound[r], ideal_lo = t * r / world;
			uint64_t sum = 0;

			ck_assert_msg(bound[r] <= bound[r + 1], "%s, world %u: bound %u > bound %u",
				      m->name, world, r, r + 1);
			/* balance: the ideal bound moved down by less than align */
			ck_assert_msg(bound[r] <= ideal_lo && ideal_lo - bound[r] < m->align,
				      "%s, world %u: bound[%u] = %llu, ideal %llu", m->name, world, r,
				      (unsigned long long)bound[r], (unsigned long long)ideal_lo);
			ck_assert_uint_le(ns, m->np);
			ck_assert_uint_eq(part_segments(m->numel, m->np, bound, r, seg), ns);
			for (size_t k = 0; k < ns; k++) {
				const struct part_seg *s = &seg[k];

				ck_assert_uint_lt(s->param, m->np);
				ck_assert_uint_gt(s->n, 0);
				ck_assert_uint_le(s->off + s->n, m->numel[s->param]);
				ck_assert_msg(s->off % m->align == 0,
					      "%s, world %u, rank %u: a piece of parameter %u at %llu",
					      m->name, world, r, s->param, (unsigned long long)s->off);
				/* in flat order, contiguous, inside the rank's range */
				ck_assert_uint_eq(start[s->param] + s->off, bound[r] + sum);
				sum += s->n;
			}
			ck_assert_uint_eq(sum, own);
			covered += own;
		}
		ck_assert_uint_eq(covered, t);
		/* the per-parameter counts against a walk of every element
		 * (elements sampled on huge parameters) */
		for (uint32_t i = 0; i < m->np; i++) {
			uint64_t counts[MAXW], displs[MAXW], want[MAXW] = { 0 }, first[MAXW];
			uint64_t stepx = m->numel[i] > 100000 ? 997 : 1, total = 0;

			part_counts(m->numel, m->np, bound, world, i, counts, displs);
			for (uint32_t r = 0; r < world; r++) {
				total += counts[r];
				first[r] = UINT64_MAX;
			}
			ck_assert_uint_eq(total, m->numel[i]);
			for (uint64_t x = 0; x < m->numel[i]; x += stepx) {
				uint32_t r = owner(bound, world, start[i] + x);

				/* (no ck_assert per element: each one writes to Check's pipe) */
				if (x < displs[r] || x >= displs[r] + counts[r])
					ck_abort_msg("%s, world %u: element %llu of parameter %u is rank %u's, counts say [%llu, +%llu)",
						     m->name, world, (unsigned long long)x, i, r,
						     (unsigned long long)displs[r], (unsigned long long)counts[r]);
				want[r]++;
				if (first[r] == UINT64_MAX)
					first[r] = x;
			}
			if (stepx == 1)
				for (uint32_t r = 0; r < world; r++) {
					ck_assert_uint_eq(want[r], counts[r]);
					if (counts[r])
						ck_assert_uint_eq(first[r], displs[r]);
				}
		}
	}
}
END_TEST

START_TEST(refused)
{
	uint64_t n[2] = { 10, 0 }, big[2] = { UINT64_C(1) << 62, UINT64_C(1) << 62 };
	uint64_t bound[4];

	ck_assert_int_eq(part_plan(n, 2, 2, 64, bound), -EINVAL);   /* a parameter of 0 */
	ck_assert_int_eq(part_plan(n, 1, 0, 64, bound), -EINVAL);   /* no ranks */
	ck_assert_int_eq(part_plan(n, 1, 2, 0, bound), -EINVAL);    /* align 0 */
	ck_assert_int_eq(part_plan(n, 0, 2, 64, bound), -EINVAL);   /* no parameters */
	ck_assert_int_eq(part_plan(NULL, 1, 2, 64, bound), -EINVAL);
	ck_assert_int_eq(part_plan(big, 2, 3, 64, bound), -EOVERFLOW);
	big[1] = (UINT64_C(1) << 62) - 1;                           /* 2^63 - 1: taken */
	ck_assert_int_eq(part_plan(big, 2, 3, 64, bound), 0);
	ck_assert_uint_eq(bound[3], (UINT64_C(1) << 63) - 1);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("partition");
	TCase *tc = tcase_create("plan");

	tcase_add_loop_test(tc, plan, 0, (int)ARRAY_SIZE(models));
	tcase_add_test(tc, refused);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run_suite(suite());
}
