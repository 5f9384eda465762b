/*
 * stat_stale.c - what tier-stat --remove-stale does beyond stale stats
 * segments: the temporary files of a segment creation that did not
 * finish (.tierstore-PID-N.tmp in the stats directory, PID gone), and the
 * backing files in the NVMe paths of the manifest ($TIER_MANIFEST, else
 * the embedded default) that a store did not close cleanly.  A stale file
 * of a scratch store (a benchmark's, a test's) is removed; a stale file of
 * a named store is listed, since the next open of that store reclaims it.
 */
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stat_live.h"
#include "tierstore/toolkit.h"

static bool pid_gone(long pid)
{
	return pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* .tierstore-PID-N.tmp files in @dir whose PID is gone; -1 on an error. */
static int remove_tmp(const char *dir, unsigned *n)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int rc = 0;

	if (!d)
		return 0; /* segments_load already said what is wrong with it */
	while ((de = readdir(d))) {
		char path[PATH_MAX + 256];
		long pid;
		unsigned k;
		char end;

		if (sscanf(de->d_name, ".tierstore-%ld-%u.tm%c", &pid, &k, &end) != 3 ||
		    end != 'p' || fnmatch(".tierstore-*.tmp", de->d_name, 0) != 0 || !pid_gone(pid))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (unlink(path) != 0) {
			fprintf(stderr, "tier-stat: %s: %s\n", path, strerror(errno));
			rc = -1;
			continue;
		}
		printf("removed %s (a segment process %ld did not finish making)\n", path, pid);
		(*n)++;
	}
	closedir(d);
	return rc;
}

/* One backing file: removed if stale and a scratch store's, listed if stale. */
static int stale_file(const char *file, unsigned *n)
{
	struct tier_nvme_file_info fi;

	if (tier_nvme_file_probe(file, &fi) != 0 || fi.state != TIER_NVME_FILE_STALE)
		return 0; /* absent, in use, clean, or not ours: not for us to touch */
	(*n)++;
	if (!fi.scratch) {
		printf("%s: backing file of store '%s', left by process %ld, which did not close it cleanly; its next open reclaims it\n",
		       file, fi.store_name, fi.owner_pid);
		return 0;
	}
	if (tier_nvme_file_remove_stale(file) != 0) {
		fprintf(stderr, "tier-stat: %s\n", tier_last_error());
		return -1;
	}
	printf("removed %s (backing file of scratch store '%s', process %ld gone)\n", file,
	       fi.store_name, fi.owner_pid);
	return 0;
}

/* The backing files in the directory of @file: its own name and tierstore-*.dat. */
static int stale_in_dir(const char *file, unsigned *n)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(file, '/');
	DIR *d;
	struct dirent *de;
	int rc = 0;

	if (!slash)
		return 0;
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - file), file);
	d = opendir(*dir ? dir : "/");
	if (!d)
		return 0; /* not made yet: nothing left in it */
	while ((de = readdir(d))) {
		char path[PATH_MAX + 256];

		if (strcmp(de->d_name, slash + 1) != 0 &&
		    fnmatch("tierstore-*.dat", de->d_name, FNM_PERIOD) != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (stale_file(path, n))
			rc = -1;
	}
	closedir(d);
	return rc;
}

int stat_remove_stale_files(const char *stats_dir)
{
	struct tier_manifest *m = NULL;
	struct tier_manifest_info mi;
	unsigned ntmp = 0, nfiles = 0;
	int rc = remove_tmp(stats_dir, &ntmp);

	if (tier_manifest_resolve(NULL, &m) != 0 || tier_manifest_info(m, &mi) != 0) {
		fprintf(stderr, "tier-stat: backing files not looked for: %s\n", tier_last_error());
		tier_manifest_free(m);
		return -1;
	}
	for (unsigned i = 0; i < mi.npaths; i++) {
		struct tier_manifest_path mp;

		if (tier_manifest_path(m, i, &mp) == 0 && stale_in_dir(mp.file, &nfiles))
			rc = -1;
	}
	if (!nfiles)
		printf("no stale backing files (in the paths of %s)\n", mi.source);
	tier_manifest_free(m);
	return rc;
}
