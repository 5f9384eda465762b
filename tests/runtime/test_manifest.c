/*
 * test_manifest.c - the tier manifest: parsing, schema errors (each class,
 * with its line and column), resolution against this machine, the
 * embedded default, emission and round trip, and every fault site the
 * loader passes.
 *
 * Manifests refer to a scratch directory through ${T}, which each test sets,
 * so the same table runs anywhere.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/options.h"
#include "common/sysinfo.h"
#include "runtime/manifest/manifest.h"
#include "t_helpers.h"

static char *g_dir;

static void setup(void)
{
	g_dir = t_mkdtemp();
	setenv("T", g_dir, 1);
	unsetenv("TIER_TEST_UNSET_VAR");
	setenv("TIER_TEST_EMPTY_VAR", "", 1);
}

static void teardown(void)
{
	t_rmtree(g_dir);
	free(g_dir);
	g_dir = NULL;
}

/* Parses @text as file "m.yaml" in the scratch dir; returns the code. */
static int load_text(const char *text, struct tier_manifest **m)
{
	char *path = t_write_file(g_dir, "m.yaml", text);
	int rc = tier_manifest_load(path, m);

	free(path);
	return rc;
}

/* --------------------------------------------------- invalid manifests */

struct bad_case {
	const char *name;
	const char *text;
	int line, col;           /* where the first error must point */
	const char *needle;      /* a substring of the first error line */
};

#define SMALL "dram:\n  capacity: 512MiB\n"

static const struct bad_case bad_cases[] = {
	{ "unknown key, near miss on line 7",
	  "version: 1\n"
	  "name: t\n"
	  "gpu:\n"
	  "  device: none\n"
	  "dram:\n"
	  "  capacity: 64MiB\n"
	  "  capacty: 1GiB\n",
	  7, 3, "unknown key 'capacty' in dram (did you mean 'capacity'?)" },
	{ "unknown top-level key, no suggestion",
	  SMALL "zebra: 1\n", 3, 1, "unknown key 'zebra' in the manifest" },
	{ "unknown key suggests in nvme path",
	  SMALL "nvme:\n  paths:\n    - path: ${T}/\n      capasity: 1GiB\n",
	  6, 7, "did you mean 'capacity'?" },
	{ "wrong type: list for a size",
	  "dram:\n  capacity: [1, 2]\n", 2, 13, "dram.capacity: expected a size such as 64GiB, got a list" },
	{ "wrong type: scalar for a section",
	  "dram: 5\n", 1, 7, "dram: expected a mapping of keys, got a scalar" },
	{ "wrong type: bool",
	  SMALL "nvme:\n  direct: maybe\n  paths:\n    - {path: \"${T}/\", capacity: 1MiB}\n",
	  4, 11, "nvme.direct: expected a boolean (true or false), got 'maybe'" },
	{ "wrong type: quoted bool",
	  SMALL "nvme:\n  sqpoll: \"true\"\n  paths:\n    - {path: \"${T}/\", capacity: 1MiB}\n",
	  4, 11, "got the string 'true'" },
	{ "wrong type: integer",
	  SMALL "nvme:\n  queue_depth: deep\n  paths:\n    - {path: \"${T}/\", capacity: 1MiB}\n",
	  4, 16, "nvme.queue_depth: expected an integer, got 'deep'" },
	{ "integer out of range",
	  SMALL "prefetch:\n  write_behind: 0\n", 4, 17, "out of range [1, 1024]" },
	{ "null value",
	  "dram:\n  capacity:\n", 2, 12, "got nothing (null)" },
	{ "bad unit",
	  "dram:\n  capacity: 5GB2\n", 2, 13, "bad unit in '5GB2'" },
	/* units: only the prefix letter in either case (issue 16) */
	{ "unit Gib (looks like bits)",
	  "dram:\n  capacity: 64Gib\n", 2, 13,
	  "bad unit in '64Gib' (accepted units: B, K, KiB, KB, M, MiB, MB, G, GiB, GB" },
	{ "unit gib", "dram:\n  capacity: 64gib\n", 2, 13, "bad unit in '64gib'" },
	{ "unit GIB", "dram:\n  capacity: 64GIB\n", 2, 13, "bad unit in '64GIB'" },
	{ "unit mb", "dram:\n  capacity: 512mb\n", 2, 13, "bad unit in '512mb'" },
	{ "unit Mb", "dram:\n  capacity: 512Mb\n", 2, 13, "bad unit in '512Mb'" },
	{ "unit b", "dram:\n  capacity: 536870912b\n", 2, 13, "bad unit in '536870912b'" },
	{ "unit Gi", "dram:\n  capacity: 1Gi\n", 2, 13, "bad unit in '1Gi'" },
	{ "bad unit: not a number",
	  "dram:\n  capacity: lots\n", 2, 13, "'lots' is not a size" },
	{ "negative size",
	  "dram:\n  capacity: -1GiB\n", 2, 13, "negative size" },
	{ "zero size",
	  "dram:\n  capacity: 0\n", 2, 13, "size must be greater than zero" },
	{ "zero percent",
	  "dram:\n  capacity: 0%\n", 2, 13, "size must be greater than zero" },
	{ "percentage over 100",
	  "dram:\n  capacity: 150%\n", 2, 13, "over 100%" },
	{ "percentage where not allowed",
	  SMALL "nvme:\n  stripe_unit: 10%\n  paths:\n    - {path: \"${T}/\", capacity: 1MiB}\n",
	  4, 16, "a percentage ('10%') is not allowed here" },
	{ "DRAM over MemAvailable",
	  "dram:\n  capacity: 100%\n", 2, 13, "more than this machine has available (MemAvailable" },
	{ "DRAM far over the machine",
	  "dram:\n  capacity: 1PiB\n", 2, 13, "more than this machine has available" },
	{ "NVMe over free space",
	  SMALL "nvme:\n  paths:\n    - path: ${T}/\n      capacity: 100PiB\n",
	  6, 17, "more than the free space of the file system of" },
	{ "NVMe over free space summed over paths on one file system",
	  SMALL "nvme:\n  paths:\n    - path: ${T}/a.dat\n      capacity: 60%\n"
	  "    - path: ${T}/b.dat\n      capacity: 60%\n",
	  8, 17, "already given to paths on it" },
	{ "duplicate path",
	  SMALL "nvme:\n  paths:\n    - {path: \"${T}/\", capacity: 1MiB}\n"
	  "    - {path: \"${T}/./\", capacity: 1MiB}\n",
	  6, 14, "duplicate path" },
	{ "duplicate path: file and directory spelling",
	  SMALL "name: s\nnvme:\n  paths:\n    - {path: \"${T}/\", capacity: 1MiB}\n"
	  "    - {path: \"${T}/tierstore-s.dat\", capacity: 1MiB}\n",
	  7, 14, "is the same file as nvme.paths[0] (line 6)" },
	{ "missing directory",
	  SMALL "nvme:\n  paths:\n    - path: ${T}/nope/file.dat\n      capacity: 1MiB\n",
	  5, 13, "does not exist (create it, or add create: true)" },
	{ "missing directory, trailing slash",
	  SMALL "nvme:\n  paths:\n    - path: ${T}/nope/\n      capacity: 1MiB\n",
	  5, 13, "does not exist" },
	{ "YAML syntax error: unclosed flow sequence",
	  "dram:\n  capacity: [1, 2\nnvme: x\n", 3, 5, "YAML syntax error" },
	{ "YAML syntax error: bad indentation",
	  "dram:\n  capacity: 1GiB\n numa_node: 0\n", 3, 2, "YAML syntax error" },
	{ "YAML syntax error: tab indentation",
	  "dram:\n\tcapacity: 1GiB\n", 2, 1, "YAML syntax error" },
	{ "aliases expanding without bound",
	  "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	  "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
	  "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
	  "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
	  "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
	  "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
	  "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n"
	  "h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
	  "i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]\n",
	  4, 4, "YAML aliases expand this node to more than" },
	{ "alias to an undefined anchor",
	  "dram: *nothing\n", 1, 7, "YAML syntax error" },
	{ "nesting too deep",
	  "a: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n",
	  1, 36, "nesting deeper than" },
	{ "nesting too deep, block sequences",
	  "a:\n" "- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - 1\n",
	  2, 65, "YAML nesting deeper than 32 levels (the limit); refused" },
	{ "an escape sequence in a value is shown escaped",
	  "name: \"a\\e[31mred\"\n" SMALL, 1, 7, "'a\\x1b[31mred' is not a valid store name" },
	{ "duplicate key",
	  "dram:\n  capacity: 64MiB\n  capacity: 128MiB\n", 3, 3, "dram.capacity: duplicate key (first at line 2)" },
	{ "duplicate section",
	  SMALL "dram:\n  numa_node: none\n", 3, 1, "dram: duplicate key (first at line 1)" },
	{ "unsupported version",
	  "version: 2\n" SMALL, 1, 10, "unsupported manifest version 2" },
	{ "GPU index not present",
	  "gpu:\n  device: 1000\n" SMALL, 2, 11, "GPU 1000 requested" },
	{ "GPU capacity with no device",
	  "gpu:\n  device: none\n  capacity: 1GiB\n" SMALL, 3, 13, "given with device: none" },
	{ "bad GPU device word",
	  "gpu:\n  device: first\n" SMALL, 2, 11, "expected auto, none or a device index" },
	{ "NUMA node that does not exist",
	  "dram:\n  capacity: 64MiB\n  numa_node: 999\n", 3, 14, "node 999 does not exist" },
	{ "huge_pages word",
	  "dram:\n  capacity: 64MiB\n  huge_pages: sometimes\n", 3, 15, "'sometimes' is not one of auto|on|off" },
	{ "unset environment variable",
	  SMALL "nvme:\n  paths:\n    - path: ${TIER_TEST_UNSET_VAR}/x\n      capacity: 1MiB\n",
	  5, 13, "environment variable 'TIER_TEST_UNSET_VAR' is not set" },
	{ "unterminated variable",
	  SMALL "nvme:\n  paths:\n    - path: ${T/x\n      capacity: 1MiB\n",
	  5, 13, "unterminated '${'" },
	{ "invalid capacity is not also reported missing",
	  SMALL "nvme:\n  paths:\n    - path: ${T}/\n      capacity: 5XB\n",
	  6, 17, "bad unit in '5XB'" },
	{ "paths not a list",
	  SMALL "nvme:\n  paths: /mnt/nvme0\n", 4, 10, "nvme.paths: expected a list of paths, got a scalar" },
	{ "trailing slash on a file",
	  SMALL "nvme:\n  paths:\n    - path: ${T}/m.yaml/\n      capacity: 1MiB\n",
	  5, 13, "ends in '/' but is a file, not a directory" },
	{ "lookahead smaller than a shard (both written; a shard size not written follows it)",
	  SMALL "optimizer:\n  shard_size: 2MiB\nprefetch:\n  lookahead: 1MiB\n", 6, 14,
	  "less than one shard" },
	{ "empty environment variable",
	  SMALL "nvme:\n  paths:\n    - path: ${TIER_TEST_EMPTY_VAR}/x\n      capacity: 1MiB\n",
	  5, 13, "'TIER_TEST_EMPTY_VAR' is not set or empty" },
	{ "path entry without capacity",
	  SMALL "nvme:\n  paths:\n    - path: ${T}/\n", 5, 7, "missing key 'capacity'" },
	{ "path entry without path",
	  SMALL "nvme:\n  paths:\n    - capacity: 1MiB\n", 5, 7, "missing key 'path'" },
	{ "path entry as a bare string",
	  SMALL "nvme:\n  paths:\n    - /mnt/nvme0\n", 5, 7, "expected a mapping with 'path' and 'capacity'" },
	{ "nvme without paths",
	  SMALL "nvme:\n  queue_depth: 8\n", 4, 3, "missing key 'paths'" },
	{ "empty list of paths",
	  SMALL "nvme:\n  paths: []\n", 4, 10, "the list of paths is empty" },
	{ "block size not a power of two",
	  SMALL "nvme:\n  block_size: 3000\n  paths:\n    - {path: \"${T}/\", capacity: 1MiB}\n",
	  4, 15, "not a power of two" },
	{ "stripe unit not a multiple of the block size",
	  SMALL "nvme:\n  stripe_unit: 12KiB\n  block_size: 8KiB\n  paths:\n    - {path: \"${T}/\", capacity: 1MiB}\n",
	  4, 16, "not a multiple of nvme.paths[0].block_size 8192" },
	{ "checksum word",
	  SMALL "nvme:\n  checksum: md5\n  paths:\n    - {path: \"${T}/\", capacity: 1MiB}\n",
	  4, 13, "'md5' is not one of none|crc32c" },
	{ "offload fraction out of range",
	  SMALL "optimizer:\n  offload_fraction: 1.5\n", 4, 21, "expected auto or a fraction in [0, 1]" },
	{ "master dtype must be fp32",
	  SMALL "optimizer:\n  master_dtype: bf16\n", 4, 17, "always fp32" },
	{ "moment dtype word",
	  SMALL "optimizer:\n  moment_dtype: int8\n", 4, 17, "'int8' is not one of fp32|bf16|q8" },
	{ "rounding word",
	  SMALL "optimizer:\n  rounding: up\n", 4, 13, "'up' is not one of nearest|stochastic" },
	{ "out_rounding word",
	  SMALL "optimizer:\n  out_rounding: 1\n", 4, 17, "'1' is not one of nearest|stochastic" },
	{ "seed negative",
	  SMALL "optimizer:\n  seed: -1\n", 4, 9, "seed" },
	{ "seed not a number",
	  SMALL "optimizer:\n  seed: abc\n", 4, 9, "seed" },
	{ "shard size bounds",
	  SMALL "optimizer:\n  shard_size: 1KiB\n", 4, 15, "must be a multiple of 4 KiB in [64 KiB, 4 GiB]" },
	{ "lookahead over half the DRAM tier",
	  SMALL "prefetch:\n  lookahead: 300MiB\n", 4, 14, "more than half the DRAM tier" },
	{ "bad store name",
	  "name: a/b\n" SMALL, 1, 7, "not a valid store name" },
	{ "empty document",
	  "# nothing here\n", 1, 1, "the manifest is empty" },
	{ "two documents",
	  SMALL "---\n" SMALL, 4, 1, "a second one starts here" },
	{ "a list at the top",
	  "- a\n- b\n", 1, 1, "manifest: expected a mapping of keys, got a list" },
	{ "non-scalar key",
	  "? [a, b]\n: 1\n", 1, 3, "a key must be a plain word" },
	/*
	 * REGRESSION (issue 41, item 1): 2^64 - 1 bytes passed: the capacity
	 * and the file's header, added to compare with the free space,
	 * wrapped to less than a MiB.
	 */
	{ "NVMe capacity of 2^64 - 1 bytes",
	  SMALL "nvme:\n  paths:\n    - path: ${T}/\n      capacity: 18446744073709551615B\n",
	  6, 17, "nvme.paths[0].capacity: 18446744073709551615 B (16.00 EiB) is larger than" },
	{ "NVMe capacity of 2^64 - 1 bytes, a file path",
	  SMALL "nvme:\n  paths:\n    - path: ${T}/a.dat\n      capacity: 18446744073709551615\n",
	  6, 17, "with the file's 1.00 MiB header it passes 2^64 bytes" },
	{ "NVMe capacity just under 2^64 bytes, divided",
	  SMALL "nvme:\n  paths:\n    - path: ${T}/\n      capacity: 16383PiB/local_world\n",
	  6, 17, "more than the free space of the file system of" },
	/*
	 * REGRESSION (issue 41, item 3): a NUL byte in a double-quoted
	 * scalar cut the value short ("a\0b" was the store name "a").
	 */
	{ "NUL in the store name",
	  "name: \"a\\0b\"\n" SMALL, 1, 7,
	  "name: contains a NUL byte at offset 1 ('a\\x00b')" },
	{ "NUL in a path",
	  SMALL "nvme:\n  paths:\n    - path: \"${T}/x\\0y\"\n      capacity: 1MiB\n",
	  5, 13, "nvme.paths[0].path: contains a NUL byte at offset 6" },
	{ "NUL in a size",
	  "dram:\n  capacity: \"512MiB\\0junk\"\n", 2, 13,
	  "dram.capacity: contains a NUL byte at offset 6" },
	{ "NUL in a key",
	  "dram:\n  \"capacity\\0x\": 512MiB\n", 2, 3,
	  "dram: the key 'capacity\\x00x' contains a NUL byte at offset 8" },
	{ "NUL in a value under an unknown key",
	  SMALL "extra:\n  - \"\\0\"\n", 4, 5, "extra[0]: contains a NUL byte at offset 0" },
	{ "NUL in a list item",
	  SMALL "nvme:\n  paths:\n    - \"x\\0\"\n", 5, 7,
	  "nvme.paths[0]: contains a NUL byte at offset 1" },
};

START_TEST(test_bad)
{
	const struct bad_case *c = &bad_cases[_i];
	struct tier_manifest *m = NULL;
	char want[256];
	const char *err;
	int rc;

	rc = load_text(c->text, &m);
	err = tier_last_error();
	ck_assert_msg(rc == -EINVAL, "%s: rc %d (%s), error: %s", c->name, rc,
		      tier_strerror(rc), err);
	ck_assert_ptr_null(m);
	snprintf(want, sizeof(want), "%s/m.yaml:%d:%d: ", g_dir, c->line, c->col);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0,
		      "%s: error does not start with '%s':\n%s", c->name, want, err);
	{
		const char *nl = strchr(err, '\n');
		size_t first = nl ? (size_t)(nl - err) : strlen(err);
		char line[4096];

		snprintf(line, sizeof(line), "%.*s", (int)first, err);
		ck_assert_msg(strstr(line, c->needle), "%s: '%s' not in first error:\n%s",
			      c->name, c->needle, err);
	}
}
END_TEST

/* Several mistakes in one file: all are reported, in document order. */
START_TEST(test_many_errors)
{
	struct tier_manifest *m = NULL;
	const char *err, *p;
	int rc, lines = 1;

	rc = load_text("dram:\n  capacty: 1GiB\n  huge_pages: maybe\n"
		       "prefetch:\n  write_behind: x\nbogus: 1\n", &m);
	ck_assert_int_eq(rc, -EINVAL);
	err = tier_last_error();
	for (p = err; (p = strchr(p, '\n')); p++)
		lines++;
	ck_assert_msg(lines == 4, "expected 4 errors, got %d:\n%s", lines, err);
	ck_assert_ptr_nonnull(strstr(err, "m.yaml:2:3:"));
	ck_assert_ptr_nonnull(strstr(err, "m.yaml:3:15:"));
	ck_assert_ptr_nonnull(strstr(err, "m.yaml:5:17:"));
	ck_assert_ptr_nonnull(strstr(err, "m.yaml:6:1:"));
	ck_assert(strstr(err, "m.yaml:2:3:") < strstr(err, "m.yaml:6:1:"));
}
END_TEST

/*
 * O_DIRECT refused: a ramfs mounted in a private mount namespace (Check
 * runs this in a forked child).  Skipped where mounting is not allowed.
 */
START_TEST(test_direct_refused)
{
	struct tier_manifest *m = NULL;
	char *mnt;
	char want[512], text[512];
	int rc;

	if (asprintf(&mnt, "%s/ramfs", g_dir) < 0)
		ck_abort();
	mkdir(mnt, 0700);
	if (unshare(CLONE_NEWNS) != 0 && unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
		fprintf(stderr, "test_direct_refused: no mount namespace; skipped\n");
		free(mnt);
		return;
	}
	mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
	if (mount("none", mnt, "ramfs", 0, NULL) != 0) {
		fprintf(stderr, "test_direct_refused: cannot mount ramfs; skipped\n");
		free(mnt);
		return;
	}
	snprintf(text, sizeof(text),
		 SMALL "nvme:\n  paths:\n    - path: %s/\n      capacity: 1MiB\n", mnt);
	rc = load_text(text, &m);
	ck_assert_int_eq(rc, -EINVAL);
	snprintf(want, sizeof(want), "%s/m.yaml:5:13: nvme.paths[0].path: the file system of '", g_dir);
	ck_assert_msg(strncmp(tier_last_error(), want, strlen(want)) == 0, "%s", tier_last_error());
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "refuses O_DIRECT while direct: true"));

	umount(mnt);
	free(mnt);
}
END_TEST

/* ------------------------------------------------------ valid manifests */

/*
 * The public view of the effective configuration (tier_manifest_info,
 * tier_manifest_path) reports what the manifest resolved to.
 */
static void assert_info_matches(const struct tier_manifest *m)
{
	struct tier_manifest_info in;
	struct tier_manifest_path p;
	uint64_t total = 0;

	ck_assert_int_eq(tier_manifest_info(m, &in), 0);
	ck_assert_str_eq(in.source, tier_manifest_source(m));
	ck_assert_str_eq(in.name, m->tiers.name);
	ck_assert_int_eq(in.gpu, m->tiers.gpu);
	ck_assert_uint_eq(in.hbm_capacity, m->tiers.gpu >= 0 ? m->tiers.hbm_capacity : 0);
	ck_assert_uint_eq(in.dram_capacity, m->tiers.dram_capacity);
	ck_assert_int_eq(in.numa_node, m->tiers.numa_node);
	ck_assert_uint_eq(in.npaths, m->tiers.npaths);
	ck_assert_uint_eq(in.stripe_unit, m->tiers.stripe_unit);
	ck_assert(in.checksum == (m->tiers.checksum == TIER_CSUM_CRC32C));
	ck_assert_uint_eq(in.lookahead, m->lookahead);
	ck_assert_uint_eq(in.write_behind, m->write_behind);
	ck_assert(in.offload_fraction == (m->offload_auto ? TIER_OFFLOAD_AUTO : m->offload_fraction));
	ck_assert_int_eq(in.moment_dtype, m->moment_dtype);
	ck_assert_int_eq(in.rounding, m->rounding);
	ck_assert_int_eq(in.out_rounding, m->out_rounding);
	ck_assert_uint_eq(in.seed, m->seed);
	ck_assert_uint_eq(in.shard_size, m->shard_size);
	for (unsigned i = 0; i < in.npaths; i++) {
		ck_assert_int_eq(tier_manifest_path(m, i, &p), 0);
		ck_assert_str_eq(p.path, m->tiers.paths[i].path);
		ck_assert_str_eq(p.file, m->tiers.paths[i].file);
		ck_assert_uint_eq(p.capacity, m->tiers.paths[i].capacity);
		ck_assert_uint_eq(p.block_size, m->tiers.paths[i].block_size);
		ck_assert_uint_eq(p.queue_depth, m->tiers.paths[i].queue_depth);
		ck_assert(p.direct == m->tiers.paths[i].direct);
		total += p.capacity;
	}
	ck_assert_uint_eq(in.nvme_capacity, total);
	ck_assert_int_eq(tier_manifest_path(m, in.npaths, &p), -ERANGE);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "no NVMe path"));
	ck_assert_int_eq(tier_manifest_info(NULL, &in), -EINVAL);
	ck_assert_int_eq(tier_manifest_info(m, NULL), -EINVAL);
	ck_assert_int_eq(tier_manifest_path(m, 0, NULL), -EINVAL);
}

START_TEST(test_empty_mapping_defaults)
{
	struct tier_manifest *m = NULL;
	const struct tier_manifest *c;
	struct ts_meminfo mi;

	ck_assert_int_eq(load_text("{}\n", &m), 0);
	c = m;
	ck_assert_str_eq(c->tiers.name, "tierstore");
	ck_assert_int_eq(c->version, 1);
	ck_assert_uint_eq(c->tiers.npaths, 0);
	ck_assert(c->offload_auto);
	ck_assert_int_eq(c->moment_dtype, TIER_FP32);
	ck_assert_int_eq(c->rounding, TIER_ROUND_STOCHASTIC);
	ck_assert_int_eq(c->out_rounding, TIER_ROUND_NEAREST);
	ck_assert_uint_eq(c->seed, 0);
	ck_assert_uint_eq(c->shard_size, 64u << 20);
	ck_assert_uint_eq(c->write_behind, 4);
	ck_assert_int_eq(sys_meminfo(&mi), 0);
	ck_assert_uint_gt(c->tiers.dram_capacity, 0);
	ck_assert_uint_le(c->tiers.dram_capacity, mi.available);
	ck_assert_uint_eq(c->tiers.dram_capacity % 4096, 0);
	ck_assert_uint_le(c->lookahead, c->tiers.dram_capacity / 2);
	assert_info_matches(m);
	tier_manifest_free(m);
}
END_TEST

START_TEST(test_full_manifest)
{
	struct tier_manifest *m = NULL;
	const struct tier_manifest *c;
	struct ts_meminfo mi;
	char want[1024];

	setenv("TIER_TEST_SUB", "sub", 1);
	{
		char *sub;

		if (asprintf(&sub, "%s/sub", g_dir) < 0)
			ck_abort();
		mkdir(sub, 0700);
		free(sub);
	}
	ck_assert_int_eq(sys_meminfo(&mi), 0);
	ck_assert_msg(load_text(
		"version: 1\n"
		"name: run-7.b\n"
		"gpu:\n"
		"  device: none\n"
		"dram:\n"
		"  capacity: 1%\n"
		"  numa_node: none\n"
		"  huge_pages: off\n"
		"nvme:\n"
		"  stripe_unit: 2MiB\n"
		"  block_size: 4KiB\n"
		"  queue_depth: 128\n"
		"  direct: &d true\n"
		"  sqpoll: yes\n"
		"  checksum: none\n"
		"  paths:\n"
		"    - path: ${T}/\n"
		"      capacity: 10MiB\n"
		"    - path: ${T}/${TIER_TEST_SUB}/../${TIER_TEST_UNSET_VAR:-b}.dat\n"
		"      capacity: 1.5MiB\n"
		"      queue_depth: 8\n"
		"      block_size: 8KiB\n"
		"      direct: *d\n"
		"    - path: ${T}/new/dir/\n"
		"      capacity: 1MiB\n"
		"      create: true\n"
		"prefetch:\n"
		"  lookahead: 10%\n"
		"  write_behind: 16\n"
		"optimizer:\n"
		"  offload_fraction: 0.25\n"
		"  master_dtype: fp32\n"
		"  moment_dtype: bf16\n"
		"  rounding: nearest\n"
		"  out_rounding: stochastic\n"
		"  seed: 9007199254740993\n"
		"  shard_size: 1MiB\n", &m) == 0, "%s", tier_last_error());
	c = m;
	ck_assert_str_eq(c->tiers.name, "run-7.b");
	ck_assert_int_eq(c->tiers.gpu, -1);
	ck_assert_uint_eq(c->tiers.dram_capacity, (uint64_t)((double)mi.total * 0.01) & ~4095ull);
	ck_assert_int_eq(c->tiers.numa_node, -1);
	ck_assert_int_eq(c->tiers.huge_pages, TIER_HUGE_OFF);
	ck_assert_uint_eq(c->tiers.stripe_unit, 2u << 20);
	ck_assert(c->tiers.sqpoll);
	ck_assert_int_eq(c->tiers.checksum, TIER_CSUM_NONE);
	ck_assert_uint_eq(c->tiers.npaths, 3);
	ck_assert_uint_eq(c->tiers.paths[0].capacity, 10u << 20);
	ck_assert_uint_eq(c->tiers.paths[0].queue_depth, 128);
	ck_assert_uint_eq(c->tiers.paths[0].block_size, 4096);
	ck_assert(c->tiers.paths[0].direct);
	snprintf(want, sizeof(want), "/tierstore-run-7.b.dat");
	ck_assert_ptr_nonnull(strstr(c->tiers.paths[0].file, want));
	ck_assert_int_eq(c->tiers.paths[0].line, 17);
	ck_assert_int_eq(c->tiers.paths[0].col, 7);
	/* 1.5 MiB rounded down to the path's 8 KiB blocks */
	ck_assert_uint_eq(c->tiers.paths[1].capacity, (3u << 19) / 8192 * 8192);
	ck_assert_uint_eq(c->tiers.paths[1].block_size, 8192);
	ck_assert_uint_eq(c->tiers.paths[1].queue_depth, 8);
	ck_assert_ptr_nonnull(strstr(c->tiers.paths[1].file, "/b.dat"));
	ck_assert_ptr_null(strstr(c->tiers.paths[1].file, "/../"));
	ck_assert(c->tiers.paths[2].create);
	ck_assert_ptr_nonnull(strstr(c->tiers.paths[2].file, "/new/dir/tierstore-run-7.b.dat"));
	ck_assert_uint_eq(c->lookahead, (uint64_t)((double)c->tiers.dram_capacity * 0.10));
	ck_assert_uint_eq(c->write_behind, 16);
	ck_assert(!c->offload_auto);
	ck_assert(c->offload_fraction == 0.25);
	ck_assert_int_eq(c->moment_dtype, TIER_BF16);
	ck_assert_int_eq(c->rounding, TIER_ROUND_NEAREST);
	ck_assert_int_eq(c->out_rounding, TIER_ROUND_STOCHASTIC);
	ck_assert_uint_eq(c->seed, 9007199254740993ull);
	ck_assert_uint_eq(c->shard_size, 1u << 20);
	assert_info_matches(m);
	tier_manifest_free(m);
	unsetenv("TIER_TEST_SUB");
}
END_TEST

/* Emitted YAML is itself a manifest that resolves to the same configuration. */
static void assert_same_config(const struct tier_manifest *a, const struct tier_manifest *b)
{
	ck_assert_str_eq(a->tiers.name, b->tiers.name);
	ck_assert_int_eq(a->tiers.gpu, b->tiers.gpu);
	ck_assert_uint_eq(a->tiers.hbm_capacity, b->tiers.hbm_capacity);
	ck_assert_uint_eq(a->tiers.dram_capacity, b->tiers.dram_capacity);
	ck_assert_int_eq(a->tiers.numa_node, b->tiers.numa_node);
	ck_assert_int_eq(a->tiers.huge_pages, b->tiers.huge_pages);
	ck_assert_uint_eq(a->tiers.stripe_unit, b->tiers.stripe_unit);
	ck_assert_int_eq(a->tiers.sqpoll, b->tiers.sqpoll);
	ck_assert_int_eq(a->tiers.checksum, b->tiers.checksum);
	ck_assert_uint_eq(a->tiers.npaths, b->tiers.npaths);
	for (size_t i = 0; i < a->tiers.npaths; i++) {
		ck_assert_str_eq(a->tiers.paths[i].file, b->tiers.paths[i].file);
		ck_assert_uint_eq(a->tiers.paths[i].capacity, b->tiers.paths[i].capacity);
		ck_assert_uint_eq(a->tiers.paths[i].block_size, b->tiers.paths[i].block_size);
		ck_assert_uint_eq(a->tiers.paths[i].queue_depth, b->tiers.paths[i].queue_depth);
		ck_assert_int_eq(a->tiers.paths[i].direct, b->tiers.paths[i].direct);
		ck_assert_int_eq(a->tiers.paths[i].create, b->tiers.paths[i].create);
	}
	ck_assert_uint_eq(a->lookahead, b->lookahead);
	ck_assert_uint_eq(a->write_behind, b->write_behind);
	ck_assert_int_eq(a->offload_auto, b->offload_auto);
	ck_assert(a->offload_fraction == b->offload_fraction);
	ck_assert_int_eq(a->moment_dtype, b->moment_dtype);
	ck_assert_int_eq(a->rounding, b->rounding);
	ck_assert_int_eq(a->out_rounding, b->out_rounding);
	ck_assert_uint_eq(a->seed, b->seed);
	ck_assert_uint_eq(a->shard_size, b->shard_size);
}

static void round_trip(struct tier_manifest *m)
{
	struct tier_manifest *m2 = NULL;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(tier_manifest_emit(m, f), 0);
	fclose(f);
	ck_assert_msg(tier_manifest_parse(buf, len, "emitted", 0, &m2) == 0,
		      "emitted YAML does not parse: %s\n%s", tier_last_error(), buf);
	assert_same_config(m, m2);
	tier_manifest_free(m2);
	free(buf);
}

START_TEST(test_round_trip)
{
	struct tier_manifest *m = NULL;

	ck_assert_msg(load_text(
		"name: \"q\\\"uote\"\n" /* refused: checks that names stay simple */
		SMALL, &m) == -EINVAL, "quote in a name must be refused");
	ck_assert_msg(load_text(
		SMALL
		"nvme:\n"
		"  sqpoll: true\n"
		"  paths:\n"
		"    - path: \"${T}/we ird:#dir\\\"/\"\n"
		"      capacity: 3MiB\n"
		"      create: true\n"
		"    - path: ${T}/x.dat\n"
		"      capacity: 2MiB\n"
		"      direct: false\n"
		"optimizer:\n"
		"  offload_fraction: 0.3\n", &m) == 0, "%s", tier_last_error());
	round_trip(m);
	tier_manifest_free(m);
}
END_TEST

/*
 * REGRESSION (found by the fuzzer): a path holding a character YAML reads
 * as a line break (NEL U+0085, LS U+2028, PS U+2029), written as it is,
 * broke the emitted YAML ("could not find expected ':'"); other non-ASCII
 * and control characters must come back the same too.  Each path is
 * emitted, parsed again and compared.
 */
static const char *const text_paths[] = {
	"${T}/nel\\Nx/",           /* U+0085 */
	"${T}/ls\\Lx/",            /* U+2028 */
	"${T}/ps\\Px/",            /* U+2029 */
	"${T}/acc\\u00e9nt/",      /* é */
	"${T}/emoji\\U0001F600/",  /* 4 bytes */
	"${T}/ctl\\x01\\ttab/",  /* control characters */
	"${T}/nbsp\\_bom\\ufeff/",
};

START_TEST(test_round_trip_text)
{
	struct tier_manifest *m = NULL;
	char text[512];

	snprintf(text, sizeof(text), SMALL "nvme:\n  paths:\n    - path: \"%s\"\n"
		 "      capacity: 3MiB\n      create: true\n", text_paths[_i]);
	ck_assert_msg(tier_manifest_parse(text, strlen(text), "text.yaml",
					  TIER_MANIFEST_NO_PROBE, &m) == 0,
		      "%s\n%s", tier_last_error(), text);
	{
		struct tier_manifest *m2 = NULL;
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);

		ck_assert_ptr_nonnull(f);
		ck_assert_int_eq(tier_manifest_emit(m, f), 0);
		fclose(f);
		ck_assert_msg(tier_manifest_parse(buf, len, "emitted", TIER_MANIFEST_NO_PROBE, &m2) == 0,
			      "emitted YAML does not parse: %s\n%s", tier_last_error(), buf);
		ck_assert_str_eq(m2->tiers.paths[0].path, m->tiers.paths[0].path);
		ck_assert_str_eq(m2->tiers.paths[0].file, m->tiers.paths[0].file);
		tier_manifest_free(m2);
		free(buf);
	}
	tier_manifest_free(m);
}
END_TEST

/* A manifest file whose name holds a line break: the emitted comment that
 * names it stays one line. */
START_TEST(test_source_name_line_break)
{
	struct tier_manifest *m = NULL, *m2 = NULL;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	ck_assert_int_eq(tier_manifest_parse(SMALL, strlen(SMALL), "a\nb\xc2\x85" "c.yaml",
					     TIER_MANIFEST_NO_PROBE, &m), 0);
	f = open_memstream(&buf, &len);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(tier_manifest_emit(m, f), 0);
	fclose(f);
	{
		static const char want[] = "# effective configuration of a\\x0ab\\u0085c.yaml (";

		ck_assert_msg(strncmp(buf, want, sizeof(want) - 1) == 0, "%s", buf);
	}
	ck_assert_msg(tier_manifest_parse(buf, len, "emitted", TIER_MANIFEST_NO_PROBE, &m2) == 0,
		      "%s\n%s", tier_last_error(), buf);
	tier_manifest_free(m2);
	tier_manifest_free(m);
	free(buf);
}
END_TEST

/* An environment variable that is not UTF-8 is refused, named. */
START_TEST(test_env_not_utf8)
{
	struct tier_manifest *m = NULL;
	const char *text = SMALL "nvme:\n  paths:\n    - path: ${TIER_TEST_BAD_UTF8}/\n"
			   "      capacity: 3MiB\n";

	setenv("TIER_TEST_BAD_UTF8", "/tmp/\xff\xfe", 1);
	ck_assert_int_eq(tier_manifest_parse(text, strlen(text), "env.yaml", TIER_MANIFEST_NO_PROBE,
					     &m), -EINVAL);
	ck_assert_ptr_null(m);
	ck_assert_msg(strstr(tier_last_error(), "TIER_TEST_BAD_UTF8") &&
		      strstr(tier_last_error(), "not UTF-8"), "%s", tier_last_error());
	unsetenv("TIER_TEST_BAD_UTF8");
}
END_TEST

START_TEST(test_default)
{
	struct tier_manifest *m = NULL;
	const struct tier_manifest *c;
	char *text = NULL;
	char *data;

	if (asprintf(&data, "%s/data", g_dir) < 0)
		ck_abort();
	setenv("TIER_DATA", data, 1);
	ts_options_reload();
	ck_assert_int_eq(tier_manifest_default_text(&text), 0);
	ck_assert_ptr_nonnull(strstr(text, data));
	ck_assert_msg(tier_manifest_default(&m) == 0, "%s", tier_last_error());
	c = m;
	ck_assert_str_eq(tier_manifest_source(m), "<default>");
	ck_assert_uint_eq(c->tiers.npaths, 1);
	ck_assert(c->tiers.paths[0].create);
	ck_assert_ptr_nonnull(strstr(c->tiers.paths[0].file, "/data/tierstore-tierstore.dat"));
	ck_assert_uint_ge(c->tiers.paths[0].capacity, 64u << 20);
	ck_assert_uint_le(c->tiers.paths[0].capacity, 64ull << 30);
	ck_assert_uint_gt(c->tiers.dram_capacity, 0);
	/* Checking the default creates nothing. */
	ck_assert_int_ne(access(data, F_OK), 0);
	round_trip(m);
	tier_manifest_free(m);
	free(text);

	/* A cap from the options table is honoured. */
	setenv("TIER_NVME_MAX", "100MiB", 1);
	ts_options_reload();
	ck_assert_int_eq(tier_manifest_default(&m), 0);
	ck_assert_uint_eq(m->tiers.paths[0].capacity, 100u << 20);
	tier_manifest_free(m);
	unsetenv("TIER_NVME_MAX");
	unsetenv("TIER_DATA");
	free(data);
}
END_TEST

/*
 * A symlink on the way to the scratch directory names the same backing
 * file.  (The link as the last component is refused: test_symlink.)
 */
START_TEST(test_duplicate_through_symlink)
{
	struct tier_manifest *m = NULL;
	char *link, *sub, text[1024], target[4096];

	if (!realpath(g_dir, target) || asprintf(&link, "%s/link", g_dir) < 0 ||
	    asprintf(&sub, "%s/sub", g_dir) < 0 || symlink(target, link) != 0 ||
	    mkdir(sub, 0700) != 0)
		ck_abort();
	snprintf(text, sizeof(text),
		 SMALL "nvme:\n  paths:\n    - {path: \"%s/\", capacity: 1MiB}\n"
		 "    - {path: \"%s/sub/\", capacity: 1MiB}\n", sub, link);
	ck_assert_int_eq(load_text(text, &m), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), ":6:14: nvme.paths[1].path: duplicate path"));
	free(link);
	free(sub);
}
END_TEST

/*
 * REGRESSION (issue 41, item 2): "dir/" was reached through a symbolic
 * link (to /etc, say), and the store created its file where the link
 * pointed.  The path as written, directory or file, must not be a
 * symbolic link; links on the way to it are fine.
 */
static const struct symlink_case {
	const char *name;
	const char *target;      /* what ${T}/l points to (@ = the scratch dir) */
	const char *path;        /* the entry's path */
	const char *needle;      /* NULL: accepted */
} symlink_cases[] = {
	{ "to /etc, directory form", "/etc", "${T}/l/",
	  "is a symbolic link (to '/etc'); name the real directory" },
	{ "to /etc, file form", "/etc", "${T}/l",
	  "is a symbolic link (to '/etc'); name the real directory" },
	{ "to a directory of ours", "real", "${T}/l/",
	  "is a symbolic link (to 'real'); name the real directory" },
	{ "to a directory of ours, spelled with /.", "real", "${T}/l/.",
	  "is a symbolic link (to 'real'); name the real directory" },
	{ "to a file of ours", "real/f.dat", "${T}/l",
	  "is a symbolic link (to 'real/f.dat'); name the real file" },
	{ "dangling", "nowhere", "${T}/l/",
	  "is a symbolic link (to 'nowhere'); name the real directory" },
	{ "on the way, not the last component", "real", "${T}/l/sub/", NULL },
};

START_TEST(test_symlink)
{
	const struct symlink_case *c = &symlink_cases[_i];
	struct tier_manifest *m = NULL;
	char dir[4200], text[4500], want[8600], abs[4096];
	int rc;

	ck_assert_ptr_nonnull(realpath(g_dir, abs));
	snprintf(dir, sizeof(dir), "%s/real", g_dir);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	snprintf(dir, sizeof(dir), "%s/real/sub", g_dir);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	snprintf(dir, sizeof(dir), "%s/l", g_dir);
	ck_assert_int_eq(symlink(c->target, dir), 0);
	snprintf(text, sizeof(text),
		 SMALL "nvme:\n  paths:\n    - path: %s\n      capacity: 1MiB\n      direct: false\n",
		 c->path);
	rc = load_text(text, &m);
	if (!c->needle) {
		ck_assert_msg(rc == 0, "%s: %s", c->name, tier_last_error());
		snprintf(want, sizeof(want), "%s/real/sub/tierstore-tierstore.dat", abs);
		ck_assert_str_eq(m->tiers.paths[0].file, want);
		tier_manifest_free(m);
		return;
	}
	ck_assert_msg(rc == -EINVAL, "%s: accepted (rc %d)", c->name, rc);
	/* The path as written (cut to an excerpt if long), then the rest. */
	snprintf(want, sizeof(want), "%s/m.yaml:5:13: nvme.paths[0].path: path '", g_dir);
	ck_assert_msg(strncmp(tier_last_error(), want, strlen(want)) == 0,
		      "%s: not '%s...':\n%s", c->name, want, tier_last_error());
	ck_assert_msg(strstr(tier_last_error(), c->needle), "%s: '%s' not in:\n%s", c->name,
		      c->needle, tier_last_error());
}
END_TEST

/*
 * The store's open refuses the same: a directory still to be made
 * (create: true) when the manifest was read, which is a symbolic link by
 * the time the store opens.  Nothing is created where it points.
 */
START_TEST(test_symlink_at_open)
{
	struct tier_manifest *m = NULL;
	struct tier_nvme *t = NULL;
	char text[4500], abs[4096], real[4200], link[4200], f[4400], want[13000];
	int rc;

	snprintf(text, sizeof(text),
		 SMALL "nvme:\n  paths:\n    - path: ${T}/later/\n      capacity: 1MiB\n"
		 "      direct: false\n      create: true\n");
	ck_assert_msg(load_text(text, &m) == 0, "%s", tier_last_error());
	ck_assert_ptr_nonnull(realpath(g_dir, abs));
	snprintf(real, sizeof(real), "%s/real", abs);
	snprintf(link, sizeof(link), "%s/later", abs);
	ck_assert_int_eq(mkdir(real, 0700), 0);
	ck_assert_int_eq(symlink("real", link), 0);
	rc = tier_nvme_open(m, 0, &t);
	if (rc == 0)
		tier_nvme_close(t);
	ck_assert_msg(rc == -ELOOP, "open through a symlink: rc %d: %s", rc, tier_last_error());
	snprintf(want, sizeof(want), "nvme0: path '%s' (%s/m.yaml:5:7) is a symbolic link (to 'real'); name the real directory",
		 link, g_dir);
	ck_assert_msg(strstr(tier_last_error(), want), "'%s' not in:\n%s", want, tier_last_error());
	snprintf(f, sizeof(f), "%s/tierstore-tierstore.dat", real);
	ck_assert_msg(access(f, F_OK) != 0, "%s was created through the link", f);
	tier_manifest_free(m);
}
END_TEST

/*
 * REGRESSION (issue 41, item 1): the capacities of the paths, each a
 * size, added up past 2^64 (schema-only, where no free space bounds
 * them); refused at the entry where the sum passes it.  Below it, the
 * total that tier_manifest_info() reports is exact.
 */
START_TEST(test_size_sums)
{
	struct tier_manifest *m = NULL;
	struct tier_manifest_info in;
	const char *over = SMALL "nvme:\n  paths:\n"
			   "    - {path: /x/a.dat, capacity: 16383PiB}\n"
			   "    - {path: /x/b.dat, capacity: 16383PiB}\n";
	const char *under = SMALL "nvme:\n  paths:\n"
			    "    - {path: /x/a.dat, capacity: 8191PiB}\n"
			    "    - {path: /x/b.dat, capacity: 8191PiB}\n";
	int rc;

	rc = tier_manifest_parse(over, strlen(over), "s.yaml", TIER_MANIFEST_NO_PROBE, &m);
	ck_assert_msg(rc == -EINVAL, "accepted (rc %d)", rc);
	ck_assert_msg(strstr(tier_last_error(),
			     "s.yaml:6:34: nvme.paths[1].capacity: 18445618173802708992 B (16.00 EiB) is larger than"),
		      "%s", tier_last_error());
	ck_assert_msg(strstr(tier_last_error(), "passes 2^64 bytes"), "%s", tier_last_error());
	ck_assert_msg(tier_manifest_parse(under, strlen(under), "s.yaml", TIER_MANIFEST_NO_PROBE, &m) == 0,
		      "%s", tier_last_error());
	ck_assert_int_eq(tier_manifest_info(m, &in), 0);
	ck_assert_uint_eq(in.nvme_capacity, 2 * (8191ull << 50));
	tier_manifest_free(m);
}
END_TEST

/* "gpu:" with nothing after it takes every default of the section. */
START_TEST(test_null_section)
{
	struct tier_manifest *m = NULL;

	ck_assert_msg(load_text("gpu:\ndram:\n  capacity: 512MiB\nprefetch:\noptimizer: ~\n", &m) == 0,
		      "%s", tier_last_error());
	ck_assert_uint_eq(m->write_behind, 4);
	tier_manifest_free(m);
	ck_assert_int_eq(load_text("dram:\n  capacity: 512MiB\nnvme:\n", &m), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "missing key 'paths'"));
}
END_TEST

/* One mistake, one message: an invalid value is not also "missing". */
START_TEST(test_one_message_per_mistake)
{
	struct tier_manifest *m = NULL;

	ck_assert_int_eq(load_text(SMALL "nvme:\n  paths:\n    - path: ${T}/\n      capacity: 5XB\n", &m),
			 -EINVAL);
	ck_assert_msg(strchr(tier_last_error(), '\n') == NULL, "%s", tier_last_error());
	ck_assert_int_eq(load_text(SMALL "nvme:\n  paths: 7\n", &m), -EINVAL);
	ck_assert_msg(strchr(tier_last_error(), '\n') == NULL, "%s", tier_last_error());
}
END_TEST

START_TEST(test_aliases_within_limit)
{
	struct tier_manifest *m = NULL;

	ck_assert_msg(load_text(
		"defaults: &cap 64MiB\n" /* an unknown key: refused, but aliases parse */
		"dram:\n  capacity: *cap\n", &m) == -EINVAL, "%s", tier_last_error());
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "m.yaml:1:1: unknown key 'defaults'"));
	ck_assert_msg(load_text(
		"dram:\n  capacity: &cap 64MiB\n"
		"prefetch:\n  lookahead: 8MiB\n"
		"optimizer:\n  shard_size: &s 1MiB\n", &m) == 0, "%s", tier_last_error());
	tier_manifest_free(m);
}
END_TEST

START_TEST(test_no_probe)
{
	struct tier_manifest *m = NULL;
	const char *text =
		"gpu:\n  device: 3\n"
		"dram:\n  capacity: 32GiB\n"
		"nvme:\n  paths:\n    - {path: /nonexistent/nvme0/, capacity: 50%}\n";

	ck_assert_msg(tier_manifest_parse(text, strlen(text), "np", TIER_MANIFEST_NO_PROBE, &m) == 0,
		      "%s", tier_last_error());
	ck_assert_int_eq(m->tiers.gpu, 3);
	ck_assert_uint_eq(m->tiers.paths[0].capacity, 1ull << 39);
	tier_manifest_free(m);
}
END_TEST

START_TEST(test_not_nul_terminated)
{
	struct tier_manifest *m = NULL;
	char buf[64];

	memset(buf, 'x', sizeof(buf));
	memcpy(buf, "{}", 2);
	ck_assert_int_eq(tier_manifest_parse(buf, 2, "buf", TIER_MANIFEST_NO_PROBE, &m), 0);
	tier_manifest_free(m);
}
END_TEST

START_TEST(test_missing_file)
{
	struct tier_manifest *m = NULL;
	char *path;

	if (asprintf(&path, "%s/absent.yaml", g_dir) < 0)
		ck_abort();
	ck_assert_int_eq(tier_manifest_load(path, &m), -ENOENT);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "absent.yaml: No such file or directory"));
	free(path);
}
END_TEST

/* ------------------------------------------------ limits (issue 16) */

/* Accepted unit spellings: each gives shard_size 64 MiB. */
static const char *const good_units[] = {
	"64MiB", "64M", "64m", "64miB", "64 MiB", "65536KiB", "65536K", "65536k",
	"65536kiB", "67108864", "67108864B", "0.0625GiB", "0.0625G", "0.0625g",
};

START_TEST(test_unit_spellings)
{
	struct tier_manifest *m = NULL;
	struct tier_manifest_info info;
	char text[256];

	snprintf(text, sizeof(text), SMALL "optimizer:\n  shard_size: %s\n", good_units[_i]);
	ck_assert_msg(tier_manifest_parse(text, strlen(text), "u.yaml", TIER_MANIFEST_NO_PROBE,
					  &m) == 0, "%s: %s", good_units[_i], tier_last_error());
	ck_assert_int_eq(tier_manifest_info(m, &info), 0);
	ck_assert_uint_eq(info.shard_size, 64u << 20);
	tier_manifest_free(m);
}
END_TEST

#if defined(__SANITIZE_ADDRESS__)
#define SLOW_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SLOW_BUILD 1
#endif
#endif
#ifndef SLOW_BUILD
#define SLOW_BUILD 0
#endif

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* @unit repeated to fill @len bytes (then @tail), in a new buffer. */
static char *repeat(const char *head, const char *unit, size_t len, const char *tail)
{
	size_t h = strlen(head), u = strlen(unit), t = strlen(tail);
	char *b = malloc(len + 1);
	size_t o = 0;

	ck_assert_ptr_nonnull(b);
	memcpy(b, head, h);
	o = h;
	while (o + u + t <= len) {
		memcpy(b + o, unit, u);
		o += u;
	}
	memcpy(b + o, tail, t);
	o += t;
	b[o] = '\0';
	return b;
}

struct worst {
	const char *name, *head, *unit, *tail, *needle;
};

static const struct worst worst_cases[] = {
	{ "deep flow mappings", "", "{a: ", "", "nesting deeper than 32 levels" },
	{ "deep flow sequences", "", "[", "", "nesting deeper than 32 levels" },
	{ "deep block sequences", "", "- ", "", "nesting deeper than 32 levels" },
	{ "deep flow in a block", "a:\n  b: ", "[{x: ", "", "nesting deeper than 32 levels" },
	{ "many aliases", "a: &x 1\nb: [", "*x, ", "*x]\n", "TIER_YAML_NODE_LIMIT" },
	{ "long list", "a: [", "1,", "1]\n", "TIER_YAML_NODE_LIMIT" },
	{ "many keys", "", "k: 1\n", "", "TIER_YAML_NODE_LIMIT" },
	{ "long line", "name: ", "x", "\n", "is not a valid store name" },
	{ "long key", "", "x", ": 1\n", "YAML syntax error" },
};

/*
 * Every worst case at the size cap (1 MiB) is answered within a second
 * (ten under a sanitizer): nesting and node counts are checked on the
 * parser's events, before the loader builds anything.
 */
START_TEST(test_worst_case_time)
{
	const struct worst *c = &worst_cases[_i];
	double limit = SLOW_BUILD ? 10.0 : 1.0;
	struct tier_manifest *m = NULL;
	char *text = repeat(c->head, c->unit, 1u << 20, c->tail);
	double t0 = now_s();
	int rc = tier_manifest_parse(text, strlen(text), "w.yaml", TIER_MANIFEST_NO_PROBE, &m);
	double s = now_s() - t0;

	ck_assert_msg(rc == -EINVAL, "%s: rc %d: %s", c->name, rc, tier_last_error());
	ck_assert_msg(strstr(tier_last_error(), c->needle), "%s: '%s' not in: %.300s", c->name,
		      c->needle, tier_last_error());
	ck_assert_msg(strlen(tier_last_error()) < 400, "%s: an error of %zu bytes", c->name,
		      strlen(tier_last_error()));
	ck_assert_msg(s < limit, "%s: %.3f s (limit %.0f s)", c->name, s, limit);
	free(text);
}
END_TEST

/*
 * libyaml's loader looks anchors up linearly: ~5000 distinct long anchors
 * and as many aliases took seconds.  More than 256 anchors are refused
 * while parsing, at once.
 */
START_TEST(test_many_anchors_time)
{
	double limit = SLOW_BUILD ? 10.0 : 1.0;
	struct tier_manifest *m = NULL;
	size_t cap = 1u << 20, o = 0;
	char *text = malloc(cap + 1), pre[96];
	double t0, s;
	int i, rc;

	ck_assert_ptr_nonnull(text);
	memset(pre, 'y', sizeof(pre) - 1);
	pre[sizeof(pre) - 1] = '\0';
	o += (size_t)snprintf(text, cap, "a: [");
	for (i = 0; i < 4990; i++)
		o += (size_t)snprintf(text + o, cap - o, "&%s%05d 1, ", pre, i);
	for (i = 0; i < 5000 && o + 200 < cap; i++)
		o += (size_t)snprintf(text + o, cap - o, "*%s%05d, ", pre, 4989);
	snprintf(text + o, cap - o, "1]\n");
	t0 = now_s();
	rc = tier_manifest_parse(text, strlen(text), "w.yaml", TIER_MANIFEST_NO_PROBE, &m);
	s = now_s() - t0;
	ck_assert_int_eq(rc, -EINVAL);
	ck_assert_msg(strstr(tier_last_error(), "w.yaml:1:"), "%s", tier_last_error());
	ck_assert_msg(strstr(tier_last_error(), "more than 256 YAML anchors (the limit); refused"),
		      "%s", tier_last_error());
	ck_assert_msg(s < limit, "%.3f s (limit %.0f s)", s, limit);
	free(text);
}
END_TEST

/*
 * With TIER_YAML_NODE_LIMIT raised to its maximum, 100000 keys reach the
 * schema walk, whose duplicate check is quadratic: it stops once the
 * report is full (20 problems), instead of taking minutes.
 */
START_TEST(test_many_keys_raised_limit)
{
	double limit = SLOW_BUILD ? 10.0 : 1.0;
	struct tier_manifest *m = NULL;
	size_t cap = 1u << 20, o = 0;
	char *text = malloc(cap + 1);
	double t0, s;
	int rc;

	ck_assert_ptr_nonnull(text);
	for (int i = 0; o + 16 < cap; i++)
		o += (size_t)snprintf(text + o, cap - o, "k%d: 1\n", i);
	ck_assert_int_eq(setenv("TIER_YAML_NODE_LIMIT", "10000000", 1), 0);
	ts_options_reload();
	t0 = now_s();
	rc = tier_manifest_parse(text, o, "w.yaml", TIER_MANIFEST_NO_PROBE, &m);
	s = now_s() - t0;
	unsetenv("TIER_YAML_NODE_LIMIT");
	ts_options_reload();
	ck_assert_int_eq(rc, -EINVAL);
	ck_assert_msg(strstr(tier_last_error(), "w.yaml: too many errors; stopping"), "%.300s",
		      tier_last_error());
	ck_assert_msg(s < limit, "%.3f s (limit %.0f s)", s, limit);
	free(text);
}
END_TEST

/* One byte over the cap: refused by size, naming the file, size and cap. */
START_TEST(test_size_cap)
{
	struct tier_manifest *m = NULL;
	char *text = repeat("", "#", (1u << 20) + 1, "");
	char *path = t_write_file(g_dir, "big.yaml", text);
	char want[512];

	ck_assert_int_eq(tier_manifest_load(path, &m), -EFBIG);
	snprintf(want, sizeof(want), "%s: the manifest is 1048577 bytes, more than the limit of 1048576 bytes (1 MiB)",
		 path);
	ck_assert_str_eq(tier_last_error(), want);
	free(path);
	free(text);
}
END_TEST

/* A FIFO, a device or a directory is refused at once, never read. */
START_TEST(test_not_regular)
{
	struct tier_manifest *m = NULL;
	char *fifo;

	if (asprintf(&fifo, "%s/fifo.yaml", g_dir) < 0)
		ck_abort();
	ck_assert_int_eq(mkfifo(fifo, 0600), 0);
	ck_assert_int_eq(tier_manifest_load(fifo, &m), -EINVAL);
	ck_assert_msg(strstr(tier_last_error(), "fifo.yaml: is a FIFO (named pipe); a manifest must be a regular file"),
		      "%s", tier_last_error());
	ck_assert_int_eq(tier_manifest_load("/dev/zero", &m), -EINVAL);
	ck_assert_str_eq(tier_last_error(),
			 "/dev/zero: is a character device; a manifest must be a regular file");
	ck_assert_int_eq(tier_manifest_load(g_dir, &m), -EISDIR);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "is a directory; a manifest must be a regular file"));
	ck_assert_ptr_null(m);
	free(fifo);
}
END_TEST

/* A 10 KB bad value is quoted as a 40-character excerpt. */
START_TEST(test_long_value_excerpt)
{
	struct tier_manifest *m = NULL;
	char *text = repeat("dram:\n  capacity: 1", "x", 10000, "\n");
	char want[128];

	ck_assert_int_eq(tier_manifest_parse(text, strlen(text), "l.yaml", TIER_MANIFEST_NO_PROBE, &m),
			 -EINVAL);
	snprintf(want, sizeof(want), "l.yaml:2:13: dram.capacity: bad unit in '1%.39s\xe2\x80\xa6'",
		 text + 20);
	ck_assert_msg(strncmp(tier_last_error(), want, strlen(want)) == 0, "%s", tier_last_error());
	ck_assert_uint_lt(strlen(tier_last_error()), 300);
	free(text);
}
END_TEST

/*
 * capacity: 100% leaves room for the backing file's header and data
 * offset (1 MiB with the default stripe unit), so what --check accepts can
 * be opened and filled.
 */
START_TEST(test_capacity_counts_header)
{
	struct tier_manifest *m = NULL;
	struct tier_manifest_path p;
	struct statvfs v0, v1;
	uint64_t avail;
	int rc;

	ck_assert_int_eq(statvfs(g_dir, &v0), 0);
	rc = load_text(SMALL "nvme:\n  paths:\n    - {path: \"${T}/\", capacity: 100%, direct: false}\n",
		       &m);
	ck_assert_msg(rc == 0, "%s", tier_last_error());
	ck_assert_int_eq(statvfs(g_dir, &v1), 0);
	avail = (uint64_t)v0.f_bavail * v0.f_frsize;
	if ((uint64_t)v1.f_bavail * v1.f_frsize > avail)
		avail = (uint64_t)v1.f_bavail * v1.f_frsize;
	ck_assert_int_eq(tier_manifest_path(m, 0, &p), 0);
	ck_assert_msg(p.capacity + (1u << 20) <= avail, "capacity %llu + 1 MiB > free %llu",
		      (unsigned long long)p.capacity, (unsigned long long)avail);
	tier_manifest_free(m);
}
END_TEST

/* ------------------------------------------------------------ faults */

struct fault_case {
	enum ts_fault_site site;
	int err;
	const char *needle;
};

static const struct fault_case fault_cases[] = {
	{ TIER_FAULT_MANIFEST_OPEN, -EACCES, "m.yaml: Permission denied" },
	{ TIER_FAULT_MANIFEST_READ, -EIO, "m.yaml: read: Input/output error" },
	{ TIER_FAULT_YAML_PARSE, -ENOMEM, "cannot set up the YAML parser" },
	{ TIER_FAULT_MEMINFO, -EIO, "/proc/meminfo" },
	{ TIER_FAULT_STATVFS, -EIO, "statvfs: Input/output error" },
	{ TIER_FAULT_DIRECT_PROBE, -EIO, "O_DIRECT probe: Input/output error" },
};

START_TEST(test_fault_sites)
{
	const struct fault_case *fc = &fault_cases[_i];
	struct tier_manifest *m = NULL;
	int rc;

	NEED_FAULTS();
	ts_fault_arm(fc->site, 1, TIER_FAULT_PERSISTENT, fc->err);
	rc = load_text(SMALL "nvme:\n  paths:\n    - {path: \"${T}/\", capacity: 1MiB}\n", &m);
	ck_assert_msg(rc != 0, "site %s: parse succeeded", ts_fault_site_name(fc->site));
	ck_assert_ptr_null(m);
	ck_assert_uint_ge(ts_fault_fired(fc->site), 1);
	ck_assert_msg(strstr(tier_last_error(), fc->needle), "site %s: '%s' not in: %s",
		      ts_fault_site_name(fc->site), fc->needle, tier_last_error());
	ts_fault_disarm(fc->site);
}
END_TEST

/*
 * Fail the Nth allocation for N = 1, 2, ... until a run injects nothing:
 * every run either fails cleanly (an error, no manifest) or succeeds, and
 * ASan sees no leak.
 */
START_TEST(test_alloc_fail_nth)
{
	const char *text = SMALL "nvme:\n  paths:\n    - {path: \"${T}/\", capacity: 1MiB}\n"
			   "    - {path: \"${T}/b.dat\", capacity: 1MiB}\n";
	struct t_nth f = T_NTH(TIER_FAULT_ALLOC, -ENOMEM, 999);

	NEED_FAULTS();
	while (t_nth_next(&f)) {
		struct tier_manifest *m = NULL;
		int rc;

		t_nth_arm(&f);
		rc = load_text(text, &m);
		if (!t_nth_fired(&f)) {
			ck_assert_msg(rc == 0, "clean run failed: %s", tier_last_error());
			tier_manifest_free(m);
			break;
		}
		ck_assert_msg(rc != 0, "allocation %llu failed but the load succeeded",
			      (unsigned long long)f.nth);
		ck_assert_ptr_null(m);
		ck_assert_msg(tier_last_error()[0] != 0, "allocation %llu: rc %d with no detail", (unsigned long long)f.nth, rc);
	}
	ck_assert_uint_gt(f.nth, 3);
}
END_TEST

/* ------------------------------------------------ values sized from others */

/*
 * What the user did not write is sized from what they did: the shard size
 * from the DRAM tier (an eighth, a power of two, 64 KiB - 64 MiB), the
 * window from both; an error names only a key the user wrote.
 *
 * REGRESSION (issue 16, item 1): the shard size was 64 MiB whatever the DRAM
 * tier, so `dram: capacity: 64MiB` alone was refused with errors about
 * prefetch.lookahead and optimizer.shard_size, keys the user never wrote.
 */
struct sized_case {
	const char *text;
	uint64_t shard, lookahead;  /* 0, 0: refused */
	const char *err;            /* the refusal (at the position of what it names) */
	const char *not_named;      /* a key the refusal must not name */
};

static const struct sized_case sized_cases[] = {
	{ "dram:\n  capacity: 64MiB\n", 8u << 20, 16u << 20, NULL, NULL },
	{ "dram:\n  capacity: 192MiB\n", 16u << 20, 48u << 20, NULL, NULL },
	{ "dram:\n  capacity: 1GiB\n", 64u << 20, 256u << 20, NULL, NULL },
	{ "dram:\n  capacity: 300KiB\n", 64u << 10, 75u << 10, NULL, NULL },
	{ "dram:\n  capacity: 1GiB\nprefetch:\n  lookahead: 1MiB\n", 1u << 20, 1u << 20, NULL,
	  NULL },
	{ "dram:\n  capacity: 64MiB\noptimizer:\n  shard_size: 12MiB\n", 12u << 20, 16u << 20,
	  NULL, NULL },
	{ "dram:\n  capacity: 64MiB\noptimizer:\n  shard_size: 16MiB\n", 16u << 20, 16u << 20,
	  NULL, NULL },
	{ "dram:\n  capacity: 200KiB\n", 0, 0, ":2:13: dram.capacity: 200.00 KiB is too small",
	  "optimizer.shard_size" },
	{ "dram:\n  capacity: 64MiB\noptimizer:\n  shard_size: 20MiB\nprefetch:\n  lookahead: 8MiB\n",
	  0, 0, ":6:14: prefetch.lookahead: 8.00 MiB is less than one shard", NULL },
	{ "dram:\n  capacity: 64MiB\noptimizer:\n  shard_size: 48MiB\n", 0, 0,
	  ":4:15: optimizer.shard_size: 48.00 MiB is more than a quarter", "prefetch.lookahead" },
	{ "dram:\n  capacity: 64MiB\nprefetch:\n  lookahead: 32KiB\n", 0, 0,
	  ":4:14: prefetch.lookahead: 32.00 KiB is less than one shard", "optimizer.shard_size:" },
};

START_TEST(test_sized_defaults)
{
	const struct sized_case *c = &sized_cases[_i];
	struct tier_manifest *m = NULL;
	int rc = load_text(c->text, &m);

	if (!c->err) {
		ck_assert_msg(rc == 0, "REGRESSION: %s refused: %s", c->text, tier_last_error());
		ck_assert_msg(m->shard_size == c->shard && m->lookahead == c->lookahead,
			      "%s: shard %llu, lookahead %llu; expected %llu, %llu", c->text,
			      (unsigned long long)m->shard_size, (unsigned long long)m->lookahead,
			      (unsigned long long)c->shard, (unsigned long long)c->lookahead);
		round_trip(m);
		tier_manifest_free(m);
		return;
	}
	ck_assert_msg(rc == -EINVAL && strstr(tier_last_error(), c->err),
		      "%s: %d, expected '%s': %s", c->text, rc, c->err, tier_last_error());
	ck_assert_msg(!c->not_named || !strstr(tier_last_error(), c->not_named),
		      "%s: the refusal names %s, which the manifest does not have: %s", c->text,
		      c->not_named, tier_last_error());
}
END_TEST

/* ------------------------------------------------ ranks (issue 19) */

/* Every variable tier_rank_from_env() reads. */
static const char *const launcher_vars[] = {
	"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
	"OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
	"MPI_LOCALNRANKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS",
	"SLURM_NTASKS_PER_NODE",
};

/* Clears the launchers' variables, then sets "A=1 B=2" from @env. */
static void set_launcher_env(const char *env)
{
	char buf[512], *save = NULL;

	for (size_t i = 0; i < ARRAY_SIZE(launcher_vars); i++)
		unsetenv(launcher_vars[i]);
	snprintf(buf, sizeof(buf), "%s", env ? env : "");
	for (char *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
		char *eq = strchr(tok, '=');

		ck_assert_ptr_nonnull(eq);
		*eq = '\0';
		ck_assert_int_eq(setenv(tok, eq + 1, 1), 0);
	}
}

#define RANK_NAME "name: r${RANK}-w${WORLD_SIZE}-l${LOCAL_RANK}-lw${LOCAL_WORLD_SIZE}\n"
#define RANK_SIZES RANK_NAME "dram:\n  capacity: 1GiB/local_world\n" \
	"prefetch:\n  lookahead: 128MiB / local_world\n" \
	"nvme:\n  paths:\n    - path: /nonexistent/r${LOCAL_RANK}/\n" \
	"      capacity: 1GiB/local_world\n      create: true\n"

struct rank_case {
	const char *name;
	const char *env;             /* "VAR=value ..." after clearing them all */
	const struct tier_rank *api; /* NULL: the environment's */
	const char *text;
	/* valid: */
	const char *want_name;
	uint64_t dram, lookahead, nvme; /* 0: not checked */
	/* invalid (want_name NULL): the first error's place (line 0: the file's)
	 * and a substring of it */
	int line, col;
	const char *needle;
};

static const struct tier_rank rank_2_of_4 = { .rank = 2, .local_rank = 1, .world_size = 4, .local_world_size = 2 };
static const struct tier_rank rank_past_world = { .rank = 2, .local_rank = 0, .world_size = 2, .local_world_size = 1 };
static const struct tier_rank world_zero = { .rank = 0, .local_rank = 0, .world_size = 0, .local_world_size = 1 };

#define OK(n, env, api, text, want, d, la, nv) { n, env, api, text, want, d, la, nv, 0, 0, NULL }
#define BAD(n, env, api, text, l, c, needle) { n, env, api, text, NULL, 0, 0, 0, l, c, needle }
static const struct rank_case rank_cases[] = {
	OK("single process", NULL, NULL, RANK_SIZES, "r0-w1-l0-lw1",
	  1ull << 30, 128ull << 20, 1ull << 30),
	OK("torchrun", "RANK=5 LOCAL_RANK=1 WORLD_SIZE=8 LOCAL_WORLD_SIZE=4", NULL, RANK_SIZES,
	  "r5-w8-l1-lw4", 256ull << 20, 32ull << 20, 256ull << 20),
	OK("open mpi", "OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_SIZE=2",
	  NULL, RANK_SIZES, "r3-w4-l1-lw2", 512ull << 20, 64ull << 20, 512ull << 20),
	/* 1 GiB / 3 = 357913941, rounded down to 4 KiB (dram) and to the block size */
	OK("mpich", "PMI_RANK=2 PMI_SIZE=3 MPI_LOCALRANKID=2 MPI_LOCALNRANKS=3", NULL, RANK_SIZES,
	  "r2-w3-l2-lw3", 357912576, (128ull << 20) / 3, 357912576),
	OK("slurm", "SLURM_PROCID=1 SLURM_LOCALID=1 SLURM_NTASKS=2 SLURM_NTASKS_PER_NODE=2", NULL,
	  RANK_SIZES, "r1-w2-l1-lw2", 512ull << 20, 64ull << 20, 512ull << 20),
	OK("torchrun's names first", "RANK=1 OMPI_COMM_WORLD_RANK=0 WORLD_SIZE=2 OMPI_COMM_WORLD_SIZE=4",
	  NULL, RANK_NAME, "r1-w2-l0-lw1", 0, 0, 0),
	OK("open mpi before mpich before slurm",
	  "OMPI_COMM_WORLD_RANK=1 PMI_RANK=2 SLURM_PROCID=3 PMI_SIZE=5 SLURM_NTASKS=6", NULL,
	  RANK_NAME, "r1-w5-l0-lw1", 0, 0, 0),
	OK("an empty variable is unset", "RANK= OMPI_COMM_WORLD_RANK=2 WORLD_SIZE=3", NULL,
	  RANK_NAME, "r2-w3-l0-lw1", 0, 0, 0),
	OK("the API's rank over the environment's", "RANK=5 WORLD_SIZE=8 LOCAL_WORLD_SIZE=1",
	  &rank_2_of_4, RANK_NAME "dram:\n  capacity: 50%/local_world\n",
	  "r2-w4-l1-lw2", 16ull << 30 /* 50% of the nominal 64 GiB, halved */, 0, 0),
	OK("a default never replaces a rank", NULL, NULL, "name: x${RANK:-9}\n", "x0", 0, 0, 0),
	/* errors in the environment or the struct: the file's, no place */
	BAD("not a number", "RANK=abc", NULL, RANK_NAME, 0, 0,
	  "environment: RANK='abc' is not a rank"),
	BAD("negative", "LOCAL_RANK=-1", NULL, "{}", 0, 0,
	  "LOCAL_RANK='-1' is not a rank"),
	BAD("world of 0", "OMPI_COMM_WORLD_SIZE=0", NULL, "{}", 0, 0,
	  "OMPI_COMM_WORLD_SIZE='0' is not a number of ranks"),
	BAD("rank past the world", "RANK=4 WORLD_SIZE=4", NULL, "{}", 0, 0,
	  "RANK=4 is not below the world size (WORLD_SIZE=4)"),
	BAD("rank without a world", "PMI_RANK=1", NULL, "{}", 0, 0,
	  "PMI_RANK=1 is not below the world size (1 (no WORLD_SIZE"),
	BAD("local rank past the local world", "SLURM_LOCALID=2 SLURM_NTASKS=4 SLURM_NTASKS_PER_NODE=2",
	  NULL, "{}", 0, 0,
	  "SLURM_LOCALID=2 is not below the local world size (SLURM_NTASKS_PER_NODE=2)"),
	BAD("local world past the world", "LOCAL_WORLD_SIZE=4 WORLD_SIZE=2", NULL, "{}", 0, 0, "LOCAL_WORLD_SIZE=4 is more than the world size (WORLD_SIZE=2)"),
	BAD("mixed launchers disagree", "OMPI_COMM_WORLD_RANK=3 WORLD_SIZE=2", NULL, "{}", 0, 0, "OMPI_COMM_WORLD_RANK=3 is not below the world size (WORLD_SIZE=2)"),
	BAD("API rank past its world", NULL, &rank_past_world, "{}", 0, 0, "struct tier_rank: rank 2 is not below the world size (world_size 2)"),
	BAD("API world of 0", NULL, &world_zero, "{}", 0, 0, "world_size 0: the world size must be at least 1"),
	/* errors in the document: its place */
	BAD("another variable still unset", NULL, NULL, "name: ${TIER_TEST_UNSET_VAR}-${RANK}\n",
	  1, 7, "'TIER_TEST_UNSET_VAR' is not set or empty"),
	BAD("divided by world", NULL, NULL, "dram:\n  capacity: 1GiB/world\n", 2, 13,
	  "divide by local_world, not world"),
	BAD("divided by a number", NULL, NULL, "gpu:\n  capacity: 40GiB/2\n", 2, 13,
	  "after '/' only local_world may follow"),
	BAD("divided twice", NULL, NULL, "dram:\n  capacity: 1GiB/local_world/local_world\n", 2, 13,
	    "bad unit in '1GiB/local_world'"),
	BAD("not a size before it", NULL, NULL, "prefetch:\n  lookahead: lots/local_world\n", 2, 14, "prefetch.lookahead: 'lots' is not a size"),
	BAD("on a size that is not a share", NULL, NULL, "optimizer:\n  shard_size: 64MiB/local_world\n",
	  2, 15, "optimizer.shard_size: '64MiB/local_world': only gpu.capacity"),
	BAD("on the block size", NULL, NULL,
	  "nvme:\n  block_size: 8KiB/local_world\n  paths:\n    - {path: /x/, capacity: 1GiB, create: true}\n",
	  2, 15, "nvme.block_size: '8KiB/local_world': only"),
	BAD("on a key that takes no size", NULL, NULL, "prefetch:\n  write_behind: 8/local_world\n",
	  2, 17, "expected an integer"),
	BAD("divided to zero", "LOCAL_WORLD_SIZE=8 WORLD_SIZE=8", NULL,
	  "dram:\n  capacity: 20KiB/local_world\n", 2, 13, "dram.capacity: rounds down to zero"),
};

START_TEST(test_rank)
{
	const struct rank_case *c = &rank_cases[_i];
	struct tier_manifest *m = NULL;
	struct tier_manifest_info info;
	struct tier_manifest_path path;
	char want[128];
	const char *err;
	int rc;

	set_launcher_env(c->env);
	rc = tier_manifest_parse_rank(c->text, strlen(c->text), "m.yaml", TIER_MANIFEST_NO_PROBE,
				      c->api, &m);
	err = tier_last_error();
	if (!c->want_name) {
		ck_assert_msg(rc == -EINVAL, "%s: rc %d, error: %s", c->name, rc, err);
		ck_assert_ptr_null(m);
		if (c->line)
			snprintf(want, sizeof(want), "m.yaml:%d:%d: ", c->line, c->col);
		else
			snprintf(want, sizeof(want), "m.yaml: ");
		ck_assert_msg(strncmp(err, want, strlen(want)) == 0 && strstr(err, c->needle),
			      "%s: want '%s...%s', got:\n%s", c->name, want, c->needle, err);
		return;
	}
	ck_assert_msg(rc == 0, "%s: rc %d: %s", c->name, rc, err);
	ck_assert_int_eq(tier_manifest_info(m, &info), 0);
	ck_assert_str_eq(info.name, c->want_name);
	if (c->dram)
		ck_assert_uint_eq(info.dram_capacity, c->dram);
	if (c->lookahead)
		ck_assert_uint_eq(info.lookahead, c->lookahead);
	if (c->nvme) {
		ck_assert_int_eq(tier_manifest_path(m, 0, &path), 0);
		ck_assert_uint_eq(path.capacity, c->nvme);
	}
	if (c->api) {
		ck_assert_int_eq(info.rank.rank, c->api->rank);
		ck_assert_int_eq(info.rank.world_size, c->api->world_size);
		ck_assert_int_eq(info.rank.local_rank, c->api->local_rank);
		ck_assert_int_eq(info.rank.local_world_size, c->api->local_world_size);
	}
	tier_manifest_free(m);
}
END_TEST

/* tier_rank_from_env() as such, and the rank in the effective configuration. */
START_TEST(test_rank_env_and_emit)
{
	struct tier_rank r = { -1, -1, -1, -1 };
	struct tier_manifest *m = NULL;
	const char *text = "dram:\n  capacity: 1GiB/local_world\n"
			   "nvme:\n  paths:\n    - path: ${T}/r${LOCAL_RANK}.dat\n"
			   "      capacity: 1GiB/local_world\n";
	char *out = NULL, *back = NULL;
	size_t len = 0;
	FILE *f;

	set_launcher_env(NULL);
	ck_assert_int_eq(tier_rank_from_env(&r), 0);
	ck_assert(r.rank == 0 && r.local_rank == 0 && r.world_size == 1 && r.local_world_size == 1);
	set_launcher_env("RANK=6 LOCAL_RANK=2 WORLD_SIZE=8 LOCAL_WORLD_SIZE=4");
	ck_assert_int_eq(tier_rank_from_env(&r), 0);
	ck_assert(r.rank == 6 && r.local_rank == 2 && r.world_size == 8 && r.local_world_size == 4);
	r = (struct tier_rank){ -1, -1, -1, -1 };
	set_launcher_env("RANK=x");
	ck_assert_int_eq(tier_rank_from_env(&r), -EINVAL);
	ck_assert_int_eq(r.rank, -1); /* untouched */
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "RANK='x'"));

	set_launcher_env("RANK=6 LOCAL_RANK=2 WORLD_SIZE=8 LOCAL_WORLD_SIZE=4");
	ck_assert_int_eq(load_text(text, &m), 0);
	f = open_memstream(&out, &len);
	ck_assert_int_eq(tier_manifest_emit(m, f), 0);
	fclose(f);
	ck_assert_msg(strstr(out, "# resolved for rank 6 of 8 (local rank 2 of 4 on this node)\n"), "%s", out);
	ck_assert_msg(strstr(out, "/r2.dat\""), "%s", out);
	ck_assert_msg(strstr(out, "  capacity: 268435456   # 256.00 MiB, /local_world: 1 of 4 ranks on this node\n"), "%s", out);
	ck_assert_msg(strstr(out, "      capacity: 268435456   # 256.00 MiB, /local_world: 1 of 4 ranks on this node\n"), "%s", out);
	tier_manifest_free(m);
	m = NULL;
	/* The effective configuration reads back to the same sizes for this rank. */
	ck_assert_int_eq(tier_manifest_parse(out, len, "effective", 0, &m), 0);
	f = open_memstream(&back, &len);
	ck_assert_int_eq(tier_manifest_emit(m, f), 0);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(back, "  capacity: 268435456   # 256.00 MiB\n"));
	tier_manifest_free(m);
	free(out);
	free(back);
}
END_TEST

static Suite *manifest_suite(void)
{
	Suite *s = suite_create("manifest");
	TCase *tc = tcase_create("invalid");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_bad, 0, (int)ARRAY_SIZE(bad_cases));
	tcase_add_test(tc, test_many_errors);
	tcase_add_test(tc, test_direct_refused);
	tcase_add_test(tc, test_missing_file);
	suite_add_tcase(s, tc);

	tc = tcase_create("limits");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_loop_test(tc, test_unit_spellings, 0,
			    (int)ARRAY_SIZE(good_units));
	tcase_add_loop_test(tc, test_worst_case_time, 0,
			    (int)ARRAY_SIZE(worst_cases));
	tcase_add_test(tc, test_many_anchors_time);
	tcase_add_test(tc, test_many_keys_raised_limit);
	tcase_add_test(tc, test_size_cap);
	tcase_add_test(tc, test_not_regular);
	tcase_add_test(tc, test_long_value_excerpt);
	tcase_add_test(tc, test_capacity_counts_header);
	suite_add_tcase(s, tc);

	tc = tcase_create("valid");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_empty_mapping_defaults);
	tcase_add_test(tc, test_full_manifest);
	tcase_add_test(tc, test_round_trip);
	tcase_add_loop_test(tc, test_round_trip_text, 0,
			    (int)ARRAY_SIZE(text_paths));
	tcase_add_test(tc, test_source_name_line_break);
	tcase_add_test(tc, test_env_not_utf8);
	tcase_add_test(tc, test_default);
	tcase_add_test(tc, test_aliases_within_limit);
	tcase_add_test(tc, test_duplicate_through_symlink);
	tcase_add_loop_test(tc, test_symlink, 0,
			    (int)ARRAY_SIZE(symlink_cases));
	tcase_add_test(tc, test_symlink_at_open);
	tcase_add_test(tc, test_size_sums);
	tcase_add_test(tc, test_null_section);
	tcase_add_test(tc, test_one_message_per_mistake);
	tcase_add_test(tc, test_no_probe);
	tcase_add_test(tc, test_not_nul_terminated);
	tcase_add_loop_test(tc, test_sized_defaults, 0, (int)ARRAY_SIZE(sized_cases));
	suite_add_tcase(s, tc);

	tc = tcase_create("rank");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_rank, 0, (int)ARRAY_SIZE(rank_cases));
	tcase_add_test(tc, test_rank_env_and_emit);
	suite_add_tcase(s, tc);

	tc = t_tcase_faults("faults");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_fault_sites, 0,
			    (int)ARRAY_SIZE(fault_cases));
	tcase_add_test(tc, test_alloc_fail_nth);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run_suite(manifest_suite());
}
