/*
 * version.c - what this build of the library is: its version, as text and
 * as a number, whether it serves a program built against a given header,
 * and the features it was built with.
 */
#include "config.h"

#include <errno.h>

#include "common/error.h"
#include "common/fault.h"
#include "tierstore/common.h"

_Static_assert(TIER_VERSION_MAJOR * 10000 + TIER_VERSION_MINOR * 100 + TIER_VERSION_PATCH ==
		       TIER_VERSION_NUMBER, "TIER_VERSION_NUMBER");

#if TIER_HAVE_CUDA
#define FEAT_CUDA "cuda=yes"
#else
#define FEAT_CUDA "cuda=no"
#endif
#if TIER_HAVE_NCCL
#define FEAT_NCCL " nccl=yes"
#else
#define FEAT_NCCL " nccl=no"
#endif
#if TIER_HAVE_MPI
#define FEAT_MPI " mpi=yes"
#else
#define FEAT_MPI " mpi=no"
#endif
#if TIER_FAULT_SITES
#define FEAT_FAULT " fault_sites=yes"
#else
#define FEAT_FAULT " fault_sites=no"
#endif
#if TIER_STATS_BUILD
#define FEAT_STATS " stats=yes"
#else
#define FEAT_STATS " stats=no"
#endif

const char *tier_version(void)
{
	return TIER_VERSION_STRING;
}

const char *tier_build_features(void)
{
	return FEAT_CUDA FEAT_NCCL FEAT_MPI FEAT_FAULT FEAT_STATS;
}

unsigned tier_version_number(void)
{
	return TIER_VERSION_NUMBER;
}

int tier_version_check(unsigned major, unsigned minor)
{
	bool ok = major == TIER_VERSION_MAJOR &&
		  (major == 0 ? minor == TIER_VERSION_MINOR : minor <= TIER_VERSION_MINOR);

	if (ok)
		return 0;
	return ts_err(-EPROTO, "libtierstore %s serves programs built against tierstore.h %u.%u "
		      "(this program was built against %u.%u)%s",
		      TIER_VERSION_STRING, TIER_VERSION_MAJOR, TIER_VERSION_MINOR, major, minor,
		      TIER_VERSION_MAJOR == 0 ? "; before 1.0 the minor version must match" : "");
}
