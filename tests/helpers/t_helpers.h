/*
 * t_helpers.h - helpers shared by the Check suites: scratch directories and
 * files, and the exit code for a skipped test (77, which meson shows as
 * SKIP).
 */
#ifndef TIER_TESTS_HELPERS_H
#define TIER_TESTS_HELPERS_H

#include <stddef.h>

#define T_EXIT_SKIP 77

/*
 * A fresh scratch directory under $TIER_TEST_TMPDIR (else the build
 * directory's tmp/), on a disk that supports O_DIRECT where the machine has
 * one.  Returns a malloc'd path; removed (with its contents) by t_rmtree().
 */
char *t_mkdtemp(void);
void t_rmtree(const char *path);

/* Writes @text to @dir/@name; returns the malloc'd path. */
char *t_write_file(const char *dir, const char *name, const char *text);

/* Runs a Check suite in the usual way; returns the process exit code. */
struct Suite;
int t_run_suite(struct Suite *s);

#endif
