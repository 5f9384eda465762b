/*
 * tier-stat - inspects tierstore configuration and (in later versions)
 * running stores.
 *
 *   tier-stat --check [FILE]   validate a manifest (FILE, else $TIER_MANIFEST,
 *                              else the embedded default) and print the
 *                              effective configuration as YAML.
 *   tier-stat --print-default  print the embedded default manifest's text.
 *   tier-stat --options        print the options table (TIER_* variables).
 *   tier-stat --gpu-selftest [N]  run a kernel on GPU N and check the result.
 *
 * Exit status: 0 success; 1 an operational failure (no GPU, out of memory);
 * 2 a usage error or an invalid manifest, with every problem on stderr as
 * FILE:LINE:COL: message.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tierstore.h"

enum { EXIT_USAGE = 2 };

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tier-stat --check [FILE]     validate a manifest, print the effective configuration\n"
		"       tier-stat --print-default    print the embedded default manifest\n"
		"       tier-stat --options          print the options table (TIER_* environment)\n"
		"       tier-stat --gpu-selftest [N] run a test kernel on CUDA device N (default 0)\n"
		"       tier-stat --version | --help\n"
		"\n"
		"With no FILE, --check uses $TIER_MANIFEST, else the embedded default.\n"
		"The live view of running stores is not part of this version.\n");
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


int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "check", no_argument, NULL, 'c' },
		{ "print-default", no_argument, NULL, 'd' },
		{ "options", no_argument, NULL, 'o' },
		{ "gpu-selftest", no_argument, NULL, 'g' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int mode = 0, c;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
		case 'd':
		case 'o':
		case 'g':
		case 'V':
			if (mode && mode != c) {
				fprintf(stderr, "tier-stat: choose one of --check, --print-default, --options, --gpu-selftest\n");
				return EXIT_USAGE;
			}
			mode = c;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (mode != 'c' && mode != 'g' && optind < argc) {
		fprintf(stderr, "tier-stat: unexpected argument '%s'\n", argv[optind]);
		return EXIT_USAGE;
	}
	if (optind + 1 < argc) {
		fprintf(stderr, "tier-stat: too many arguments\n");
		return EXIT_USAGE;
	}
	switch (mode) {
	case 'c':
		return do_check(optind < argc ? argv[optind] : NULL);
	case 'd':
		return do_print_default();
	case 'o':
		return tier_options_print(stdout) ? 1 : 0;
	case 'g': {
		char *end;
		long n = 0;
		int rc;

		if (optind < argc) {
			n = strtol(argv[optind], &end, 10);
			if (*end || n < 0 || n > 1023) {
				fprintf(stderr, "tier-stat: bad GPU index '%s'\n", argv[optind]);
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
	case 'V':
		printf("tier-stat (tierstore) %s [%s]\n", tier_version(), tier_build_features());
		return 0;
	default:
		usage(stderr);
		return EXIT_USAGE;
	}
}
