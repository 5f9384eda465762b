/*
 * units.h - sizes with units ("64GiB", "512MiB", "1.5 TB", "10%"), shared
 * by the manifest and the options table so both accept the same spellings.
 */
#ifndef TIER_COMMON_UNITS_H
#define TIER_COMMON_UNITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ts_size {
	uint64_t bytes;   /* when !is_percent */
	double percent;   /* when is_percent: in (0, 100] */
	bool is_percent;
};

/*
 * Parses @s.  Binary units KiB MiB GiB TiB PiB (and K M G T P), decimal
 * units KB MB GB TB PB, B or no unit for bytes, all case-insensitive; a
 * fraction is allowed with a unit ("1.5GiB", rounded down to a byte).  "N%"
 * only when @allow_percent.  Zero and negative sizes are refused.
 *
 * @return 0, or -EINVAL with a reason in @why ("bad unit 'GB2' ...",
 *   "size must be greater than zero", "negative size", ...), or -ERANGE
 *   when the value does not fit in 64 bits.
 */
int ts_size_parse(const char *s, bool allow_percent, struct ts_size *out,
		    char *why, size_t whylen);

/* "1.50 GiB", "512 B": for messages.  Returns @buf. */
char *ts_size_fmt(uint64_t bytes, char *buf, size_t len);

/* Strict base-10 integer parse of the whole string; -EINVAL or -ERANGE. */
int ts_int_parse(const char *s, long long min, long long max, long long *out);

/* Levenshtein distance, capped: for "did you mean" suggestions. */
unsigned ts_edit_distance(const char *a, const char *b);

#ifdef __cplusplus
}
#endif

#endif
