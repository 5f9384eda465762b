/*
 * t_helpers.h - helpers shared by the Check suites: scratch directories and
 * files, the suite runner and its fault cases, the fail-Nth-until-clean
 * fault loop (t_nth), the random stream (t_rnd), ARRAY_SIZE, and the exit
 * code for a skipped test (77, which meson shows as SKIP).
 */
#ifndef TIER_TESTS_HELPERS_H
#define TIER_TESTS_HELPERS_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/fault.h"
#include "tierstore/toolkit.h"

#define T_EXIT_SKIP 77

/* The number of elements of the array @a (an array, not a pointer). */
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* tier_dtype_name, with "none" for a value that is no dtype (such as -1
 * for no copy-out). */
const char *t_dtype_name(int dt);

/*
 * A fresh scratch directory under $TIER_TEST_TMPDIR (else the build
 * directory's tmp/), on a disk that supports O_DIRECT where the machine has
 * one.  Returns a malloc'd path; removed (with its contents) by t_rmtree().
 */
char *t_mkdtemp(void);
void t_rmtree(const char *path);

/* Writes @text to @dir/@name; returns the malloc'd path. */
char *t_write_file(const char *dir, const char *name, const char *text);

/*
 * Whether a GPU can run this suite: a child process counts the devices
 * (tier_gpu_count), so that CUDA is not initialised before Check forks,
 * and also calls @also (may be NULL) there, which may print why not.
 * Prints "no GPU: <why>" on stderr when there is none.  main() returns
 * T_EXIT_SKIP when this is false.
 */
bool t_gpu_present(bool (*also)(void));

/*
 * Runs this test program again as a child, with @child_env=1 and TIER_SIMD
 * set to @simd (NULL: unset; any TIER_SIMD and TIER_LOG* of ours are left
 * out), and collects its standard output (and standard error, with
 * @with_stderr) into @out (@len bytes, NUL-terminated).  Returns the
 * waitpid status.  For the suites whose kernels pick a SIMD version once
 * per process.
 */
int t_spawn_self(const char *child_env, const char *simd, bool with_stderr, char *out, size_t len);

/* t_spawn_self() without its standard error, then fails the test unless the
 * child exited 0 and printed exactly @want. */
void t_child_says(const char *child_env, const char *simd, const char *want);

/* The whole file @dir/@name, NUL-terminated (free() it); *len its size.
 * Fails the test when it cannot be read. */
void *t_read_all(const char *dir, const char *name, size_t *len);

/*
 * The torch.optim golden data (tests/golden/adamw/<case>, under
 * $TIER_GOLDEN; format in tests/golden/README.md): t_golden_load reads a
 * case's meta.json and arrays, failing the test when they are missing or
 * of the wrong size; t_golden_free frees the arrays.
 */
#define T_GOLDEN_CASES 3
extern const char *const t_golden_cases[T_GOLDEN_CASES];

struct t_golden {
	const char *name;
	size_t numel, steps;
	bool decoupled;
	double beta1, beta2, eps, wd;
	float *p0, *grads, *lr, *pf, *mf, *vf; /* initial, per-step grads and lr, final state */
};

void t_golden_load(struct t_golden *g, const char *name);
void t_golden_free(struct t_golden *g);

/* The README's bounds for a float32 implementation of torch's formula:
 * parameters within 1e-7 of the largest |parameter|, moments 1e-6. */
#define T_GOLDEN_TOL_PARAM 1e-7
#define T_GOLDEN_TOL_MOMENT 1e-6

/* Largest |x - ref| over the largest |ref| (norm-wise relative error);
 * *worst: where the largest |x - ref| is. */
double t_rel_err(const float *x, const float *ref, size_t n, size_t *worst);

/*
 * Fault-site tests.  A test that arms fault sites (common/fault.h) goes in
 * a test case made by t_tcase_faults(), which tags it "faults", and starts
 * with NEED_FAULTS().  t_run_suite() picks the cases by TIER_TEST_FAULTS:
 *
 *   only   the "faults" cases alone; in a build without fault sites none:
 *          it prints "SKIP: ..." and returns T_EXIT_SKIP;
 *   skip   every case but the "faults" ones;
 *   unset  (a run by hand) everything in a build with fault sites, else
 *          every case but the "faults" ones, saying how many it left out.
 *
 * tests/meson.build registers a suite with fault cases twice: NAME with
 * skip and NAME-faults with only, so a build without fault sites shows
 * them as SKIP, never as passed.
 */
struct TCase;
struct TCase *t_tcase_faults(const char *name);

/* Whether this run may arm fault sites: the build has them and
 * TIER_TEST_FAULTS is not "skip". */
bool t_faults_on(void);

/*
 * The first statement of a test that needs fault sites.  Reached in a run
 * that may not arm them (a build without fault sites, or a run of the
 * untagged cases), it fails the test: such a test belongs in a
 * t_tcase_faults() case, where t_run_suite() never runs it then.
 */
#define NEED_FAULTS()                                                                      \
	do {                                                                               \
		if (!t_faults_on())                                                        \
			ck_abort_msg("%s needs fault sites: put it in a t_tcase_faults() case", \
				     __func__);                                            \
	} while (0)

/*
 * The fail-Nth-until-clean loop: an operation run again and again with
 * @site armed to fail its 1st call (once, with @err), then its 2nd, its
 * 3rd... until a run in which the site does not fire.  Each run before it
 * must fail cleanly (the loop's own checks), the last one must work:
 *
 *	struct t_nth f = T_NTH(TIER_FAULT_ALLOC, -ENOMEM, 99);
 *
 *	while (t_nth_next(&f)) {
 *		...                     (set up: the site is not armed yet)
 *		t_nth_arm(&f);
 *		rc = the_operation();
 *		if (!t_nth_fired(&f)) { (disarms the site)
 *			check that it worked;
 *			break;
 *		}
 *		check that call f.nth's failure left things as they were;
 *	}
 *	(f.nth: the clean run's number; f.nth - 1 failures were injected)
 *
 * The loop ends by break: at the clean run, or where the test ends it on
 * the operation's result (an operation that may survive a failed call).
 * t_nth_next() is always true, or fails the test: when run @max fired too
 * (the operation never runs clean), when a run did not fire and the loop
 * went on, or when a run did not tell whether it fired.  A run in a child
 * process arms there (t_nth_arm, or ts_fault_arm(site, f.nth, 1, err)) and
 * the parent says how it went with t_nth_ran().
 */
struct t_nth {
	enum ts_fault_site site;
	int err;      /* the negative errno the failed call returns */
	uint64_t max; /* the most runs */
	uint64_t nth; /* this run's: the call of the site that fails */
	bool armed, told, fired;
};

#define T_NTH(site, err, max) { (site), (err), (max), 0, false, false, false }

bool t_nth_next(struct t_nth *f);
void t_nth_arm(struct t_nth *f);
/* After the operation: whether the armed call came (it failed); disarms. */
bool t_nth_fired(struct t_nth *f);
void t_nth_ran(struct t_nth *f, bool fired);

/*
 * An unchecked fixture per test case, run in Check's parent process: a
 * base directory that every test's scratch directory (t_mkdtemp) goes
 * under, removed after the case however its tests ended (a failing test
 * exits before its checked teardown and may leave preallocated files).
 */
void t_case_setup(void);
void t_case_teardown(void);

/*
 * A full file system for the tests of what happens when one is: mounts a
 * tmpfs of @size bytes on @dir (which must exist), fills it with the file
 * @dir/filler until it refuses more (ENOSPC), then frees @leave bytes of
 * it (a multiple of the page size).  Returns 0, or the -errno of mount()
 * (-EPERM when not root, or in a container without CAP_SYS_ADMIN): the
 * caller then skips.  t_umount() unmounts it; t_case_teardown() unmounts
 * whatever a crashed test left mounted under its base directory.
 */
int t_tmpfs_full(const char *dir, size_t size, size_t leave);
void t_umount(const char *dir);

/* Bytes free in the file system of @path (statvfs f_bavail). */
unsigned long long t_fs_free(const char *path);

/* The entries of @dir other than ., .. and t_tmpfs_full's "filler". */
int t_files_besides_filler(const char *dir);

/* Runs a Check suite (its "faults" cases as TIER_TEST_FAULTS says, above;
 * CK_RUN_CASE and the other CK_ variables as usual); returns the process
 * exit code. */
struct Suite;
int t_run_suite(struct Suite *s);

/*
 * t_run_suite() in two parts, for a program that runs its own SRunner
 * (test_zero: MPI ranks, no fork): t_faults_skipped() is true, having
 * printed the SKIP line, when TIER_TEST_FAULTS=only in a build without
 * fault sites (return T_EXIT_SKIP then); t_srunner_run() runs @sr, made
 * from @s, with the cases TIER_TEST_FAULTS selects, and returns how many
 * tests failed.
 */
struct SRunner;
bool t_faults_skipped(void);
int t_srunner_run(struct SRunner *sr, struct Suite *s);

/*
 * A training run the checkpoint tests and tools share: three parameters,
 * a gradient that depends only on (step, parameter, element), a learning
 * rate set every fourth step and kept between (TIER_LR_KEEP).
 */
#define T_TRAIN_NPARAMS 3
extern const size_t t_train_numel[T_TRAIN_NPARAMS];
extern const char *const t_train_name[T_TRAIN_NPARAMS];
float t_train_grad(unsigned step, unsigned param, size_t i);
double t_train_lr(unsigned step);
/* Parameter @p's initial master weights (step 0's gradient, doubled). */
float t_train_init(unsigned p, size_t i);

/*
 * 1 in a sanitizer build (ASan, TSan: instrumented, unoptimised code that
 * runs the largest statistical tests tens of times slower); those take
 * fewer elements there, with the same checks, and their full size in the
 * other builds (the release and -O2 ones, where CI runs them too).
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define T_SANITIZED 1
#else
#define T_SANITIZED 0
#endif

/*
 * The random stream of the tests (xorshift64*: fixed seeds, so a failure
 * reproduces; a test keeps its own generator only where its expected
 * values depend on that generator's sequence).  The state *s is any
 * nonzero value (0 stays 0: t_rnd_seed() makes one from any seed).
 * t_rnd_next: the next 64 bits; t_rnd_below: an integer below @n (0 for
 * n = 0); t_rnd_unit: uniform in [0, 1); t_rnd_normal: N(0, 1) by
 * Box-Muller.
 *
 * t_rnd_mix is no stream: SplitMix64's step and finaliser, 64 random bits
 * that depend only on @x, for values recomputed from their index (each
 * rank of a run, or a reference, makes the same without sharing a stream).
 * SplitMix64 itself is x = t_rnd_mix(state), state += 0x9e3779b97f4a7c15.
 */
static inline uint64_t t_rnd_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static inline uint64_t t_rnd_seed(uint64_t seed)
{
	uint64_t s = t_rnd_mix(seed);

	return s ? s : 1;
}

static inline uint64_t t_rnd_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1Dull;
}

static inline size_t t_rnd_below(uint64_t *s, size_t n)
{
	return n ? (size_t)(t_rnd_next(s) % n) : 0;
}

static inline double t_rnd_unit(uint64_t *s)
{
	return (double)(t_rnd_next(s) >> 11) * 0x1p-53;
}

static inline double t_rnd_normal(uint64_t *s)
{
	double u = t_rnd_unit(s), v = t_rnd_unit(s);

	return sqrt(-2.0 * log(u + 0x1p-60)) * cos(6.283185307179586 * v);
}

#endif
