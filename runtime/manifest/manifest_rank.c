/*
 * manifest_rank.c - where this process stands in a distributed job: the
 * rank, local rank, world size and local world size that ${RANK},
 * ${LOCAL_RANK}, ${WORLD_SIZE} and ${LOCAL_WORLD_SIZE} expand to in a
 * manifest and that "/local_world" in a size divides by.
 *
 * Each field is taken from the first variable set of its row in
 * rank_vars[]: the name a manifest writes (torchrun sets exactly these),
 * then Open MPI's, MPICH/Hydra's and Slurm's.  A process no launcher
 * started is rank 0 of a world of 1.  The values are checked against each
 * other, so a manifest never expands a rank its job cannot have.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/units.h"
#include "runtime/manifest/manifest_impl.h"

/* The variables that give each field, in order of precedence. */
static const char *const rank_vars[4][5] = {
	{ "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", NULL },
	{ "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", NULL },
	{ "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", NULL },
	{ "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
	  "SLURM_NTASKS_PER_NODE", NULL },
};

int mf_rank_var(const char *name)
{
	for (int i = 0; i < 4; i++)
		if (strcmp(name, rank_vars[i][0]) == 0)
			return i;
	return -1;
}

int mf_rank_value(const struct tier_rank *r, int var)
{
	switch (var) {
	case 0:
		return r->rank;
	case 1:
		return r->local_rank;
	case 2:
		return r->world_size;
	default:
		return r->local_world_size;
	}
}

/*
 * The four values @v (rank, local rank, world, local world), each named
 * for messages by @src ("RANK=3", "rank 3"), against each other.
 */
static int rank_check(const int v[4], char src[4][160], const char *what)
{
	if (v[2] < 1)
		return ts_err(-EINVAL, "%s: %s: the world size must be at least 1", what, src[2]);
	if (v[3] < 1)
		return ts_err(-EINVAL, "%s: %s: the local world size must be at least 1", what,
			      src[3]);
	if (v[0] < 0 || v[0] >= v[2])
		return ts_err(-EINVAL, "%s: %s is not below the world size (%s)", what, src[0],
			      src[2]);
	if (v[1] < 0 || v[1] >= v[3])
		return ts_err(-EINVAL, "%s: %s is not below the local world size (%s)", what,
			      src[1], src[3]);
	if (v[3] > v[2])
		return ts_err(-EINVAL, "%s: %s is more than the world size (%s)", what, src[3],
			      src[2]);
	return 0;
}

int mf_rank_check(const struct tier_rank *r)
{
	const int v[4] = { r->rank, r->local_rank, r->world_size, r->local_world_size };
	static const char *const field[4] = { "rank", "local_rank", "world_size",
					      "local_world_size" };
	char src[4][160];

	for (int i = 0; i < 4; i++)
		snprintf(src[i], sizeof(src[i]), "%s %d", field[i], v[i]);
	return rank_check(v, src, "struct tier_rank");
}

int tier_rank_from_env(struct tier_rank *out)
{
	TS_NONNULL(out);
	int v[4] = { 0, 0, 1, 1 };
	char src[4][160];

	for (int i = 0; i < 4; i++) {
		const char *const *name = rank_vars[i];
		const char *s = NULL;
		long long n;

		while (*name && (!(s = getenv(*name)) || !*s))
			name++;
		if (!*name) {
			snprintf(src[i], sizeof(src[i]), "%d (no %s, %s, %s or %s set)", v[i],
				 rank_vars[i][0], rank_vars[i][1], rank_vars[i][2], rank_vars[i][3]);
			continue;
		}
		if (ts_int_parse(s, i < 2 ? 0 : 1, INT_MAX, &n))
			return ts_err(-EINVAL, "environment: %s='%.40s' is not a %s", *name, s,
				      i < 2 ? "rank (a whole number from 0)"
					    : "number of ranks (a whole number from 1)");
		v[i] = (int)n;
		snprintf(src[i], sizeof(src[i]), "%s=%d", *name, v[i]);
	}
	if (rank_check(v, src, "environment"))
		return -EINVAL;
	*out = (struct tier_rank){ v[0], v[1], v[2], v[3] };
	return 0;
}
