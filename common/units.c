/*
 * units.c - parsing of sizes and integers, and the edit distance used for
 * suggestions.  Parsing is done by hand (not strtod on the whole string) so
 * that every malformed spelling gets a precise reason.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/units.h"

struct unit {
	const char *name;
	uint64_t mult;
};

static const struct unit units[] = {
	{ "", 1 }, { "B", 1 },
	{ "K", 1ull << 10 }, { "KiB", 1ull << 10 }, { "KB", 1000ull },
	{ "M", 1ull << 20 }, { "MiB", 1ull << 20 }, { "MB", 1000000ull },
	{ "G", 1ull << 30 }, { "GiB", 1ull << 30 }, { "GB", 1000000000ull },
	{ "T", 1ull << 40 }, { "TiB", 1ull << 40 }, { "TB", 1000000000000ull },
	{ "P", 1ull << 50 }, { "PiB", 1ull << 50 }, { "PB", 1000000000000000ull },
};

/*
 * The value of @s, digits with at most one '.', read without strtod so
 * that the C locale's decimal point does not matter ("1.5" is 1.5 under a
 * comma-decimal locale too).
 */
static long double decimal(const char *s)
{
	long double v = 0.0L, scale = 1.0L;
	bool frac = false;

	for (; *s; s++) {
		if (*s == '.') {
			frac = true;
		} else if (frac) {
			scale /= 10.0L;
			v += (long double)(*s - '0') * scale;
		} else {
			v = v * 10.0L + (long double)(*s - '0');
		}
	}
	return v;
}

/*
 * Whether @written spells the unit @name: its prefix letter (K, M, G, T,
 * P) in either case, the rest ("B", "iB") exactly as in the table, so
 * that "64Gib" or "1kb" (bits, by their look) are not read as bytes.
 */
static bool unit_is(const char *written, const char *name)
{
	if (name[0] == '\0' || name[0] == 'B')
		return strcmp(written, name) == 0;
	return toupper((unsigned char)written[0]) == name[0] && strcmp(written + 1, name + 1) == 0;
}

static int why_set(char *why, size_t len, int err, const char *fmt, const char *arg)
{
	if (why && len)
		snprintf(why, len, fmt, arg);
	return err;
}

int ts_size_parse(const char *s, bool allow_percent, struct ts_size *out,
		    char *why, size_t whylen)
{
	const char *p = s, *num, *u;
	char unit[16];
	size_t ulen;
	bool frac = false, digits = false;

	while (isspace((unsigned char)*p))
		p++;
	if (*p == '-')
		return why_set(why, whylen, -EINVAL, "negative size '%s'", s);
	if (*p == '+')
		p++;
	num = p;
	while (isdigit((unsigned char)*p) || *p == '.') {
		if (*p == '.') {
			if (frac)
				return why_set(why, whylen, -EINVAL,
					       "'%s' is not a size", s);
			frac = true;
		} else {
			digits = true;
		}
		p++;
	}
	if (!digits)
		return why_set(why, whylen, -EINVAL,
			       "'%s' is not a size (expected a number with an optional unit, e.g. 64GiB)", s);
	u = p;
	while (isspace((unsigned char)*u))
		u++;
	ulen = strlen(u);
	while (ulen && isspace((unsigned char)u[ulen - 1]))
		ulen--;
	if (ulen >= sizeof(unit))
		return why_set(why, whylen, -EINVAL,
			       "bad unit in '%s' (accepted units: B, K, KiB, KB, M, MiB, MB, G, GiB, GB, T, TiB, TB, P, PiB, PB, the first letter in either case)", s);
	memcpy(unit, u, ulen);
	unit[ulen] = '\0';

	char numbuf[64];
	size_t nlen = (size_t)(p - num);
	if (nlen >= sizeof(numbuf))
		return why_set(why, whylen, -ERANGE, "size '%s' is too large", s);
	memcpy(numbuf, num, nlen);
	numbuf[nlen] = '\0';

	if (strcmp(unit, "%") == 0) {
		double v;

		if (!allow_percent)
			return why_set(why, whylen, -EINVAL,
				       "a percentage ('%s') is not allowed here", s);
		v = (double)decimal(numbuf);
		if (v == 0.0)
			return why_set(why, whylen, -EINVAL,
				       "size must be greater than zero (got '%s')", s);
		if (v > 100.0)
			return why_set(why, whylen, -EINVAL,
				       "percentage '%s' is over 100%%", s);
		out->is_percent = true;
		out->percent = v;
		out->bytes = 0;
		return 0;
	}

	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (!unit_is(unit, units[i].name))
			continue;
		if (!frac) {
			unsigned long long v;
			char *end;

			errno = 0;
			v = strtoull(numbuf, &end, 10);
			if (errno == ERANGE || v > UINT64_MAX / units[i].mult)
				return why_set(why, whylen, -ERANGE,
					       "size '%s' is too large", s);
			if (v == 0)
				return why_set(why, whylen, -EINVAL,
					       "size must be greater than zero (got '%s')", s);
			out->bytes = (uint64_t)v * units[i].mult;
		} else {
			long double v = decimal(numbuf) * (long double)units[i].mult;

			if (units[i].mult == 1)
				return why_set(why, whylen, -EINVAL,
					       "'%s': a byte count must be a whole number", s);
			if (v >= 18446744073709551616.0L)
				return why_set(why, whylen, -ERANGE,
					       "size '%s' is too large", s);
			if (v < 1.0L)
				return why_set(why, whylen, -EINVAL,
					       "size must be greater than zero (got '%s')", s);
			out->bytes = (uint64_t)floorl(v);
		}
		out->is_percent = false;
		out->percent = 0.0;
		return 0;
	}
	return why_set(why, whylen, -EINVAL,
		       allow_percent ?
		       "bad unit in '%s' (accepted units: B, K, KiB, KB, M, MiB, MB, G, GiB, GB, T, TiB, TB, P, PiB, PB or %%; the first letter in either case)" :
		       "bad unit in '%s' (accepted units: B, K, KiB, KB, M, MiB, MB, G, GiB, GB, T, TiB, TB, P, PiB, PB, the first letter in either case)", s);
}

char *ts_size_fmt(uint64_t bytes, char *buf, size_t len)
{
	static const char *const names[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)bytes;
	int i = 0;

	/* Move up a unit when the value would print as 1024.00. */
	while (v >= 1023.995 && i < 6) {
		v /= 1024.0;
		i++;
	}
	if (i == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%.2f %s", v, names[i]);
	return buf;
}

int ts_int_parse(const char *s, long long min, long long max, long long *out)
{
	char *end;
	long long v;

	if (!*s || isspace((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (*end != '\0')
		return -EINVAL;
	if (errno == ERANGE || v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

unsigned ts_edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned row[65];

	if (la > 64 || lb > 64)
		return UINT_MAX;
	for (size_t j = 0; j <= lb; j++)
		row[j] = (unsigned)j;
	for (size_t i = 1; i <= la; i++) {
		unsigned diag = row[0];

		row[0] = (unsigned)i;
		for (size_t j = 1; j <= lb; j++) {
			unsigned up = row[j];
			unsigned cost = tolower((unsigned char)a[i - 1]) !=
					tolower((unsigned char)b[j - 1]);
			unsigned best = diag + cost;

			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			diag = up;
			row[j] = best;
		}
	}
	return row[lb];
}
