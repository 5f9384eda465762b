/*
 * optim_param.c - the optimizer's parameters (tier_optim_* in tierstore.h;
 * docs/optimizer.md): adding one (its shards created on the store and
 * their initial state written), its state read and written back, its
 * step count, freezing and removing it, between steps; the groups and
 * their hyperparameters; the loss scaler's state.  The optimizer's
 * lifetime and tier_optim_info are optim.c's; optim_impl.h what they
 * share.
 *
 * Threads: as optim.c, one thread drives these calls; each that changes
 * the parameters or groups is refused inside a step (between_steps).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/units.h"
#include "prefetch/writebehind.h"
#include "runtime/optim/optim_impl.h"
#include "formats/trace.h"
#include "tiers/store.h"

/* ------------------------------------------------------------ parameters */

const char *optim_param_key(const void *ctx, uintptr_t item)
{
	const struct tier_optim *o = ctx;

	return o->params[item - 1].name;
}

/* Writes the shard's initial state: what @fill writes, else master from
 * @init (or zeros) and moments zero. */
static int shard_init(struct tier_optim *o, struct shard *sh, const float *init,
		      optim_fill_fn fill, void *arg)
{
	void *ptr;
	int rc = tier_obj_acquire(o->s, sh->obj, TIER_DRAM, TIER_ACQUIRE_WRITE | TIER_ACQUIRE_DISCARD, &ptr);

	if (rc)
		return rc;
	if (fill) {
		rc = fill(arg, o, sh, ptr);
		if (rc) {
			/* Released clean: the shard is abandoned with its parameter. */
			tier_obj_release(o->s, sh->obj, TIER_DRAM, false);
			return rc;
		}
		return tier_obj_release(o->s, sh->obj, TIER_DRAM, true);
	}
	if (init)
		memcpy(ptr, init + sh->off, sh->n * 4);
	else
		memset(ptr, 0, sh->n * 4);
	memset((char *)ptr + sh->n * 4, 0, state_bytes_n(o->md, sh->n) - sh->n * 4);
	return tier_obj_release(o->s, sh->obj, TIER_DRAM, true);
}

/* Whether parameter @name of @numel elements may be added now. */
static int add_check(const struct tier_optim *o, const char *name, size_t numel)
{
	if (!o || !name || !*name)
		return ts_err(-EINVAL, "tier_optim_add_param: no optimizer or no name");
	if (o->in_step)
		return ts_err(-EBUSY, "parameter '%s': cannot add a parameter inside a step", name);
	if (o->pending)
		return ts_err(-EBUSY, "parameter '%s': cannot add a parameter while step %" PRIu64 ", which failed part way, is pending (complete it first)",
				name, o->applied + 1);
	if (!numel)
		return ts_err(-EINVAL, "parameter '%s': no elements", name);
	if (o->nparams == UINT32_MAX)
		return ts_err(-EOVERFLOW, "tier_optim_add_param: parameter '%s': the optimizer holds %u parameters, the most a uint32_t id counts",
				name, o->nparams);
	if (strlen(name) > TIERS_NAME_MAX * 4)
		return ts_err(-EINVAL, "parameter '%.32s...': name longer than %d bytes", name,
				TIERS_NAME_MAX * 4);
	if (ts_names_find(&o->pnames, name))
		return ts_err(-EEXIST, "parameter '%s' already exists", name);
	return 0;
}

/*
 * The shard count of a parameter of @numel elements into *nsh: 0, or
 * -EOVERFLOW when its state's bytes overflow 64 bits (or its master
 * weights' a size_t), or its shards with the optimizer's others exceed a
 * uint32_t; -ENOSPC when its state exceeds the home tier's capacity.
 */
static int add_size(const struct tier_optim *o, const char *name, size_t numel, uint32_t *nsh)
{
	uint64_t bytes, n;
	size_t master;
	struct tier_store_stats st;
	enum tier_level home = tier_store_home(o->s);

	if (__builtin_mul_overflow((uint64_t)numel, (uint64_t)(4 + 2 * o->mb + 1), &bytes) ||
	    __builtin_mul_overflow(numel, (size_t)4, &master))
		return ts_err(-EOVERFLOW, "tier_optim_add_param: parameter '%s': numel %zu: its state (%zu bytes per element) overflows a 64-bit byte count",
				name, numel, 4 + 2 * o->mb);
	bytes = state_bytes_n(o->md, numel); /* no more than the product checked */
	n = numel / o->shard_elems + (numel % o->shard_elems != 0);
	if (n > UINT32_MAX - o->nshards)
		return ts_err(-EOVERFLOW, "tier_optim_add_param: parameter '%s': numel %zu needs %" PRIu64 " shards of %zu elements; with the %u held that exceeds %u (uint32_t)",
				name, numel, n, o->shard_elems, o->nshards, UINT32_MAX);
	tier_store_get_stats(o->s, &st);
	if (bytes > st.level[home].capacity)
		return ts_err(-ENOSPC, "tier_optim_add_param: parameter '%s': numel %zu: %" PRIu64 " bytes of state exceed the home tier (%s, %" PRIu64 " bytes)",
				name, numel, bytes, tier_level_name(home), st.level[home].capacity);
	*nsh = (uint32_t)n;
	return 0;
}

/* @cap doubled (from @first when 0) until it holds @need, at most UINT32_MAX. */
static uint32_t grow_cap(uint32_t cap, uint32_t first, uint64_t need)
{
	uint64_t c = cap ? cap : first;

	while (c < need)
		c *= 2;
	return c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
}

/* Room for one more parameter and @nsh more shards (add_size checked the
 * counts). */
int optim_add_room(struct tier_optim *o, const char *name, uint32_t nsh)
{
	if (o->nparams == o->params_cap) {
		uint32_t cap = grow_cap(o->params_cap, 16, (uint64_t)o->nparams + 1);
		struct param *np = ts_realloc(o->params, cap * sizeof(*np));

		if (!np)
			return ts_err(-ENOMEM, "parameter '%s': out of memory", name);
		o->params = np;
		o->params_cap = cap;
	}
	if ((uint64_t)o->nshards + nsh > o->shards_cap) {
		uint32_t cap = grow_cap(o->shards_cap, 64, (uint64_t)o->nshards + nsh);
		struct shard **ns;

		if (!(ns = ts_realloc(o->shards, cap * sizeof(*ns))))
			return ts_err(-ENOMEM, "parameter '%s': out of memory", name);
		o->shards = ns;
		o->shards_cap = cap;
	}
	/* so that indexing the parameter by name, its last step, cannot fail */
	if (ts_names_reserve(&o->pnames, 1))
		return ts_err(-ENOMEM, "parameter '%s': out of memory", name);
	return 0;
}

int tier_optim_add_param(struct tier_optim *o, const char *name, size_t numel, const float *init,
			 uint32_t *id)
{
	OPTIM_ARG(o);
	TS_NONNULL(name);
	return optim_add_param(o, 0, name, numel, init, NULL, NULL, id);
}

int tier_optim_add_param_to(struct tier_optim *o, uint32_t gid, const char *name, size_t numel,
			    const float *init, uint32_t *id)
{
	OPTIM_ARG(o);
	TS_NONNULL(name);
	return optim_add_param(o, gid, name, numel, init, NULL, NULL, id);
}

int optim_add_param(struct tier_optim *o, uint32_t gid, const char *name, size_t numel,
		    const float *init, optim_fill_fn fill, void *arg, uint32_t *id)
{
	uint32_t nsh = 0, first = o ? o->nshards : 0;
	struct param *pp, piece = { .numel = numel };
	int rc;

	if ((rc = add_check(o, name, numel)))
		return rc;
	if (gid >= o->ngroups)
		return ts_err(-EINVAL, "parameter '%s': no group %u (the optimizer has %u)", name,
				gid, o->ngroups);
	piece.name = (char *)name;
	if ((rc = zero_param_split(o, &piece)))
		return rc;
	if ((rc = add_size(o, name, piece.pn, &nsh)) || (rc = optim_add_room(o, name, nsh))) {
		zero_param_free(o, &piece);
		return rc;
	}
	pp = &o->params[o->nparams];
	*pp = piece;
	if (!(pp->name = ts_strdup(name))) {
		zero_param_free(o, pp);
		return ts_err(-ENOMEM, "parameter '%s': out of memory", name);
	}
	pp->first = first;
	pp->group = gid;
	for (uint32_t k = 0; k < nsh; k++) {
		struct shard *sh = ts_calloc(1, sizeof(*sh));
		char oname[TIERS_NAME_MAX * 4 + 32];

		if (!sh) {
			rc = ts_err(-ENOMEM, "parameter '%s': out of memory", name);
			goto undo;
		}
		o->shards[o->nshards++] = sh;
		sh->o = o;
		sh->param = o->nparams;
		sh->index = first + k;
		sh->off = (size_t)k * o->shard_elems;
		sh->n = pp->pn - sh->off < o->shard_elems ? pp->pn - sh->off : o->shard_elems;
		sh->bytes = state_bytes_n(o->md, sh->n);
		snprintf(oname, sizeof(oname), "%s#%u", name, k);
		if ((rc = tier_obj_create(o->s, oname, sh->bytes, &sh->obj))) {
			ts_err_prefix("parameter '%s': ", name);
			goto undo;
		}
		store_obj_set_user(sh->obj, sh);
		trace_name_shard(o->trace, sh->index, oname);
		if ((rc = shard_init(o, sh, init ? init + pp->poff : NULL, fill, arg))) {
			ts_err_prefix("parameter '%s': writing its initial state: ", name);
			goto undo;
		}
	}
	pp->nshards = nsh;
	if ((rc = ts_names_insert(&o->pnames, (uintptr_t)o->nparams + 1)))
		goto undo; /* not after optim_add_room's reserve */
	if (id)
		*id = o->nparams;
	o->nparams++;
	o->state_bytes += optim_shards_bytes(o, first, nsh);
	o->synced = false;
	o->layout_dirty = true;
	optim_feed_update(o, NULL);
	return 0;
undo:
	while (o->nshards > first) {
		struct shard *sh = o->shards[--o->nshards];

		if (sh->obj) {
			store_obj_set_user(sh->obj, NULL);
			(void)tier_obj_destroy(o->s, sh->obj);
		}
		free(sh);
	}
	zero_param_free(o, pp);
	free(pp->name);
	return rc;
}

/* ------------------------------------------------------------ groups */

int optim_push_group(struct tier_optim *o, const struct tier_group_params *g)
{
	if (o->ngroups == o->groups_cap) {
		uint32_t cap = grow_cap(o->groups_cap, 4, (uint64_t)o->ngroups + 1);
		struct tier_group_params *ng = ts_realloc(o->groups, cap * sizeof(*ng));

		if (!ng)
			return ts_err(-ENOMEM, "optimizer: out of memory for group %u", o->ngroups);
		o->groups = ng;
		o->groups_cap = cap;
	}
	o->groups[o->ngroups] = *g;
	o->groups[o->ngroups].size = (uint32_t)sizeof(*g);
	o->ngroups++;
	return 0;
}

/* Whether the optimizer's parameters and groups may change now. */
static int between_steps(const struct tier_optim *o, const char *what)
{
	if (atomic_load(&o->in_step))
		return ts_err(-EBUSY, "%s: inside a step (call it between steps)", what);
	if (o->pending)
		return ts_err(-EBUSY, "%s: step %" PRIu64 " failed part way and is pending (complete it first)",
				what, o->applied + 1);
	return 0;
}

int tier_optim_add_group(struct tier_optim *o, const struct tier_group_params *g, uint32_t *gid)
{
	OPTIM_ARG(o);
	TS_NONNULL(g);
	char what[64];
	int rc;

	snprintf(what, sizeof(what), "optimizer: group %u", o->ngroups);
	if (ts_params_size("tier_optim_add_group: struct tier_group_params", g->size, sizeof(*g)))
		return -EINVAL;
	if ((rc = optim_check_group(what, g)) || (rc = between_steps(o, what)))
		return rc;
	if (o->ngroups == UINT32_MAX)
		return ts_err(-EOVERFLOW, "%s: the optimizer holds the most groups a uint32_t counts", what);
	if ((rc = optim_push_group(o, g)))
		return rc;
	if (gid)
		*gid = o->ngroups - 1;
	return 0;
}

int tier_optim_set_group(struct tier_optim *o, uint32_t gid, const struct tier_group_params *g)
{
	OPTIM_ARG(o);
	TS_NONNULL(g);
	char what[64];
	int rc;

	snprintf(what, sizeof(what), "optimizer: group %u", gid);
	if (ts_params_size("tier_optim_set_group: struct tier_group_params", g->size, sizeof(*g)))
		return -EINVAL;
	if (gid >= o->ngroups)
		return ts_err(-EINVAL, "tier_optim_set_group: no group %u (the optimizer has %u)", gid,
				o->ngroups);
	if ((rc = optim_check_group(what, g)) || (rc = between_steps(o, what)))
		return rc;
	o->groups[gid] = *g;
	o->groups[gid].size = (uint32_t)sizeof(*g);
	return 0;
}

int tier_optim_get_group(const struct tier_optim *o, uint32_t gid, struct tier_group_params *out)
{
	OPTIM_ARG(o);
	TS_NONNULL(out);
	if (gid >= o->ngroups)
		return ts_err(-EINVAL, "tier_optim_get_group: no group %u (the optimizer has %u)", gid,
				o->ngroups);
	*out = o->groups[gid];
	return 0;
}

uint32_t tier_optim_ngroups(const struct tier_optim *o)
{
	OPTIM_ARG_OR(o, 0);
	return o ? o->ngroups : 0;
}

/* ------------------------------------------------- parameters' state */

static int param_arg(const struct tier_optim *o, uint32_t id, const char *fn)
{
	if (id >= o->nparams)
		return ts_err(-EINVAL, "%s: no parameter with id %u (there are %u)", fn, id, o->nparams);
	return 0;
}

int tier_optim_param_info(const struct tier_optim *o, uint32_t id, struct tier_param_info *out)
{
	OPTIM_ARG(o);
	TS_NONNULL(out);
	const struct param *pp;
	int rc;

	if ((rc = param_arg(o, id, "tier_optim_param_info")))
		return rc;
	pp = &o->params[id];
	memset(out, 0, sizeof(*out));
	out->name = pp->name;
	out->numel = pp->numel;
	out->group = pp->group;
	out->nshards = pp->nshards;
	out->step = pp->step;
	out->frozen = pp->frozen;
	out->part_off = pp->poff;
	out->part_numel = pp->pn;
	return 0;
}

int tier_optim_set_param_step(struct tier_optim *o, uint32_t id, uint64_t step)
{
	OPTIM_ARG(o);
	int rc;

	if ((rc = param_arg(o, id, "tier_optim_set_param_step")) ||
	    (rc = between_steps(o, "tier_optim_set_param_step")))
		return rc;
	o->params[id].step = step;
	return 0;
}

int tier_optim_freeze(struct tier_optim *o, uint32_t id, bool frozen)
{
	OPTIM_ARG(o);
	int rc;

	if ((rc = param_arg(o, id, "tier_optim_freeze")) ||
	    (rc = between_steps(o, "tier_optim_freeze")))
		return rc;
	if (o->params[id].frozen != frozen) {
		o->params[id].frozen = frozen;
		o->synced = false;
		o->layout_dirty = true;
	}
	return 0;
}

int tier_optim_remove_param(struct tier_optim *o, uint32_t id)
{
	OPTIM_ARG(o);
	struct param *pp;
	uint32_t first, nsh;
	int rc, rc1 = 0;

	if ((rc = param_arg(o, id, "tier_optim_remove_param")) ||
	    (rc = between_steps(o, "tier_optim_remove_param")))
		return rc;
	pp = &o->params[id];
	first = pp->first;
	nsh = pp->nshards;
	/* Its write-backs first: a queued one holds the object. */
	wb_drain(o->wb);
	o->state_bytes -= optim_shards_bytes(o, first, nsh);
	for (uint32_t k = 0; k < nsh; k++) {
		struct shard *sh = o->shards[first + k];

		store_obj_set_user(sh->obj, NULL);
		rc = tier_obj_destroy(o->s, sh->obj);
		if (rc && !rc1) {
			ts_err_prefix("tier_optim_remove_param: parameter '%s': ", pp->name);
			rc1 = rc;
		}
		free(sh);
	}
	memmove(&o->shards[first], &o->shards[first + nsh],
		(o->nshards - first - nsh) * sizeof(*o->shards));
	o->nshards -= nsh;
	zero_param_free(o, pp);
	ts_names_remove(&o->pnames, (uintptr_t)id + 1, pp->name);
	free(pp->name);
	memmove(pp, pp + 1, (o->nparams - id - 1) * sizeof(*pp));
	o->nparams--;
	ts_names_shift(&o->pnames, (uintptr_t)id + 1);
	for (uint32_t i = id; i < o->nparams; i++)
		o->params[i].first -= nsh;
	for (uint32_t i = first; i < o->nshards; i++) {
		struct shard *sh = o->shards[i];

		sh->index = i;
		sh->param = sh->param - 1;
		trace_name_shard(o->trace, i, tier_obj_name(sh->obj));
	}
	o->synced = false;
	o->layout_dirty = true;
	optim_feed_update(o, NULL);
	return rc1;
}

int tier_optim_get_scaler(const struct tier_optim *o, struct tier_loss_scaler *out)
{
	OPTIM_ARG(o);
	TS_NONNULL(out);
	if (o->p.dynamic_loss_scale) {
		*out = o->scaler;
		return 0;
	}
	memset(out, 0, sizeof(*out));
	out->scale = o->p.loss_scale;
	out->min_scale = o->p.min_loss_scale;
	out->growth_factor = o->p.growth_factor;
	out->backoff_factor = o->p.backoff_factor;
	out->growth_interval = o->p.growth_interval;
	out->hysteresis = o->p.hysteresis;
	return 0;
}

int tier_optim_set_scaler(struct tier_optim *o, const struct tier_loss_scaler *in)
{
	OPTIM_ARG(o);
	TS_NONNULL(in);
	struct tier_loss_scaler t;
	int rc;

	if ((rc = between_steps(o, "tier_optim_set_scaler")))
		return rc;
	if (!o->p.dynamic_loss_scale) {
		if (!(in->scale > 0) || !isfinite(in->scale))
			return ts_err(-EINVAL, "tier_optim_set_scaler: scale %g (must be > 0)", in->scale);
		o->p.loss_scale = in->scale;
		return 0;
	}
	if ((rc = tier_loss_scaler_init(&t, in->scale, in->min_scale, in->growth_factor,
					in->backoff_factor, in->growth_interval, in->hysteresis))) {
		ts_err_prefix("tier_optim_set_scaler: ");
		return rc;
	}
	if (in->hysteresis_tracker < 0 || (uint32_t)in->hysteresis_tracker > in->hysteresis)
		return ts_err(-EINVAL, "tier_optim_set_scaler: hysteresis_tracker %d (0 .. hysteresis %u)",
				(int)in->hysteresis_tracker, in->hysteresis);
	t.growth_tracker = in->growth_tracker;
	t.hysteresis_tracker = in->hysteresis_tracker;
	o->scaler = t;
	return 0;
}

/* ------------------------------------------------------------ read back */

/* A q8 shard's moments as fp32 values (either output may be NULL). */
void optim_q8_decode(const void *shard, size_t n, float *m, float *v)
{
	struct shard_view sv;

	shard_view_of(TIER_Q8, (void *)(uintptr_t)shard, n, &sv);
	if (m)
		(void)tier_q8_decode(sv.m, sv.ms, n, TIER_Q8_EXP_AVG, m);
	if (v)
		(void)tier_q8_decode(sv.v, sv.vs, n, TIER_Q8_EXP_AVG_SQ, v);
}

/* fp32 moments into a q8 shard (either input may be NULL: that moment
 * stays), each block scaled by its largest |value|, rounded to nearest. */
void optim_q8_encode(void *shard, size_t n, const float *m, const float *v)
{
	struct shard_view sv;

	shard_view_of(TIER_Q8, shard, n, &sv);
	if (m)
		(void)tier_q8_encode(m, n, TIER_Q8_EXP_AVG, sv.m, sv.ms);
	if (v)
		(void)tier_q8_encode(v, n, TIER_Q8_EXP_AVG_SQ, sv.v, sv.vs);
}

int tier_optim_read(struct tier_optim *o, uint32_t id, float *master, void *exp_avg,
		    void *exp_avg_sq)
{
	OPTIM_ARG(o);
	const struct param *pp;

	if (id >= o->nparams)
		return ts_err(-EINVAL, "tier_optim_read: no parameter %u", id);
	if (o->in_step)
		return ts_err(-EBUSY, "optimizer: cannot read state inside a step");
	pp = &o->params[id];
	for (uint32_t k = 0; k < pp->nshards; k++) {
		const struct shard *sh = o->shards[pp->first + k];
		char *ptr;
		int rc = tier_obj_acquire(o->s, sh->obj, TIER_DRAM, TIER_ACQUIRE_READ, (void **)&ptr);

		if (rc)
			return rc;
		if (master)
			memcpy(master + sh->off, ptr, sh->n * 4);
		if (o->md == TIER_Q8) {
			optim_q8_decode(ptr, sh->n, exp_avg ? (float *)exp_avg + sh->off : NULL,
					exp_avg_sq ? (float *)exp_avg_sq + sh->off : NULL);
		} else {
			if (exp_avg)
				memcpy((char *)exp_avg + sh->off * o->mb, ptr + 4 * sh->n,
				       sh->n * o->mb);
			if (exp_avg_sq)
				memcpy((char *)exp_avg_sq + sh->off * o->mb, ptr + (4 + o->mb) * sh->n,
				       sh->n * o->mb);
		}
		if ((rc = tier_obj_release(o->s, sh->obj, TIER_DRAM, false)))
			return rc;
	}
	return 0;
}

int tier_optim_write(struct tier_optim *o, uint32_t id, const float *master,
		     const void *exp_avg, const void *exp_avg_sq)
{
	OPTIM_ARG(o);
	const struct param *pp;
	bool all = master && exp_avg && exp_avg_sq;
	int rc;

	if ((rc = param_arg(o, id, "tier_optim_write")) || (rc = between_steps(o, "tier_optim_write")))
		return rc;
	pp = &o->params[id];
	for (uint32_t k = 0; k < pp->nshards; k++) {
		const struct shard *sh = o->shards[pp->first + k];
		char *ptr;

		rc = tier_obj_acquire(o->s, sh->obj, TIER_DRAM,
				      all ? TIER_ACQUIRE_WRITE | TIER_ACQUIRE_DISCARD
					  : TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE,
				      (void **)&ptr);
		if (rc) {
			ts_err_prefix("tier_optim_write: parameter '%s': ", pp->name);
			return rc;
		}
		if (master)
			memcpy(ptr, master + sh->off, sh->n * 4);
		if (o->md == TIER_Q8) {
			optim_q8_encode(ptr, sh->n, exp_avg ? (const float *)exp_avg + sh->off : NULL,
					exp_avg_sq ? (const float *)exp_avg_sq + sh->off : NULL);
		} else {
			if (exp_avg)
				memcpy(ptr + 4 * sh->n, (const char *)exp_avg + sh->off * o->mb,
				       sh->n * o->mb);
			if (exp_avg_sq)
				memcpy(ptr + (4 + o->mb) * sh->n,
				       (const char *)exp_avg_sq + sh->off * o->mb, sh->n * o->mb);
		}
		if ((rc = tier_obj_release(o->s, sh->obj, TIER_DRAM, true)))
			return rc;
	}
	return 0;
}
