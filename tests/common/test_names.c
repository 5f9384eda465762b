/*
 * test_names.c - the index of names (common/names.h) against a reference:
 * a table of scripts of inserts, finds and removes over a set of names,
 * each step checked against a plain array searched by strcmp; growth over
 * tombstones; and an insert after a reserve that never allocates (the
 * alloc fault site armed), which the NVMe tier and the optimizer rely on.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fault.h"
#include "common/names.h"
#include "t_helpers.h"

/* The items are 1 + an index into names[]; names[i] NULL: not held. */
struct ref {
	char **names;
	uint32_t n;
};

static const char *ref_key(const void *ctx, uintptr_t item)
{
	const struct ref *r = ctx;

	return r->names[item - 1];
}

static struct ref ref_make(uint32_t n, unsigned len)
{
	struct ref r = { calloc(n ? n : 1, sizeof(char *)), n };

	ck_assert_ptr_nonnull(r.names);
	for (uint32_t i = 0; i < n; i++) {
		r.names[i] = malloc(len + 24);
		ck_assert_ptr_nonnull(r.names[i]);
		/* distinct by the index; a shared random prefix makes the hashes collide
		 * no less than real tensor names ("layers.17.mlp.fc1.weight") do */
		snprintf(r.names[i], len + 24, "%.*s.%u", (int)len,
			 "model.layers.attention.q_proj.weight.shard.of.rank.in.group", i);
	}
	return r;
}

static void ref_free(struct ref *r)
{
	for (uint32_t i = 0; i < r->n; i++)
		free(r->names[i]);
	free(r->names);
}

/* Every name of @r: found as its item when @held[i], else not found. */
static void check_all(const struct ts_names *ix, const struct ref *r, const bool *held,
		      const char *when)
{
	uint32_t live = 0;

	for (uint32_t i = 0; i < r->n; i++) {
		uintptr_t got = ts_names_find(ix, r->names[i]);

		ck_assert_msg(got == (held[i] ? i + 1 : 0), "%s: '%s': item %lu, expected %lu",
			      when, r->names[i], (unsigned long)got,
			      (unsigned long)(held[i] ? i + 1 : 0));
		live += held[i];
	}
	ck_assert_uint_eq(ix->live, live);
	ck_assert(ix->used * 4 <= ix->cap * 3 || ix->cap == 0);
	ck_assert_ptr_null((void *)ts_names_find(ix, "not.a.name"));
}

static const struct script_case {
	const char *what;
	uint32_t n;        /* names */
	unsigned len;      /* prefix length */
	uint32_t rounds;   /* random inserts/removes after filling */
	unsigned remove_pct;
} script_cases[] = {
	{ "empty index", 0, 8, 0, 0 },
	{ "one name", 1, 8, 10, 50 },
	{ "a few, short names", 10, 0, 200, 50 },
	{ "grows past several tables", 5000, 20, 2000, 30 },
	{ "churn: tombstones then growth", 300, 40, 20000, 50 },
	{ "remove everything", 1000, 12, 0, 100 },
};

START_TEST(script)
{
	const struct script_case *c = &script_cases[_i];
	struct ref r = ref_make(c->n, c->len);
	bool *held = calloc(c->n ? c->n : 1, 1);
	uint64_t s = t_rnd_seed((uint64_t)_i * 77 + 5);
	struct ts_names ix;

	ck_assert_ptr_nonnull(held);
	ts_names_init(&ix, ref_key, &r);
	check_all(&ix, &r, held, c->what);
	for (uint32_t i = 0; i < c->n; i++) {
		ck_assert_int_eq(ts_names_insert(&ix, i + 1), 0);
		held[i] = true;
	}
	check_all(&ix, &r, held, c->what);
	if (c->remove_pct == 100) {
		for (uint32_t i = 0; i < c->n; i++) {
			ts_names_remove(&ix, i + 1, r.names[i]);
			held[i] = false;
		}
		check_all(&ix, &r, held, c->what);
	}
	for (uint32_t k = 0; k < c->rounds && c->n; k++) {
		uint32_t i = (uint32_t)t_rnd_below(&s, c->n);

		if (held[i] && t_rnd_below(&s, 100) < c->remove_pct) {
			ts_names_remove(&ix, i + 1, r.names[i]);
			held[i] = false;
		} else if (!held[i]) {
			ck_assert_int_eq(ts_names_insert(&ix, i + 1), 0);
			held[i] = true;
		}
		ck_assert_uint_eq(ts_names_find(&ix, r.names[i]), held[i] ? i + 1 : 0);
	}
	check_all(&ix, &r, held, c->what);
	/* removing what is not held changes nothing */
	if (c->n) {
		for (uint32_t i = 0; i < c->n; i++)
			if (!held[i])
				ts_names_remove(&ix, i + 1, r.names[i]);
		check_all(&ix, &r, held, c->what);
	}
	ts_names_free(&ix);
	ck_assert_uint_eq(ix.live, 0);
	ck_assert_ptr_null((void *)ts_names_find(&ix, c->n ? r.names[0] : "x"));
	free(held);
	ref_free(&r);
}
END_TEST

/*
 * An array with removals from the middle, as the optimizer's parameters:
 * the items after a removed one shift down, the index follows.
 */
START_TEST(shift_after_removal)
{
	struct ref r = ref_make(500, 16);
	struct ref arr = { calloc(500, sizeof(char *)), 500 };
	uint64_t s = t_rnd_seed(9);
	struct ts_names ix;
	uint32_t n = 500;

	ck_assert_ptr_nonnull(arr.names);
	memcpy(arr.names, r.names, 500 * sizeof(char *));
	ts_names_init(&ix, ref_key, &arr);
	for (uint32_t i = 0; i < n; i++)
		ck_assert_int_eq(ts_names_insert(&ix, i + 1), 0);
	while (n) {
		uint32_t id = (uint32_t)t_rnd_below(&s, n);
		char *gone = arr.names[id];

		ts_names_remove(&ix, id + 1, gone);
		memmove(&arr.names[id], &arr.names[id + 1], (n - id - 1) * sizeof(char *));
		n--;
		ts_names_shift(&ix, id + 1);
		ck_assert_uint_eq(ix.live, n);
		ck_assert_uint_eq(ts_names_find(&ix, gone), 0);
		for (uint32_t i = 0; i < n; i += 1 + n / 50)
			ck_assert_uint_eq(ts_names_find(&ix, arr.names[i]), i + 1);
	}
	ts_names_free(&ix);
	free(arr.names);
	ref_free(&r);
}
END_TEST

/* Reserve, then arm every allocation to fail: the inserts still work. */
START_TEST(insert_after_reserve_never_allocates)
{
	NEED_FAULTS();
	struct ref r = ref_make(100, 10);
	bool held[100] = { false };
	struct ts_names ix;

	ts_names_init(&ix, ref_key, &r);
	for (uint32_t i = 0; i < 40; i++) {
		ck_assert_int_eq(ts_names_insert(&ix, i + 1), 0);
		held[i] = true;
	}
	ck_assert_int_eq(ts_names_reserve(&ix, 60), 0);
	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_ALLOC, 1, TIER_FAULT_PERSISTENT, -ENOMEM), 0);
	for (uint32_t i = 40; i < 100; i++) {
		ck_assert_int_eq(ts_names_insert(&ix, i + 1), 0);
		held[i] = true;
	}
	ts_fault_disarm(TIER_FAULT_ALLOC);
	ts_names_remove(&ix, 1, r.names[0]);
	held[0] = false;
	check_all(&ix, &r, held, "after reserve");
	ts_names_free(&ix);
	ref_free(&r);
}
END_TEST

/* A growth that fails leaves the index as it was, and a later one works. */
START_TEST(failed_growth_leaves_the_index)
{
	NEED_FAULTS();
	struct ref r = ref_make(64, 10);
	bool held[64] = { false };
	struct t_nth f = T_NTH(TIER_FAULT_ALLOC, -ENOMEM, 10);
	struct ts_names ix;
	uint32_t i = 0;

	ts_names_init(&ix, ref_key, &r);
	/* fill to the brim of the 16-slot table: the 13th insert grows it */
	for (; i < 12; i++) {
		ck_assert_int_eq(ts_names_insert(&ix, i + 1), 0);
		held[i] = true;
	}
	ck_assert_uint_eq(ix.cap, 16);
	while (t_nth_next(&f)) {
		int rc;

		t_nth_arm(&f);
		rc = ts_names_insert(&ix, i + 1);
		if (!t_nth_fired(&f)) {
			ck_assert_int_eq(rc, 0);
			held[i] = true;
			break;
		}
		ck_assert_int_eq(rc, -ENOMEM);
		ck_assert_ptr_nonnull(strstr(tier_last_error(), "out of memory for an index"));
		ck_assert_uint_eq(ix.cap, 16);
		check_all(&ix, &r, held, "failed growth");
	}
	ck_assert_uint_eq(f.nth, 2);
	ck_assert_uint_gt(ix.cap, 16);
	check_all(&ix, &r, held, "after growth");
	ts_names_free(&ix);
	ref_free(&r);
}
END_TEST

static Suite *names_suite(void)
{
	Suite *s = suite_create("names");
	TCase *tc = tcase_create("index");

	tcase_add_loop_test(tc, script, 0, (int)ARRAY_SIZE(script_cases));
	tcase_add_test(tc, shift_after_removal);
	suite_add_tcase(s, tc);
	tc = t_tcase_faults("index-faults");
	tcase_add_test(tc, insert_after_reserve_never_allocates);
	tcase_add_test(tc, failed_growth_leaves_the_index);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run_suite(names_suite());
}
