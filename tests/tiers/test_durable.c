/*
 * test_durable.c - the durable store (tiers/nvme_commit.c and tiers/nvme_recover.c,
 * docs/nvme-format.md "Commits"): commits and reopening, copy on write,
 * kept commits and roll back, the space commits free, damaged and
 * mismatched files (refused or rolled back, never silently wrong), and a
 * fault at every write and sync of the commit path.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "kernels/crc32c.h"
#include "tiers/nvme.h"
#include "tiers/nvme_format.h"
#include "tiers/nvme_impl.h"
#include "t_helpers.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define U64(x) ((unsigned long long)(x))

static char *g_dir;

static void setup(void)
{
	ts_err_clear();
	g_dir = t_mkdtemp();
	setenv("T", g_dir, 1);
}

static void teardown(void)
{
	ts_fault_reset_all();
	t_rmtree(g_dir);
	free(g_dir);
	g_dir = NULL;
}

/* ------------------------------------------------------------ helpers */

struct mopt {
	unsigned npaths;        /* 1..3 */
	uint64_t unit;          /* 0: 64 KiB */
	bool nocsum;
	unsigned keep;          /* 0: the default */
	int direct;             /* 0 default, -1 false */
	uint64_t dram;          /* 0: 64 MiB */
};

static struct tier_manifest *manifest_for(const struct mopt *o)
{
	struct tier_manifest *m = NULL;
	char text[4096];
	size_t n = 0;
	int rc;

	n += (size_t)snprintf(text + n, sizeof(text) - n,
			      "name: durable\ngpu:\n  device: none\ndram:\n  capacity: %llu\nnvme:\n"
			      "  stripe_unit: %llu\n  checksum: %s\n",
			      U64(o->dram ? o->dram : 64 * MiB), U64(o->unit ? o->unit : 64 * KiB),
			      o->nocsum ? "none" : "crc32c");
	if (o->keep)
		n += (size_t)snprintf(text + n, sizeof(text) - n, "  keep_commits: %u\n", o->keep);
	if (o->direct < 0)
		n += (size_t)snprintf(text + n, sizeof(text) - n, "  direct: false\n");
	n += (size_t)snprintf(text + n, sizeof(text) - n, "  paths:\n");
	for (unsigned i = 0; i < (o->npaths ? o->npaths : 1); i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n,
				      "    - path: ${T}/p%u/\n      create: true\n      capacity: 256MiB\n", i);
	rc = tier_manifest_parse(text, n, "durable.yaml", 0, &m);
	ck_assert_msg(rc == 0, "manifest: %s\n%s", tier_last_error(), text);
	return m;
}

static const char *file_of(const struct tier_manifest *m, unsigned i)
{
	struct tier_manifest_path p;

	ck_assert_int_eq(tier_manifest_path(m, i, &p), 0);
	return p.file;
}

static int open_store_gen(const struct tier_manifest *m, uint64_t gen, struct tier_store **s)
{
	struct tier_store_params p;

	tier_store_params_init(&p);
	p.generation = gen;
	*s = NULL;
	return tier_store_open(m, &p, s);
}

static struct tier_store *open_store(const struct tier_manifest *m)
{
	struct tier_store *s;
	int rc = open_store_gen(m, 0, &s);

	ck_assert_msg(rc == 0, "open: %s: %s", tier_strerror(rc), tier_last_error());
	return s;
}

static void close_store(struct tier_store *s)
{
	int rc = tier_store_close(s);

	ck_assert_msg(rc == 0, "close: %s", tier_last_error());
}

/* Deterministic bytes of object @name at version @v. */
static void pattern(const char *name, unsigned v, unsigned char *buf, size_t n)
{
	uint64_t x = 0x9e3779b97f4a7c15ull * (v + 1);

	for (const char *c = name; *c; c++)
		x = (x ^ (unsigned char)*c) * 0x100000001b3ull;
	for (size_t i = 0; i < n; i++)
		buf[i] = (unsigned char)t_rnd_next(&x);
}

/* The objects of the tests: sizes below, at and across stripe units. */
static const struct {
	const char *name;
	uint64_t size;
} g_objs[] = {
	{ "tiny", 100 },
	{ "one-unit", 64 * KiB },
	{ "ragged", 300 * KiB + 17 },
	{ "big", 2 * MiB },
	{ "odd", 5 * 4096 + 1 },
};

/* Writes version @v of object @i (creating it if need be). */
static void put(struct tier_store *s, size_t i, unsigned v)
{
	struct tier_obj *o = tier_obj_find(s, g_objs[i].name);
	unsigned char *b = malloc(g_objs[i].size);
	int rc;

	if (!o) {
		rc = tier_obj_create(s, g_objs[i].name, g_objs[i].size, &o);
		ck_assert_msg(rc == 0, "create %s: %s", g_objs[i].name, tier_last_error());
	}
	pattern(g_objs[i].name, v, b, g_objs[i].size);
	rc = tier_obj_write(s, o, 0, g_objs[i].size, b);
	ck_assert_msg(rc == 0, "write %s: %s", g_objs[i].name, tier_last_error());
	free(b);
}

/* Object @i holds version @v (v < 0: it does not exist). */
static void expect(struct tier_store *s, size_t i, int v, const char *when)
{
	struct tier_obj *o = tier_obj_find(s, g_objs[i].name);
	unsigned char *b, *want;
	int rc;

	if (v < 0) {
		ck_assert_msg(o == NULL, "%s: '%s' exists", when, g_objs[i].name);
		return;
	}
	ck_assert_msg(o != NULL, "%s: '%s' is missing", when, g_objs[i].name);
	ck_assert_uint_eq(tier_obj_size(o), g_objs[i].size);
	b = malloc(g_objs[i].size);
	want = malloc(g_objs[i].size);
	rc = tier_obj_read(s, o, 0, g_objs[i].size, b);
	ck_assert_msg(rc == 0, "%s: read %s: %s", when, g_objs[i].name, tier_last_error());
	pattern(g_objs[i].name, (unsigned)v, want, g_objs[i].size);
	ck_assert_msg(memcmp(b, want, g_objs[i].size) == 0, "%s: '%s' does not hold version %d", when,
		      g_objs[i].name, v);
	free(b);
	free(want);
}

static uint64_t commit(struct tier_store *s, const char *rec)
{
	uint64_t gen = 0;
	int rc = tier_store_commit(s, rec, rec ? strlen(rec) + 1 : 0, &gen);

	ck_assert_msg(rc == 0, "commit: %s: %s", tier_strerror(rc), tier_last_error());
	return gen;
}

static void expect_record(struct tier_store *s, const char *rec)
{
	const void *r;
	size_t len;

	ck_assert_int_eq(tier_store_record(s, &r, &len), 0);
	ck_assert_uint_eq(len, strlen(rec) + 1);
	ck_assert_str_eq((const char *)r, rec);
}

static uint64_t generation(struct tier_store *s)
{
	struct tier_commit_info ci;

	ck_assert_int_eq(tier_store_committed(s, &ci), 0);
	return ci.generation;
}

/* The newer valid slot of path 0's file @f. */
static void read_slot(const char *f, struct ts_nvme_slot *out, int *index)
{
	struct ts_nvme_slot a, b;
	int fd = open(f, O_RDONLY);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &a, sizeof(a), TIER_NVME_SLOT_OFF(0)), (ssize_t)sizeof(a));
	ck_assert_int_eq(pread(fd, &b, sizeof(b), TIER_NVME_SLOT_OFF(1)), (ssize_t)sizeof(b));
	close(fd);
	if (nvme_slot_check(&a) == 0 && (nvme_slot_check(&b) != 0 || a.seq > b.seq)) {
		*out = a;
		*index = 0;
	} else {
		ck_assert_int_eq(nvme_slot_check(&b), 0);
		*out = b;
		*index = 1;
	}
}

static void flip_byte(const char *f, uint64_t off)
{
	int fd = open(f, O_RDWR);
	unsigned char c;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &c, 1, (off_t)off), 1);
	c ^= 0x20;
	ck_assert_int_eq(pwrite(fd, &c, 1, (off_t)off), 1);
	close(fd);
}

static uint64_t data_off(uint64_t unit)
{
	uint64_t align = unit < MiB ? unit : MiB;

	return (TIER_NVME_META_END + align - 1) / align * align;
}

/* ------------------------------------------------ commit and reopen */

static const struct mopt reopen_cases[] = {
	{ .npaths = 1 },
	{ .npaths = 3 },
	{ .npaths = 2, .nocsum = true },
	{ .npaths = 3, .unit = 4096, .direct = -1 },
	{ .npaths = 1, .unit = 1 * MiB, .keep = 1 },
};

START_TEST(test_commit_reopen)
{
	const struct mopt *c = &reopen_cases[_i];
	struct tier_manifest *m = manifest_for(c);
	struct tier_store *s = open_store(m);
	struct tier_commit_info ci;

	ck_assert_int_eq(tier_store_committed(s, &ci), 0);
	ck_assert_uint_eq(ci.generation, 0);
	ck_assert_int_eq(tier_store_record(s, &(const void *){ 0 }, &(size_t){ 0 }), -ENOENT);
	for (size_t i = 0; i < ARRAY_SIZE(g_objs); i++)
		put(s, i, 1);
	ck_assert_uint_eq(commit(s, "first"), 1);
	ck_assert_int_eq(tier_store_committed(s, &ci), 0);
	ck_assert_uint_eq(ci.generation, 1);
	ck_assert_uint_eq(ci.objects, ARRAY_SIZE(g_objs));
	ck_assert_uint_gt(ci.time_ns, 0);
	/* After the commit: written again (copy on write), one destroyed. */
	put(s, 0, 2);
	put(s, 3, 2);
	ck_assert_int_eq(tier_obj_destroy(s, tier_obj_find(s, "ragged")), 0);
	close_store(s);

	/* Uncommitted changes are not kept: the files reopen at generation 1. */
	s = open_store(m);
	ck_assert_uint_eq(generation(s), 1);
	expect_record(s, "first");
	for (size_t i = 0; i < ARRAY_SIZE(g_objs); i++)
		expect(s, i, 1, "reopened at 1");
	put(s, 0, 2);
	put(s, 3, 2);
	ck_assert_int_eq(tier_obj_destroy(s, tier_obj_find(s, "ragged")), 0);
	ck_assert_uint_eq(commit(s, "second"), 2);
	put(s, 1, 3); /* never committed */
	close_store(s);

	s = open_store(m);
	ck_assert_uint_eq(generation(s), 2);
	expect_record(s, "second");
	expect(s, 0, 2, "reopened at 2");
	expect(s, 1, 1, "reopened at 2");
	expect(s, 2, -1, "reopened at 2");
	expect(s, 3, 2, "reopened at 2");
	expect(s, 4, 1, "reopened at 2");
	ck_assert_int_eq(tier_store_validate(s), 0);
	close_store(s);

	if (c->keep != 1) {
		/* Roll back to generation 1: durable, and generation 2 is gone. */
		ck_assert_int_eq(open_store_gen(m, 1, &s), 0);
		ck_assert_uint_eq(generation(s), 1);
		for (size_t i = 0; i < ARRAY_SIZE(g_objs); i++)
			expect(s, i, 1, "rolled back to 1");
		put(s, 4, 5);
		close_store(s);
		s = open_store(m);
		ck_assert_uint_eq(generation(s), 1);
		expect(s, 4, 1, "reopened after the roll back");
		ck_assert_uint_eq(commit(s, "third"), 3); /* generations are never reused */
		close_store(s);
	} else {
		ck_assert_int_eq(open_store_gen(m, 1, &s), -ENOENT);
		ck_assert_ptr_nonnull(strstr(tier_last_error(), "not among the kept commits (2)"));
	}
	tier_manifest_free(m);
}
END_TEST

/* ------------------------------------------------ a rollback is safe */

struct find_ext {
	const char *name;
	uint64_t off;
};

static int find_ext_fn(void *arg, const struct nvme_tobj *o)
{
	struct find_ext *f = arg;

	if (o->name_len == strlen(f->name) && memcmp(o->name, f->name, o->name_len) == 0)
		f->off = o->ext_off[0];
	return 0;
}

/* Data offset of object @name's extent in the table of slot entry @c. */
static uint64_t ext_in_table(const char *file, const struct ts_nvme_commit *c, const char *name)
{
	struct find_ext f = { name, UINT64_MAX };
	char *buf = malloc(c->table_len);
	int fd = open(file, O_RDONLY);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, buf, c->table_len, (off_t)(data_off(64 * KiB) + c->table_off)),
			 (ssize_t)c->table_len);
	close(fd);
	ck_assert_int_eq(nvme_table_walk(buf, c->table_len, "test", find_ext_fn, &f, NULL, NULL, NULL), 0);
	free(buf);
	ck_assert_uint_ne(f.off, UINT64_MAX);
	return f.off;
}

/*
 * Three kept commits, 'big' rewritten by each: a rollback to a commit
 * whose data is damaged is refused and changes nothing; so is the
 * automatic fallback when no older commit verifies; after either, the
 * newest commit opens whole.
 */
START_TEST(test_rollback_refused)
{
	struct mopt mo = { .npaths = 1, .keep = 3 };
	struct tier_manifest *m = manifest_for(&mo);
	struct tier_store *s = open_store(m);
	struct ts_nvme_slot before, after;
	const char *f0;
	uint64_t a, b;
	int idx, rc;

	for (size_t i = 0; i < ARRAY_SIZE(g_objs); i++)
		put(s, i, 1);
	commit(s, "one");
	put(s, 3, 2);
	commit(s, "two");
	put(s, 3, 3);
	commit(s, "three");
	close_store(s);
	f0 = file_of(m, 0);
	read_slot(f0, &before, &idx);
	ck_assert_uint_eq(before.ncommits, 3);
	a = ext_in_table(f0, &before.c[2], "big");
	b = ext_in_table(f0, &before.c[1], "big");
	ck_assert_uint_ne(a, b);
	ck_assert_uint_ne(b, ext_in_table(f0, &before.c[0], "big"));

	/* Generation 1's own copy of 'big' damaged: no rollback to it. */
	flip_byte(f0, data_off(64 * KiB) + a + 100);
	rc = open_store_gen(m, 1, &s);
	ck_assert_int_eq(rc, -EBADMSG);
	ck_assert_msg(strstr(tier_last_error(), "cannot roll back to generation 1") &&
		      strstr(tier_last_error(), "object 'big' stripe unit 0") &&
		      strstr(tier_last_error(), "nothing was changed"), "%s", tier_last_error());
	read_slot(f0, &after, &idx);
	ck_assert_mem_eq(&after, &before, sizeof(before));
	/* Generation 2 verifies: the rollback to it goes through. */
	s = NULL;
	rc = open_store_gen(m, 2, &s);
	ck_assert_msg(rc == 0, "%s", tier_last_error());
	expect(s, 3, 2, "rolled back to 2");
	expect(s, 0, 1, "rolled back to 2");
	close_store(s);
	read_slot(f0, &after, &idx);
	ck_assert_uint_eq(after.ncommits, 2);
	ck_assert_uint_eq(after.c[0].gen, 2);
	memcpy(&before, &after, sizeof(before));

	/* Generation 2's table damaged, and generation 1 does not verify:
	 * the fallback finds nothing whole, and changes nothing. */
	flip_byte(f0, data_off(64 * KiB) + before.c[0].table_off + 50);
	rc = open_store_gen(m, 0, &s);
	ck_assert_int_eq(rc, -EBADMSG);
	ck_assert_msg(strstr(tier_last_error(), "generation 2's object table") &&
		      strstr(tier_last_error(), "object 'big' stripe unit 0") &&
		      strstr(tier_last_error(), "nothing was changed"), "%s", tier_last_error());
	read_slot(f0, &after, &idx);
	ck_assert_mem_eq(&after, &before, sizeof(before));
	/* Repaired, the newest opens as it was. */
	flip_byte(f0, data_off(64 * KiB) + before.c[0].table_off + 50);
	s = open_store(m);
	ck_assert_uint_eq(generation(s), 2);
	expect(s, 3, 2, "the newest after the refusals");
	close_store(s);
	tier_manifest_free(m);
}
END_TEST

/*
 * Written after a reopen and never committed (as a run killed after its
 * restart leaves them): the writes take no extent an older kept commit
 * names, so every kept commit still reopens whole.
 */
START_TEST(test_reopen_write_keeps_older)
{
	struct mopt mo = { .npaths = 2, .keep = (unsigned)_i + 2, .nocsum = _i == 1 };
	struct tier_manifest *m = manifest_for(&mo);
	struct tier_store *s = open_store(m);
	unsigned keep = mo.keep;

	for (unsigned g = 1; g <= keep; g++) {
		for (size_t i = 0; i < ARRAY_SIZE(g_objs); i++)
			put(s, i, g);
		commit(s, NULL);
	}
	close_store(s);
	/* Three restarts, each writing everything and stopping uncommitted. */
	for (unsigned k = 0; k < 3; k++) {
		s = open_store(m);
		ck_assert_uint_eq(generation(s), keep);
		for (size_t i = 0; i < ARRAY_SIZE(g_objs); i++)
			put(s, i, 100 + k);
		close_store(s);
	}
	/* Each kept commit, newest first (each rollback drops only newer ones). */
	for (unsigned g = keep; g >= 1; g--) {
		char what[64];

		ck_assert_int_eq(open_store_gen(m, g, &s), 0);
		snprintf(what, sizeof(what), "generation %u after restarts", g);
		for (size_t i = 0; i < ARRAY_SIZE(g_objs); i++)
			expect(s, i, (int)g, what);
		for (size_t i = 0; i < ARRAY_SIZE(g_objs); i++)
			put(s, i, 200);
		close_store(s);
	}
	tier_manifest_free(m);
}
END_TEST

/* Keep K: K commits stay, the older ones go, and so does their space. */
START_TEST(test_keep_and_space)
{
	unsigned keep = (unsigned)_i + 1;
	struct mopt mo = { .npaths = 2, .keep = keep };
	struct tier_manifest *m = manifest_for(&mo);
	struct tier_store *s = open_store(m);
	struct tier_commit_info ci;
	uint64_t state = 0;
	struct stat st;
	const unsigned rounds = 12;

	for (size_t i = 0; i < ARRAY_SIZE(g_objs); i++)
		state += g_objs[i].size;
	for (unsigned r = 1; r <= rounds; r++) {
		for (size_t i = 0; i < ARRAY_SIZE(g_objs); i++)
			put(s, i, r);
		ck_assert_uint_eq(commit(s, "k"), r);
		ck_assert_int_eq(tier_store_committed(s, &ci), 0);
		ck_assert_uint_eq(ci.kept, r < keep ? r : keep);
		ck_assert_uint_eq(ci.oldest, r < keep ? 1 : r - keep + 1);
	}
	close_store(s);
	/* Each file holds at most the kept commits' state and one more
	 * (copy on write), rounded to extents, plus tables: never all rounds. */
	for (unsigned p = 0; p < 2; p++) {
		ck_assert_int_eq(stat(file_of(m, p), &st), 0);
		ck_assert_msg((uint64_t)st.st_size < 64 * MiB + (keep + 2) * state,
			      "keep %u: path %u is %lld bytes after %u commits of %llu bytes", keep, p,
			      (long long)st.st_size, rounds, U64(state));
	}
	for (unsigned g = 1; g <= rounds; g++) {
		int rc = open_store_gen(m, g, &s);

		if (g + keep <= rounds) {
			ck_assert_int_eq(rc, -ENOENT);
			continue;
		}
		ck_assert_msg(rc == 0, "keep %u, generation %u: %s", keep, g, tier_last_error());
		for (size_t i = 0; i < ARRAY_SIZE(g_objs); i++)
			expect(s, i, (int)g, "an older kept commit");
		close_store(s);
		break; /* opening an older one drops the newer ones */
	}
	tier_manifest_free(m);
}
END_TEST

/* ------------------------------------------------------------ damage */

enum damage {
	DMG_TABLE,        /* a byte of the newest table: back to the previous commit */
	DMG_SLOT,         /* a byte of the newest slot: the other slot */
	DMG_BOTH_SLOTS,   /* both slots: refused */
	DMG_TRUNCATE,     /* path 1 cut short: back to a commit it holds, or refused */
	DMG_MISSING,      /* path 1 removed: refused */
	DMG_GEOMETRY,     /* another stripe unit in the manifest: refused */
	DMG_SCRATCH,      /* opened as a scratch store: refused */
	DMG_DATA,         /* a byte of an object: its read fails, naming it */
	DMG_HEADER,       /* path 1's header: refused */
	DMG_SWAPPED,      /* the manifest lists the paths the other way round: refused */
	DMG_PATH0_GONE,   /* path 0's file removed: path 1 is not emptied */
	DMG_HEADER0,      /* path 0's header: refused, nothing emptied */
};

static const struct damage_case {
	const char *name;
	enum damage d;
	int open_rc;      /* what reopening gives */
	int gen;          /* the generation it opens at */
	const char *says; /* in the detail or the warning */
} damage_cases[] = {
	{ "table byte flipped", DMG_TABLE, 0, 1, "damaged (crc32c mismatch)" },
	{ "slot byte flipped", DMG_SLOT, 0, 1, "commit slot" },
	{ "both slots damaged", DMG_BOTH_SLOTS, -EBADMSG, 0, "commit slots" },
	{ "data file truncated", DMG_TRUNCATE, -EBADMSG, 0, "truncated" },
	{ "data file missing", DMG_MISSING, -ENOENT, 0, "was missing" },
	{ "another stripe unit", DMG_GEOMETRY, -EINVAL, 0, "stripe_unit" },
	{ "scratch store", DMG_SCRATCH, -EEXIST, 0, "scratch store would discard it" },
	{ "object byte flipped", DMG_DATA, 0, 2, "checksum mismatch in 'big'" },
	{ "a path's header damaged", DMG_HEADER, -ENOENT, 0, "header is damaged" },
	{ "paths listed the other way round", DMG_SWAPPED, -EINVAL, 0, "list the paths in the order" },
	{ "path 0's file gone", DMG_PATH0_GONE, -EEXIST, 0, "it may hold part of that store's committed state" },
	{ "path 0's header damaged", DMG_HEADER0, -EBADMSG, 0, "the file holds committed state, so nothing is changed; keep the file" },
};

static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_log[8192];

static void log_sink(int l, uint32_t ss, const char *msg, void *arg)
{
	(void)arg;
	(void)ss;
	if (l > TIER_LL_WARN)
		return;
	pthread_mutex_lock(&g_log_lock);
	snprintf(g_log + strlen(g_log), sizeof(g_log) - strlen(g_log), "%s\n", msg);
	pthread_mutex_unlock(&g_log_lock);
}

START_TEST(test_damage)
{
	const struct damage_case *c = &damage_cases[_i];
	struct mopt mo = { .npaths = 2 };
	struct tier_manifest *m = manifest_for(&mo), *m2 = NULL;
	struct tier_store *s = open_store(m);
	struct ts_nvme_slot sl;
	char aside[4200] = "";
	struct stat st1 = { 0 }, st2;
	int idx, rc;

	for (size_t i = 0; i < ARRAY_SIZE(g_objs); i++)
		put(s, i, 1);
	commit(s, "one");
	for (size_t i = 0; i < ARRAY_SIZE(g_objs); i++)
		put(s, i, 2);
	commit(s, "two");
	close_store(s);
	read_slot(file_of(m, 0), &sl, &idx);
	ck_assert_uint_eq(sl.c[0].gen, 2);
	switch (c->d) {
	case DMG_TABLE:
		flip_byte(file_of(m, 0), data_off(64 * KiB) + sl.c[0].table_off + sl.c[0].table_len / 2);
		break;
	case DMG_SLOT:
		flip_byte(file_of(m, 0), TIER_NVME_SLOT_OFF(idx) + 200);
		break;
	case DMG_BOTH_SLOTS:
		flip_byte(file_of(m, 0), TIER_NVME_SLOT_OFF(0) + 100);
		flip_byte(file_of(m, 0), TIER_NVME_SLOT_OFF(1) + 100);
		break;
	case DMG_TRUNCATE:
		ck_assert_int_eq(truncate(file_of(m, 1), (off_t)data_off(64 * KiB) + 64 * KiB), 0);
		break;
	case DMG_MISSING:
		ck_assert_int_eq(unlink(file_of(m, 1)), 0);
		break;
	case DMG_GEOMETRY: {
		struct mopt o2 = mo;

		o2.unit = 128 * KiB;
		m2 = manifest_for(&o2);
		break;
	}
	case DMG_DATA: {
		/* The "big" object's first unit: find it from the table. */
		break;
	}
	case DMG_HEADER:
		flip_byte(file_of(m, 1), 40);
		break;
	case DMG_HEADER0:
		flip_byte(file_of(m, 0), 40);
		break;
	case DMG_SWAPPED: {
		char text[2048];
		int n = snprintf(text, sizeof(text),
				 "name: durable\ngpu:\n  device: none\ndram:\n  capacity: 64MiB\nnvme:\n"
				 "  stripe_unit: 64KiB\n  paths:\n"
				 "    - path: ${T}/p1/\n      capacity: 256MiB\n"
				 "    - path: ${T}/p0/\n      capacity: 256MiB\n");

		ck_assert_int_eq(tier_manifest_parse(text, (size_t)n, "swapped.yaml", 0, &m2), 0);
		break;
	}
	case DMG_PATH0_GONE:
		snprintf(aside, sizeof(aside), "%s.aside", file_of(m, 0));
		ck_assert_int_eq(rename(file_of(m, 0), aside), 0);
		ck_assert_int_eq(stat(file_of(m, 1), &st1), 0);
		break;
	default:
		break;
	}
	if (c->d == DMG_DATA) {
		/* Flip one byte in every data unit of path 1 after the slots
		 * would be blunt; instead change one object's unit through a
		 * store that does not know it: write the file behind its back. */
		struct tier_store *s2 = open_store(m);
		struct tier_obj *o = tier_obj_find(s2, "big");
		unsigned char *b = malloc(2 * MiB);
		int fd;
		struct stat st;

		ck_assert_ptr_nonnull(o);
		ck_assert_int_eq(tier_store_close(s2), 0);
		/* Flip a byte in the middle of every 64 KiB block of path 1's
		 * data: one of them is a unit of 'big' (it spans both paths). */
		fd = open(file_of(m, 1), O_RDWR);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(fstat(fd, &st), 0);
		for (uint64_t off = data_off(64 * KiB); off + 64 * KiB <= (uint64_t)st.st_size; off += 64 * KiB) {
			unsigned char x;

			ck_assert_int_eq(pread(fd, &x, 1, (off_t)(off + 1000)), 1);
			x ^= 1;
			ck_assert_int_eq(pwrite(fd, &x, 1, (off_t)(off + 1000)), 1);
		}
		close(fd);
		free(b);
	}
	g_log[0] = '\0';
	ts_log_set_sink(log_sink, NULL);
	if (c->d == DMG_SCRATCH) {
		struct tier_store_params p;

		tier_store_params_init(&p);
		p.flags = TIER_STORE_SCRATCH;
		rc = tier_store_open(m, &p, &s);
	} else {
		rc = open_store_gen(m2 ? m2 : m, 0, &s);
	}
	ts_log_set_sink(NULL, NULL);
	ck_assert_msg(rc == c->open_rc, "%s: open gave %d (%s), expected %d: %s", c->name, rc,
		      tier_strerror(rc), c->open_rc, tier_last_error());
	if (rc) {
		ck_assert_msg(strstr(tier_last_error(), c->says), "%s: '%s' lacks '%s'", c->name,
			      tier_last_error(), c->says);
		/* Refused: nothing changed; the original manifest still opens
		 * at generation 2 unless the damage is in the files. */
		if (c->d == DMG_GEOMETRY || c->d == DMG_SCRATCH || c->d == DMG_SWAPPED) {
			s = open_store(m);
			ck_assert_uint_eq(generation(s), 2);
			for (size_t i = 0; i < ARRAY_SIZE(g_objs); i++)
				expect(s, i, 2, "after a refused open");
			close_store(s);
		}
		if (c->d == DMG_MISSING)
			ck_assert_int_ne(access(file_of(m, 1), F_OK), 0); /* not left created */
		if (c->d == DMG_PATH0_GONE) {
			/* Path 1 was not emptied, and the store comes back whole. */
			ck_assert_int_eq(stat(file_of(m, 1), &st2), 0);
			ck_assert_int_eq(st2.st_size, st1.st_size);
			ck_assert_int_ne(access(file_of(m, 0), F_OK), 0);
			ck_assert_int_eq(rename(aside, file_of(m, 0)), 0);
			s = open_store(m);
			ck_assert_uint_eq(generation(s), 2);
			for (size_t i = 0; i < ARRAY_SIZE(g_objs); i++)
				expect(s, i, 2, "path 0 back");
			close_store(s);
		}
	} else if (c->d == DMG_DATA) {
		struct tier_obj *o = tier_obj_find(s, "big");
		unsigned char *b = malloc(2 * MiB);

		ck_assert_uint_eq(generation(s), 2);
		rc = tier_obj_read(s, o, 0, 2 * MiB, b);
		ck_assert_int_eq(rc, -EBADMSG);
		ck_assert_msg(strstr(tier_last_error(), c->says), "'%s' lacks '%s'", tier_last_error(),
			      c->says);
		free(b);
		close_store(s);
	} else {
		ck_assert_uint_eq(generation(s), (uint64_t)c->gen);
		for (size_t i = 0; i < ARRAY_SIZE(g_objs); i++)
			expect(s, i, c->gen, c->name);
		ck_assert_msg(strstr(g_log, c->says), "%s: the warning '%s' lacks '%s'", c->name, g_log,
			      c->says);
		close_store(s);
		/* The roll back is durable: it opens at the same generation again. */
		s = open_store(m);
		ck_assert_uint_eq(generation(s), (uint64_t)c->gen);
		close_store(s);
	}
	if (m2)
		tier_manifest_free(m2);
	tier_manifest_free(m);
}
END_TEST

/* ------------------------------------------------------------ faults */

static const struct fault_case {
	enum ts_fault_site site;
	bool partial;     /* the object is written in part after the commit (a copy at commit) */
} fault_cases[] = {
	{ TIER_FAULT_COMMIT_COPY, true },
	{ TIER_FAULT_COMMIT_TABLE, false },
	{ TIER_FAULT_COMMIT_SYNC, false },
	{ TIER_FAULT_COMMIT_SLOT, false },
	{ TIER_FAULT_COMMIT_SLOT_SYNC, false },
};

/* The NVMe tier's object named @name (a test reaches inside). */
struct find_arg {
	const char *name;
	struct tier_nvme_obj *o;
};

static void find_obj(void *arg, struct tier_nvme_obj *o)
{
	struct find_arg *f = arg;

	if (!strcmp(tier_nvme_obj_name(o), f->name))
		f->o = o;
}

static struct tier_nvme_obj *nvme_find(struct tier_nvme *t, const char *name)
{
	struct find_arg f = { name, NULL };

	nvme_for_each_obj(t, find_obj, &f);
	return f.o;
}

START_TEST(test_commit_faults)
{
	NEED_FAULTS();
	const struct fault_case *c = &fault_cases[_i];
	struct mopt mo = { .npaths = 2 };
	struct tier_manifest *m = manifest_for(&mo);
	struct tier_nvme *t = NULL;
	struct tier_nvme_obj *o;
	unsigned char *v1 = malloc(MiB), *v2 = malloc(MiB), *got = malloc(MiB);
	uint64_t gen;
	int rc;

	pattern("x", 1, v1, MiB);
	memcpy(v2, v1, MiB);
	pattern("x", 2, v2 + 1000, 70000); /* across units, unaligned */
	ck_assert_int_eq(tier_nvme_open(m, 0, &t), 0);
	ck_assert_int_eq(tier_nvme_obj_create(t, "x", MiB, &o), 0);
	ck_assert_int_eq(tier_nvme_write(t, o, 0, MiB, v1), 0);
	ck_assert_int_eq(tier_nvme_commit(t, "a", 2, &gen), 0);
	ck_assert_uint_eq(gen, 1);
	if (c->partial)
		ck_assert_int_eq(tier_nvme_write(t, o, 1000, 70000, v2 + 1000), 0);
	else
		ck_assert_int_eq(tier_nvme_write(t, o, 0, MiB, v2), 0);
	ck_assert_int_eq(tier_nvme_read(t, o, 0, MiB, got), 0);
	ck_assert(memcmp(got, v2, MiB) == 0);
	ts_fault_arm(c->site, 1, 1, -EIO);
	rc = tier_nvme_commit(t, "b", 2, &gen);
	ck_assert_int_eq(rc, -EIO);
	ck_assert_uint_eq(ts_fault_fired(c->site), 1);
	ck_assert_msg(strstr(tier_last_error(), "nvme"), "detail: %s", tier_last_error());
	/* The tier goes on: the bytes read back, and a later commit works. */
	ck_assert_int_eq(tier_nvme_read(t, o, 0, MiB, got), 0);
	ck_assert(memcmp(got, v2, MiB) == 0);
	ck_assert_int_eq(tier_nvme_close(t), 0);

	/* Reopened: the failed commit is not the state (generation 1). */
	ck_assert_int_eq(tier_nvme_open(m, 0, &t), 0);
	o = nvme_find(t, "x");
	ck_assert_ptr_nonnull(o);
	ck_assert_int_eq(tier_nvme_read(t, o, 0, MiB, got), 0);
	/* A slot whose write went out but whose sync failed may be on disk
	 * (here it is, in the page cache): generation 2 then, whole. */
	if (c->site == TIER_FAULT_COMMIT_SLOT_SYNC)
		ck_assert_msg(memcmp(got, v2, MiB) == 0 || memcmp(got, v1, MiB) == 0,
			      "site %s: neither generation", ts_fault_site_name(c->site));
	else
		ck_assert_msg(memcmp(got, v1, MiB) == 0, "site %s: not generation 1",
			      ts_fault_site_name(c->site));
	/* Committed again after the fault: that one holds. */
	ck_assert_int_eq(tier_nvme_write(t, o, 1000, 70000, v2 + 1000), 0);
	ck_assert_int_eq(tier_nvme_commit(t, "c", 2, &gen), 0);
	ck_assert_int_eq(tier_nvme_close(t), 0);
	ck_assert_int_eq(tier_nvme_open(m, 0, &t), 0);
	o = nvme_find(t, "x");
	ck_assert_int_eq(tier_nvme_read(t, o, 0, MiB, got), 0);
	ck_assert(memcmp(got, v2, MiB) == 0);
	ck_assert_int_eq(tier_nvme_close(t), 0);
	free(v1);
	free(v2);
	free(got);
	tier_manifest_free(m);
}
END_TEST

/*
 * Two commits that fail at their slot in a row (the first after its write
 * went out, the second before), then one that works: it is the state, and
 * the commit before the failures is still whole behind it (roll back).
 */
START_TEST(test_failed_slots_in_a_row)
{
	NEED_FAULTS();
	struct mopt mo = { .npaths = 2, .keep = 2 };
	struct tier_manifest *m = manifest_for(&mo);
	struct tier_store *s = open_store(m);
	uint64_t gen;

	put(s, 3, 1);
	put(s, 2, 1);
	ck_assert_uint_eq(commit(s, "g1"), 1);
	put(s, 3, 2);
	ts_fault_arm(TIER_FAULT_COMMIT_SLOT_SYNC, 1, 1, -EIO);
	ck_assert_int_eq(tier_store_commit(s, "g2", 3, &gen), -EIO);
	put(s, 3, 3);
	ts_fault_arm(TIER_FAULT_COMMIT_SLOT, 1, 1, -EIO);
	ck_assert_int_eq(tier_store_commit(s, "g3", 3, &gen), -EIO);
	put(s, 3, 4);
	ck_assert_uint_eq(commit(s, "g4"), 4); /* generations are not reused */
	close_store(s);
	s = open_store(m);
	ck_assert_uint_eq(generation(s), 4);
	expect(s, 3, 4, "after two failed slots");
	expect(s, 2, 1, "after two failed slots");
	close_store(s);
	ck_assert_int_eq(open_store_gen(m, 1, &s), 0);
	expect(s, 3, 1, "rolled back over two failed slots");
	expect(s, 2, 1, "rolled back over two failed slots");
	close_store(s);
	tier_manifest_free(m);
}
END_TEST

/* A fault inside a commit that kept going: the slot written but its sync
 * failed.  Whichever state the disk holds, the files reopen to a commit
 * whose bytes are intact, and the next commit works. */
START_TEST(test_commit_load_fault)
{
	NEED_FAULTS();
	struct mopt mo = { .npaths = 1 };
	struct tier_manifest *m = manifest_for(&mo);
	struct tier_store *s = open_store(m);
	int rc;

	put(s, 3, 1);
	commit(s, "x");
	close_store(s);
	ts_fault_arm(TIER_FAULT_COMMIT_LOAD, 1, 1, -EIO);
	rc = open_store_gen(m, 0, &s);
	ck_assert_int_eq(rc, -EIO);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "commit slots"));
	s = open_store(m);
	expect(s, 3, 1, "after a failed open");
	close_store(s);
	tier_manifest_free(m);
}
END_TEST

/* Partial writes under copy on write, at the NVMe tier: many small
 * unaligned writes after a commit, some units never touched; the commit
 * copies those; every version reads back exactly. */
START_TEST(test_cow_partial)
{
	struct mopt mo = { .npaths = 3, .nocsum = _i == 1 };
	struct tier_manifest *m = manifest_for(&mo);
	struct tier_nvme *t = NULL;
	struct tier_nvme_obj *o;
	const size_t n = 1 * MiB + 5000;
	unsigned char *cur = malloc(n), *got = malloc(n), *snap[3];
	uint64_t seed = 7;

	ck_assert_int_eq(tier_nvme_open(m, 0, &t), 0);
	ck_assert_int_eq(tier_nvme_obj_create(t, "p", n, &o), 0);
	pattern("p", 0, cur, n);
	ck_assert_int_eq(tier_nvme_write(t, o, 0, n, cur), 0);
	for (int g = 0; g < 3; g++) {
		ck_assert_int_eq(tier_nvme_commit(t, NULL, 0, NULL), 0);
		snap[g] = malloc(n);
		memcpy(snap[g], cur, n);
		for (int k = 0; k < 20; k++) {
			uint64_t r = t_rnd_next(&seed);
			size_t off = (r >> 20) % (n / 3);  /* the last two thirds stay */
			size_t len = 1 + (r >> 40) % 9000;

			pattern("w", (unsigned)(g * 100 + k), cur + off, len);
			ck_assert_int_eq(tier_nvme_write(t, o, off, len, cur + off), 0);
		}
		ck_assert_int_eq(tier_nvme_read(t, o, 0, n, got), 0);
		ck_assert_msg(memcmp(got, cur, n) == 0, "round %d: read after partial writes", g);
	}
	ck_assert_int_eq(tier_nvme_commit(t, NULL, 0, NULL), 0);
	ck_assert_int_eq(tier_nvme_close(t), 0);
	ck_assert_int_eq(tier_nvme_open(m, 0, &t), 0);
	o = nvme_find(t, "p");
	ck_assert_int_eq(tier_nvme_read(t, o, 0, n, got), 0);
	ck_assert(memcmp(got, cur, n) == 0);
	ck_assert_int_eq(tier_nvme_close(t), 0);
	for (int g = 0; g < 3; g++)
		free(snap[g]);
	free(cur);
	free(got);
	tier_manifest_free(m);
}
END_TEST

/* A commit whose kept copies would not fit warns once; one that fits
 * says nothing. */
START_TEST(test_space_warning)
{
	struct tier_manifest *m = NULL;
	char text[1024];
	const uint64_t caps[2] = { 6 * MiB, 256 * MiB };

	for (int k = 0; k < 2; k++) {
		struct tier_store *s;
		int n = snprintf(text, sizeof(text),
				 "name: durable\ngpu:\n  device: none\ndram:\n  capacity: 64MiB\nnvme:\n"
				 "  stripe_unit: 64KiB\n  keep_commits: 2\n  paths:\n"
				 "    - path: ${T}/s%d/\n      create: true\n      capacity: %llu\n", k,
				 U64(caps[k]));

		ck_assert_int_eq(tier_manifest_parse(text, (size_t)n, "space.yaml", 0, &m), 0);
		s = open_store(m);
		for (size_t i = 0; i < ARRAY_SIZE(g_objs); i++)
			put(s, i, 1);
		g_log[0] = '\0';
		ts_log_set_sink(log_sink, NULL);
		commit(s, NULL);
		commit(s, NULL);
		ts_log_set_sink(NULL, NULL);
		if (k == 0) {
			ck_assert_msg(strstr(g_log, "a write after a commit may fail with ENOSPC"), "no warning: '%s'", g_log);
			ck_assert_ptr_eq(strstr(strstr(g_log, "ENOSPC") + 1, "ENOSPC"), NULL); /* once */
		} else {
			ck_assert_msg(!strstr(g_log, "ENOSPC"), "a warning with room: '%s'", g_log);
		}
		close_store(s);
		tier_manifest_free(m);
	}
}
END_TEST

/* A commit while a request is in flight, or an object pinned for write. */
START_TEST(test_commit_busy)
{
	struct mopt mo = { .npaths = 1 };
	struct tier_manifest *m = manifest_for(&mo);
	struct tier_store *s = open_store(m);
	struct tier_obj *o;
	void *ptr;

	put(s, 1, 1);
	o = tier_obj_find(s, g_objs[1].name);
	ck_assert_int_eq(tier_obj_acquire(s, o, TIER_DRAM, TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE, &ptr), 0);
	ck_assert_int_eq(tier_store_commit(s, NULL, 0, NULL), -EBUSY);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "one-unit"));
	ck_assert_int_eq(tier_obj_release(s, o, TIER_DRAM, true), 0);
	ck_assert_uint_eq(commit(s, NULL), 1);
	close_store(s);
	tier_manifest_free(m);
}
END_TEST

/* A DRAM-only store has nothing durable. */
START_TEST(test_no_nvme)
{
	struct tier_manifest *m = NULL;
	const char *text = "gpu:\n  device: none\ndram:\n  capacity: 16MiB\n";
	struct tier_store *s;

	ck_assert_int_eq(tier_manifest_parse(text, strlen(text), "x.yaml", 0, &m), 0);
	ck_assert_int_eq(open_store_gen(m, 0, &s), 0);
	ck_assert_int_eq(tier_store_commit(s, NULL, 0, NULL), -ENODEV);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "no NVMe tier"));
	close_store(s);
	tier_manifest_free(m);
}
END_TEST

static Suite *durable_suite(void)
{
	Suite *s = suite_create("durable");
	TCase *tc;

	tc = tcase_create("commit");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_commit_reopen, 0, (int)ARRAY_SIZE(reopen_cases));
	tcase_add_loop_test(tc, test_keep_and_space, 0, 3);
	tcase_add_loop_test(tc, test_cow_partial, 0, 2);
	tcase_add_test(tc, test_commit_busy);
	tcase_add_test(tc, test_space_warning);
	tcase_add_test(tc, test_no_nvme);
	tcase_add_test(tc, test_rollback_refused);
	tcase_add_loop_test(tc, test_reopen_write_keeps_older, 0, 3);
	suite_add_tcase(s, tc);

	tc = tcase_create("damage");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_damage, 0, (int)ARRAY_SIZE(damage_cases));
	suite_add_tcase(s, tc);

	tc = t_tcase_faults("faults");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_commit_faults, 0, (int)ARRAY_SIZE(fault_cases));
	tcase_add_test(tc, test_commit_load_fault);
	tcase_add_test(tc, test_failed_slots_in_a_row);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run_suite(durable_suite());
}
