/*
 * version.c - what this build of the library is.
 */
#include "config.h"

#include "common/fault.h"
#include "tierstore.h"

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
	return FEAT_CUDA FEAT_NCCL FEAT_FAULT FEAT_STATS;
}
