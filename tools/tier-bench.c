/*
 * tier-bench - benchmarks of tierstore's parts, run as programs (never as
 * timed tests).  Each prints a human table, or one JSON object with --json.
 *
 *   tier-bench io [--manifest FILE] [--size BYTES] [--bs BYTES] [--qd N]
 *                 [--mix F] [--verify] [--json]
 *       Writes then reads SIZE bytes of one object through the NVMe tier in
 *       requests of BS bytes with QD in flight, and reports each direction's
 *       bandwidth in GB/s (1e9 bytes per second).  With --mix, a third pass
 *       reads the share F of the object's requests (spread evenly) while
 *       writing the others, both moving through the object together and in
 *       flight together in that proportion (an optimizer step's traffic).
 *       Checksums are as the manifest says (on by default).  Backing files the run creates are
 *       removed at the end.
 *
 *   tier-bench cache [--manifest FILE] [--objects N] [--object-size BYTES]
 *                    [--dram BYTES] [--cycles K] [--policy belady|lru|both]
 *                    [--json]
 *       Runs a cyclic schedule over N objects through a DRAM cache of the
 *       given size over the NVMe tier, K times, writing every object on each
 *       visit, and reports per policy the NVMe bytes read and written per
 *       cycle, the DRAM hit rate and the time per cycle (first cycle, and the
 *       steady state of cycles 2..K).  Every byte is verified at the end.
 *       With both policies, also the ratio of Belady's NVMe reads to LRU's
 *       against the bound (N-C+2)/N, C the objects DRAM holds.
 *
 *   tier-bench adam [--numel N] [--threads T] [--moments fp32|bf16]
 *                   [--grads fp32|bf16|fp16] [--copy-out none|bf16|fp16|fp32]
 *                   [--runs R] [--json]
 *       Times R runs of tier_adam_step over N elements (AdamW) on a pool of T
 *       threads, alternating with R runs of tier_adam_roofline (the same
 *       bytes with trivial arithmetic) on the same arrays, and reports the
 *       bytes per element, the median step time, Gelem/s, GB/s, the
 *       roofline's GB/s and roofline_frac = roofline time / step time.
 *       Between runs, untimed, exp_avg_sq is made non-negative again (the
 *       roofline adds the gradient to it).
 *
 *   tier-bench step [OPTIONS]
 *       The main job: optimizer steps of a synthetic model through the
 *       store, against the bound measured in the same run (bench_step.c).
 *       With --checkpoint-every K, a durable checkpoint (tier_optim_checkpoint)
 *       after every K-th step, timed with the dirty bytes it wrote, against
 *       its prediction at the measured write rate and one full copy of the
 *       state (tier_optim_export); needs an NVMe tier.
 *
 * This file owns the command line's first word; each subcommand is in its
 * own file (bench_io.c, bench_cache.c, bench_adam.c, bench_step*.c), and
 * what they share is in bench_common.c (bench.h).
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: tier-bench io [OPTIONS]      NVMe tier write and read bandwidth\n"
		   "       tier-bench cache [OPTIONS]   DRAM cache over NVMe on a cyclic schedule\n"
		   "       tier-bench adam [OPTIONS]    CPU AdamW step against its memory roofline\n"
		   "       tier-bench step [OPTIONS]    optimizer steps through the tiers against the bound\n"
		   "       tier-bench --version | --help\n"
		   "Run 'tier-bench COMMAND --help' for its options.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (strcmp(argv[1], "io") == 0)
		return cmd_io(argc - 1, argv + 1);
	if (strcmp(argv[1], "cache") == 0)
		return cmd_cache(argc - 1, argv + 1);
	if (strcmp(argv[1], "adam") == 0)
		return cmd_adam(argc - 1, argv + 1);
	if (strcmp(argv[1], "step") == 0)
		return cmd_step(argc - 1, argv + 1);
	if (strcmp(argv[1], "--version") == 0) {
		printf("tier-bench (tierstore) %s [%s]\n", tier_version(), tier_build_features());
		return 0;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "tier-bench: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return EXIT_USAGE;
}
