/*
 * optim_export.c - the optimizer's full state as safetensors files
 * (docs/optimizer.md, "Export and import"): tier_optim_export writes
 * every parameter's master weights and moments, with the step count and
 * the hyperparameters as metadata, shard by shard (each shard comes up
 * through the store once and its three parts go to their places in the
 * file), so a state larger than DRAM exports without being held in
 * memory; tier_optim_import builds an optimizer on another store (another
 * manifest, shard size, number of paths) from such a file, again shard by
 * shard, so that its next step is the step the exporting optimizer would
 * have taken.  formats/safetensors_*.c read and write the format.
 *
 * The file: for parameter NAME, tensors "master.NAME" (F32, [numel]),
 * "exp_avg.NAME" and "exp_avg_sq.NAME" (F32 or BF16, [numel]); metadata
 * "format" = "tierstore.optimizer", "format_version" = "2", the
 * parameters in order ("nparams", "param.0", ...), "step", the
 * hyperparameters (group 0's) and the loss scaler, doubles printed
 * exactly (%.17g); then the groups ("ngroups", "group.G.lr", ...) and
 * each parameter's "param.K.group", "param.K.step", "param.K.frozen".
 * Version 1 files (no groups) are read as one group, every parameter at
 * "step".
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "runtime/optim/optim_impl.h"
#include "formats/safetensors.h"
#include "tiers/store.h"

#define FORMAT "tierstore.optimizer"
#define FORMAT_VERSION "2" /* 2: groups, each parameter's group, step, freeze; 1 read too */
#define PART_NAMES { "master", "exp_avg", "exp_avg_sq" }

/* ------------------------------------------------------------ export */

struct kv {
	char **v;     /* 2 * n strings */
	size_t n, cap;
	bool nomem;
};

__attribute__((format(printf, 3, 4)))
static void kv_add(struct kv *m, const char *key, const char *fmt, ...)
{
	va_list ap;
	char *k = NULL, *v = NULL;

	if (m->nomem)
		return;
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 64;
		char **nv = realloc(m->v, 2 * cap * sizeof(*nv));

		if (!nv) {
			m->nomem = true;
			return;
		}
		m->v = nv;
		m->cap = cap;
	}
	va_start(ap, fmt);
	if (vasprintf(&v, fmt, ap) < 0)
		v = NULL;
	va_end(ap);
	k = strdup(key);
	if (!k || !v) {
		free(k);
		free(v);
		m->nomem = true;
		return;
	}
	m->v[2 * m->n] = k;
	m->v[2 * m->n + 1] = v;
	m->n++;
}

static void kv_free(struct kv *m)
{
	for (size_t i = 0; i < 2 * m->n; i++)
		free(m->v[i]);
	free(m->v);
}

static const char *md_name(enum tier_dtype md)
{
	return md == TIER_BF16 ? "bf16" : md == TIER_Q8 ? "q8" : "fp32";
}

static void meta_fill(const struct tier_optim *o, struct kv *m)
{
	const struct tier_optim_params *p = &o->p;
	const struct tier_group_params *g0 = &o->groups[0];

	kv_add(m, "format", "%s", FORMAT);
	kv_add(m, "format_version", "%s", FORMAT_VERSION);
	kv_add(m, "step", "%" PRIu64, o->applied);
	kv_add(m, "lr", "%.17g", g0->lr);
	kv_add(m, "beta1", "%.17g", g0->beta1);
	kv_add(m, "beta2", "%.17g", g0->beta2);
	kv_add(m, "eps", "%.17g", g0->eps);
	kv_add(m, "weight_decay", "%.17g", g0->weight_decay);
	kv_add(m, "decoupled", "%s", g0->decoupled ? "true" : "false");
	kv_add(m, "moment_dtype", "%s", md_name(o->md));
	kv_add(m, "rounding", "%s", o->rounding == TIER_ROUND_STOCHASTIC ? "stochastic" : "nearest");
	kv_add(m, "out_rounding", "%s",
	       o->out_rounding == TIER_ROUND_STOCHASTIC ? "stochastic" : "nearest");
	kv_add(m, "seed", "%" PRIu64, o->seed);
	kv_add(m, "max_grad_norm", "%.17g", p->max_grad_norm);
	kv_add(m, "dynamic_loss_scale", "%s", p->dynamic_loss_scale ? "true" : "false");
	kv_add(m, "loss_scale", "%.17g", p->dynamic_loss_scale ? o->scaler.scale : p->loss_scale);
	kv_add(m, "min_loss_scale", "%.17g", p->min_loss_scale);
	kv_add(m, "growth_factor", "%.17g", p->growth_factor);
	kv_add(m, "backoff_factor", "%.17g", p->backoff_factor);
	kv_add(m, "growth_interval", "%u", p->growth_interval);
	kv_add(m, "hysteresis", "%u", p->hysteresis);
	kv_add(m, "growth_tracker", "%u", o->scaler.growth_tracker);
	kv_add(m, "hysteresis_tracker", "%d", (int)o->scaler.hysteresis_tracker);
	kv_add(m, "shard_elems", "%zu", o->shard_elems);
	kv_add(m, "nparams", "%u", o->nparams);
	for (uint32_t i = 0; i < o->nparams; i++) {
		char key[32];

		snprintf(key, sizeof(key), "param.%u", i);
		kv_add(m, key, "%s", o->params[i].name);
	}
	kv_add(m, "ngroups", "%u", o->ngroups);
	for (uint32_t g = 0; g < o->ngroups; g++) {
		const struct tier_group_params *q = &o->groups[g];
		char key[64];

#define GKEY(f) (snprintf(key, sizeof(key), "group.%u." f, g), key)
		kv_add(m, GKEY("lr"), "%.17g", q->lr);
		kv_add(m, GKEY("beta1"), "%.17g", q->beta1);
		kv_add(m, GKEY("beta2"), "%.17g", q->beta2);
		kv_add(m, GKEY("eps"), "%.17g", q->eps);
		kv_add(m, GKEY("weight_decay"), "%.17g", q->weight_decay);
		kv_add(m, GKEY("decoupled"), "%s", q->decoupled ? "true" : "false");
#undef GKEY
	}
	for (uint32_t i = 0; i < o->nparams; i++) {
		char key[64];

		snprintf(key, sizeof(key), "param.%u.group", i);
		kv_add(m, key, "%u", o->params[i].group);
		snprintf(key, sizeof(key), "param.%u.step", i);
		kv_add(m, key, "%" PRIu64, o->params[i].step);
		snprintf(key, sizeof(key), "param.%u.frozen", i);
		kv_add(m, key, "%s", o->params[i].frozen ? "true" : "false");
	}
}

int tier_optim_export(struct tier_optim *o, const char *path)
{
	OPTIM_ARG(o);
	TS_NONNULL(path);
	static const char *const parts[] = PART_NAMES;
	enum st_dtype mdt = o->md == TIER_BF16 ? ST_BF16 : ST_F32;
	struct st_desc *d = NULL;
	char **names = NULL;
	struct st_writer *w = NULL;
	struct kv meta = { 0 };
	size_t nt = (size_t)o->nparams * 3;
	float *q8tmp = NULL; /* q8: a shard's moments as fp32, exported as F32 */
	int rc = 0;

	if (o->comm && o->world > 1)
		return ts_err(-ENOTSUP, "tier_optim_export: the optimizer is partitioned (rank %d of %d keeps a piece of each parameter); export is of a whole optimizer: checkpoint each rank instead",
			      o->rank, o->world);
	if (atomic_load(&o->in_step))
		return ts_err(-EBUSY, "tier_optim_export: a step is begun; export between steps");
	if (o->pending || o->failed)
		return ts_err(-EBUSY, "tier_optim_export: step %" PRIu64 " failed part way; the state is not one step's",
			      o->applied + 1);
	d = calloc(nt ? nt : 1, sizeof(*d));
	names = calloc(nt ? nt : 1, sizeof(*names));
	if (!d || !names) {
		rc = ts_err(-ENOMEM, "tier_optim_export: out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < o->nparams; i++) {
		for (int k = 0; k < 3; k++) {
			size_t j = (size_t)i * 3 + (size_t)k;

			if (asprintf(&names[j], "%s.%s", parts[k], o->params[i].name) < 0) {
				names[j] = NULL;
				rc = ts_err(-ENOMEM, "tier_optim_export: out of memory");
				goto out;
			}
			d[j].name = names[j];
			d[j].dtype = k == 0 ? ST_F32 : mdt;
			d[j].ndim = 1;
			d[j].shape[0] = o->params[i].numel;
		}
	}
	meta_fill(o, &meta);
	if (meta.nomem) {
		rc = ts_err(-ENOMEM, "tier_optim_export: out of memory");
		goto out;
	}
	rc = st_writer_open(path, d, nt, (const char *const *)meta.v, meta.n, &w);
	if (rc)
		goto out;
	/* Shard by shard, in order, each brought up once; the next one's
	 * fill is started before this one is copied out. */
	for (uint32_t s = 0; s < o->nshards && !rc; s++) {
		const struct shard *sh = o->shards[s];
		size_t j = (size_t)sh->param * 3;
		char *ptr;

		if (s + 1 < o->nshards)
			(void)tier_obj_prefetch(o->s, o->shards[s + 1]->obj, TIER_DRAM);
		rc = tier_obj_acquire(o->s, sh->obj, TIER_DRAM, TIER_ACQUIRE_READ, (void **)&ptr);
		if (rc)
			break;
		rc = st_writer_pwrite(w, j, sh->off * 4, ptr, sh->n * 4);
		if (!rc && o->md == TIER_Q8) {
			if (!q8tmp && !(q8tmp = malloc(o->shard_elems * 8))) {
				rc = ts_err(-ENOMEM, "tier_optim_export: out of memory");
			} else {
				optim_q8_decode(ptr, sh->n, q8tmp, q8tmp + sh->n);
				rc = st_writer_pwrite(w, j + 1, sh->off * 4, q8tmp, sh->n * 4);
				if (!rc)
					rc = st_writer_pwrite(w, j + 2, sh->off * 4, q8tmp + sh->n,
							      sh->n * 4);
			}
		} else {
			if (!rc)
				rc = st_writer_pwrite(w, j + 1, sh->off * o->mb, ptr + 4 * sh->n,
						      sh->n * o->mb);
			if (!rc)
				rc = st_writer_pwrite(w, j + 2, sh->off * o->mb,
						      ptr + (4 + o->mb) * sh->n, sh->n * o->mb);
		}
		tier_obj_release(o->s, sh->obj, TIER_DRAM, false);
	}
	if (rc) {
		st_writer_abort(w);
		goto out;
	}
	rc = st_writer_finish(w);
	if (!rc)
		TIER_INFO(TIER_SS_OPTIM, "optimizer: exported step %" PRIu64 " (%u parameters) to %s", o->applied,
			  o->nparams, path);
out:
	for (size_t j = 0; j < nt && names; j++)
		free(names[j]);
	free(names);
	free(d);
	free(q8tmp);
	kv_free(&meta);
	return rc;
}

/* ------------------------------------------------------------ import */

struct imp {
	struct st_reader *r;
	const char *path;
	size_t t[3];             /* this parameter's tensors */
	size_t mb;
	float *q8tmp;            /* q8: a shard's moments as read (F32) */
};

static int fill_from_file(void *arg, struct tier_optim *o, const struct shard *sh, void *ptr)
{
	struct imp *im = arg;
	char *p = ptr;
	int rc;

	rc = st_reader_pread(im->r, im->t[0], sh->off * 4, p, sh->n * 4);
	if (!rc && o->md == TIER_Q8) {
		if (!im->q8tmp && !(im->q8tmp = malloc(o->shard_elems * 8)))
			return ts_err(-ENOMEM, "tier_optim_import: out of memory");
		rc = st_reader_pread(im->r, im->t[1], sh->off * 4, im->q8tmp, sh->n * 4);
		if (!rc)
			rc = st_reader_pread(im->r, im->t[2], sh->off * 4, im->q8tmp + sh->n, sh->n * 4);
		if (!rc)
			optim_q8_encode(p, sh->n, im->q8tmp, im->q8tmp + sh->n);
		return rc;
	}
	if (!rc)
		rc = st_reader_pread(im->r, im->t[1], sh->off * o->mb, p + 4 * sh->n, sh->n * o->mb);
	if (!rc)
		rc = st_reader_pread(im->r, im->t[2], sh->off * o->mb, p + (4 + o->mb) * sh->n,
				     sh->n * o->mb);
	return rc;
}

static int meta_num(struct st_reader *r, const char *path, const char *key, double *out)
{
	const char *v = st_reader_meta(r, key);
	char *end;

	if (!v)
		return ts_err(-EBADMSG, "%s: the metadata lacks '%s'", path, key);
	*out = strtod(v, &end);
	if (end == v || *end || !isfinite(*out))
		return ts_err(-EBADMSG, "%s: metadata '%s' = '%s' is not a number", path, key, v);
	return 0;
}

static int meta_bool(struct st_reader *r, const char *path, const char *key, bool *out)
{
	const char *v = st_reader_meta(r, key);

	if (!v || (strcmp(v, "true") && strcmp(v, "false")))
		return ts_err(-EBADMSG, "%s: metadata '%s' must be \"true\" or \"false\"%s", path, key,
			      v ? "" : " (it is missing)");
	*out = !strcmp(v, "true");
	return 0;
}

/* Reads the hyperparameters and counters of the file into @p and @st. */
static int import_meta(struct st_reader *r, const char *path, struct tier_optim_params *p,
		       uint64_t *step, struct tier_loss_scaler *sc, uint32_t *nparams)
{
	struct {
		const char *key;
		double *to;
	} nums[] = {
		{ "lr", &p->lr }, { "beta1", &p->beta1 }, { "beta2", &p->beta2 }, { "eps", &p->eps },
		{ "weight_decay", &p->weight_decay }, { "max_grad_norm", &p->max_grad_norm },
		{ "loss_scale", &p->loss_scale }, { "min_loss_scale", &p->min_loss_scale },
		{ "growth_factor", &p->growth_factor }, { "backoff_factor", &p->backoff_factor },
	};
	const char *f = st_reader_meta(r, "format"), *fv = st_reader_meta(r, "format_version");
	const char *md = st_reader_meta(r, "moment_dtype");
	double x;
	int rc;

	if (!f || strcmp(f, FORMAT))
		return ts_err(-EBADMSG, "%s: not a tierstore optimizer export (metadata 'format' is %s%s%s)",
			      path, f ? "'" : "", f ? f : "missing", f ? "'" : "");
	if (!fv || (strcmp(fv, FORMAT_VERSION) && strcmp(fv, "1")))
		return ts_err(-EPROTO, "%s: an optimizer export of format_version %s (this library reads 1 and %s)",
			      path, fv ? fv : "(none)", FORMAT_VERSION);
	for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
		if ((rc = meta_num(r, path, nums[i].key, nums[i].to)))
			return rc;
	if ((rc = meta_bool(r, path, "decoupled", &p->decoupled)) ||
	    (rc = meta_bool(r, path, "dynamic_loss_scale", &p->dynamic_loss_scale)))
		return rc;
	if (!md || (strcmp(md, "fp32") && strcmp(md, "bf16") && strcmp(md, "q8")))
		return ts_err(-EBADMSG, "%s: metadata 'moment_dtype' must be fp32, bf16 or q8", path);
	p->moment_dtype = !strcmp(md, "bf16") ? TIER_BF16 : !strcmp(md, "q8") ? TIER_Q8 : TIER_FP32;
	/* optional (exports before API 0.6 have none: the manifest's) */
	{
		static const char *const rkeys[2] = { "rounding", "out_rounding" };
		int *rdst[2] = { &p->rounding, &p->out_rounding };
		const char *sd = st_reader_meta(r, "seed");

		for (int k = 0; k < 2; k++) {
			const char *v = st_reader_meta(r, rkeys[k]);

			if (!v)
				continue;
			if (strcmp(v, "nearest") && strcmp(v, "stochastic"))
				return ts_err(-EBADMSG, "%s: metadata '%s' must be nearest or stochastic",
					      path, rkeys[k]);
			*rdst[k] = !strcmp(v, "stochastic") ? TIER_ROUND_STOCHASTIC : TIER_ROUND_NEAREST;
		}
		if (sd) {
			char *end;
			unsigned long long u;

			errno = 0;
			u = strtoull(sd, &end, 10);
			if (!*sd || *end || errno || sd[0] == '-' || u == TIER_SEED_MANIFEST)
				return ts_err(-EBADMSG, "%s: metadata 'seed' = '%s' is not a seed", path, sd);
			p->seed = u;
		}
	}
#define UINT_META(key, dst, max)                                                           \
	do {                                                                               \
		if ((rc = meta_num(r, path, key, &x)))                                     \
			return rc;                                                         \
		if (x < 0 || x > (double)(max) || x != floor(x))                           \
			return ts_err(-EBADMSG, "%s: metadata '%s' = %g is out of range", path, key, x); \
		dst = x;                                                                   \
	} while (0)
	UINT_META("growth_interval", p->growth_interval, UINT32_MAX);
	UINT_META("hysteresis", p->hysteresis, UINT32_MAX);
	UINT_META("step", *step, 9007199254740992.0);
	UINT_META("growth_tracker", sc->growth_tracker, UINT32_MAX);
	UINT_META("nparams", *nparams, UINT32_MAX);
	if ((rc = meta_num(r, path, "hysteresis_tracker", &x)))
		return rc;
	if (x != floor(x) || fabs(x) > INT32_MAX)
		return ts_err(-EBADMSG, "%s: metadata 'hysteresis_tracker' = %g is out of range", path, x);
	sc->hysteresis_tracker = (int32_t)x;
	sc->scale = p->loss_scale;
#undef UINT_META
	return 0;
}

/* Version 2's groups into @o (group 0 is the one create made from the
 * top-level hyperparameters: the same values). */
static int import_groups(struct imp *im, struct tier_optim *o)
{
	struct st_reader *r = im->r;
	const char *path = im->path;
	double x = 0;
	uint32_t ng;
	int rc;

	if ((rc = meta_num(r, path, "ngroups", &x)))
		return rc;
	if (x < 1 || x > 1e6 || x != floor(x))
		return ts_err(-EBADMSG, "%s: metadata 'ngroups' = %g is out of range", path, x);
	ng = (uint32_t)x;
	for (uint32_t g = 0; g < ng; g++) {
		struct tier_group_params q;
		struct {
			const char *f;
			double *to;
		} nums[] = { { "lr", &q.lr }, { "beta1", &q.beta1 }, { "beta2", &q.beta2 },
			     { "eps", &q.eps }, { "weight_decay", &q.weight_decay } };
		char key[64];

		tier_group_params_init(&q);
		for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
			snprintf(key, sizeof(key), "group.%u.%s", g, nums[i].f);
			if ((rc = meta_num(r, path, key, nums[i].to)))
				return rc;
		}
		snprintf(key, sizeof(key), "group.%u.decoupled", g);
		if ((rc = meta_bool(r, path, key, &q.decoupled)))
			return rc;
		snprintf(key, sizeof(key), "%s: group %u", path, g);
		if ((rc = optim_check_group(key, &q)))
			return rc;
		if (g == 0)
			o->groups[0] = q;
		else if ((rc = optim_push_group(o, &q)))
			return rc;
	}
	return 0;
}

/* A parameter's group, step and freeze (version 2). */
struct pmeta {
	bool v1;
	uint32_t group;
	uint64_t step;
	bool frozen;
};

static int import_param_meta(struct imp *im, uint32_t i, uint32_t ngroups, struct pmeta *pm)
{
	char key[64];
	double x = 0;
	int rc;

	memset(pm, 0, sizeof(*pm));
	if (!strcmp(st_reader_meta(im->r, "format_version"), "1")) {
		pm->v1 = true;
		return 0;
	}
	snprintf(key, sizeof(key), "param.%u.group", i);
	if ((rc = meta_num(im->r, im->path, key, &x)))
		return rc;
	if (x < 0 || x >= ngroups || x != floor(x))
		return ts_err(-EBADMSG, "%s: metadata '%s' = %g is not a group (there are %u)", im->path,
			      key, x, ngroups);
	pm->group = (uint32_t)x;
	snprintf(key, sizeof(key), "param.%u.step", i);
	if ((rc = meta_num(im->r, im->path, key, &x)))
		return rc;
	if (x < 0 || x > 9007199254740992.0 || x != floor(x))
		return ts_err(-EBADMSG, "%s: metadata '%s' = %g is out of range", im->path, key, x);
	pm->step = (uint64_t)x;
	snprintf(key, sizeof(key), "param.%u.frozen", i);
	return meta_bool(im->r, im->path, key, &pm->frozen);
}

/* The three tensors of parameter @name, checked against @numel's shape. */
static int find_tensors(struct imp *im, const char *name, enum st_dtype mdt, uint64_t *numel)
{
	static const char *const parts[] = PART_NAMES;

	for (int k = 0; k < 3; k++) {
		char tn[1200];
		const struct st_tensor *t;
		int rc;

		snprintf(tn, sizeof(tn), "%s.%s", parts[k], name);
		rc = st_reader_find(im->r, tn, &im->t[k]);
		if (rc)
			return ts_err(rc, "%s: parameter '%s' has no tensor '%s'", im->path, name, tn);
		t = st_reader_tensor(im->r, im->t[k]);
		if (t->ndim != 1 || t->dtype != (k == 0 ? ST_F32 : mdt) || t->shape[0] == 0 ||
		    (k > 0 && t->shape[0] != *numel))
			return ts_err(-EBADMSG, "%s: tensor '%s' is %s of %u dimension(s), %" PRIu64
				      " elements; expected %s, 1 dimension%s", im->path, tn,
				      st_dtype_name(t->dtype), t->ndim, t->ndim ? t->shape[0] : 1,
				      st_dtype_name(k == 0 ? ST_F32 : mdt),
				      k ? ", as many elements as its master weights" : "");
		if (k == 0)
			*numel = t->shape[0];
	}
	return 0;
}

int tier_optim_import(struct tier_store *s, const char *path, const struct tier_optim_params *rt,
		      struct tier_optim **out)
{
	TS_NONNULL(s);
	TS_NONNULL(path);
	TS_NONNULL(out);
	struct tier_optim_params p;
	struct tier_loss_scaler sc = { 0 };
	struct imp im = { .path = path };
	struct tier_optim *o = NULL;
	uint64_t step = 0;
	uint32_t nparams = 0;
	struct pmeta pm;
	int rc;

	*out = NULL;
	if (rt && ts_params_size("tier_optim_import: struct tier_optim_params", rt->size, sizeof(*rt)))
		return -EINVAL;
	if (rt && rt->comm && tier_comm_size(rt->comm) > 1)
		return ts_err(-ENOTSUP, "tier_optim_import: a communicator was passed: import builds a whole optimizer, not a rank's piece of a partitioned one");
	rc = st_reader_open(path, &im.r);
	if (rc)
		return rc;
	tier_optim_params_init(&p);
	rc = import_meta(im.r, path, &p, &step, &sc, &nparams);
	if (rc)
		goto out;
	if (rt) {
		p.threads = rt->threads;
		p.offload_fraction = rt->offload_fraction;
		p.shard_size = rt->shard_size;
		p.comm = rt->comm; /* one rank at most (above) */
	}
	rc = tier_optim_create(s, &p, &o);
	if (rc)
		goto out;
	if (strcmp(st_reader_meta(im.r, "format_version"), "1") && (rc = import_groups(&im, o)))
		goto out;
	im.mb = o->mb;
	for (uint32_t i = 0; i < nparams; i++) {
		char key[32];
		const char *name;
		uint64_t numel = 0;

		snprintf(key, sizeof(key), "param.%u", i);
		name = st_reader_meta(im.r, key);
		if (!name) {
			rc = ts_err(-EBADMSG, "%s: metadata '%s' is missing (nparams is %u)", path, key, nparams);
			goto out;
		}
		rc = find_tensors(&im, name, o->md == TIER_BF16 ? ST_BF16 : ST_F32, &numel);
		if (rc)
			goto out;
		rc = import_param_meta(&im, i, o->ngroups, &pm);
		if (rc)
			goto out;
		rc = optim_add_param(o, pm.group, name, numel, NULL, fill_from_file, &im, NULL);
		if (rc) {
			ts_err_prefix("tier_optim_import: %s: ", path);
			goto out;
		}
		o->params[i].step = pm.v1 ? step : pm.step;
		o->params[i].frozen = pm.frozen;
	}
	if (st_reader_count(im.r) != (size_t)nparams * 3) {
		rc = ts_err(-EBADMSG, "%s: %zu tensors, and %u parameters make %zu: the file holds tensors of no parameter",
			    path, st_reader_count(im.r), nparams, (size_t)nparams * 3);
		goto out;
	}
	o->applied = step;
	o->ran = step;
	if (p.dynamic_loss_scale) {
		o->scaler.scale = sc.scale;
		o->scaler.growth_tracker = sc.growth_tracker;
		o->scaler.hysteresis_tracker = sc.hysteresis_tracker;
	}
	optim_feed_update(o, NULL);
	TIER_INFO(TIER_SS_OPTIM, "optimizer: imported %s: step %" PRIu64 ", %u parameters, %u shards", path,
		  step, o->nparams, o->nshards);
	*out = o;
	o = NULL;
out:
	if (o)
		tier_optim_destroy(o);
	free(im.q8tmp);
	st_reader_close(im.r);
	return rc;
}
