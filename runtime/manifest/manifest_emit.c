/*
 * manifest_emit.c - the effective configuration of a resolved manifest
 * written back as YAML (tier_manifest_emit): every default spelled out,
 * with comments saying where the automatic values came from; strings are
 * double-quoted with '$' doubled, so that reading them back gives the
 * same text.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/error.h"
#include "common/units.h"
#include "runtime/manifest/manifest_impl.h"

/*
 * @s as YAML text: a double-quoted string whose ${...} expansion gives
 * back @s (@quoted), or the text of a comment that stays on its line.
 * Control characters and every character YAML reads as a line break (NEL,
 * U+2028, U+2029) are escaped; in a string, so is every other non-ASCII
 * character (\u or \U: YAML folds or refuses some of them written as they
 * are).  Bytes that are not UTF-8 (only the environment can bring them;
 * the parser refuses them there) are written as \xNN.
 */
static void emit_text(FILE *f, const char *s, bool quoted)
{
	if (quoted)
		fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		uint32_t cp;
		size_t n = mf_utf8_next(p, &cp);

		if (n == 0) {
			fprintf(f, "\\x%02x", *p++);
			continue;
		}
		if (cp == '$' && quoted)
			fputs("$$", f);
		else if ((cp == '"' || cp == '\\') && quoted)
			fprintf(f, "\\%c", (int)cp);
		else if (cp < 0x20 || cp == 0x7f)
			fprintf(f, "\\x%02x", (unsigned)cp);
		else if (cp < 0x80)
			fputc((int)cp, f);
		else if ((quoted || cp == 0x85 || cp == 0x2028 || cp == 0x2029) && cp > 0xffff)
			fprintf(f, "\\U%08x", (unsigned)cp);
		else if (quoted || cp == 0x85 || cp == 0x2028 || cp == 0x2029)
			fprintf(f, "\\u%04x", (unsigned)cp);
		else
			fwrite(p, 1, n, f);
		p += n;
	}
	if (quoted)
		fputc('"', f);
}

static void emit_str(FILE *f, const char *s)
{
	emit_text(f, s, true);
}

/* The comment of a size written "/local_world": what it was divided by. */
static const char *per_local(const struct tier_manifest *c, bool div, char *buf, size_t len)
{
	if (!div)
		return "";
	snprintf(buf, len, ", /local_world: 1 of %d ranks on this node", c->rank.local_world_size);
	return buf;
}

int tier_manifest_emit(const struct tier_manifest *m, FILE *f)
{
	TS_NONNULL(m);
	if (!f)
		return ts_err_null(__func__, "out");
	const struct tier_manifest *c = m;
	static const char *const huge[] = { "auto", "on", "off" };
	char a[32], d[64];

	fputs("# effective configuration of ", f);
	emit_text(f, c->tiers.source, false);
	fprintf(f, " (tierstore %s)\n", tier_version());
	fprintf(f, "# resolved for rank %d of %d (local rank %d of %d on this node)\n",
		c->rank.rank, c->rank.world_size, c->rank.local_rank, c->rank.local_world_size);
	fprintf(f, "version: %d\n", c->version);
	fprintf(f, "name: ");
	emit_str(f, c->tiers.name);
	fputc('\n', f);

	fprintf(f, "gpu:\n");
	if (c->tiers.gpu >= 0) {
		fprintf(f, "  device: %d   # %s%s, %s, PCI %s\n", c->tiers.gpu,
			c->gpu_auto ? "auto: " : "", c->gpu_name,
			ts_size_fmt(c->gpu_mem, a, sizeof(a)), c->gpu_pci[0] ? c->gpu_pci : "?");
		fprintf(f, "  capacity: %llu   # %s%s\n", (unsigned long long)c->tiers.hbm_capacity,
			ts_size_fmt(c->tiers.hbm_capacity, a, sizeof(a)), per_local(c, c->hbm_div, d, sizeof(d)));
	} else {
		fprintf(f, "  device: none   # %s\n", c->gpu_note[0] ? c->gpu_note : "no HBM tier");
	}

	fprintf(f, "dram:\n");
	fprintf(f, "  capacity: %llu   # %s%s\n", (unsigned long long)c->tiers.dram_capacity,
		ts_size_fmt(c->tiers.dram_capacity, a, sizeof(a)), per_local(c, c->dram_div, d, sizeof(d)));
	if (c->tiers.numa_node >= 0)
		fprintf(f, "  numa_node: %d%s\n", c->tiers.numa_node, c->numa_auto ? "   # auto: the GPU's node" : "");
	else
		fprintf(f, "  numa_node: none   # %s\n",
			c->numa_auto ? "auto: no GPU node known; memory is not bound" : "not bound");
	fprintf(f, "  huge_pages: %s\n", huge[c->tiers.huge_pages]);

	if (c->tiers.npaths) {
		fprintf(f, "nvme:\n");
		fprintf(f, "  stripe_unit: %llu\n", (unsigned long long)c->tiers.stripe_unit);
		fprintf(f, "  sqpoll: %s\n", c->tiers.sqpoll ? "true" : "false");
		fprintf(f, "  checksum: %s\n", c->tiers.checksum == TIER_CSUM_CRC32C ? "crc32c" : "none");
		fprintf(f, "  keep_commits: %u\n", c->tiers.keep_commits);
		fprintf(f, "  paths:\n");
		for (size_t i = 0; i < c->tiers.npaths; i++) {
			const struct tiers_path_cfg *p = &c->tiers.paths[i];

			fprintf(f, "    - path: ");
			emit_str(f, p->path);
			fprintf(f, "\n      # backing file: ");
			emit_str(f, p->file);
			fprintf(f, "\n      capacity: %llu   # %s%s\n", (unsigned long long)p->capacity,
				ts_size_fmt(p->capacity, a, sizeof(a)),
				per_local(c, (c->path_div >> i) & 1, d, sizeof(d)));
			fprintf(f, "      block_size: %u\n", p->block_size);
			fprintf(f, "      queue_depth: %u\n", p->queue_depth);
			fprintf(f, "      direct: %s\n", p->direct ? "true" : "false");
			fprintf(f, "      create: %s\n", p->create ? "true" : "false");
		}
	} else {
		fprintf(f, "# nvme: none (no NVMe tier; DRAM is the home of every object)\n");
	}

	fprintf(f, "prefetch:\n");
	fprintf(f, "  lookahead: %llu   # %s%s\n", (unsigned long long)c->lookahead,
		ts_size_fmt(c->lookahead, a, sizeof(a)), per_local(c, c->lookahead_div, d, sizeof(d)));
	fprintf(f, "  write_behind: %u\n", c->write_behind);

	fprintf(f, "optimizer:\n");
	if (c->offload_auto)
		fprintf(f, "  offload_fraction: auto\n");
	else
		fprintf(f, "  offload_fraction: %.17g\n", c->offload_fraction);
	fprintf(f, "  master_dtype: %s\n", tier_dtype_name(c->master_dtype));
	fprintf(f, "  moment_dtype: %s\n", tier_dtype_name(c->moment_dtype));
	fprintf(f, "  rounding: %s\n", c->rounding == TIER_ROUND_STOCHASTIC ? "stochastic" : "nearest");
	fprintf(f, "  out_rounding: %s\n",
		c->out_rounding == TIER_ROUND_STOCHASTIC ? "stochastic" : "nearest");
	fprintf(f, "  seed: %llu\n", (unsigned long long)c->seed);
	fprintf(f, "  shard_size: %llu   # %s\n", (unsigned long long)c->shard_size,
		ts_size_fmt(c->shard_size, a, sizeof(a)));
	if (ferror(f))
		return ts_err(-EIO, "writing the configuration failed");
	return 0;
}
