/*
 * params.c - the defaults of the kernels' parameter struct, struct
 * tier_adam_params: tier_adam_params_init, exported so that a binding
 * takes the defaults from the library instead of copying them
 * (docs/api.md, "Parameter structs").
 */
#include "config.h"

#include <string.h>

#include "common/error.h"
#include "tierstore/kernels.h"

void tier_adam_params_init(struct tier_adam_params *p)
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
	p->step = 1;
	p->grad_scale = 1.0;
	p->rounding = TIER_ROUND_NEAREST;
	p->out_rounding = TIER_ROUND_NEAREST;
	p->seed = 0;
}
