/*
 * tier-stat - inspects running tierstore stores and tierstore configuration.
 *
 *   tier-stat                  list this user's stores (running and stale).
 *   tier-stat PID[.N]          one report of PID's store(s): per tier, per
 *                              NVMe path, prefetch, optimizer.
 *   -w SEC [-c COUNT]          refresh every SEC seconds, rates over the
 *                              interval; --json, --prometheus: other formats;
 *   --remove-stale             remove segments left by dead processes;
 *   --dir DIR                  segments in DIR (default $TIER_STATS_DIR,
 *                              else /dev/shm).
 *   tier-stat --check [FILE]   validate a manifest (FILE, else $TIER_MANIFEST,
 *                              else the embedded default) and print the
 *                              effective configuration as YAML.
 *   tier-stat --check-files PATH...  verify a closed store's backing files
 *                              offline (tier_nvme_check_files): headers,
 *                              commit slots, object tables, every stripe
 *                              unit's crc32c; each finding, then a summary.
 *   tier-stat --print-default  print the embedded default manifest's text.
 *   tier-stat --options        print the options table (TIER_* variables).
 *   tier-stat --gpu-selftest [N]  run a kernel on GPU N and check the result.
 *
 * Exit status: 0 success; 1 an operational failure (no GPU, out of memory),
 * or --check-files found problems or could not read a file (or one is in
 * use by a running store); 2 a usage error or an invalid manifest, with
 * every problem on stderr as FILE:LINE:COL: message.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stat_fields.h"
#include "stat_live.h"
#include "tierstore/toolkit.h"

enum { EXIT_USAGE = 2 };

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tier-stat [--dir DIR]        list the running stores of this user\n"
		"       tier-stat [--dir DIR] PID[.N] report on PID's store(s): tiers, NVMe paths, prefetch, optimizer\n"
		"         -w, --watch SEC            refresh every SEC seconds, rates over the interval\n"
		"         -c, --count N              stop after N reports (with -w)\n"
		"         --json                     one JSON object (JSON Lines with -w)\n"
		"         --prometheus               Prometheus text exposition format\n"
		"       tier-stat --remove-stale     remove the segments of processes that are gone\n"
		"       tier-stat --check [FILE]     validate a manifest, print the effective configuration\n"
		"       tier-stat --check-files PATH...  verify a closed store's backing files offline\n"
		"       tier-stat --print-default    print the embedded default manifest\n"
		"       tier-stat --options          print the options table (TIER_* environment)\n"
		"       tier-stat --gpu-selftest [N] run a test kernel on CUDA device N (default 0)\n"
		"       tier-stat --version | --help\n"
		"\n"
		"With no FILE, --check uses $TIER_MANIFEST, else the embedded default.\n"
		"Stores publish in $TIER_STATS_DIR, else /dev/shm. Exit status: 0 success,\n"
		"1 no such store or an unreadable one (another user's, another version, stale),\n"
		"or --check-files found problems or could not read a file, 2 usage error.\n"
		"See tier-stat(1).\n");
}

static int do_check(const char *file)
{
	struct tier_manifest *m = NULL;
	int rc;

	rc = tier_manifest_resolve(file, &m);
	if (rc) {
		const char *msg = tier_last_error();

		if (*msg)
			fprintf(stderr, "%s\n", msg);
		else
			fprintf(stderr, "tier-stat: %s\n", tier_strerror(rc));
		return rc == -ENOMEM ? 1 : EXIT_USAGE;
	}
	rc = tier_manifest_emit(m, stdout);
	tier_manifest_free(m);
	if (rc || fflush(stdout) != 0) {
		fprintf(stderr, "tier-stat: writing the configuration: %s\n", tier_strerror(rc ? rc : -EIO));
		return 1;
	}
	return 0;
}

static void check_say(void *arg, bool problem, const char *line)
{
	(void)arg;
	printf("%s%s\n", problem ? "PROBLEM: " : "", line);
}

/*
 * --check-files: every finding on stdout (faults as "PROBLEM: ..."), then
 * a summary line.  0 sound, 1 problems, or a file that cannot be checked
 * (unreadable, not a store's, in use: said on stderr).
 */
static int do_check_files(char *const *files, int n)
{
	struct tier_nvme_check_report r;
	char when[32] = "-", b[32];
	int rc;

	rc = tier_nvme_check_files((const char *const *)files, (size_t)n, check_say, NULL, &r);
	fflush(stdout);
	if (rc && rc != -EBADMSG) {
		const char *msg = tier_last_error();

		fprintf(stderr, "tier-stat: --check-files: %s\n", *msg ? msg : tier_strerror(rc));
		return 1;
	}
	if (r.generation) {
		time_t t = (time_t)(r.time_ns / 1000000000u);
		struct tm tm;

		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tm));
	}
	printf("store '%s' (%u file%s): ", r.store_name, r.npaths, r.npaths == 1 ? "" : "s");
	if (r.generation)
		printf("generation %" PRIu64 " (%s), %u of %u kept commit%s sound, %u reachable%s%s%s, ",
		       r.generation, when, r.commits_ok, r.commits_kept, r.commits_kept == 1 ? "" : "s",
		       r.commits_reachable, *r.reachable ? " (" : "", r.reachable,
		       *r.reachable ? ")" : "");
	else
		printf("%s, ", r.commits_kept || r.problems ? "no sound commit" : "no commit");
	printf("%" PRIu64 " objects, %s; stripe units: %" PRIu64 " verified, %" PRIu64 " bad, %" PRIu64
	       " unchecked; %s\n", r.objects, stat_fmt_bytes((double)r.data_bytes, b, sizeof(b)),
	       r.units_checked, r.units_bad, r.units_unchecked,
	       rc ? "PROBLEMS FOUND" : "sound");
	if (fflush(stdout) != 0)
		return 1;
	if (rc)
		fprintf(stderr, "tier-stat: %s\n", tier_last_error());
	return rc ? 1 : 0;
}

static int do_print_default(void)
{
	char *text = NULL;
	int rc = tier_manifest_default_text(&text);

	if (rc) {
		fprintf(stderr, "tier-stat: %s\n", tier_last_error());
		return 1;
	}
	fputs(text, stdout);
	free(text);
	return 0;
}

/* The command line: a mode (one of the options that do one thing) or the
 * live view's options, and the operands from optind on. */
struct cmdline {
	struct stat_live_args la;
	bool live_opt;   /* an option of the live view was given */
	int mode;        /* 'C', 'F', 'd', 'o', 'g', 'V'; 0 for the live view */
};

/* The options into @cl: -1 to go on, else the exit status (--help, or a
 * usage error said on stderr). */
static int parse_options(int argc, char **argv, struct cmdline *cl)
{
	enum { O_DIR = 1000, O_JSON, O_PROM, O_REMOVE };
	static const struct option longopts[] = {
		{ "check", no_argument, NULL, 'C' },
		{ "check-files", no_argument, NULL, 'F' },
		{ "print-default", no_argument, NULL, 'd' },
		{ "options", no_argument, NULL, 'o' },
		{ "gpu-selftest", no_argument, NULL, 'g' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ "watch", required_argument, NULL, 'w' },
		{ "count", required_argument, NULL, 'c' },
		{ "dir", required_argument, NULL, O_DIR },
		{ "json", no_argument, NULL, O_JSON },
		{ "prometheus", no_argument, NULL, O_PROM },
		{ "remove-stale", no_argument, NULL, O_REMOVE },
		{ NULL, 0, NULL, 0 },
	};
	struct stat_live_args *la = &cl->la;
	int c;
	char *end;

	while ((c = getopt_long(argc, argv, "hw:c:", longopts, NULL)) != -1) {
		switch (c) {
		case 'C':
		case 'F':
		case 'd':
		case 'o':
		case 'g':
		case 'V':
			if (cl->mode && cl->mode != c) {
				fprintf(stderr, "tier-stat: choose one of --check, --check-files, --print-default, --options, --gpu-selftest\n");
				return EXIT_USAGE;
			}
			cl->mode = c;
			break;
		case 'w':
			errno = 0;
			la->watch_s = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(la->watch_s >= 0.1) || la->watch_s > 86400) {
				fprintf(stderr, "tier-stat: -w '%s': give the interval in seconds, from 0.1 to 86400\n",
					optarg);
				return EXIT_USAGE;
			}
			cl->live_opt = true;
			break;
		case 'c':
			errno = 0;
			la->count = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || la->count < 1) {
				fprintf(stderr, "tier-stat: -c '%s': give a count of reports, 1 or more\n", optarg);
				return EXIT_USAGE;
			}
			cl->live_opt = true;
			break;
		case O_DIR:
			la->dir = optarg;
			cl->live_opt = true;
			break;
		case O_JSON:
		case O_PROM:
			if (la->format != STAT_TABLE && la->format != (c == O_JSON ? STAT_JSON : STAT_PROMETHEUS)) {
				fprintf(stderr, "tier-stat: choose one of --json and --prometheus\n");
				return EXIT_USAGE;
			}
			la->format = c == O_JSON ? STAT_JSON : STAT_PROMETHEUS;
			cl->live_opt = true;
			break;
		case O_REMOVE:
			la->remove_stale = true;
			cl->live_opt = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (cl->mode && cl->live_opt) {
		fprintf(stderr, "tier-stat: -w, -c, --dir, --json, --prometheus and --remove-stale are for the live view, not with --check, --check-files, --print-default, --options, --gpu-selftest or --version\n");
		return EXIT_USAGE;
	}
	return -1;
}

/* The live view: the list, a report, -w, --remove-stale; at most one PID. */
static int run_live(struct stat_live_args *la, int argc, char **argv)
{
	if (optind + 1 < argc) {
		fprintf(stderr, "tier-stat: too many arguments (one PID at most)\n");
		return EXIT_USAGE;
	}
	if (la->count && la->watch_s <= 0) {
		fprintf(stderr, "tier-stat: -c counts the reports of -w; give -w SEC too\n");
		return EXIT_USAGE;
	}
	if (la->remove_stale && (optind < argc || la->watch_s > 0 || la->format != STAT_TABLE)) {
		fprintf(stderr, "tier-stat: --remove-stale takes no PID, -w, --json or --prometheus\n");
		return EXIT_USAGE;
	}
	la->target = optind < argc ? argv[optind] : NULL;
	return stat_live_run(la);
}

/* --gpu-selftest [N] */
static int do_gpu_selftest(const char *arg)
{
	long n = 0;
	char *end;
	int rc;

	if (arg) {
		n = strtol(arg, &end, 10);
		if (*end || n < 0 || n > 1023) {
			fprintf(stderr, "tier-stat: bad GPU index '%s'\n", arg);
			return EXIT_USAGE;
		}
	}
	rc = tier_gpu_selftest((int)n);
	if (rc) {
		fprintf(stderr, "tier-stat: GPU %ld self-test failed: %s\n", n, tier_last_error());
		return 1;
	}
	printf("GPU %ld self-test passed\n", n);
	return 0;
}

/* One of the modes, with its operands from optind on. */
static int run_mode(int mode, int argc, char **argv)
{
	if (mode == 'F') {
		if (optind >= argc) {
			fprintf(stderr, "tier-stat: --check-files: name the backing files of a closed store\n");
			return EXIT_USAGE;
		}
		return do_check_files(argv + optind, argc - optind);
	}
	if (mode != 'C' && mode != 'g' && optind < argc) {
		fprintf(stderr, "tier-stat: unexpected argument '%s'\n", argv[optind]);
		return EXIT_USAGE;
	}
	if (optind + 1 < argc) {
		fprintf(stderr, "tier-stat: too many arguments\n");
		return EXIT_USAGE;
	}
	switch (mode) {
	case 'C':
		return do_check(optind < argc ? argv[optind] : NULL);
	case 'd':
		return do_print_default();
	case 'o':
		return tier_options_print(stdout) ? 1 : 0;
	case 'g':
		return do_gpu_selftest(optind < argc ? argv[optind] : NULL);
	case 'V':
		printf("tier-stat (tierstore) %s [%s]\n", tier_version(), tier_build_features());
		return 0;
	default:
		usage(stderr);
		return EXIT_USAGE;
	}
}

int main(int argc, char **argv)
{
	struct cmdline cl = { .la = { .format = STAT_TABLE } };
	int rc = parse_options(argc, argv, &cl);

	if (rc >= 0)
		return rc;
	if (!cl.mode)
		return run_live(&cl.la, argc, argv);
	return run_mode(cl.mode, argc, argv);
}
