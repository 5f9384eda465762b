/*
 * dtype.c - the element types (enum tier_dtype): their sizes and names,
 * the one table every layer and tool reads them from.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "common/error.h"
#include "tierstore/common.h"

static const struct {
	const char *name;
	size_t size;
} dtypes[] = {
	[TIER_FP32] = { "fp32", 4 },
	[TIER_BF16] = { "bf16", 2 },
	[TIER_FP16] = { "fp16", 2 },
	[TIER_Q8] = { "q8", 1 }, /* moments only: the codes, not the block scales */
};

#define NDTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

size_t tier_dtype_size(enum tier_dtype d)
{
	return (unsigned)d < NDTYPES ? dtypes[d].size : 0;
}

const char *tier_dtype_name(enum tier_dtype d)
{
	return (unsigned)d < NDTYPES ? dtypes[d].name : NULL;
}

int tier_dtype_parse(const char *name, enum tier_dtype *out)
{
	TS_NONNULL(name);
	TS_NONNULL(out);
	for (unsigned i = 0; name && i < NDTYPES; i++) {
		if (strcmp(name, dtypes[i].name) == 0) {
			*out = (enum tier_dtype)i;
			return 0;
		}
	}
	return ts_err(-EINVAL, "dtype '%s': not fp32, bf16, fp16 or q8", name ? name : "(null)");
}
