/*
 * bench_step_world.c - `tier-bench step` over several ranks: which run it
 * is (--comm, or an MPI launcher's environment), the tool's own MPI (the
 * barriers between the phases and rank 0's gathers of every rank's
 * records), the communicator the partitioned optimizer takes, and each
 * rank's manifest (its rank's variables expanded; the embedded default
 * given a directory of its own per rank).
 *
 * The tool initialises MPI itself (MPI_Init_thread, MPI_THREAD_SERIALIZED:
 * the library's comm may be used from the optimizer's threads, and the
 * tool calls MPI only between steps) before it opens the comm, so the
 * library duplicates MPI_COMM_WORLD and leaves MPI to the tool, which
 * finalises it after the comm is closed.  Built without MPI (TIER_BENCH_MPI
 * 0), `--comm mpi` is refused, and a launcher's world of more than one
 * rank too; a world of one runs on the single backend.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_step.h"

#ifndef TIER_BENCH_MPI
#define TIER_BENCH_MPI 0
#endif
#if TIER_BENCH_MPI
#include <mpi.h>
#endif

/* An MPI launcher started this process (what tier_comm_open looks at). */
static const char *launcher_var(void)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK" };

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i]);

		if (v && *v)
			return vars[i];
	}
	return NULL;
}

bool step_world_have_mpi(void)
{
	return TIER_BENCH_MPI;
}

int step_world_open(const struct step_opts *o, struct step_world *w)
{
	const char *lv = launcher_var();
	struct tier_comm_params cp;
	int rc;

	memset(w, 0, sizeof(*w));
	w->world = 1;
	rc = tier_rank_from_env(&w->tr);
	if (rc) {
		fprintf(stderr, STEP_WHO ": the rank from the environment: %s\n",
			tier_last_error());
		return EXIT_USAGE;
	}
	if (o->comm == STEP_COMM_NONE || (o->comm == STEP_COMM_AUTO && !lv))
		return 0;
	w->active = true;
	if (o->comm == STEP_COMM_MPI || (o->comm == STEP_COMM_AUTO && TIER_BENCH_MPI)) {
		if (!TIER_BENCH_MPI) {
			fprintf(stderr, STEP_WHO ": --comm mpi: this tier-bench was built without MPI"
				" (configure with -Dmpi=enabled and an MPI for C installed)\n");
			return EXIT_USAGE;
		}
		w->backend = "mpi";
	} else if (o->comm == STEP_COMM_AUTO) {
		/* A launcher started a build without MPI. */
		if (w->tr.world_size > 1) {
			fprintf(stderr, STEP_WHO ": started by an MPI launcher (%s is set) with %d"
				" ranks, but this tier-bench was built without MPI (configure with"
				" -Dmpi=enabled); run one rank, or --comm none for independent runs\n",
				lv, w->tr.world_size);
			return EXIT_USAGE;
		}
		w->backend = "single";
	} else {
		if (w->tr.world_size > 1) {
			fprintf(stderr, STEP_WHO ": --comm single runs one rank, but the environment"
				" says %d (rank %d)\n", w->tr.world_size, w->tr.rank);
			return EXIT_USAGE;
		}
		w->backend = "single";
	}
#if TIER_BENCH_MPI
	if (!strcmp(w->backend, "mpi")) {
		int provided = 0, inited = 0;

		MPI_Initialized(&inited);
		if (!inited) {
			if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) !=
			    MPI_SUCCESS) {
				fprintf(stderr, STEP_WHO ": MPI_Init_thread failed\n");
				return 1;
			}
			if (provided < MPI_THREAD_SERIALIZED) {
				fprintf(stderr, STEP_WHO ": MPI gives thread level %d, the comm needs"
					" MPI_THREAD_SERIALIZED (%d)\n", provided,
					MPI_THREAD_SERIALIZED);
				MPI_Finalize();
				return 1;
			}
		}
		w->mpi = true;
	}
#endif
	tier_comm_params_init(&cp);
	cp.backend = w->backend;
	rc = tier_comm_open(&cp, &w->comm);
	if (rc) {
		w->comm = NULL;
		step_fail("open the communicator", rc);
		step_world_abort(w, 1);
		return 1;
	}
	w->rank = tier_comm_rank(w->comm);
	w->world = tier_comm_size(w->comm);
	if (w->rank != w->tr.rank || w->world != w->tr.world_size) {
		fprintf(stderr, STEP_WHO ": the communicator says rank %d of %d, the environment"
			" rank %d of %d (tier_rank_from_env: RANK, WORLD_SIZE, then the launcher's"
			" variables)\n", w->rank, w->world, w->tr.rank, w->tr.world_size);
		step_world_abort(w, 1);
		return 1;
	}
	return 0;
}

void step_world_barrier(const struct step_world *w)
{
#if TIER_BENCH_MPI
	if (w->mpi)
		MPI_Barrier(MPI_COMM_WORLD);
#else
	(void)w;
#endif
}

int step_world_gather(const struct step_world *w, const void *mine, size_t bytes, void *all)
{
#if TIER_BENCH_MPI
	if (w->mpi) {
		if (bytes > (size_t)0x7fffffff) {
			fprintf(stderr, STEP_WHO ": %zu bytes of records to gather: too many\n", bytes);
			return 1;
		}
		if (MPI_Gather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, 0,
			       MPI_COMM_WORLD) != MPI_SUCCESS) {
			fprintf(stderr, STEP_WHO ": MPI_Gather of the ranks' records failed\n");
			return 1;
		}
		return 0;
	}
#endif
	(void)w;
	memcpy(all, mine, bytes);
	return 0;
}

int step_world_max(const struct step_world *w, int v)
{
#if TIER_BENCH_MPI
	int out = v;

	if (w->mpi && MPI_Allreduce(&v, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS)
		return v ? v : 1;
	return out;
#else
	(void)w;
	return v;
#endif
}

void step_world_abort(const struct step_world *w, int code)
{
#if TIER_BENCH_MPI
	int size = 1;

	if (w->mpi) {
		MPI_Comm_size(MPI_COMM_WORLD, &size);
		if (size > 1) {
			fflush(stdout);
			fflush(stderr);
			MPI_Abort(MPI_COMM_WORLD, code);
		}
	}
#else
	(void)w;
	(void)code;
#endif
}

int step_world_close(struct step_world *w)
{
	int rc = tier_comm_close(w->comm), ret = 0;

	w->comm = NULL;
	if (rc)
		ret = step_fail("close the communicator", rc);
#if TIER_BENCH_MPI
	if (w->mpi) {
		MPI_Finalize();
		w->mpi = false;
	}
#endif
	return ret;
}

/* -------------------------------------------------------------- manifests */

/*
 * The embedded default for rank @tr: its NVMe directory gets a
 * subdirectory "rank${RANK}/" (the ranks' backing files apart), and its
 * DRAM and NVMe sizes end in "/local_world" (the ranks on the node share
 * its memory and its disk).  The default's text is rewritten: the path's
 * closing quote and the two capacities are found by their keys.
 */
static int default_for_rank(const struct tier_rank *tr, struct tier_manifest **m)
{
	char *text = NULL, *out = NULL, *p;
	const char *keys[] = { "dram:\n  capacity: ", "      capacity: " };
	size_t len, at[3], n = 0;
	int rc = tier_manifest_default_text(&text);

	if (rc) {
		fprintf(stderr, STEP_WHO ": the embedded default manifest: %s\n", tier_last_error());
		return rc;
	}
	/* Where to insert: after each capacity's digits, before the path's
	 * closing quote (the default's directory ends in '/'). */
	for (size_t k = 0; k < 2; k++) {
		p = strstr(text, keys[k]);
		if (!p)
			break;
		p += strlen(keys[k]);
		while (*p >= '0' && *p <= '9')
			p++;
		at[n++] = (size_t)(p - text);
	}
	p = strstr(text, "- path: \"");
	if (p) {
		p += strlen("- path: \"");
		while (*p && !(*p == '"' && p[-1] != '\\'))
			p++;
	}
	if (n != 2 || !p || !*p || p[-1] != '/') {
		fprintf(stderr, STEP_WHO ": the embedded default manifest is not of the shape this"
			" tool rewrites for ranks; pass --manifest with ${RANK} in its paths:\n%s",
			text);
		free(text);
		return -EINVAL;
	}
	at[2] = (size_t)(p - text);
	len = strlen(text);
	out = malloc(len + 64);
	if (!out) {
		free(text);
		return -ENOMEM;
	}
	/* at[] is in order: dram capacity, nvme capacity, then ... the path
	 * comes before the nvme capacity in the text; sort the three. */
	for (int i = 0; i < 3; i++)
		for (int j = i + 1; j < 3; j++)
			if (at[j] < at[i]) {
				size_t t = at[i];

				at[i] = at[j];
				at[j] = t;
			}
	{
		size_t from = 0, o2 = 0;

		for (int i = 0; i < 3; i++) {
			const char *ins = text[at[i]] == '"' ? "rank${RANK}/" : "/local_world";

			memcpy(out + o2, text + from, at[i] - from);
			o2 += at[i] - from;
			memcpy(out + o2, ins, strlen(ins));
			o2 += strlen(ins);
			from = at[i];
		}
		memcpy(out + o2, text + from, len - from + 1);
	}
	free(text);
	rc = tier_manifest_parse_rank(out, strlen(out), "<default, per rank>", 0, tr, m);
	if (rc)
		fprintf(stderr, "%s\n", tier_last_error());
	free(out);
	return rc;
}

int step_world_manifest(const struct step_opts *o, const struct step_world *w,
			struct tier_manifest **m)
{
	const char *path = o->manifest;
	int rc;

	if (!w->active)
		return load_manifest(o->manifest, m) ? EXIT_USAGE : 0;
	if (!path || !*path)
		path = getenv("TIER_MANIFEST");
	if (!path || !*path)
		rc = default_for_rank(&w->tr, m);
	else if ((rc = tier_manifest_load_rank(path, 0, &w->tr, m)))
		fprintf(stderr, "%s\n", tier_last_error());
	return rc ? EXIT_USAGE : 0;
}
