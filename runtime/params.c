/*
 * params.c - the defaults of the parameter structs tierstore.h declares:
 * tier_optim_params_init, tier_group_params_init and
 * tier_comm_params_init, exported so that a binding (python/tierstore)
 * takes the defaults from the library instead of copying them
 * (docs/api.md, "Parameter structs").  The optimizer and the communicator
 * take their NULL-params defaults from here too.
 */
#include "config.h"

#include <string.h>

#include "common/error.h"
#include "tierstore.h"

void tier_optim_params_init(struct tier_optim_params *p)
{
	TS_NONNULL_OR(p, );
	memset(p, 0, sizeof(*p));
	p->size = (uint32_t)sizeof(*p);
	p->lr = 1e-3;
	p->beta1 = 0.9;
	p->beta2 = 0.999;
	p->eps = 1e-8;
	p->weight_decay = 0.01;
	p->decoupled = true;
	p->moment_dtype = TIER_DTYPE_MANIFEST;
	p->rounding = TIER_ROUND_MANIFEST;
	p->out_rounding = TIER_ROUND_MANIFEST;
	p->seed = TIER_SEED_MANIFEST;
	p->offload_fraction = TIER_OFFLOAD_MANIFEST;
	p->loss_scale = 1.0;
	p->min_loss_scale = 1.0;
	p->growth_factor = 2.0;
	p->backoff_factor = 0.5;
	p->growth_interval = 1000;
	p->hysteresis = 2;
}

void tier_group_params_init(struct tier_group_params *g)
{
	TS_NONNULL_OR(g, );
	memset(g, 0, sizeof(*g));
	g->size = (uint32_t)sizeof(*g);
	g->lr = 1e-3;
	g->beta1 = 0.9;
	g->beta2 = 0.999;
	g->eps = 1e-8;
	g->weight_decay = 0.01;
	g->decoupled = true;
}

void tier_comm_params_init(struct tier_comm_params *p)
{
	TS_NONNULL_OR(p, );
	memset(p, 0, sizeof(*p));
	p->size = (uint32_t)sizeof(*p);
	p->device = -1;
}
