/*
 * test_check_files.c - tier_nvme_check_files (tiers/nvme_check.c), the
 * offline check of a closed store's backing files behind tier-stat
 * --check-files: a sound store, and one damage per row (a stripe unit, a
 * commit slot, both, the newest object table, a file truncated, a file in
 * use, missing or not named, no checksums, no commit) with what the check
 * must say: its return, the generation it verified, its counts, and a
 * line naming the fault.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "tiers/nvme_format.h"
#include "t_helpers.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define U64(x) ((unsigned long long)(x))
#define NOBJ 3

static char *g_dir;

static void setup(void)
{
	ts_err_clear();
	g_dir = t_mkdtemp();
	setenv("T", g_dir, 1);
}

static void teardown(void)
{
	t_rmtree(g_dir);
	free(g_dir);
	g_dir = NULL;
}

enum damage {
	D_NONE,
	D_DATA,       /* a byte of obj0's first stripe unit (path 0) */
	D_SLOT_NEW,   /* the newest commit slot */
	D_SLOT_BOTH,  /* both slots */
	D_TABLE_NEW,  /* the newest commit's object table */
	D_TRUNC0,     /* path 0 cut to 100000 bytes: tables and data gone */
	D_TRUNC1,     /* path 1 cut into its data */
	D_IN_USE,     /* the store still open */
	D_DATA_OLD,   /* a byte of obj2's extent that only generation 1 names */
	D_LEGACY,     /* path 0's header as an earlier build wrote it */
	D_MISSING,    /* a file that does not exist named too */
	D_TOO_FEW,    /* one file of a store of several */
};

static const struct fcase {
	const char *what;
	unsigned npaths;
	unsigned ncommits;
	bool nocsum;
	enum damage damage;
	int rc;                 /* of tier_nvme_check_files */
	uint64_t gen;           /* the generation verified */
	uint32_t problems;      /* UINT32_MAX: some */
	uint64_t bad;           /* units_bad; UINT64_MAX: some */
	const char *line;       /* in a line said (a problem line when problems) */
	int reach;              /* commits_reachable; -1: as many as kept */
} g_cases[] = {
	{ "sound, one path", 1, 2, false, D_NONE, 0, 2, 0, 0, "table sound, its stripe units verified", -1 },
	{ "sound, three paths", 3, 3, false, D_NONE, 0, 3, 0, 0, "path 2 of 3", -1 },
	{ "no commit", 1, 0, false, D_NONE, 0, 0, 0, 0, "no commit", -1 },
	{ "no checksums", 1, 1, true, D_NONE, 0, 1, 0, 0, "no checksums", -1 },
	{ "a flipped data byte", 1, 2, false, D_DATA, -EBADMSG, 2, 1, 1,
	  "object 'obj0' stripe unit 0 (nvme0 file offset 65536, 65536 bytes): crc32c", 0 },
	{ "a flipped data byte, three paths", 3, 2, false, D_DATA, -EBADMSG, 2, 1, 1,
	  "object 'obj0' stripe unit 0 (nvme0", 0 },
	{ "the newest slot damaged", 1, 2, false, D_SLOT_NEW, -EBADMSG, 1, 1, 0, "damaged", -1 },
	{ "both slots damaged", 1, 2, false, D_SLOT_BOTH, -EBADMSG, 0, 3, 0, "no commit", -1 },
	{ "the newest table damaged", 1, 2, false, D_TABLE_NEW, -EBADMSG, 1, 1, 0,
	  "generation 2's table at nvme0 file offset", -1 },
	{ "path 0 truncated", 1, 2, false, D_TRUNC0, -EBADMSG, 0, 2, 0, "(truncated)", -1 },
	{ "path 1 truncated", 2, 1, false, D_TRUNC1, -EBADMSG, 1, UINT32_MAX, UINT64_MAX,
	  "the file was truncated", 0 },
	{ "in use", 1, 1, false, D_IN_USE, -EBUSY, 0, 0, 0, NULL, -1 },
	{ "a missing file", 1, 1, false, D_MISSING, -ENOENT, 0, 0, 0, NULL, -1 },
	{ "a file not named", 3, 1, false, D_TOO_FEW, -EINVAL, 0, 0, 0, NULL, -1 },
	{ "an older commit's data flipped", 1, 2, false, D_DATA_OLD, -EBADMSG, 2, 1, 1,
	  "generation 1: object 'obj2' stripe unit 0", 1 },
	{ "no checksums, an earlier build opened the files", 1, 2, true, D_LEGACY, 0, 2, 0, 0,
	  "not reachable: an earlier build of tierstore opened the files since", 1 },
};

static struct tier_manifest *manifest_for(const struct fcase *c)
{
	struct tier_manifest *m = NULL;
	char text[4096];
	size_t n = 0;
	int rc;

	n += (size_t)snprintf(text + n, sizeof(text) - n,
			      "name: checked\ngpu:\n  device: none\ndram:\n  capacity: %llu\nnvme:\n"
			      "  stripe_unit: 64KiB\n  checksum: %s\n  direct: false\n  paths:\n",
			      U64(64 * MiB), c->nocsum ? "none" : "crc32c");
	for (unsigned i = 0; i < c->npaths; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n,
				      "    - path: ${T}/p%u/\n      create: true\n      capacity: 64MiB\n", i);
	rc = tier_manifest_parse(text, n, "check.yaml", 0, &m);
	ck_assert_msg(rc == 0, "manifest: %s\n%s", tier_last_error(), text);
	return m;
}

static void put(struct tier_store *s, unsigned i, unsigned v)
{
	char name[16];
	uint64_t size = 100 * KiB + i * 4097ull;
	struct tier_obj *o;
	unsigned char *b = malloc(size);

	ck_assert_ptr_nonnull(b);
	snprintf(name, sizeof(name), "obj%u", i);
	o = tier_obj_find(s, name);
	if (!o)
		ck_assert_int_eq(tier_obj_create(s, name, size, &o), 0);
	for (uint64_t k = 0; k < size; k++)
		b[k] = (unsigned char)(k * 31 + i * 7 + v * 13);
	ck_assert_msg(tier_obj_write(s, o, 0, size, b) == 0, "write: %s", tier_last_error());
	free(b);
}

static void flip_byte(const char *f, uint64_t off)
{
	int fd = open(f, O_RDWR);
	unsigned char ch;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &ch, 1, (off_t)off), 1);
	ch ^= 0x20;
	ck_assert_int_eq(pwrite(fd, &ch, 1, (off_t)off), 1);
	close(fd);
}

/* What the check said: every line, problems marked "P: ". */
struct said {
	char text[16384];
	size_t len;
	unsigned problems;
};

static void say(void *arg, bool problem, const char *line)
{
	struct said *s = arg;
	int n = snprintf(s->text + s->len, sizeof(s->text) - s->len, "%s%s\n", problem ? "P: " : "",
			 line);

	ck_assert_msg(n > 0 && (size_t)n < sizeof(s->text) - s->len, "too much said");
	s->len += (size_t)n;
	s->problems += problem;
}

/* Whether a line said holds @needle (and is a problem, if @problem). */
static bool said_line(const struct said *s, const char *needle, bool problem)
{
	for (const char *l = s->text; *l;) {
		const char *e = strchr(l, '\n');
		const char *hit = strstr(l, needle);

		if (hit && hit < e && (!problem || strncmp(l, "P: ", 3) == 0))
			return true;
		l = e + 1;
	}
	return false;
}

START_TEST(check_files)
{
	const struct fcase *c = &g_cases[_i];
	struct tier_manifest *m = manifest_for(c);
	struct tier_store_params p;
	struct tier_store *s = NULL;
	struct tier_nvme_check_report r;
	struct said *said = calloc(1, sizeof(*said));
	const char *files[4];
	char missing[4200];
	size_t nfiles = c->npaths;
	int rc;

	ck_assert_ptr_nonnull(said);
	for (unsigned i = 0; i < c->npaths; i++) {
		struct tier_manifest_path mp;

		ck_assert_int_eq(tier_manifest_path(m, i, &mp), 0);
		files[i] = mp.file;
	}
	tier_store_params_init(&p);
	rc = tier_store_open(m, &p, &s);
	ck_assert_msg(rc == 0, "open: %s", tier_last_error());
	for (unsigned i = 0; i < NOBJ; i++)
		put(s, i, 0);
	for (unsigned k = 0; k < c->ncommits; k++) {
		if (k)
			put(s, NOBJ - 1, k);
		rc = tier_store_commit(s, NULL, 0, NULL);
		ck_assert_msg(rc == 0, "commit: %s", tier_last_error());
	}
	if (c->damage != D_IN_USE) {
		ck_assert_int_eq(tier_store_close(s), 0);
		s = NULL;
	}

	switch (c->damage) {
	case D_DATA:
		/* obj0 was placed first, at the start of the data area (64 KiB
		 * for a 64 KiB unit), and no commit moved it */
		flip_byte(files[0], 64 * KiB + 10);
		break;
	case D_DATA_OLD:
		/* obj2 was placed third (two 64 KiB units an object); the
		 * second commit moved it, so its old extent is generation 1's */
		flip_byte(files[0], 64 * KiB + 256 * KiB + 10);
		break;
	case D_LEGACY: {
		struct ts_nvme_header h;
		int fd = open(files[0], O_RDWR);

		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
		ck_assert_uint_ne(h.flags & TIER_NVME_HDR_HOLDS_KEPT, 0);
		h.flags &= ~TIER_NVME_HDR_HOLDS_KEPT;
		nvme_header_seal(&h);
		ck_assert_int_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
		close(fd);
		break;
	}
	case D_SLOT_NEW:
		flip_byte(files[0], TIER_NVME_SLOT_OFF(c->ncommits % 2) + 100);
		break;
	case D_SLOT_BOTH:
		flip_byte(files[0], TIER_NVME_SLOT_OFF(0) + 100);
		flip_byte(files[0], TIER_NVME_SLOT_OFF(1) + 100);
		break;
	case D_TABLE_NEW: {
		struct ts_nvme_slot sl;
		int fd = open(files[0], O_RDONLY);

		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(pread(fd, &sl, sizeof(sl), TIER_NVME_SLOT_OFF(c->ncommits % 2)),
				 (ssize_t)sizeof(sl));
		close(fd);
		ck_assert_uint_eq(sl.c[0].gen, c->ncommits);
		flip_byte(files[0], 64 * KiB + sl.c[0].table_off + 20);
		break;
	}
	case D_TRUNC0:
		ck_assert_int_eq(truncate(files[0], 100000), 0);
		break;
	case D_TRUNC1:
		ck_assert_int_eq(truncate(files[1], 64 * KiB + 4096), 0);
		break;
	case D_MISSING:
		snprintf(missing, sizeof(missing), "%s/p0/absent.dat", g_dir);
		files[0] = missing;
		nfiles = 1;
		break;
	case D_TOO_FEW:
		nfiles = 2;
		break;
	default:
		break;
	}

	rc = tier_nvme_check_files(files, nfiles, say, said, &r);
	ck_assert_msg(rc == c->rc, "%s: returned %d (%s), expected %d; said:\n%s", c->what, rc,
		      tier_last_error(), c->rc, said->text);
	if (c->rc == 0 || c->rc == -EBADMSG) {
		ck_assert_msg(r.generation == c->gen, "%s: generation %llu, expected %llu:\n%s", c->what,
			      U64(r.generation), U64(c->gen), said->text);
		ck_assert_msg(said->problems == r.problems &&
			      (c->problems == UINT32_MAX ? r.problems > 0 : r.problems == c->problems),
			      "%s: %u problems (%u said), expected %u:\n%s", c->what, r.problems,
			      said->problems, c->problems, said->text);
		if (c->bad == UINT64_MAX)
			ck_assert_uint_gt(r.units_bad, 0);
		else
			ck_assert_uint_eq(r.units_bad, c->bad);
		ck_assert_str_eq(r.store_name, "checked");
		ck_assert_uint_eq(r.npaths, c->npaths);
		if (r.generation) {
			ck_assert_uint_eq(r.objects, NOBJ);
			ck_assert_uint_eq(r.data_bytes, 3 * 100 * KiB + 3 * 4097);
			/* the older slot (the newest damaged) keeps one commit fewer */
			unsigned kept = c->ncommits - (c->damage == D_SLOT_NEW);

			ck_assert_uint_eq(r.commits_kept, kept < 2 ? kept : 2);
			ck_assert_uint_ne(r.time_ns, 0);
			if (c->nocsum) {
				ck_assert_uint_eq(r.units_checked, 0);
				ck_assert_uint_gt(r.units_unchecked, 0);
			} else if (c->damage != D_TRUNC1) {
				/* 2 units an object, every one with a checksum;
				 * with two commits kept, also the older commit's
				 * extent of the object the newer one rewrote */
				ck_assert_uint_eq(r.units_checked, 2 * NOBJ + (r.commits_ok > 1 ? 2 : 0));
				ck_assert_uint_eq(r.units_unchecked, 0);
			}
		}
		if (c->rc == 0 && c->ncommits)
			ck_assert_uint_eq(r.commits_ok, r.commits_kept);
		ck_assert_msg(r.commits_reachable == (c->reach < 0 ? r.commits_ok : (uint32_t)c->reach),
			      "%s: %u reachable commits, expected %d:\n%s", c->what, r.commits_reachable,
			      c->reach, said->text);
	} else {
		ck_assert_msg(strstr(tier_last_error(), files[nfiles - 1]) ||
			      strstr(tier_last_error(), files[0]),
			      "%s: the detail names no file: %s", c->what, tier_last_error());
		if (c->rc == -EBUSY)
			ck_assert_ptr_nonnull(strstr(tier_last_error(), "in use"));
	}
	if (c->line)
		ck_assert_msg(said_line(said, c->line, c->problems != 0), "%s: '%s' not said%s:\n%s",
			      c->what, c->line, c->problems ? " as a problem" : "", said->text);
	if (s)
		ck_assert_int_eq(tier_store_close(s), 0);
	/* the check reads only: a sound store reopens at its last commit */
	if (c->damage == D_NONE && c->ncommits) {
		struct tier_commit_info ci;

		ck_assert_int_eq(tier_store_open(m, &p, &s), 0);
		ck_assert_int_eq(tier_store_committed(s, &ci), 0);
		ck_assert_uint_eq(ci.generation, c->ncommits);
		ck_assert_int_eq(tier_store_close(s), 0);
	}
	tier_manifest_free(m);
	free(said);
}
END_TEST

/* Arguments refused before any file is opened. */
START_TEST(check_files_args)
{
	struct tier_nvme_check_report r;
	const char *files[2] = { "/nonexistent", NULL };

	ck_assert_int_eq(tier_nvme_check_files(files, 0, NULL, NULL, &r), -EINVAL);
	ck_assert_int_eq(tier_nvme_check_files(files, 2, NULL, NULL, &r), -EINVAL);
	ck_assert_int_eq(tier_nvme_check_files(files, 1, NULL, NULL, &r), -ENOENT);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "/nonexistent"));
}
END_TEST

static Suite *check_files_suite(void)
{
	Suite *s = suite_create("check_files");
	TCase *tc = tcase_create("check_files");

	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, check_files, 0, (int)ARRAY_SIZE(g_cases));
	tcase_add_test(tc, check_files_args);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run_suite(check_files_suite());
}
