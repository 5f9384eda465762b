/*
 * bench_step_report.c - the output of `tier-bench step`: the medians over
 * the steps counted (the first, warm-up step left out with 3 steps or
 * more), the stall shares, the checkpoints of --checkpoint-every (their
 * times against the prediction from the dirty bytes at the measured write
 * rate, the full copy, the step time with them), and the report as a
 * table or one JSON object (docs/optimizer.md#tier-bench-step lists every
 * key).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_step.h"
#include "json_out.h"

typedef double (*step_get)(const struct step_record *r);

static double get_step(const struct step_record *r) { return r->res.step_s; }
static double get_wall(const struct step_record *r) { return r->wall_s; }
static double get_stall(const struct step_record *r) { return r->res.stall_s; }
static double get_cstall(const struct step_record *r) { return r->res.cpu_stall_s; }
static double get_gstall(const struct step_record *r) { return r->res.gpu_stall_s; }
static double get_rd(const struct step_record *r) { return (double)r->res.nvme_read_bytes; }
static double get_wr(const struct step_record *r) { return (double)r->res.nvme_write_bytes; }
static double get_trd(const struct step_record *r) { return (double)r->tier_read; }
static double get_twr(const struct step_record *r) { return (double)r->tier_written; }
static double get_h2d(const struct step_record *r) { return (double)r->res.h2d_bytes; }
static double get_d2h(const struct step_record *r) { return (double)r->res.d2h_bytes; }
static double get_rbps(const struct step_record *r) { return r->res.nvme_read_Bps; }
static double get_wbps(const struct step_record *r) { return r->res.nvme_write_Bps; }
static double get_cpu(const struct step_record *r) { return r->res.offload_fraction; }
static double get_norm(const struct step_record *r) { return r->res.grad_norm; }
static double get_coll(const struct step_record *r) { return (double)r->res.collectives; }
static double get_cbytes(const struct step_record *r) { return (double)r->res.comm_bytes; }
static double get_comm(const struct step_record *r) { return r->res.comm_s; }
static double get_cwait(const struct step_record *r) { return r->res.comm_wait_s; }
static double get_tries(const struct step_record *r) { return (double)r->tries; }

/* The per-step arrays of the JSON object, in order. */
static const struct {
	const char *key;
	step_get get;
} step_arrays[] = {
	{ "step_s", get_step },
	{ "wall_s", get_wall },
	{ "stall_s", get_stall },
	{ "cpu_stall_s", get_cstall },
	{ "gpu_stall_s", get_gstall },
	{ "nvme_read_bytes", get_rd },
	{ "nvme_write_bytes", get_wr },
	{ "nvme_tier_read_bytes", get_trd },
	{ "nvme_tier_write_bytes", get_twr },
	{ "h2d_bytes", get_h2d },
	{ "d2h_bytes", get_d2h },
	{ "nvme_read_Bps", get_rbps },
	{ "nvme_write_Bps", get_wbps },
	{ "offload_fraction", get_cpu },
	{ "grad_norm", get_norm },
	{ "collectives", get_coll },
	{ "comm_bytes", get_cbytes },
	{ "comm_s", get_comm },
	{ "comm_wait_s", get_cwait },
	{ "tries", get_tries },
};

/* The median of a field over the steps counted. */
static double med_of(const struct step_record *rec, uint64_t first, uint64_t n, step_get get)
{
	double *v = malloc((n - first) * sizeof(*v)), r;

	if (!v)
		return get(&rec[n - 1]);
	for (uint64_t i = first; i < n; i++)
		v[i - first] = get(&rec[i]);
	r = median(v, n - first);
	free(v);
	return r;
}

uint64_t step_first_counted(const struct step_opts *o)
{
	return o->steps >= 3 ? 1 : 0;
}

void step_bytes(const struct step_opts *o, const struct step_record *rec, double *rd_b,
		double *wr_b)
{
	*rd_b = med_of(rec, step_first_counted(o), o->steps, get_rd);
	*wr_b = med_of(rec, step_first_counted(o), o->steps, get_wr);
}

void step_hbm_medians(const struct step_opts *o, const struct step_record *rec, double *h2d_b,
		      double *d2h_b, double *offload_fraction)
{
	*h2d_b = med_of(rec, step_first_counted(o), o->steps, get_h2d);
	*d2h_b = med_of(rec, step_first_counted(o), o->steps, get_d2h);
	*offload_fraction = med_of(rec, step_first_counted(o), o->steps, get_cpu);
}

/* The figures of the steps counted. */
struct step_figs {
	uint64_t first;
	double step_s, rd_b, wr_b;
	double stall, cstall, gstall;     /* over the step time */
	double cpu, h2d, d2h;             /* medians */
	const struct tier_step_result *last;
	const char *hbm;                  /* the HBM tier's backend */
};

static void step_figs(const struct step_opts *o, const struct step_setup *su,
		      const struct step_record *rec, bool has_hbm, struct step_figs *f)
{
	double steps_sum = 0;

	f->first = step_first_counted(o);
	f->step_s = med_of(rec, f->first, o->steps, get_step);
	step_bytes(o, rec, &f->rd_b, &f->wr_b);
	f->stall = f->cstall = f->gstall = 0;
	for (uint64_t k = f->first; k < o->steps; k++) {
		f->stall += rec[k].res.stall_s;
		f->cstall += rec[k].res.cpu_stall_s;
		f->gstall += rec[k].res.gpu_stall_s;
		steps_sum += rec[k].res.step_s;
	}
	f->stall = steps_sum > 0 ? f->stall / steps_sum : 0;
	f->cstall = steps_sum > 0 ? f->cstall / steps_sum : 0;
	f->gstall = steps_sum > 0 ? f->gstall / steps_sum : 0;
	f->cpu = med_of(rec, f->first, o->steps, get_cpu);
	f->h2d = med_of(rec, f->first, o->steps, get_h2d);
	f->d2h = med_of(rec, f->first, o->steps, get_d2h);
	f->last = &rec[o->steps - 1].res;
	f->hbm = !has_hbm ? "none" : su->hbm_backend ? su->hbm_backend : "cuda";
}

/* The checkpoints' figures (--checkpoint-every). */
struct ckpt_figs {
	uint64_t n;                       /* checkpoints */
	double med_s, max_s;              /* over all of them */
	double med_written, med_table;    /* bytes: NVMe tier written, object table */
	double write_Bps;                 /* the NVMe write rate measured in this run */
	double pred_s, overhead_s;        /* med_written / write_Bps; med_s - pred_s */
	double ratio;                     /* med_s / the full copy's time */
	/* Over the steps counted: the median step time with the checkpoint
	 * added to the step it follows, and without; the mean (amortized)
	 * likewise. */
	double step_with_s, step_alone_s, amort_with_s, amort_alone_s;
};

static double get_step_ckpt(const struct step_record *r)
{
	return r->res.step_s + (r->ckpt ? r->ckpt_s : 0);
}

static void ckpt_figs(const struct step_opts *o, const struct step_nvme *nv,
		      const struct step_store_summary *st, const struct step_record *rec,
		      uint64_t first, struct ckpt_figs *c)
{
	double *t = calloc(o->steps, sizeof(*t)), *w = calloc(o->steps, sizeof(*w));
	double *tb = calloc(o->steps, sizeof(*tb)), sum_step = 0, sum_ckpt = 0;

	*c = (struct ckpt_figs){ 0 };
	for (uint64_t k = 0; k < o->steps && t && w && tb; k++) {
		if (!rec[k].ckpt)
			continue;
		t[c->n] = rec[k].ckpt_s;
		w[c->n] = (double)rec[k].ckpt_written;
		tb[c->n++] = (double)rec[k].ckpt_table;
	}
	if (c->n) {
		c->med_s = median(t, c->n);
		c->max_s = t[0];
		for (uint64_t i = 1; i < c->n; i++)
			c->max_s = t[i] > c->max_s ? t[i] : c->max_s;
		c->med_written = median(w, c->n);
		c->med_table = median(tb, c->n);
	}
	c->write_Bps = nv->write_Bps;
	c->pred_s = c->write_Bps > 0 ? c->med_written / c->write_Bps : 0;
	c->overhead_s = c->med_s - c->pred_s;
	c->ratio = st->export_s > 0 ? c->med_s / st->export_s : 0;
	for (uint64_t k = first; k < o->steps; k++) {
		sum_step += rec[k].res.step_s;
		sum_ckpt += rec[k].ckpt ? rec[k].ckpt_s : 0;
	}
	c->step_with_s = med_of(rec, first, o->steps, get_step_ckpt);
	c->step_alone_s = med_of(rec, first, o->steps, get_step);
	c->amort_with_s = (sum_step + sum_ckpt) / (double)(o->steps - first);
	c->amort_alone_s = sum_step / (double)(o->steps - first);
	free(t);
	free(w);
	free(tb);
}

/* ---------------------------------------------------------------- JSON */

/* "KEY": [GB/s of each of the @n passes of @size bytes] */
static void print_pass_rates(const char *key, const double *pass_s, unsigned n, uint64_t size)
{
	printf("\"%s\": [", key);
	for (unsigned i = 0; i < n; i++)
		printf("%s%.4f", i ? ", " : "", (double)size / pass_s[i] * 1e-9);
	printf("]");
}

/* The measurements and the bounds. */
/* What sets the bound: "nvme", "pcie" (the HBM-resident regime's link)
 * or "update". */
static const char *bound_by(const struct step_bound *b)
{
	if (b->hbm_regime && b->link.link_s >= b->update_s && b->link.link_s >= b->nvme_s)
		return "pcie";
	return b->nvme_s >= b->update_s ? "nvme" : "update";
}

/* The HBM-resident regime's part of the JSON (null without it). */
static void print_json_link(const struct step_bound *b)
{
	const struct step_link *l = &b->link;

	if (!b->hbm_regime) {
		printf(", \"regime\": \"nvme\", \"link\": null");
		return;
	}
	printf(", \"regime\": \"hbm\", \"link\": {\"h2d_GBps\": %.4f, \"d2h_GBps\": %.4f"
	       ", \"h2d_both_GBps\": %.4f, \"d2h_both_GBps\": %.4f"
	       ", \"h2d_bytes_per_step\": %.0f, \"d2h_bytes_per_step\": %.0f, \"link_s\": %.6f"
	       ", \"gpu_share\": %.4f, \"gpu_update_s\": %.6f}",
	       l->h2d_Bps * 1e-9, l->d2h_Bps * 1e-9, l->h2d_both_Bps * 1e-9, l->d2h_both_Bps * 1e-9,
	       l->h2d_b, l->d2h_b, l->link_s, l->gpu_share, l->gpu_update_s);
}

static void print_json_bound(const struct step_setup *su, const struct step_nvme *nv,
			     const struct step_bound *b, const struct step_figs *f)
{
	const struct bench_io_result *io = &nv->io, *io2 = &nv->io2;

	printf("{\"step_s\": %.6f, \"bound_s\": %.6f, \"efficiency\": %.4f"
	       ", \"stall_frac\": %.4f, \"cpu_stall_frac\": %.4f, \"gpu_stall_frac\": %.4f"
	       ", \"nvme_read_bytes_per_step\": %.0f"
	       ", \"nvme_write_bytes_per_step\": %.0f, \"bound_by\": \"%s\""
	       ", \"nvme_s\": %.6f, \"update_s\": %.6f, \"read_GBps\": %.4f"
	       ", \"write_GBps\": %.4f, \"io_bs\": %" PRIu64 ", \"io_qd\": %" PRIu64
	       ", \"io_size\": %" PRIu64 ", \"io_passes\": %u",
	       f->step_s, b->bound_s, b->bound_s / f->step_s, f->stall, f->cstall, f->gstall,
	       f->rd_b, f->wr_b, bound_by(b), b->nvme_s,
	       b->update_s, nv->read_Bps * 1e-9, nv->write_Bps * 1e-9, su->io_bs, su->io_qd,
	       su->io_size, io->passes);
	printf(", ");
	print_pass_rates("io_read_GBps_passes", io->read_pass_s, io->passes, su->io_size);
	printf(", ");
	print_pass_rates("io_write_GBps_passes", io->write_pass_s, io->passes, su->io_size);
	if (b->mixed_Bps > 0) {
		printf(", \"mixed_bound_s\": %.6f, \"mixed_efficiency\": %.4f"
		       ", \"mixed_nvme_s\": %.6f, \"mixed_GBps\": %.4f"
		       ", \"mixed_read_share\": %.4f, ",
		       b->mixed_bound_s, b->mixed_bound_s / f->step_s, b->mixed_nvme_s,
		       b->mixed_Bps * 1e-9, b->mixed_read_share);
		print_pass_rates("io_mixed_GBps_passes", io2->mixed_pass_s, io2->passes, su->io_size);
	} else {
		printf(", \"mixed_bound_s\": null, \"mixed_efficiency\": null"
		       ", \"mixed_nvme_s\": null, \"mixed_GBps\": null"
		       ", \"mixed_read_share\": null, \"io_mixed_GBps_passes\": []");
	}
}

/* "checkpoints": the figures and each checkpoint, or null without
 * --checkpoint-every. */
static void print_json_ckpt(const struct step_opts *o, const struct step_record *rec,
			    const struct step_store_summary *st, const struct ckpt_figs *c)
{
	static const char *const keys[] = { "after_step", "s", "dirty_bytes", "table_bytes",
					     "generation" };

	if (!o->checkpoint_every) {
		printf(", \"checkpoints\": null");
		return;
	}
	printf(", \"checkpoints\": {\"every\": %" PRIu64 ", \"count\": %" PRIu64
	       ", \"median_s\": %.6f, \"max_s\": %.6f, \"median_dirty_bytes\": %.0f"
	       ", \"median_table_bytes\": %.0f, \"write_GBps\": %.4f, \"predicted_s\": %.6f"
	       ", \"overhead_s\": %.6f, \"full_copy_s\": %.6f, \"full_copy_bytes\": %" PRIu64
	       ", \"ratio\": %.6f, \"step_s_with\": %.6f, \"step_s_alone\": %.6f"
	       ", \"amortized_step_s_with\": %.6f, \"amortized_step_s_alone\": %.6f",
	       o->checkpoint_every, c->n, c->med_s, c->max_s, c->med_written, c->med_table,
	       c->write_Bps * 1e-9, c->pred_s, c->overhead_s, st->export_s, st->export_bytes,
	       c->ratio, c->step_with_s, c->step_alone_s, c->amort_with_s, c->amort_alone_s);
	for (size_t a = 0; a < sizeof(keys) / sizeof(keys[0]); a++) {
		bool any = false;

		printf(", \"%s\": [", keys[a]);
		for (uint64_t k = 0; k < o->steps; k++) {
			const struct step_record *r = &rec[k];

			if (!r->ckpt)
				continue;
			printf("%s", any ? ", " : "");
			any = true;
			switch (a) {
			case 0: printf("%" PRIu64, k + 1); break;
			case 1: printf("%.9g", r->ckpt_s); break;
			case 2: printf("%" PRIu64, r->ckpt_written); break;
			case 3: printf("%" PRIu64, r->ckpt_table); break;
			default: printf("%" PRIu64, r->ckpt_gen); break;
			}
		}
		printf("]");
	}
	printf("}");
}

struct world_figs;
static void print_json_world(const struct step_opts *o, const struct step_setup *su,
			     const struct world_figs *wf);
static bool world_differs(const struct world_figs *wf);

/* The calls of the steps beyond one each: the steps run again after a
 * transient failure. */
static uint64_t step_retries(const struct step_opts *o, const struct step_record *rec)
{
	uint64_t n = 0;

	for (uint64_t k = 0; k < o->steps; k++)
		n += rec[k].tries > 1 ? rec[k].tries - 1 : 0;
	return n;
}

static void print_json(const struct step_opts *o, const struct step_setup *su,
		       const struct step_record *rec, const struct step_nvme *nv,
		       const struct step_bound *b, const struct step_store_summary *st,
		       const struct step_figs *f, const struct ckpt_figs *c,
		       const struct world_figs *wf)
{
	bool emulated = st->has_hbm && su->hbm_backend;

	print_json_bound(su, nv, b, f);
	print_json_link(b);
	printf(", \"params\": %d, \"numel\": %" PRIu64 ", \"state_bytes\": %" PRIu64
	       ", \"moments\": \"%s\", \"copy_out\": \"%s\", \"grads\": \"%s\", \"dram_bytes\": %" PRIu64
	       ", \"dram_capped\": %s, \"manifest_dram_bytes\": %" PRIu64
	       ", \"shard_size\": %" PRIu64 ", \"lookahead\": %" PRIu64
	       ", \"manifest_lookahead\": %" PRIu64
	       ", \"hbm_backend\": \"%s\", \"hbm_capacity\": %" PRIu64
	       ", \"hbm_bandwidth\": %.4g, \"offload_fraction\": \"%s\""
	       ", \"threads\": %u, \"isa\": \"%s\", \"manifest\": ",
	       STEP_NPARAMS, su->numel, su->state_bytes, dtype_name((int)su->moments),
	       dtype_name(o->copy_out), step_grads_name(su->grads), su->dram, su->dram_capped ? "true" : "false",
	       su->manifest_dram, su->shard_size, su->lookahead, su->manifest_lookahead, f->hbm,
	       emulated ? su->hbm_capacity : 0, emulated ? o->hbm_bandwidth : 0.0,
	       su->offload_text, su->threads, tier_adam_isa());
	json_out_str(stdout, su->source);
	print_json_ckpt(o, rec, st, c);
	printf(", \"offload_fraction\": %.4f, \"cpu_shards\": %u, \"gpu_shards\": %u"
	       ", \"h2d_bytes_per_step\": %.0f, \"d2h_bytes_per_step\": %.0f"
	       ", \"dram_hits\": %" PRIu64 ", \"dram_misses\": %" PRIu64
	       ", \"nsteps\": %" PRIu64 ", \"steps_counted\": %" PRIu64
	       ", \"verified\": %s",
	       f->cpu, f->last->cpu_shards, f->last->gpu_shards, f->h2d, f->d2h,
	       st->ss.level[TIER_DRAM].hits, st->ss.level[TIER_DRAM].misses, o->steps,
	       o->steps - f->first, o->verify && !(wf && world_differs(wf)) ? "true" : "false");
	if (st->have_digest)
		printf(", \"state_digest\": \"%016" PRIx64 "\"", st->state_digest);
	else
		printf(", \"state_digest\": null");
	printf(", \"retries\": %" PRIu64 ", \"steps\": {", step_retries(o, rec));
	for (size_t a = 0; a < sizeof(step_arrays) / sizeof(step_arrays[0]); a++) {
		printf("%s\"%s\": [", a ? ", " : "", step_arrays[a].key);
		for (uint64_t i = 0; i < o->steps; i++)
			printf("%s%.9g", i ? ", " : "", step_arrays[a].get(&rec[i]));
		printf("]");
	}
	printf("}");
	if (wf)
		print_json_world(o, su, wf);
	else
		printf(", \"comm\": null");
	printf("}\n");
}

/* ---------------------------------------------------------------- text */

/* The header: the model, the store, the measurements. */
static void print_text_setup(const struct step_opts *o, const struct step_setup *su,
			     const struct step_nvme *nv, const struct step_bound *b, bool has_hbm)
{
	char a[32], c[32];

	printf("tier-bench step: %d parameters, %" PRIu64 " elements, state %" PRIu64
	       " bytes (%s), DRAM %" PRIu64 " bytes (%s%s), %" PRIu64 " steps\n",
	       STEP_NPARAMS, su->numel, su->state_bytes, human(su->state_bytes, a, sizeof(a)),
	       su->dram, human(su->dram, c, sizeof(c)), su->dram_capped ? ", capped at 1 GiB" : "",
	       o->steps);
	if (su->dram_capped)
		printf("  manifest %s; its DRAM tier (%s) capped at 1 GiB; --dram sets it\n",
		       su->source, human(su->manifest_dram, a, sizeof(a)));
	else
		printf("  manifest %s\n", su->source);
	if (su->block_bytes)
		printf("  moments %s (%zu state bytes per element and %u per %d-element block),"
		       " copy-out %s, gradients and copies in %s memory\n", dtype_name((int)su->moments),
		       su->bpe, su->block_bytes, TIER_Q8_BLOCK, dtype_name(o->copy_out),
		       step_grads_name(su->grads));
	else
		printf("  moments %s (%zu state bytes per element), copy-out %s, gradients and"
		       " copies in %s memory\n", dtype_name((int)su->moments), su->bpe,
		       dtype_name(o->copy_out), step_grads_name(su->grads));
	printf("  shard %" PRIu64 " bytes, lookahead %" PRIu64 " bytes (the manifest's %"
	       PRIu64 ", scaled with DRAM), %u threads (isa %s), offload fraction %s\n",
	       su->shard_size, su->lookahead, su->manifest_lookahead, su->threads,
	       tier_adam_isa(), su->offload_text);
	if (!has_hbm)
		printf("  HBM backend: none (every shard is updated on the CPU)\n");
	else if (su->hbm_backend)
		printf("  HBM backend: %s (emulated device in host memory, %s, %.1f GB/s per"
		       " direction; its share of the update runs on the CPU)\n",
		       su->hbm_backend, human(su->hbm_capacity, a, sizeof(a)),
		       o->hbm_bandwidth * 1e-9);
	else
		printf("  HBM backend: cuda (the manifest's GPU)\n");
	if (su->w->active)
		printf("  partitioned over %d rank%s (%s): rank %d's piece %" PRIu64 " elements,"
		       " state %" PRIu64 " bytes (%s); the figures down to the table of ranks are"
		       " rank %d's\n", su->w->world, su->w->world == 1 ? "" : "s", su->w->backend, su->w->rank, su->part_elems,
		       su->part_state_bytes, human(su->part_state_bytes, a, sizeof(a)), su->w->rank);
	if (su->have_nvme)
		printf("  NVMe measured in this run (%s requests, %" PRIu64 " in flight, %s,"
		       " fastest of %u passes before and after the steps, averaged):"
		       " read %.3f GB/s, write %.3f GB/s\n",
		       human(su->io_bs, a, sizeof(a)), su->io_qd, human(su->io_size, c, sizeof(c)),
		       (unsigned)o->io_passes, nv->read_Bps * 1e-9, nv->write_Bps * 1e-9);
	else
		printf("  no NVMe tier in the manifest: DRAM is the home\n");
	printf("  in-memory update (tier_adam_step, %" PRIu64 " elements%s, %u threads): "
	       "%.4f s (median of %" PRIu64 ")\n", su->w->active ? su->part_elems : su->numel,
	       su->w->active ? ": this rank's piece, every rank at once" : "", su->threads,
	       b->update_s, o->update_runs);
}

/* "12 ms", "3.4 ms", "1.25 s" (negative: its magnitude). */
static const char *ms_text(double s, char *buf, size_t len)
{
	double a = s < 0 ? -s : s;

	if (a >= 10)
		snprintf(buf, len, "%.1f s", a);
	else if (a >= 1)
		snprintf(buf, len, "%.2f s", a);
	else if (a >= 0.01)
		snprintf(buf, len, "%.0f ms", a * 1e3);
	else
		snprintf(buf, len, "%.1f ms", a * 1e3);
	return buf;
}

/* The checkpoints' lines of the table. */
static void print_text_ckpt(const struct step_opts *o, const struct step_store_summary *st,
			    const struct ckpt_figs *c)
{
	char a[32], b[32];

	printf("  %-20s %" PRIu64 " (after every %" PRIu64 " steps: tier_optim_checkpoint)\n",
	       "checkpoints", c->n, o->checkpoint_every);
	printf("  %-20s %10.4f s   median (max %.4f s)\n", "checkpoint time", c->med_s, c->max_s);
	printf("  %-20s %.0f B (%s) median written home; object table %.0f B\n",
	       "checkpoint writes", c->med_written, human((uint64_t)c->med_written, a, sizeof(a)),
	       c->med_table);
	printf("  %-20s %10.4f s   the dirty bytes at the write rate measured in this run"
	       " (%.3f GB/s)\n", "checkpoint predicted", c->pred_s, c->write_Bps * 1e-9);
	printf("  %-20s %10.4f s   median time - prediction (the commit: table and syncs)\n",
	       "checkpoint overhead", c->overhead_s);
	printf("  %-20s %10.4f s   %" PRIu64 " B (%s, tier_optim_export); checkpoint / full"
	       " copy %.4f\n", "full copy", st->export_s, st->export_bytes,
	       human(st->export_bytes, b, sizeof(b)), c->ratio);
	printf("  %-20s %10.4f s   median with the checkpoint added to the step it follows"
	       " (%.4f s alone); mean %.4f s (%.4f s alone)\n", "step + checkpoint",
	       c->step_with_s, c->step_alone_s, c->amort_with_s, c->amort_alone_s);
}

/* What a checkpoint costs, in one plain sentence. */
static void print_ckpt_summary(const struct step_setup *su, const struct step_store_summary *st,
			       const struct ckpt_figs *c)
{
	char t[32], d[32], p[32], ov[32], sb[32], ft[32], commit[160];
	double ratio = c->med_s > 0 ? st->export_s / c->med_s : 0;

	human((uint64_t)c->med_written, d, sizeof(d));
	ms_text(c->med_s, t, sizeof(t));
	ms_text(c->pred_s, p, sizeof(p));
	ms_text(c->overhead_s, ov, sizeof(ov));
	human(su->state_bytes, sb, sizeof(sb));
	ms_text(st->export_s, ft, sizeof(ft));
	if (c->overhead_s >= 0)
		snprintf(commit, sizeof(commit), "so the commit itself added %s", ov);
	else
		snprintf(commit, sizeof(commit), "so the commit itself was lost in the noise (the"
			 " checkpoint took %s less)", ov);
	printf("A checkpoint took %s: %s of dirty state at the measured %.1f GB/s is %s, %s;"
	       " a full copy of the %s state took %s (%.*fx).\n", t, d, c->write_Bps * 1e-9, p,
	       commit, sb, ft, ratio < 10 ? 1 : 0, ratio);
}

/* The last line: what the efficiency means, in one plain sentence. */
static void print_summary(const struct step_bound *b, const struct step_figs *f)
{
	bool nvme = b->nvme_s >= b->update_s;

	if (b->hbm_regime) {
		bool link = strcmp(bound_by(b), "pcie") == 0;

		printf("In short: a step took %.3f s, and %s takes %.3f s, so the steps ran at %.0f%%"
		       " of what %s allows: the run was %s-bound (%s takes %.3f s).\n",
		       f->step_s, link ? "moving its bytes over the host-device link at the rates"
					 " measured" : "the optimizer update alone",
		       b->bound_s, 100 * b->bound_s / f->step_s, link ? "the link" : "the update",
		       link ? "link" : "update", link ? "the update alone" : "the link",
		       link ? b->update_s : b->link.link_s);
		return;
	}

	printf("In short: a step took %.3f s, and %s takes %.3f s, so the steps ran at %.0f%%"
	       " of what %s allows: the run was %s-bound (%s takes %.3f s).\n",
	       f->step_s, nvme ? "moving its bytes over NVMe at the rates measured in this run"
				: "the optimizer update in memory alone",
	       b->bound_s, 100 * b->bound_s / f->step_s, nvme ? "the disk" : "the CPU",
	       nvme ? "NVMe" : "update",
	       nvme ? "the update in memory alone" : "moving its bytes over NVMe",
	       nvme ? b->update_s : b->nvme_s);
}

static void print_text_world(const struct step_opts *o, const struct step_setup *su,
			     const struct world_figs *wf);

static void print_text(const struct step_opts *o, const struct step_setup *su,
		       const struct step_record *rec, const struct step_nvme *nv,
		       const struct step_bound *b, const struct step_store_summary *st,
		       const struct step_figs *f, const struct ckpt_figs *c,
		       const struct world_figs *wf)
{
	char c1[32], c2[32];

	print_text_setup(o, su, nv, b, st->has_hbm);
	if (f->first)
		snprintf(c1, sizeof(c1), "steps 2..%" PRIu64, o->steps);
	else
		snprintf(c1, sizeof(c1), "all %" PRIu64 " steps", o->steps);
	printf("  %-20s %10.4f s   median of %s\n", "step time", f->step_s, c1);
	if (b->hbm_regime)
		printf("  %-20s %10.4f s   %s bound (HBM-resident: no NVMe); link %.4f s (h2d %.0f B"
		       " at %.2f GB/s, d2h %.0f B at %.2f GB/s, both ways at once; alone %.2f and"
		       " %.2f), update %.4f s (GPU lane %.0f%% of the elements)\n", "bound", b->bound_s,
		       strcmp(bound_by(b), "pcie") == 0 ? "link" : "update", b->link.link_s,
		       b->link.h2d_b, b->link.h2d_both_Bps * 1e-9, b->link.d2h_b,
		       b->link.d2h_both_Bps * 1e-9, b->link.h2d_Bps * 1e-9, b->link.d2h_Bps * 1e-9,
		       b->update_s, 100 * b->link.gpu_share);
	else
		printf("  %-20s %10.4f s   %s bound; NVMe %.4f s, update %.4f s\n", "bound",
		       b->bound_s, b->nvme_s >= b->update_s ? "NVMe" : "update", b->nvme_s,
		       b->update_s);
	printf("  %-20s %10.4f\n", "efficiency", b->bound_s / f->step_s);
	if (b->mixed_Bps > 0)
		printf("  %-20s %10.4f s   efficiency %.4f; NVMe %.4f s at %.3f GB/s,"
		       " reads and writes in flight together (%.0f%% reads)\n",
		       "mixed bound", b->mixed_bound_s, b->mixed_bound_s / f->step_s,
		       b->mixed_nvme_s, b->mixed_Bps * 1e-9, 100 * b->mixed_read_share);
	printf("  %-20s %10.4f     stall_s / step_s (CPU lane %.4f, HBM lane %.4f)\n",
	       "stall share", f->stall, f->cstall, f->gstall);
	printf("  %-20s read %.0f B (%s), write %.0f B (%s)\n", "NVMe per step", f->rd_b,
	       human((uint64_t)f->rd_b, c1, sizeof(c1)), f->wr_b,
	       human((uint64_t)f->wr_b, c2, sizeof(c2)));
	printf("  %-20s read %.3f GB/s, write %.3f GB/s (medians of the steps'"
	       " bytes over step time)\n", "NVMe achieved",
	       med_of(rec, f->first, o->steps, get_rbps) * 1e-9,
	       med_of(rec, f->first, o->steps, get_wbps) * 1e-9);
	printf("  %-20s offload_fraction %.3f (last step: %u shards on the CPU, %u on the"
	       " HBM tier)\n", "CPU/GPU split", f->cpu, f->last->cpu_shards, f->last->gpu_shards);
	printf("  %-20s h2d %.0f B, d2h %.0f B\n", "HBM per step", f->h2d, f->d2h);
	if (o->checkpoint_every)
		print_text_ckpt(o, st, c);
	printf("  %4s %9s %9s %9s %14s %14s %6s %14s %14s\n", "step", "step_s", "wall_s",
	       "stall_s", "nvme_read", "nvme_write", "cpu", "h2d", "d2h");
	for (uint64_t k = 0; k < o->steps; k++) {
		const struct tier_step_result *r = &rec[k].res;

		printf("  %4" PRIu64 " %9.4f %9.4f %9.4f %14" PRIu64 " %14" PRIu64
		       " %6.3f %14" PRIu64 " %14" PRIu64 "%s", k + 1, r->step_s,
		       rec[k].wall_s, r->stall_s, r->nvme_read_bytes, r->nvme_write_bytes,
		       r->offload_fraction, r->h2d_bytes, r->d2h_bytes, r->applied ? "" : "  skipped");
		if (rec[k].tries > 1)
			printf("  run %u times (a transient error)", rec[k].tries);
		if (rec[k].ckpt)
			printf("  checkpoint %.4f s, %" PRIu64 " B written", rec[k].ckpt_s,
			       rec[k].ckpt_written);
		printf("\n");
	}
	if (wf) {
		print_text_world(o, su, wf);
		return;
	}
	if (o->verify)
		printf("  every parameter's state and copy-out equal tier_adam_step in"
		       " memory, bit for bit%s\n", o->checkpoint_every ? " (checkpoints taken)" : "");
	if (o->checkpoint_every)
		print_ckpt_summary(su, st, c);
	print_summary(b, f);
}

void step_report(const struct step_opts *o, const struct step_setup *su,
		 const struct step_record *rec, const struct step_nvme *nv,
		 const struct step_bound *b, const struct step_store_summary *st)
{
	struct step_figs f;
	struct ckpt_figs c;

	step_figs(o, su, rec, st->has_hbm, &f);
	ckpt_figs(o, nv, st, rec, f.first, &c);
	if (o->json)
		print_json(o, su, rec, nv, b, st, &f, &c, NULL);
	else
		print_text(o, su, rec, nv, b, st, &f, &c, NULL);
}

/* ------------------------------------------------- a partitioned run */

/*
 * The world's figures, from every rank's (rank 0 gathers them):
 *   step time     per step the slowest rank's (the step of a job ends when
 *                 its last rank's does), then the median over the steps
 *                 counted;
 *   NVMe bytes    per step the sum over the ranks, then the median;
 *   bound         the largest of the ranks' bounds (each its own bytes at
 *                 its own NVMe rate, measured with every rank at once, and
 *                 its own piece's update): no rank can finish before its
 *                 bound, so neither can the world's step;
 *   collectives   summed over the ranks and the steps counted: time in
 *                 flight, time waited, and overlap = 1 - waited / in flight;
 *                 reported per rank and step (the sums over ranks x steps).
 */
struct world_figs {
	int world;
	const struct step_rank_figs *rf;   /* [world] */
	const struct step_record *rec;     /* [world][steps] */
	double step_s, rd_b, wr_b, comm_bytes;
	double bound_s, eff;
	int bound_rank;
	double comm_s, wait_s, sum_step_s; /* sums over ranks and steps counted */
	double per;                        /* ranks x steps counted */
	int differs;                       /* ranks whose --verify found a difference */
};

static bool world_differs(const struct world_figs *wf)
{
	return wf->differs > 0;
}

static double overlap_of(double comm_s, double wait_s)
{
	return comm_s > 0 ? 1.0 - wait_s / comm_s : 0.0;
}

static void rank_figs(const struct step_opts *o, const struct step_setup *su,
		      const struct step_record *rec, const struct step_nvme *nv,
		      const struct step_bound *b, int verified, struct step_rank_figs *rf)
{
	uint64_t first = step_first_counted(o);

	memset(rf, 0, sizeof(*rf));
	rf->rank = su->w->rank;
	rf->verified = verified;
	rf->part_elems = su->part_elems;
	rf->part_state_bytes = su->part_state_bytes;
	rf->step_s = med_of(rec, first, o->steps, get_step);
	step_bytes(o, rec, &rf->rd_b, &rf->wr_b);
	rf->bound_s = b->bound_s;
	rf->nvme_s = b->nvme_s;
	rf->update_s = b->update_s;
	rf->read_Bps = nv->read_Bps;
	rf->write_Bps = nv->write_Bps;
	rf->mixed_bound_s = b->mixed_Bps > 0 ? b->mixed_bound_s : 0;
	rf->collectives = med_of(rec, first, o->steps, get_coll);
	rf->comm_bytes = med_of(rec, first, o->steps, get_cbytes);
	rf->comm_s = med_of(rec, first, o->steps, get_comm);
	rf->comm_wait_s = med_of(rec, first, o->steps, get_cwait);
	for (uint64_t k = first; k < o->steps; k++) {
		rf->sum_step_s += rec[k].res.step_s;
		rf->stall += rec[k].res.stall_s;
		rf->sum_comm_s += rec[k].res.comm_s;
		rf->sum_wait_s += rec[k].res.comm_wait_s;
	}
	rf->stall = rf->sum_step_s > 0 ? rf->stall / rf->sum_step_s : 0;
}

/* The world's figures from the gathered ones.  0, or 1 out of memory. */
static int world_figs(const struct step_opts *o, const struct step_rank_figs *rf,
		      const struct step_record *all, int world, struct world_figs *wf)
{
	uint64_t first = step_first_counted(o), n = o->steps - first;
	double *st = calloc(n, sizeof(double)), *rd = calloc(n, sizeof(double));
	double *wr = calloc(n, sizeof(double)), *cb = calloc(n, sizeof(double));
	int ret = 1;

	memset(wf, 0, sizeof(*wf));
	wf->world = world;
	wf->rf = rf;
	wf->rec = all;
	if (!st || !rd || !wr || !cb) {
		fprintf(stderr, STEP_WHO ": out of memory\n");
		goto out;
	}
	for (uint64_t k = first; k < o->steps; k++) {
		for (int r = 0; r < world; r++) {
			const struct tier_step_result *res = &all[(size_t)r * o->steps + k].res;

			st[k - first] = res->step_s > st[k - first] ? res->step_s : st[k - first];
			rd[k - first] += (double)res->nvme_read_bytes;
			wr[k - first] += (double)res->nvme_write_bytes;
			cb[k - first] += (double)res->comm_bytes;
		}
	}
	wf->step_s = median(st, n);
	wf->rd_b = median(rd, n);
	wf->wr_b = median(wr, n);
	wf->comm_bytes = median(cb, n);
	for (int r = 0; r < world; r++) {
		if (r == 0 || rf[r].bound_s > wf->bound_s) {
			wf->bound_s = rf[r].bound_s;
			wf->bound_rank = r;
		}
		wf->comm_s += rf[r].sum_comm_s;
		wf->wait_s += rf[r].sum_wait_s;
		wf->sum_step_s += rf[r].sum_step_s;
		wf->differs += rf[r].verified == 0;
	}
	wf->eff = wf->step_s > 0 ? wf->bound_s / wf->step_s : 0;
	wf->per = (double)world * (double)n;
	ret = 0;
out:
	free(st);
	free(rd);
	free(wr);
	free(cb);
	return ret;
}

static void print_json_world(const struct step_opts *o, const struct step_setup *su,
			     const struct world_figs *wf)
{
	uint64_t first = step_first_counted(o);

	printf(", \"comm\": {\"backend\": \"%s\", \"world_size\": %d, \"numel\": %" PRIu64
	       ", \"state_bytes\": %" PRIu64 ", \"nvme_measured_together\": true, \"ranks\": [",
	       su->w->backend, wf->world, su->numel, su->state_bytes);
	for (int r = 0; r < wf->world; r++) {
		const struct step_rank_figs *f = &wf->rf[r];
		const struct step_record *rec = wf->rec + (size_t)r * o->steps;

		printf("%s{\"rank\": %d, \"part_elems\": %" PRIu64 ", \"part_state_bytes\": %"
		       PRIu64 ", \"step_s\": %.6f, \"nvme_read_bytes_per_step\": %.0f"
		       ", \"nvme_write_bytes_per_step\": %.0f, \"bound_s\": %.6f"
		       ", \"bound_by\": \"%s\", \"efficiency\": %.4f, \"nvme_s\": %.6f"
		       ", \"update_s\": %.6f, \"read_GBps\": %.4f, \"write_GBps\": %.4f",
		       r ? ", " : "", f->rank, f->part_elems, f->part_state_bytes, f->step_s,
		       f->rd_b, f->wr_b, f->bound_s, f->nvme_s >= f->update_s ? "nvme" : "update",
		       f->step_s > 0 ? f->bound_s / f->step_s : 0, f->nvme_s, f->update_s,
		       f->read_Bps * 1e-9, f->write_Bps * 1e-9);
		if (f->mixed_bound_s > 0)
			printf(", \"mixed_bound_s\": %.6f", f->mixed_bound_s);
		else
			printf(", \"mixed_bound_s\": null");
		printf(", \"stall_frac\": %.4f, \"collectives_per_step\": %.0f"
		       ", \"comm_bytes_per_step\": %.0f, \"comm_s\": %.6f, \"comm_wait_s\": %.6f"
		       ", \"overlap\": %.4f, \"comm_share\": %.4f, \"comm_wait_share\": %.4f"
		       ", \"verified\": %s, \"steps\": {",
		       f->stall, f->collectives, f->comm_bytes, f->comm_s, f->comm_wait_s,
		       overlap_of(f->sum_comm_s, f->sum_wait_s),
		       f->sum_step_s > 0 ? f->sum_comm_s / f->sum_step_s : 0,
		       f->sum_step_s > 0 ? f->sum_wait_s / f->sum_step_s : 0,
		       f->verified < 0 ? "null" : f->verified ? "true" : "false");
		for (size_t a = 0; a < sizeof(step_arrays) / sizeof(step_arrays[0]); a++) {
			printf("%s\"%s\": [", a ? ", " : "", step_arrays[a].key);
			for (uint64_t i = 0; i < o->steps; i++)
				printf("%s%.9g", i ? ", " : "", step_arrays[a].get(&rec[i]));
			printf("]");
		}
		printf("}}");
	}
	printf("], \"world\": {\"step_s\": %.6f, \"step_s_per_step\": [", wf->step_s);
	for (uint64_t k = 0; k < o->steps; k++) {
		double m = 0;

		for (int r = 0; r < wf->world; r++) {
			double v = wf->rec[(size_t)r * o->steps + k].res.step_s;

			m = v > m ? v : m;
		}
		printf("%s%.9g", k ? ", " : "", m);
	}
	printf("], \"nvme_read_bytes_per_step\": %.0f, \"nvme_write_bytes_per_step\": %.0f"
	       ", \"bound_s\": %.6f, \"bound_rank\": %d, \"efficiency\": %.4f"
	       ", \"comm_bytes_per_step\": %.0f, \"comm_s\": %.6f, \"comm_wait_s\": %.6f"
	       ", \"overlap\": %.4f, \"comm_share\": %.4f, \"comm_wait_share\": %.4f"
	       ", \"steps_counted\": %" PRIu64 ", \"verified\": %s}}",
	       wf->rd_b, wf->wr_b, wf->bound_s, wf->bound_rank, wf->eff, wf->comm_bytes,
	       wf->comm_s / wf->per, wf->wait_s / wf->per, overlap_of(wf->comm_s, wf->wait_s),
	       wf->sum_step_s > 0 ? wf->comm_s / wf->sum_step_s : 0,
	       wf->sum_step_s > 0 ? wf->wait_s / wf->sum_step_s : 0, o->steps - first,
	       !o->verify ? "null" : wf->differs ? "false" : "true");
}

static void print_text_world(const struct step_opts *o, const struct step_setup *su,
			     const struct world_figs *wf)
{
	char a[32], c[32];
	const struct step_rank_figs *bf = &wf->rf[wf->bound_rank];
	bool nvme = bf->nvme_s >= bf->update_s;

	printf("  ranks (every phase on every rank at once: they share this node's disk and"
	       " CPUs; NVMe measured with every rank at once too)\n");
	printf("  %4s %12s %9s %10s %10s %9s %6s %6s %5s %10s %8s %8s %7s %6s %6s%s\n", "rank",
	       "piece", "step_s", "read/step", "write/step", "bound_s", "by", "eff", "coll",
	       "comm_B", "comm_s", "wait_s", "overlap", "comm%", "wait%",
	       o->verify ? " verify" : "");
	for (int r = 0; r < wf->world; r++) {
		const struct step_rank_figs *f = &wf->rf[r];

		printf("  %4d %12" PRIu64 " %9.4f %10s %10s %9.4f %6s %6.3f %5.0f %10.0f %8.4f %8.4f"
		       " %7.3f %5.1f%% %5.1f%%%s\n", f->rank, f->part_elems, f->step_s,
		       human((uint64_t)f->rd_b, a, sizeof(a)), human((uint64_t)f->wr_b, c, sizeof(c)),
		       f->bound_s, f->nvme_s >= f->update_s ? "NVMe" : "update",
		       f->step_s > 0 ? f->bound_s / f->step_s : 0, f->collectives, f->comm_bytes,
		       f->comm_s, f->comm_wait_s, overlap_of(f->sum_comm_s, f->sum_wait_s),
		       f->sum_step_s > 0 ? 100 * f->sum_comm_s / f->sum_step_s : 0,
		       f->sum_step_s > 0 ? 100 * f->sum_wait_s / f->sum_step_s : 0,
		       !o->verify ? "" : f->verified ? " equal" : " DIFFERS");
	}
	printf("  (step_s, read/write, coll, comm_B, comm_s, wait_s: medians per step; comm_s"
	       " is the collectives' time in flight, summed, so it can pass the step time;"
	       " wait_s the time the step was blocked on them; overlap = 1 - wait_s/comm_s;"
	       " comm%% and wait%% of the step time)\n");
	printf("  world: %d rank%s, %" PRIu64 " elements, state %s\n", wf->world,
	       wf->world == 1 ? "" : "s", su->numel, human(su->state_bytes, a, sizeof(a)));
	printf("  %-20s %10.4f s   median over the steps of the slowest rank's step\n",
	       "world step time", wf->step_s);
	printf("  %-20s read %.0f B (%s), write %.0f B (%s): every rank's, summed\n",
	       "world NVMe per step", wf->rd_b, human((uint64_t)wf->rd_b, a, sizeof(a)), wf->wr_b,
	       human((uint64_t)wf->wr_b, c, sizeof(c)));
	printf("  %-20s %10.4f s   the largest rank's (rank %d, %s bound)\n", "world bound",
	       wf->bound_s, wf->bound_rank, nvme ? "NVMe" : "update");
	printf("  %-20s %10.4f\n", "world efficiency", wf->eff);
	printf("  %-20s %.0f B per step sent, every rank's; per rank and step in flight"
	       " %.4f s, waited %.4f s (%.1f%% of the ranks' step time), overlap %.3f\n",
	       "collectives", wf->comm_bytes, wf->comm_s / wf->per, wf->wait_s / wf->per,
	       wf->sum_step_s > 0 ? 100 * wf->wait_s / wf->sum_step_s : 0,
	       overlap_of(wf->comm_s, wf->wait_s));
	if (o->verify) {
		if (wf->differs)
			printf("  --verify: %d of %d ranks differ from tier_adam_step in memory"
			       " (their messages above)\n", wf->differs, wf->world);
		else
			printf("  every rank's piece of every parameter's state, and every rank's"
			       " gathered copy-out, equal tier_adam_step in memory, bit for bit\n");
	}
	printf("In short: a world step took %.3f s (the slowest of %d rank%s), and %s takes"
	       " %.3f s, so the steps ran at %.0f%% of what %s allows; the ranks were blocked"
	       " on collectives for %.1f%% of their step time.\n", wf->step_s, wf->world,
	       wf->world == 1 ? "" : "s",
	       nvme ? "moving the busiest rank's bytes over NVMe at the rate it measured with"
		      " every rank at once"
		    : "the busiest rank's update in memory alone",
	       wf->bound_s, wf->eff > 0 ? 100 * wf->eff : 0, nvme ? "the disk" : "the CPU",
	       wf->sum_step_s > 0 ? 100 * wf->wait_s / wf->sum_step_s : 0);
}

int step_report_world(const struct step_opts *o, const struct step_setup *su,
		      const struct step_record *rec, const struct step_nvme *nv,
		      const struct step_bound *b, const struct step_store_summary *st,
		      int verified)
{
	const struct step_world *w = su->w;
	struct step_rank_figs mine, *all_f = NULL;
	struct step_record *all_r = NULL;
	struct world_figs wf;
	struct step_figs f;
	struct ckpt_figs c;
	int bad = 0, ret = 1;

	rank_figs(o, su, rec, nv, b, verified, &mine);
	if (w->rank == 0) {
		all_f = calloc((size_t)w->world, sizeof(*all_f));
		all_r = calloc((size_t)w->world * o->steps, sizeof(*all_r));
		bad = !all_f || !all_r;
		if (bad)
			fprintf(stderr, STEP_WHO ": out of memory for the ranks' records\n");
	}
	/* every rank takes part in both gathers, whatever rank 0 could do */
	if (step_world_gather(w, &mine, sizeof(mine), all_f) ||
	    step_world_gather(w, rec, o->steps * sizeof(*rec), all_r))
		bad = 1;
	if (w->rank != 0) {
		ret = bad;
		goto out;
	}
	if (bad || world_figs(o, all_f, all_r, w->world, &wf))
		goto out;
	step_figs(o, su, rec, st->has_hbm, &f);
	ckpt_figs(o, nv, st, rec, f.first, &c);
	if (o->json)
		print_json(o, su, rec, nv, b, st, &f, &c, &wf);
	else
		print_text(o, su, rec, nv, b, st, &f, &c, &wf);
	fflush(stdout);
	ret = 0;
out:
	free(all_f);
	free(all_r);
	return ret;
}
