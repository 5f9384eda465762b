/*
 * fuzz_manifest.c - libFuzzer target for the manifest parser.
 *
 * Any input must give either a clean error (a message, no manifest) or a
 * manifest whose emitted YAML parses again to a manifest that emits the
 * same text; this round trip is checked schema-only (TIER_MANIFEST_NO_PROBE).
 * Each input is then parsed again with probing (memory, GPUs, file systems,
 * O_DIRECT), unless it holds "create" (so fuzzed paths never make
 * directories); that parse too must give a manifest or a clean error.
 * Inputs run up to the manifest size cap (run.sh sets -max_len).
 * Sanitizers report leaks and UB.
 */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tierstore.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *emit(const struct tier_manifest *m, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	if (!f || tier_manifest_emit(m, f) != 0)
		abort();
	fclose(f);
	return buf;
}

/*
 * Drops comments (which say how values were chosen, and so differ between
 * a manifest and its effective configuration) outside double quotes.
 */
static void strip_comments(char *s)
{
	char *out = s;
	bool quoted = false, comment = false;

	for (char *p = s; *p; p++) {
		if (*p == '\n') {
			comment = false;
			quoted = false;
		} else if (comment) {
			continue;
		} else if (quoted && *p == '\\' && p[1]) {
			*out++ = *p++;
		} else if (*p == '"') {
			quoted = !quoted;
		} else if (*p == '#' && !quoted) {
			comment = true;
			while (out > s && out[-1] == ' ')
				out--;
			continue;
		}
		*out++ = *p;
	}
	*out = '\0';
}

/* The same input with probing: a manifest, or an error with a message. */
static void probed(const uint8_t *data, size_t size)
{
	struct tier_manifest *m = NULL;
	int rc;

	if (memmem(data, size, "create", 6))
		return;
	rc = tier_manifest_parse((const char *)data, size, "fuzz", 0, &m);
	if (rc && (m || tier_last_error()[0] == '\0'))
		abort();
	tier_manifest_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tier_manifest *m = NULL, *m2 = NULL;
	char *a, *b;
	size_t alen, blen;
	int rc;

	probed(data, size);
	rc = tier_manifest_parse((const char *)data, size, "fuzz", TIER_MANIFEST_NO_PROBE, &m);
	if (rc) {
		if (m || tier_last_error()[0] == '\0')
			abort(); /* an error must come with a message and no manifest */
		return 0;
	}
	a = emit(m, &alen);
	rc = tier_manifest_parse(a, alen, "emitted", TIER_MANIFEST_NO_PROBE, &m2);
	if (rc) {
		fprintf(stderr, "emitted YAML does not parse: %s\n%s\n", tier_last_error(), a);
		abort();
	}
	b = emit(m2, &blen);
	strip_comments(a);
	strip_comments(b);
	if (strcmp(a, b) != 0) {
		fprintf(stderr, "round trip differs:\n%s\n---\n%s\n", a, b);
		abort();
	}
	free(a);
	free(b);
	tier_manifest_free(m);
	tier_manifest_free(m2);
	return 0;
}
