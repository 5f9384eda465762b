/*
 * commit_tool.c - makes a durable store for tier-stat's tests
 * (test_tier_stat.sh: --check-files, and the live view's commit line);
 * built for the tests only, not installed.
 *
 *   commit_tool MANIFEST NOBJ NCOMMITS [hold]
 *
 * Opens the store MANIFEST describes (its backing files kept: not a
 * scratch store), creates objects obj0 .. obj(NOBJ-1) (object i of
 * 100 KiB + i * 4097 bytes: below, at and across stripe units) filled
 * with deterministic bytes, and commits NCOMMITS times, rewriting the
 * last object before every commit after the first (so each commit
 * differs, and obj0 keeps the extent it was first given: the start of
 * path 0's data area).  Then it
 * closes the store, or with "hold" prints "holding PID" on stdout and
 * keeps the store open until a signal kills it.  Each backing file is
 * printed first, as "file PATH" (in path order).
 *
 * Exits 0, 1 with the library's detail message on stderr, 2 for usage.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tierstore/toolkit.h"

/* Deterministic bytes of object @i at version @v. */
static void pattern(unsigned i, unsigned v, unsigned char *buf, size_t n)
{
	uint64_t x = 0x9e3779b97f4a7c15ull * (v + 1) + i * 0x100000001b3ull + 1;

	for (size_t k = 0; k < n; k++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[k] = (unsigned char)x;
	}
}

static int fail(const char *what)
{
	fprintf(stderr, "commit_tool: %s: %s\n", what, tier_last_error());
	return 1;
}

static int put(struct tier_store *s, unsigned i, unsigned v)
{
	char name[32];
	uint64_t size = 100 * 1024 + (uint64_t)i * 4097;
	struct tier_obj *o;
	unsigned char *b;
	int rc;

	snprintf(name, sizeof(name), "obj%u", i);
	o = tier_obj_find(s, name);
	if (!o && tier_obj_create(s, name, size, &o) != 0)
		return fail(name);
	b = malloc(size);
	if (!b) {
		fprintf(stderr, "commit_tool: out of memory\n");
		return 1;
	}
	pattern(i, v, b, size);
	rc = tier_obj_write(s, o, 0, size, b);
	free(b);
	return rc ? fail(name) : 0;
}

int main(int argc, char **argv)
{
	struct tier_manifest *m = NULL;
	struct tier_store_params p;
	struct tier_store *s = NULL;
	struct tier_manifest_path mp;
	unsigned long nobj, ncommits;
	bool hold;
	char *end;

	hold = argc == 5 && strcmp(argv[4], "hold") == 0;
	if (argc != 4 && !hold) {
		fprintf(stderr, "usage: commit_tool MANIFEST NOBJ NCOMMITS [hold]\n");
		return 2;
	}
	nobj = strtoul(argv[2], &end, 10);
	if (*end || nobj > 1000) {
		fprintf(stderr, "commit_tool: bad NOBJ '%s'\n", argv[2]);
		return 2;
	}
	ncommits = strtoul(argv[3], &end, 10);
	if (*end || ncommits > 1000) {
		fprintf(stderr, "commit_tool: bad NCOMMITS '%s'\n", argv[3]);
		return 2;
	}
	if (tier_manifest_load(argv[1], &m) != 0)
		return fail(argv[1]);
	tier_store_params_init(&p);
	if (tier_store_open(m, &p, &s) != 0) {
		tier_manifest_free(m);
		return fail("open");
	}
	for (unsigned i = 0; tier_manifest_path(m, i, &mp) == 0; i++)
		printf("file %s\n", mp.file);
	for (unsigned i = 0; i < nobj; i++)
		if (put(s, i, 0))
			return 1;
	for (unsigned k = 0; k < ncommits; k++) {
		uint64_t gen = 0;

		if (k && nobj && put(s, (unsigned)nobj - 1, k))
			return 1;
		if (tier_store_commit(s, NULL, 0, &gen) != 0)
			return fail("commit");
		printf("committed generation %" PRIu64 "\n", gen);
	}
	if (hold) {
		printf("holding %ld\n", (long)getpid());
		fflush(stdout);
		for (;;)
			pause();
	}
	if (tier_store_close(s) != 0)
		return fail("close");
	tier_manifest_free(m);
	return 0;
}
