/*
 * params.c - the defaults of the parameter struct tierstore/common.h
 * declares, struct tier_store_params: tier_store_params_init, exported so
 * that a binding takes the defaults from the library instead of copying
 * them (docs/api.md, "Parameter structs").
 */
#include "config.h"

#include <string.h>

#include "common/error.h"
#include "tierstore/common.h"

void tier_store_params_init(struct tier_store_params *p)
{
	TS_NONNULL_OR(p, );
	memset(p, 0, sizeof(*p));
	p->size = (uint32_t)sizeof(*p);
}
