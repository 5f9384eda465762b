/*
 * t_helpers.c - scratch files, the suite runner and the fail-Nth-until-clean
 * fault loop for the Check suites.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t_helpers.h"
#include "tierstore/toolkit.h"

char *t_mkdtemp(void)
{
	const char *base = getenv("TIER_TEST_TMPDIR");
	char *path;

	if (!base || !*base)
		base = "tmp";
	mkdir(base, 0755);
	if (asprintf(&path, "%s/t-XXXXXX", base) < 0)
		abort();
	if (!mkdtemp(path)) {
		fprintf(stderr, "mkdtemp %s: %s\n", path, strerror(errno));
		abort();
	}
	return path;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void t_rmtree(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *t_write_file(const char *dir, const char *name, const char *text)
{
	char *path;
	FILE *f;

	if (asprintf(&path, "%s/%s", dir, name) < 0)
		abort();
	f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		fprintf(stderr, "writing %s: %s\n", path, strerror(errno));
		abort();
	}
	return path;
}

/* ------------------------------------------------------- fault cases */

#define T_FAULT_TAG "faults"
#define T_MAX_FAULT_CASES 64

/* The names of the cases t_tcase_faults() made. */
static const char *g_fault_cases[T_MAX_FAULT_CASES];
static int g_nfault_cases;

TCase *t_tcase_faults(const char *name)
{
	TCase *tc = tcase_create(name);

	if (g_nfault_cases == T_MAX_FAULT_CASES) {
		fprintf(stderr, "t_tcase_faults: more than %d fault cases\n", T_MAX_FAULT_CASES);
		abort();
	}
	g_fault_cases[g_nfault_cases++] = name;
	tcase_set_tags(tc, T_FAULT_TAG);
	return tc;
}

/* TIER_TEST_FAULTS: "only", "skip" or NULL (unset or empty); exits on
 * anything else. */
static const char *faults_mode(void)
{
	const char *e = getenv("TIER_TEST_FAULTS");

	if (!e || !*e)
		return NULL;
	if (strcmp(e, "only") != 0 && strcmp(e, "skip") != 0) {
		fprintf(stderr, "TIER_TEST_FAULTS=%s: want only, skip or unset\n", e);
		exit(EXIT_FAILURE);
	}
	return e;
}

bool t_faults_on(void)
{
	const char *mode = faults_mode();

	return ts_fault_available() && !(mode && strcmp(mode, "skip") == 0);
}

/* The fault cases of @s that CK_RUN_CASE (if set) selects; their names
 * in @names. */
static int fault_cases_selected(Suite *s, char *names, size_t len)
{
	const char *only = getenv("CK_RUN_CASE");
	size_t used = 0;
	int n = 0;

	names[0] = '\0';
	for (int i = 0; i < g_nfault_cases; i++) {
		if (!suite_tcase(s, g_fault_cases[i]) ||
		    (only && *only && strcmp(only, g_fault_cases[i]) != 0))
			continue;
		n++;
		if (used < len)
			used += (size_t)snprintf(names + used, len - used, "%s%s", n > 1 ? ", " : "",
						 g_fault_cases[i]);
	}
	return n;
}

/* This program's name without "test_", for the messages. */
static const char *prog_name(void)
{
	const char *prog = program_invocation_short_name;

	return strncmp(prog, "test_", 5) == 0 ? prog + 5 : prog;
}

bool t_faults_skipped(void)
{
	const char *mode = faults_mode();

	if (!mode || strcmp(mode, "only") != 0 || ts_fault_available())
		return false;
	printf("SKIP: %s: no fault sites in this build\n", prog_name());
	return true;
}

int t_srunner_run(SRunner *sr, Suite *s)
{
	const char *mode = faults_mode();
	char names[512];
	int nfault = fault_cases_selected(s, names, sizeof(names));

	if (mode && strcmp(mode, "only") == 0) {
		/* Nothing to run is a failure, never a pass: the caller should
		 * have skipped (t_faults_skipped), or the suite is registered
		 * as having fault cases (or CK_RUN_CASE names one) it lacks. */
		if (!ts_fault_available()) {
			printf("%s: TIER_TEST_FAULTS=only, but no fault sites in this build\n",
			       prog_name());
			return 1;
		}
		if (nfault == 0) {
			printf("%s: TIER_TEST_FAULTS=only, but no t_tcase_faults() case%s%s\n",
			       prog_name(), getenv("CK_RUN_CASE") ? " named " : "",
			       getenv("CK_RUN_CASE") ? getenv("CK_RUN_CASE") : "");
			return 1;
		}
		srunner_run_tagged(sr, NULL, NULL, T_FAULT_TAG, NULL, CK_NORMAL);
	} else if (mode || !ts_fault_available()) {
		if (!mode && nfault)
			printf("%s: no fault sites in this build: %d fault case%s left out (%s)\n",
			       prog_name(), nfault, nfault == 1 ? "" : "s", names);
		srunner_run_tagged(sr, NULL, NULL, NULL, T_FAULT_TAG, CK_NORMAL);
	} else {
		srunner_run_all(sr, CK_NORMAL);
	}
	return srunner_ntests_failed(sr);
}

int t_run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	if (t_faults_skipped()) {
		srunner_free(sr);
		return T_EXIT_SKIP;
	}
	failed = t_srunner_run(sr, s);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* ------------------------------------------- fail the Nth call, N = 1.. */

bool t_nth_next(struct t_nth *f)
{
	const char *site = ts_fault_site_name(f->site);

	if (f->nth > 0) {
		ck_assert_msg(f->told, "fault site %s, run %llu: t_nth_fired() (or t_nth_ran()) never said "
			      "whether it fired", site, (unsigned long long)f->nth);
		ck_assert_msg(f->fired, "fault site %s, run %llu: the site did not fire (a clean run), yet "
			      "the loop goes on: end it (break) there", site, (unsigned long long)f->nth);
		ck_assert_msg(f->nth < f->max, "fault site %s fired in each of %llu runs: the operation "
			      "never ran clean", site, (unsigned long long)f->nth);
	}
	f->nth++;
	f->armed = f->told = f->fired = false;
	return true;
}

void t_nth_arm(struct t_nth *f)
{
	int rc = ts_fault_arm(f->site, f->nth, 1, f->err);

	ck_assert_msg(rc == 0, "arming fault site %s at call %llu: %s", ts_fault_site_name(f->site),
		      (unsigned long long)f->nth, tier_last_error());
	f->armed = true;
}

bool t_nth_fired(struct t_nth *f)
{
	bool fired = ts_fault_fired(f->site) != 0;

	ck_assert_msg(f->armed, "fault site %s, run %llu: t_nth_fired() before t_nth_arm()",
		      ts_fault_site_name(f->site), (unsigned long long)f->nth);
	ts_fault_disarm(f->site);
	t_nth_ran(f, fired);
	return fired;
}

void t_nth_ran(struct t_nth *f, bool fired)
{
	f->fired = fired;
	f->told = true;
}

int t_tmpfs_full(const char *dir, size_t size, size_t leave)
{
	static char chunk[64 << 10];
	char opts[64], *filler;
	off_t filled = 0;
	ssize_t n;
	int fd;

	snprintf(opts, sizeof(opts), "size=%zu,mode=0700", size);
	if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0)
		return -errno;
	if (asprintf(&filler, "%s/filler", dir) < 0)
		abort();
	fd = open(filler, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
	ck_assert_msg(fd >= 0, "%s: %s", filler, strerror(errno));
	memset(chunk, 0x5a, sizeof(chunk));
	for (size_t len = sizeof(chunk); len >= 512;) {
		n = write(fd, chunk, len);
		if (n > 0) {
			filled += n;
			continue;
		}
		ck_assert_msg(n < 0 && (errno == ENOSPC || errno == EINTR), "%s: %s", filler,
			      strerror(errno));
		if (errno == ENOSPC)
			len /= 2;
	}
	ck_assert_msg((off_t)leave <= filled, "%s: %zu bytes to leave, %lld written", dir, leave,
		      (long long)filled);
	ck_assert_int_eq(ftruncate(fd, filled - (off_t)leave), 0);
	close(fd);
	ck_assert_msg(t_fs_free(dir) == leave, "%s: %llu bytes free, %zu wanted", dir,
		      t_fs_free(dir), leave);
	free(filler);
	return 0;
}

void t_umount(const char *dir)
{
	while (umount2(dir, MNT_DETACH) == 0)
		;
}

unsigned long long t_fs_free(const char *path)
{
	struct statvfs v;

	ck_assert_int_eq(statvfs(path, &v), 0);
	return (unsigned long long)v.f_bavail * v.f_frsize;
}

int t_files_besides_filler(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	ck_assert_msg(d != NULL, "%s: %s", dir, strerror(errno));
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		     strcmp(e->d_name, "filler");
	closedir(d);
	return n;
}

/* Unmounts every mount point under @base (a test that crashed mid-way). */
static void umount_under(const char *base)
{
	char real[PATH_MAX], mnt[PATH_MAX], line[4096];
	size_t len;
	FILE *f;
	bool again = true;

	if (!realpath(base, real))
		return;
	len = strlen(real);
	while (again) {
		again = false;
		f = fopen("/proc/self/mountinfo", "re");
		if (!f)
			return;
		while (fgets(line, sizeof(line), f)) {
			/* ID PARENT MAJ:MIN ROOT MOUNT-POINT ... */
			if (sscanf(line, "%*s %*s %*s %*s %4095s", mnt) == 1 &&
			    strncmp(mnt, real, len) == 0 && mnt[len] == '/' &&
			    umount2(mnt, MNT_DETACH) == 0)
				again = true;
		}
		fclose(f);
	}
}

static char *g_case_base, *g_case_saved_tmpdir;

void t_case_setup(void)
{
	const char *old = getenv("TIER_TEST_TMPDIR");

	g_case_saved_tmpdir = old ? strdup(old) : NULL;
	g_case_base = t_mkdtemp();
	setenv("TIER_TEST_TMPDIR", g_case_base, 1);
}

void t_case_teardown(void)
{
	umount_under(g_case_base);
	t_rmtree(g_case_base);
	free(g_case_base);
	g_case_base = NULL;
	if (g_case_saved_tmpdir)
		setenv("TIER_TEST_TMPDIR", g_case_saved_tmpdir, 1);
	else
		unsetenv("TIER_TEST_TMPDIR");
	free(g_case_saved_tmpdir);
	g_case_saved_tmpdir = NULL;
}

/* The number after "key": in @json (or after "key": [ for the @idx-th). */
static double t_json_num(const char *json, const char *key, int idx)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(json, pat);
	ck_assert_msg(p != NULL, "meta.json: no %s", key);
	p += strlen(pat);
	while (*p == ' ' || *p == '\n' || *p == '[')
		p++;
	for (int i = 0; i < idx; i++) {
		p = strchr(p, ',');
		ck_assert_ptr_nonnull(p);
		p++;
		while (*p == ' ' || *p == '\n')
			p++;
	}
	return strtod(p, NULL);
}

/* The whole file @dir/@name; *len its size. */
void *t_read_all(const char *dir, const char *name, size_t *len)
{
	char path[4096];
	FILE *f;
	long sz;
	void *buf;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
	sz = ftell(f);
	ck_assert_int_ge(sz, 0);
	rewind(f);
	buf = malloc((size_t)sz + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)sz, f), (size_t)sz);
	((char *)buf)[sz] = '\0';
	fclose(f);
	*len = (size_t)sz;
	return buf;
}

bool t_gpu_present(bool (*also)(void))
{
	pid_t pid = fork();
	int status = 0;

	if (pid == 0) {
		char why[200] = "";
		int n = 0;

		tier_gpu_count(&n, why, sizeof(why));
		if (n == 0)
			fprintf(stderr, "no GPU: %s\n", why);
		_exit(n > 0 && (!also || also()) ? 0 : 1);
	}
	return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	       WEXITSTATUS(status) == 0;
}

const char *const t_golden_cases[T_GOLDEN_CASES] = { "adamw_wd", "adam_l2", "adamw_sched" };

void t_golden_load(struct t_golden *g, const char *name)
{
	const char *root = getenv("TIER_GOLDEN");
	char dir[4096];
	char *meta;
	size_t len;

	memset(g, 0, sizeof(*g));
	ck_assert_msg(root != NULL, "TIER_GOLDEN is not set (meson test sets it)");
	snprintf(dir, sizeof(dir), "%s/adamw/%s", root, name);
	meta = t_read_all(dir, "meta.json", &len);
	g->name = name;
	g->numel = (size_t)t_json_num(meta, "numel", 0);
	g->steps = (size_t)t_json_num(meta, "steps", 0);
	g->beta1 = t_json_num(meta, "betas", 0);
	g->beta2 = t_json_num(meta, "betas", 1);
	g->eps = t_json_num(meta, "eps", 0);
	g->wd = t_json_num(meta, "weight_decay", 0);
	g->decoupled = strstr(meta, "\"decoupled_weight_decay\": true") != NULL;
	ck_assert_msg(strstr(meta, g->decoupled ? "\"AdamW\"" : "\"Adam\""), "%s: optimizer", dir);
	free(meta);
	g->p0 = t_read_all(dir, "params0.f32", &len);
	ck_assert_uint_eq(len, g->numel * 4);
	g->grads = t_read_all(dir, "grads.f32", &len);
	ck_assert_uint_eq(len, g->steps * g->numel * 4);
	g->lr = t_read_all(dir, "lr.f32", &len);
	ck_assert_uint_eq(len, g->steps * 4);
	g->pf = t_read_all(dir, "params_final.f32", &len);
	ck_assert_uint_eq(len, g->numel * 4);
	g->mf = t_read_all(dir, "exp_avg_final.f32", &len);
	ck_assert_uint_eq(len, g->numel * 4);
	g->vf = t_read_all(dir, "exp_avg_sq_final.f32", &len);
	ck_assert_uint_eq(len, g->numel * 4);
}

void t_golden_free(struct t_golden *g)
{
	free(g->p0);
	free(g->grads);
	free(g->lr);
	free(g->pf);
	free(g->mf);
	free(g->vf);
}

double t_rel_err(const float *x, const float *ref, size_t n, size_t *worst)
{
	double big = 0, e = 0;

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)x[i] - (double)ref[i]);

		big = fmax(big, fabs((double)ref[i]));
		if (!(d <= e)) {
			e = d;
			*worst = i;
		}
	}
	return big > 0 ? e / big : e;
}

int t_spawn_self(const char *child_env, const char *simd, bool with_stderr, char *out, size_t len)
{
	extern char **environ;
	char valbuf[64], childbuf[128];
	char *argv[] = { (char *)"child", NULL };
	posix_spawn_file_actions_t fa;
	size_t n = 0, nenv = 0;
	char **envp;
	int fds[2], status, rc;
	pid_t pid;
	ssize_t r;

	for (char **e = environ; *e; e++)
		nenv++;
	envp = calloc(nenv + 3, sizeof(*envp));
	ck_assert_ptr_nonnull(envp);
	nenv = 0;
	for (char **e = environ; *e; e++)
		if (strncmp(*e, "TIER_SIMD=", 10) != 0 && strncmp(*e, "TIER_LOG", 8) != 0)
			envp[nenv++] = *e;
	snprintf(childbuf, sizeof(childbuf), "%s=1", child_env);
	envp[nenv++] = childbuf;
	if (simd) {
		snprintf(valbuf, sizeof(valbuf), "TIER_SIMD=%s", simd);
		envp[nenv++] = valbuf;
	}
	ck_assert_int_eq(pipe(fds), 0);
	ck_assert_int_eq(posix_spawn_file_actions_init(&fa), 0);
	posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
	if (with_stderr)
		posix_spawn_file_actions_adddup2(&fa, fds[1], STDERR_FILENO);
	posix_spawn_file_actions_addclose(&fa, fds[0]);
	posix_spawn_file_actions_addclose(&fa, fds[1]);
	rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, envp);
	ck_assert_msg(rc == 0, "posix_spawn: %s", strerror(rc));
	posix_spawn_file_actions_destroy(&fa);
	close(fds[1]);
	while (n < len - 1 && (r = read(fds[0], out + n, len - 1 - n)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		ck_assert_int_gt(r, 0);
		n += (size_t)r;
	}
	out[n] = '\0';
	close(fds[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	free(envp);
	return status;
}

void t_child_says(const char *child_env, const char *simd, const char *want)
{
	char out[4096];
	int status = t_spawn_self(child_env, simd, false, out, sizeof(out));

	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "TIER_SIMD=%s: child status 0x%x, output:\n%s", simd ? simd : "(unset)", status,
		      out);
	ck_assert_msg(strcmp(out, want) == 0, "TIER_SIMD=%s: child said '%s', want '%s'",
		      simd ? simd : "(unset)", out, want);
}

const char *t_dtype_name(int dt)
{
	const char *n = tier_dtype_name((enum tier_dtype)dt);

	return n ? n : "none";
}

/* ------------------------------------------------------ a training run */

const size_t t_train_numel[T_TRAIN_NPARAMS] = { 700000, 333333, 257 };
const char *const t_train_name[T_TRAIN_NPARAMS] = { "layer.0.weight", "layer.0.bias", "head" };

float t_train_grad(unsigned t, unsigned p, size_t i)
{
	uint64_t x = (uint64_t)t * 0x9e3779b97f4a7c15ull ^ (uint64_t)p * 0xc2b2ae3d27d4eb4full ^
		     (uint64_t)i * 0x165667b19e3779f9ull;

	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 29;
	return (float)((double)(x >> 40) / (double)(1ull << 24) * 2.0 - 1.0) * 0.5f;
}

double t_train_lr(unsigned t)
{
	return t % 4 == 1 ? 1e-3 * (1.0 - t / 200.0) : TIER_LR_KEEP;
}

float t_train_init(unsigned p, size_t i)
{
	return t_train_grad(0, p, i) * 2;
}
