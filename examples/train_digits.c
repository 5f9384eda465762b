/*
 * train_digits.c - a small, complete trainer over tierstore's optimizer:
 * an MLP 64 -> H -> H -> 10 (ReLU, softmax cross-entropy, forward and
 * backward by hand) learns scikit-learn's digits (1797 8x8 images), its
 * AdamW state (12 bytes per parameter) in a store whose DRAM tier is a
 * quarter of that state, so every step streams shards through an NVMe
 * file.  The C twin of the PyTorch example of issue 18.
 *
 *   train_digits [OPTIONS] [DIGITS_CSV]
 *
 * DIGITS_CSV is scikit-learn's sklearn/datasets/data/digits.csv.gz (or
 * the same, decompressed): 64 pixel values then the label per line.
 * Without it the usual install places are searched.  Options: see
 * usage() or --help.
 *
 * What it does, so that another implementation can follow it:
 *  - one splitmix64 stream seeded with --seed draws, in this order: the
 *    Fisher-Yates shuffle of the 1797 rows (j = the top 32 bits of a
 *    draw times (i + 1), shifted right 32, for i = n-1 down to 1), the
 *    initial weights, then each epoch's shuffle of the training rows;
 *  - the last n/5 rows of the shuffle are the test split, the rest the
 *    training split; each pixel is standardised with the training
 *    split's mean and (population) standard deviation, 1 where it is 0;
 *  - layers are torch.nn.Linear's: weight [out][in] and bias [out], both
 *    uniform in +-1/sqrt(in);
 *  - a minibatch is the next --batch rows of the epoch's shuffle; an
 *    epoch's tail shorter than a batch is dropped;
 *  - the learning rate of step t (0-based) of T is lr * t / warmup while
 *    t < warmup, then lr * (1 + cos(pi * (t - warmup) / (T - warmup))) / 2
 *    (linear warm-up from 0, then cosine decay to 0);
 *  - AdamW (betas 0.9, 0.999, eps 1e-8) in two groups: the weights with
 *    weight decay 0.01, the biases with none.
 *
 * Exit status: 0; 1 on a library or system error (the library's message
 * on stderr); 2 on a usage error, a missing or malformed CSV; 3 when the
 * test accuracy is below --min-accuracy; 77 with --skip-missing when no
 * CSV is found (for the test harness).
 *
 * Build against an installed tierstore:
 *   cc -O2 train_digits.c $(pkg-config --cflags --libs tierstore) -lm -o train_digits
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <tierstore.h>

#define PROG "train_digits"
#define NPIX 64                 /* 8 x 8 pixels */
#define NCLASS 10
#define NCOLS (NPIX + 1)        /* the pixels, then the label */
#define NLAYER 3
#define EXIT_USAGE 2
#define EXIT_ACCURACY 3
#define EXIT_SKIP 77

/* Where Debian's and Ubuntu's python3-sklearn put the CSV (a pip or venv
 * install is found by asking python3: find_csv). */
static const char *const csv_places[] = {
	"/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz",
};

struct opts {
	const char *csv;        /* NULL: search csv_places and python3's sklearn */
	const char *data;       /* NULL: a fresh temporary directory */
	int hidden, steps, batch, warmup, log_every;
	double lr, min_accuracy;
	uint64_t seed;
	bool skip_missing;
};

/* n rows: x [n][NPIX] standardised pixels, y [n] labels. */
struct dataset {
	float *x;
	uint8_t *y;
	int n;
};

/*
 * A fully connected layer, torch's layout: w [out][in], b [out] are the
 * model's fp32 weights, which the optimizer's outputs overwrite each
 * step.  Activations are kept feature-major ([feature][cap], cap the
 * batch capacity) so that every inner loop runs over the batch or the
 * input features, contiguously.
 */
struct layer {
	int in, out;
	float *w, *b;           /* the weights */
	float *gw, *gb;         /* their gradients */
	float *xt;              /* input activations [in][cap] */
	float *xb;              /* the same batch-major [cap][in] (weight gradient) */
};

struct mlp {
	struct layer l[NLAYER];
	int cap;                /* rows per batch at most */
	float *logits;          /* [NCLASS][cap]; the output layer's gradient */
	float *dx;              /* a hidden layer's gradient [hidden][cap] */
	float *dz;              /* the same for the layer below */
};

/* -------------------------------------------------------------- helpers */

static int lib_fail(const char *what, int rc)
{
	fprintf(stderr, PROG ": %s: %s: %s\n", what, tier_strerror(rc), tier_last_error());
	return 1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, n). */
static uint32_t rnd_below(uint64_t *s, uint32_t n)
{
	return (uint32_t)(((splitmix64(s) >> 32) * n) >> 32);
}

/* Uniform in [-a, a). */
static float rnd_sym(uint64_t *s, double a)
{
	return (float)(((double)(splitmix64(s) >> 11) * 0x1.0p-53 * 2.0 - 1.0) * a);
}

static void shuffle(int *v, int n, uint64_t *s)
{
	for (int i = n - 1; i > 0; i--) {
		int j = (int)rnd_below(s, (uint32_t)i + 1), t = v[i];

		v[i] = v[j];
		v[j] = t;
	}
}

static uint64_t round_up(uint64_t v, uint64_t to)
{
	return (v + to - 1) / to * to;
}

/* ------------------------------------------------------------- options */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " [OPTIONS] [DIGITS_CSV]\n"
		"  DIGITS_CSV        scikit-learn's sklearn/datasets/data/digits.csv.gz, or the\n"
		"                    same decompressed (default: searched where python3-sklearn\n"
		"                    or pip installs it)\n"
		"  --data DIR        directory of the NVMe backing file (default: a fresh one\n"
		"                    under $TMPDIR or /tmp, removed at exit)\n"
		"  --steps N         optimizer steps (300)\n"
		"  --hidden H        hidden width (512)\n"
		"  --batch B         minibatch rows (64)\n"
		"  --lr X            peak learning rate (1e-3)\n"
		"  --warmup N        linear warm-up steps from lr 0 (30), then cosine decay\n"
		"  --seed N          seed of the split, the weights and the batches (1)\n"
		"  --log-every N     print every N steps (20)\n"
		"  --min-accuracy X  exit 3 when the test accuracy is below X (0: never)\n"
		"  --skip-missing    exit 77 instead of 2 when no CSV is found\n");
}

static int parse_int(const char *opt, const char *v, long lo, long hi, int *out)
{
	char *end;
	long x;

	errno = 0;
	x = strtol(v, &end, 10);
	if (errno || end == v || *end || x < lo || x > hi) {
		fprintf(stderr, PROG ": %s: '%s' is not an integer in [%ld, %ld]\n", opt, v, lo, hi);
		return -1;
	}
	*out = (int)x;
	return 0;
}

static int parse_u64(const char *opt, const char *v, uint64_t *out)
{
	unsigned long long x;
	char *end;

	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-') {
		fprintf(stderr, PROG ": %s: '%s' is not an unsigned 64-bit integer\n", opt, v);
		return -1;
	}
	*out = x;
	return 0;
}

static int parse_real(const char *opt, const char *v, double lo, double hi, double *out)
{
	char *end;
	double x;

	errno = 0;
	x = strtod(v, &end);
	if (errno || end == v || *end || !(x >= lo && x <= hi)) {
		fprintf(stderr, PROG ": %s: '%s' is not a number in [%g, %g]\n", opt, v, lo, hi);
		return -1;
	}
	*out = x;
	return 0;
}

static const char *const valued_opts[] = {
	"--data", "--steps", "--hidden", "--batch", "--warmup", "--log-every", "--seed", "--lr",
	"--min-accuracy",
};

static bool is_valued_opt(const char *a)
{
	for (size_t i = 0; i < sizeof(valued_opts) / sizeof(valued_opts[0]); i++)
		if (!strcmp(a, valued_opts[i]))
			return true;
	return false;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){ .hidden = 512, .steps = 300, .batch = 64, .warmup = 30,
			    .log_every = 20, .lr = 1e-3, .seed = 1 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int rc = 0;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			exit(0);
		} else if (!strcmp(a, "--skip-missing")) {
			o->skip_missing = true;
			continue;
		} else if (a[0] != '-' || !a[1]) {
			if (o->csv) {
				fprintf(stderr, PROG ": one CSV only ('%s' and '%s')\n", o->csv, a);
				return -1;
			}
			o->csv = a;
			continue;
		}
		if (!is_valued_opt(a)) {
			fprintf(stderr, PROG ": unknown option '%s' (--help lists them)\n", a);
			return -1;
		}
		if (!v) {
			fprintf(stderr, PROG ": %s needs a value\n", a);
			return -1;
		}
		i++;
		if (!strcmp(a, "--data"))
			o->data = v;
		else if (!strcmp(a, "--steps"))
			rc = parse_int(a, v, 1, 10000000, &o->steps);
		else if (!strcmp(a, "--hidden"))
			rc = parse_int(a, v, 1, 16384, &o->hidden);
		else if (!strcmp(a, "--batch"))
			rc = parse_int(a, v, 1, 4096, &o->batch);
		else if (!strcmp(a, "--warmup"))
			rc = parse_int(a, v, 0, 10000000, &o->warmup);
		else if (!strcmp(a, "--log-every"))
			rc = parse_int(a, v, 1, 10000000, &o->log_every);
		else if (!strcmp(a, "--seed"))
			rc = parse_u64(a, v, &o->seed);
		else if (!strcmp(a, "--lr"))
			rc = parse_real(a, v, 0, 1e3, &o->lr);
		else
			rc = parse_real(a, v, 0, 1, &o->min_accuracy);
		if (rc)
			return -1;
	}
	return 0;
}

/* ------------------------------------------------------------- the CSV */

/* The CSV's path: @o->csv, else the first of csv_places that exists,
 * else where python3 says sklearn is.  NULL when none is found. */
static char *find_csv(const struct opts *o)
{
	char line[4096];
	FILE *p;

	if (o->csv)
		return strdup(o->csv);
	for (size_t i = 0; i < sizeof(csv_places) / sizeof(csv_places[0]); i++)
		if (access(csv_places[i], R_OK) == 0)
			return strdup(csv_places[i]);
	/* a pip or venv install: ask the python3 on PATH, quietly */
	p = popen("python3 -c 'import importlib.util as u; "
		  "print(u.find_spec(\"sklearn\").submodule_search_locations[0] + "
		  "\"/datasets/data/digits.csv.gz\")' 2>/dev/null", "r");
	if (!p)
		return NULL;
	if (!fgets(line, sizeof(line), p))
		line[0] = 0;
	if (pclose(p) != 0 || !line[0])
		return NULL;
	line[strcspn(line, "\n")] = 0;
	return access(line, R_OK) == 0 ? strdup(line) : NULL;
}

/* Opens @path for reading, through "gzip -dc" when it is gzip data.
 * *piped says which close it needs. */
static FILE *csv_open(const char *path, bool *piped)
{
	unsigned char magic[2] = { 0, 0 };
	char *cmd, *q;
	FILE *f = fopen(path, "rb");
	size_t got;

	*piped = false;
	if (!f) {
		fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
		return NULL;
	}
	got = fread(magic, 1, 2, f);
	if (got < 2 || magic[0] != 0x1f || magic[1] != 0x8b) {
		rewind(f);
		return f;
	}
	fclose(f);
	/* gzip -dc -- 'PATH', each ' in PATH written '\'' */
	cmd = malloc(strlen(path) * 4 + 32);
	if (!cmd) {
		fprintf(stderr, PROG ": %s: out of memory\n", path);
		return NULL;
	}
	q = cmd + sprintf(cmd, "gzip -dc -- '");
	for (const char *c = path; *c; c++) {
		if (*c == '\'')
			q += sprintf(q, "'\\''");
		else
			*q++ = *c;
	}
	strcpy(q, "'");
	f = popen(cmd, "r");
	if (!f)
		fprintf(stderr, PROG ": %s: cannot run '%s': %s\n", path, cmd, strerror(errno));
	free(cmd);
	*piped = f != NULL;
	return f;
}

/* Closes what csv_open opened: 0, or -1 when gzip failed. */
static int csv_close(FILE *f, const char *path, bool piped)
{
	int st;

	if (!piped) {
		fclose(f);
		return 0;
	}
	st = pclose(f);
	if (st == 0)
		return 0;
	if (st > 0 && WIFEXITED(st))
		fprintf(stderr, PROG ": %s: gzip -dc failed (exit %d)\n", path, WEXITSTATUS(st));
	else
		fprintf(stderr, PROG ": %s: gzip -dc failed\n", path);
	return -1;
}

/* Parses one line of 65 values into x (pixels) and *y (the label):
 * 0, or -1 after naming PATH:LINE:COL and what is wrong. */
static int parse_row(char *s, const char *path, long ln, float *x, uint8_t *y)
{
	char *p = s, *end;
	int col = 0;

	for (;;) {
		double v;

		while (*p == ' ' || *p == '\t')
			p++;
		errno = 0;
		v = strtod(p, &end);
		while (*end == ' ' || *end == '\t')
			end++;
		if (end == p || errno || !isfinite(v) || (*end && *end != ',')) {
			int n = (int)strcspn(p, ",");

			fprintf(stderr, PROG ": %s:%ld:%ld: value %d '%.*s' is not a finite number\n",
				path, ln, (long)(p - s) + 1, col + 1, n > 40 ? 40 : n, p);
			return -1;
		}
		if (col < NPIX) {
			x[col] = (float)v;
		} else if (col == NPIX) {
			if (v != floor(v) || v < 0 || v > 9) {
				fprintf(stderr, PROG ": %s:%ld:%ld: label %g is not a digit 0-9\n",
					path, ln, (long)(p - s) + 1, v);
				return -1;
			}
			*y = (uint8_t)v;
		}
		col++;
		if (!*end)
			break;
		p = end + 1;
	}
	if (col != NCOLS) {
		fprintf(stderr, PROG ": %s:%ld: %d values; a row is %d pixel values, then the label\n",
			path, ln, col, NPIX);
		return -1;
	}
	return 0;
}

/* Reads the rows of @f into @d: 0, or -1 having said why. */
static int read_rows(FILE *f, const char *path, struct dataset *d)
{
	char *line = NULL;
	size_t lcap = 0;
	ssize_t len;
	long ln = 0;
	int cap = 0, rc = 0;

	while ((len = getline(&line, &lcap, f)) >= 0) {
		ln++;
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = 0;
		if (strspn(line, " \t") == (size_t)len)
			continue;       /* a blank line */
		if (d->n == cap) {
			int nc = cap ? cap * 2 : 2048;
			float *x = realloc(d->x, (size_t)nc * NPIX * sizeof(*x));
			uint8_t *y = x ? realloc(d->y, (size_t)nc) : NULL;

			if (x)
				d->x = x;
			if (!x || !y) {
				fprintf(stderr, PROG ": %s: out of memory at line %ld\n", path, ln);
				rc = -1;
				break;
			}
			d->y = y;
			cap = nc;
		}
		if (parse_row(line, path, ln, d->x + (size_t)d->n * NPIX, d->y + d->n)) {
			rc = -1;
			break;
		}
		d->n++;
	}
	if (rc == 0 && ferror(f)) {
		fprintf(stderr, PROG ": %s: read error at line %ld\n", path, ln + 1);
		rc = -1;
	}
	free(line);
	return rc;
}

static int load_digits(const char *path, struct dataset *d)
{
	bool piped;
	FILE *f = csv_open(path, &piped);
	int rc;

	if (!f)
		return -1;
	rc = read_rows(f, path, d);
	if (csv_close(f, path, piped))
		rc = -1;
	if (rc == 0 && d->n < 10) {
		fprintf(stderr, PROG ": %s: %d rows; too few to split and train\n", path, d->n);
		rc = -1;
	}
	return rc;
}

/* ------------------------------------------------------------ the data */

/* Splits @all by a shuffle into @train and @test (the last n/5 rows). */
static int split(const struct dataset *all, uint64_t *rng, struct dataset *train,
		 struct dataset *test)
{
	int *perm = malloc((size_t)all->n * sizeof(*perm));
	struct dataset *to[2] = { train, test };

	test->n = all->n / 5;
	train->n = all->n - test->n;
	for (int k = 0; k < 2; k++) {
		to[k]->x = malloc((size_t)to[k]->n * NPIX * sizeof(float));
		to[k]->y = malloc((size_t)to[k]->n);
	}
	if (!perm || !train->x || !train->y || !test->x || !test->y) {
		free(perm);
		return -1;
	}
	for (int i = 0; i < all->n; i++)
		perm[i] = i;
	shuffle(perm, all->n, rng);
	for (int i = 0; i < all->n; i++) {
		struct dataset *d = i < train->n ? train : test;
		int r = i < train->n ? i : i - train->n;

		memcpy(d->x + (size_t)r * NPIX, all->x + (size_t)perm[i] * NPIX, NPIX * sizeof(float));
		d->y[r] = all->y[perm[i]];
	}
	free(perm);
	return 0;
}

static void scale(struct dataset *d, int k, double mean, double sd)
{
	for (int i = 0; i < d->n; i++) {
		float *x = &d->x[(size_t)i * NPIX + k];

		*x = (float)(((double)*x - mean) / sd);
	}
}

/* Standardises both splits with the training split's mean and std. */
static void standardise(struct dataset *train, struct dataset *test)
{
	for (int k = 0; k < NPIX; k++) {
		double s = 0, ss = 0, mean, sd;

		for (int i = 0; i < train->n; i++)
			s += (double)train->x[(size_t)i * NPIX + k];
		mean = s / train->n;
		for (int i = 0; i < train->n; i++) {
			double e = (double)train->x[(size_t)i * NPIX + k] - mean;

			ss += e * e;
		}
		sd = sqrt(ss / train->n);
		if (sd == 0)
			sd = 1;         /* a pixel that never varies stays 0 */
		scale(train, k, mean, sd);
		scale(test, k, mean, sd);
	}
}

static void dataset_free(struct dataset *d)
{
	free(d->x);
	free(d->y);
	d->x = NULL;
	d->y = NULL;
}

/* ----------------------------------------------------------- the model */

/*
 * y += a[0] x[0] + ... + a[na - 1] x[na - 1] over n floats, x[j] at
 * x + j * xstride.  Four rows at a time, so y is loaded and stored once
 * per four; in blocks of 8 so that -O2 vectorizes the inner loop.
 */
static void axpy_rows(int n, int na, const float *a, size_t astride, const float *x,
		      size_t xstride, float *restrict y)
{
	int j = 0;

	for (; j + 4 <= na; j += 4) {
		const float a0 = a[j * astride], a1 = a[(j + 1) * astride];
		const float a2 = a[(j + 2) * astride], a3 = a[(j + 3) * astride];
		const float *restrict x0 = x + j * xstride, *restrict x1 = x0 + xstride;
		const float *restrict x2 = x1 + xstride, *restrict x3 = x2 + xstride;
		int i = 0;

		for (; i + 8 <= n; i += 8)
			for (int k = 0; k < 8; k++)
				y[i + k] += a0 * x0[i + k] + a1 * x1[i + k] + a2 * x2[i + k] +
					    a3 * x3[i + k];
		for (; i < n; i++)
			y[i] += a0 * x0[i] + a1 * x1[i] + a2 * x2[i] + a3 * x3[i];
	}
	for (; j < na; j++) {
		const float aj = a[j * astride], *restrict xj = x + j * xstride;

		for (int i = 0; i < n; i++)
			y[i] += aj * xj[i];
	}
}

static int layer_init(struct layer *l, int in, int out, int cap, uint64_t *rng)
{
	double bound = 1.0 / sqrt(in);
	size_t nw = (size_t)in * out;

	l->in = in;
	l->out = out;
	l->w = malloc(nw * sizeof(float));
	l->gw = malloc(nw * sizeof(float));
	l->b = malloc((size_t)out * sizeof(float));
	l->gb = malloc((size_t)out * sizeof(float));
	l->xt = calloc((size_t)in * cap, sizeof(float));
	l->xb = calloc((size_t)in * cap, sizeof(float));
	if (!l->w || !l->gw || !l->b || !l->gb || !l->xt || !l->xb)
		return -1;
	for (size_t i = 0; i < nw; i++)
		l->w[i] = rnd_sym(rng, bound);
	for (int i = 0; i < out; i++)
		l->b[i] = rnd_sym(rng, bound);
	return 0;
}

static void mlp_free(struct mlp *m)
{
	for (int i = 0; i < NLAYER; i++) {
		struct layer *l = &m->l[i];

		free(l->w);
		free(l->gw);
		free(l->b);
		free(l->gb);
		free(l->xt);
		free(l->xb);
	}
	free(m->logits);
	free(m->dx);
	free(m->dz);
}

static int mlp_init(struct mlp *m, int hidden, int cap, uint64_t *rng)
{
	const int dims[NLAYER + 1] = { NPIX, hidden, hidden, NCLASS };

	memset(m, 0, sizeof(*m));
	m->cap = cap;
	for (int i = 0; i < NLAYER; i++)
		if (layer_init(&m->l[i], dims[i], dims[i + 1], cap, rng))
			return -1;
	m->logits = calloc((size_t)NCLASS * cap, sizeof(float));
	m->dx = calloc((size_t)hidden * cap, sizeof(float));
	m->dz = calloc((size_t)hidden * cap, sizeof(float));
	return m->logits && m->dx && m->dz ? 0 : -1;
}

static size_t mlp_numel(const struct mlp *m)
{
	size_t n = 0;

	for (int i = 0; i < NLAYER; i++)
		n += (size_t)m->l[i].in * m->l[i].out + (size_t)m->l[i].out;
	return n;
}

/* Rows @idx[0..nb) of @d (@idx NULL: rows first..first + nb) into the
 * first layer's input, feature-major. */
static void load_batch(struct mlp *m, const struct dataset *d, const int *idx, int first, int nb)
{
	float *xt = m->l[0].xt;

	for (int b = 0; b < nb; b++) {
		const float *x = d->x + (size_t)(idx ? idx[b] : first + b) * NPIX;

		for (int k = 0; k < NPIX; k++)
			xt[(size_t)k * m->cap + b] = x[k];
	}
}

/* zt [out][cap] = W x + b over nb rows, through a ReLU when @relu. */
static void layer_forward(const struct layer *l, int nb, int cap, float *zt, bool relu)
{
	for (int o = 0; o < l->out; o++) {
		const float *w = l->w + (size_t)o * l->in;
		float *z = zt + (size_t)o * cap;

		for (int b = 0; b < nb; b++)
			z[b] = l->b[o];
		axpy_rows(nb, l->in, w, 1, l->xt, (size_t)cap, z);
		if (relu)
			for (int b = 0; b < nb; b++)
				z[b] = z[b] > 0 ? z[b] : 0;
	}
}

/* The logits of the nb rows loaded, into m->logits. */
static void mlp_forward(struct mlp *m, int nb)
{
	for (int i = 0; i < NLAYER; i++) {
		bool last = i == NLAYER - 1;

		layer_forward(&m->l[i], nb, m->cap, last ? m->logits : m->l[i + 1].xt, !last);
	}
}

/*
 * The mean cross-entropy of the softmax of m->logits against @y over nb
 * rows; *correct counts the rows whose arg max is the label.  With @grad
 * the logits are replaced by the loss's gradient (softmax - one hot) / nb.
 */
static double softmax_xent(struct mlp *m, int nb, const uint8_t *y, bool grad, int *correct)
{
	double loss = 0;

	for (int b = 0; b < nb; b++) {
		float *z = m->logits + b;
		size_t cap = (size_t)m->cap;
		double mx = (double)z[0], sum = 0;
		int best = 0;

		for (int c = 1; c < NCLASS; c++)
			if ((double)z[c * cap] > mx) {
				mx = (double)z[c * cap];
				best = c;
			}
		for (int c = 0; c < NCLASS; c++)
			sum += exp((double)z[c * cap] - mx);
		loss += log(sum) - ((double)z[y[b] * cap] - mx);
		*correct += best == y[b];
		if (!grad)
			continue;
		for (int c = 0; c < NCLASS; c++) {
			double p = exp((double)z[c * cap] - mx) / sum;

			z[c * cap] = (float)((p - (c == y[b])) / nb);
		}
	}
	return loss / nb;
}

/*
 * Given dz [out][cap], the gradient at the layer's output (before its
 * ReLU, if any), sets the layer's weight and bias gradients and, when
 * @dx is not NULL, the gradient at its input through the ReLU below
 * (the input is that ReLU's output, so input > 0 is its mask).
 */
static void layer_backward(struct layer *l, int nb, int cap, const float *dz, float *dx)
{
	for (int k = 0; k < l->in; k++)
		for (int b = 0; b < nb; b++)
			l->xb[(size_t)b * l->in + k] = l->xt[(size_t)k * cap + b];
	memset(l->gw, 0, (size_t)l->in * l->out * sizeof(float));
	for (int o = 0; o < l->out; o++) {
		const float *d = dz + (size_t)o * cap;
		double s = 0;

		for (int b = 0; b < nb; b++)
			s += (double)d[b];
		l->gb[o] = (float)s;
		axpy_rows(l->in, nb, d, 1, l->xb, (size_t)l->in, l->gw + (size_t)o * l->in);
	}
	if (!dx)
		return;
	memset(dx, 0, (size_t)l->in * cap * sizeof(float));
	for (int k = 0; k < l->in; k++) {
		float *d = dx + (size_t)k * cap;
		const float *x = l->xt + (size_t)k * cap;

		/* column k of W: w[o][k] for every o */
		axpy_rows(nb, l->out, l->w + k, (size_t)l->in, dz, (size_t)cap, d);
		for (int b = 0; b < nb; b++)
			if (!(x[b] > 0))
				d[b] = 0;
	}
}

/* Backward from the loss's gradient in m->logits: every layer's gw, gb. */
static void mlp_backward(struct mlp *m, int nb)
{
	const float *dz = m->logits;

	for (int i = NLAYER - 1; i >= 0; i--) {
		float *dx = i ? (dz == m->dx ? m->dz : m->dx) : NULL;

		layer_backward(&m->l[i], nb, m->cap, dz, dx);
		dz = dx;
	}
}

/* Mean loss and accuracy of the model over all of @d. */
static void evaluate(struct mlp *m, const struct dataset *d, double *loss, double *acc)
{
	double sum = 0;
	int correct = 0;

	for (int i = 0; i < d->n; i += m->cap) {
		int nb = d->n - i < m->cap ? d->n - i : m->cap;

		load_batch(m, d, NULL, i, nb);
		mlp_forward(m, nb);
		sum += softmax_xent(m, nb, d->y + i, false, &correct) * nb;
	}
	*loss = sum / d->n;
	*acc = (double)correct / d->n;
}

/* ------------------------------------------------------- the optimizer */

/*
 * A store whose NVMe file is under @dir and whose DRAM tier is a quarter
 * of @state bytes, rounded up to 64 KiB and at least 256 KiB (four of
 * the smallest shards, 64 KiB: the optimizer needs four in DRAM).
 * *dram gets the DRAM tier's size.
 */
static int store_open(const char *dir, uint64_t state, struct tier_manifest **m,
		      struct tier_store **s, uint64_t *dram)
{
	uint64_t nvme = round_up(state * 4, 1 << 20);
	struct tier_store_params sp;
	char text[8192], qdir[4096], *q = qdir;
	int n, rc;

	/* the directory as a double-quoted YAML scalar */
	for (const char *c = dir; *c && q < qdir + sizeof(qdir) - 3; c++) {
		if (*c == '"' || *c == '\\')
			*q++ = '\\';
		*q++ = *c;
	}
	*q = 0;
	n = snprintf(text, sizeof(text),
		     "name: train-digits\ngpu:\n  device: none\n"
		     "nvme:\n  paths:\n    - path: \"%s/\"\n      capacity: %llu\n      create: true\n"
		     "optimizer:\n  moment_dtype: fp32\n",
		     qdir, (unsigned long long)(nvme < (64u << 20) ? 64u << 20 : nvme));
	if (n < 0 || (size_t)n >= sizeof(text)) {
		fprintf(stderr, PROG ": --data: '%s' is too long\n", dir);
		return 1;
	}
	if ((rc = tier_manifest_parse(text, (size_t)n, PROG, 0, m)))
		return lib_fail("manifest", rc);
	tier_store_params_init(&sp);
	*dram = round_up(state / 4, 64 << 10);
	if (*dram < (256 << 10))
		*dram = 256 << 10;
	sp.dram_capacity = *dram;
	sp.flags = TIER_STORE_SCRATCH;
	if ((rc = tier_store_open(*m, &sp, s)))
		return lib_fail("store", rc);
	return 0;
}

/*
 * The optimizer: group 0 (the weights) with weight decay 0.01, group 1
 * (the biases) with none, both at lr 0 until the schedule sets it.  The
 * parameters are added as torch lists them (fc1.weight, fc1.bias,
 * fc2.weight, ...), each starting from the model's initial values: id
 * 2i is layer i's weight, 2i + 1 its bias.
 */
static int optim_create(struct tier_store *s, struct mlp *m, struct tier_optim **out)
{
	struct tier_optim_params p;
	struct tier_group_params g;
	struct tier_optim *o;
	uint32_t bias_gid, id;
	int rc;

	tier_optim_params_init(&p);
	p.lr = 0;
	p.weight_decay = 0.01;
	p.moment_dtype = TIER_FP32;
	if ((rc = tier_optim_create(s, &p, &o)))
		return lib_fail("optimizer", rc);
	tier_group_params_init(&g);
	g.lr = 0;
	g.weight_decay = 0;
	if ((rc = tier_optim_add_group(o, &g, &bias_gid))) {
		tier_optim_destroy(o);
		return lib_fail("bias group", rc);
	}
	for (int i = 0; i < NLAYER; i++) {
		struct layer *l = &m->l[i];
		char wn[32], bn[32];

		snprintf(wn, sizeof(wn), "fc%d.weight", i + 1);
		snprintf(bn, sizeof(bn), "fc%d.bias", i + 1);
		if ((rc = tier_optim_add_param_to(o, 0, wn, (size_t)l->in * l->out, l->w, &id)) ||
		    (rc = tier_optim_add_param_to(o, bias_gid, bn, (size_t)l->out, l->b, &id))) {
			tier_optim_destroy(o);
			return lib_fail("add parameter", rc);
		}
	}
	*out = o;
	return 0;
}

/* Step @t of @steps's learning rate: linear warm-up from 0, cosine to 0. */
static double lr_at(const struct opts *op, int t)
{
	double progress;

	if (t < op->warmup)
		return op->lr * t / op->warmup;
	progress = (double)(t - op->warmup) / (op->steps - op->warmup);
	return op->lr * 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
}

/* Every group's lr to @lr, keeping their other hyperparameters. */
static int set_lr(struct tier_optim *o, double lr)
{
	uint32_t ng = tier_optim_ngroups(o);

	for (uint32_t gid = 0; gid < ng; gid++) {
		struct tier_group_params g;
		int rc;

		tier_group_params_init(&g);
		if ((rc = tier_optim_get_group(o, gid, &g)))
			return lib_fail("get group", rc);
		g.lr = lr;
		if ((rc = tier_optim_set_group(o, gid, &g)))
			return lib_fail("set group", rc);
	}
	return 0;
}

/* ------------------------------------------------------------ training */

struct run_stats {
	double step_s, wall_s;      /* tier_optim_step's, and the whole step's */
	uint64_t nvme_bytes;
	int nsteps;
};

/*
 * A step that fails part way with an error that may pass (an I/O error
 * that outlasted the NVMe tier's own retries, a timeout, an interrupted
 * call) is completed by calling it again with the same gradients and
 * output buffers, before anything else touches the optimizer (a pending
 * step refuses tier_optim_set_group): docs/optimizer.md, "A step that
 * fails".  Any other error is not retried.
 */
#define STEP_TRIES 3

static bool step_transient(int rc)
{
	return rc == -EIO || rc == -ETIMEDOUT || rc == -EILSEQ || rc == -EAGAIN || rc == -EINTR;
}

/* One training step on rows @idx: forward, backward, the optimizer's
 * step writing the new weights into the model (called again while it
 * fails with a transient error, up to STEP_TRIES calls).  0 or 1. */
static int train_step(struct tier_optim *o, struct mlp *m, const struct dataset *d,
		      const int *idx, int nb, double *loss, struct tier_step_result *res)
{
	struct tier_tensor g[2 * NLAYER], out[2 * NLAYER];
	int correct = 0, rc;
	uint8_t y[4096];

	for (int b = 0; b < nb; b++)
		y[b] = d->y[idx[b]];
	load_batch(m, d, idx, 0, nb);
	mlp_forward(m, nb);
	*loss = softmax_xent(m, nb, y, true, &correct);
	mlp_backward(m, nb);
	for (int i = 0; i < NLAYER; i++) {
		struct layer *l = &m->l[i];
		size_t nw = (size_t)l->in * l->out, nbias = (size_t)l->out;

		g[2 * i] = (struct tier_tensor){ l->gw, TIER_FP32, TIER_MEM_HOST, nw };
		g[2 * i + 1] = (struct tier_tensor){ l->gb, TIER_FP32, TIER_MEM_HOST, nbias };
		out[2 * i] = (struct tier_tensor){ l->w, TIER_FP32, TIER_MEM_HOST, nw };
		out[2 * i + 1] = (struct tier_tensor){ l->b, TIER_FP32, TIER_MEM_HOST, nbias };
	}
	/* each group's lr was set by set_lr: TIER_LR_KEEP */
	for (int tries = 1; (rc = tier_optim_step(o, TIER_LR_KEEP, g, out, res)); tries++) {
		if (!step_transient(rc) || tries == STEP_TRIES)
			return lib_fail("step", rc);
		fprintf(stderr, PROG ": step %llu failed with a transient error (%s: %s); running it"
			" again with the same gradients (try %d of %d)\n",
			(unsigned long long)tier_optim_step_count(o) + 1, tier_strerror(rc),
			tier_last_error(), tries + 1, STEP_TRIES);
	}
	if (!res->applied)
		fprintf(stderr, PROG ": warning: step %llu skipped (an inf or nan gradient)\n",
			(unsigned long long)res->step);
	return 0;
}

static int train(const struct opts *op, struct tier_optim *o, struct mlp *m,
		 const struct dataset *train_set, uint64_t *rng, struct run_stats *st)
{
	int *perm = malloc((size_t)train_set->n * sizeof(*perm)), pos = train_set->n;
	int nb = op->batch < train_set->n ? op->batch : train_set->n, rc = 0;

	if (!perm) {
		fprintf(stderr, PROG ": out of memory\n");
		return 1;
	}
	for (int i = 0; i < train_set->n; i++)
		perm[i] = i;
	printf("%6s %10s %10s %12s %12s %9s\n", "step", "loss", "lr", "nvme_read", "nvme_write",
	       "optim_ms");
	for (int t = 0; t < op->steps && rc == 0; t++) {
		struct tier_step_result res;
		double lr = lr_at(op, t), loss, t0;

		if (pos + nb > train_set->n) {
			shuffle(perm, train_set->n, rng);
			pos = 0;
		}
		if ((rc = set_lr(o, lr)))
			break;
		t0 = now_s();
		rc = train_step(o, m, train_set, perm + pos, nb, &loss, &res);
		if (rc)
			break;
		st->wall_s += now_s() - t0;
		st->step_s += res.step_s;
		st->nvme_bytes += res.nvme_read_bytes + res.nvme_write_bytes;
		st->nsteps++;
		pos += nb;
		if (t % op->log_every == 0 || t == op->steps - 1)
			printf("%6d %10.4f %10.3g %12llu %12llu %9.2f\n", t, loss, lr,
			       (unsigned long long)res.nvme_read_bytes,
			       (unsigned long long)res.nvme_write_bytes, res.step_s * 1e3);
	}
	free(perm);
	return rc;
}

/* ---------------------------------------------------------------- main */

/* Trains and reports, on an open store: 0, 1 or EXIT_ACCURACY. */
static int run(const struct opts *op, struct tier_store *s, struct mlp *m, uint64_t dram,
	       const struct dataset *train_set, const struct dataset *test_set, uint64_t *rng)
{
	struct tier_optim_info info;
	struct run_stats st = { 0 };
	struct tier_optim *o = NULL;
	double loss, acc, tr_acc, te_loss;
	int rc, drc;

	if ((rc = optim_create(s, m, &o)))
		return rc;
	if ((rc = tier_optim_info(o, &info))) {
		tier_optim_destroy(o);
		return lib_fail("optimizer info", rc);
	}
	printf("optimizer state %llu bytes (%u per parameter), DRAM tier %llu bytes: %.1fx; "
	       "%u shards of up to %llu bytes\n",
	       (unsigned long long)info.state_bytes, info.bytes_per_elem,
	       (unsigned long long)dram, (double)info.state_bytes / (double)dram,
	       info.nshards, (unsigned long long)info.shard_bytes);
	if (info.state_bytes <= dram)
		printf("(the state fits in the DRAM tier: nothing streams through NVMe; "
		       "a larger --hidden makes it)\n");
	rc = train(op, o, m, train_set, rng, &st);
	if (rc == 0) {
		evaluate(m, train_set, &loss, &tr_acc);
		evaluate(m, test_set, &te_loss, &acc);
		printf("final training loss %.4f (training accuracy %.4f)\n", loss, tr_acc);
		printf("test loss %.4f, test accuracy %.4f (%d rows)\n", te_loss, acc, test_set->n);
		printf("%d steps: mean step %.2f ms (forward, backward and tier_optim_step; "
		       "the optimizer's step_s %.2f ms), NVMe read+written %.0f bytes per step\n",
		       st.nsteps, st.wall_s / st.nsteps * 1e3, st.step_s / st.nsteps * 1e3,
		       (double)st.nvme_bytes / st.nsteps);
		if (acc < op->min_accuracy) {
			fprintf(stderr, PROG ": test accuracy %.4f is below --min-accuracy %.4f\n",
				acc, op->min_accuracy);
			rc = EXIT_ACCURACY;
		}
	}
	if ((drc = tier_optim_destroy(o)) && rc == 0)
		rc = lib_fail("optimizer destroy", drc);
	return rc;
}

int main(int argc, char **argv)
{
	struct dataset all = { 0 }, train_set = { 0 }, test_set = { 0 };
	struct tier_manifest *man = NULL;
	struct tier_store *s = NULL;
	char *csv = NULL, *tmpdir = NULL;
	const char *dir;
	struct opts op;
	struct mlp m;
	uint64_t rng, dram = 0;
	int rc, crc;

	if (parse_opts(argc, argv, &op))
		return EXIT_USAGE;
	if ((rc = TIER_VERSION_CHECK()))
		return lib_fail("version", rc);
	csv = find_csv(&op);
	if (!csv) {
		fprintf(stderr, PROG ": no digits CSV found%s; pass the path of scikit-learn's "
			"sklearn/datasets/data/digits.csv.gz:\n"
			"  Debian, Ubuntu: apt-get install python3-sklearn puts it in\n    %s\n"
			"  pip: pip install scikit-learn puts it in\n"
			"    $(python3 -c 'import sklearn, os; print(os.path.dirname(sklearn.__file__))')"
			"/datasets/data/digits.csv.gz\n",
			op.skip_missing ? " (skipped)" : "", csv_places[0]);
		return op.skip_missing ? EXIT_SKIP : EXIT_USAGE;
	}
	rng = op.seed;
	if (load_digits(csv, &all)) {
		free(csv);
		dataset_free(&all);
		return EXIT_USAGE;
	}
	printf("%s: %d rows; hidden %d, batch %d, %d steps, lr %g, warm-up %d, seed %llu\n",
	       csv, all.n, op.hidden, op.batch, op.steps, op.lr, op.warmup,
	       (unsigned long long)op.seed);
	free(csv);
	rc = split(&all, &rng, &train_set, &test_set);
	dataset_free(&all);
	if (rc) {
		fprintf(stderr, PROG ": out of memory\n");
		rc = 1;
		goto out_data;
	}
	if (mlp_init(&m, op.hidden, op.batch, &rng)) {
		fprintf(stderr, PROG ": out of memory for the model\n");
		rc = 1;
		goto out_model;
	}
	standardise(&train_set, &test_set);
	printf("train %d rows, test %d rows; %zu parameters\n", train_set.n, test_set.n,
	       mlp_numel(&m));

	dir = op.data;
	if (!dir) {
		const char *base = getenv("TMPDIR");
		size_t len = strlen(base && *base ? base : "/tmp") + 32;

		tmpdir = malloc(len);
		if (tmpdir)
			snprintf(tmpdir, len, "%s/train-digits-XXXXXX", base && *base ? base : "/tmp");
		if (!tmpdir || !mkdtemp(tmpdir)) {
			fprintf(stderr, PROG ": cannot make a temporary directory: %s\n",
				strerror(errno));
			rc = 1;
			goto out_model;
		}
		dir = tmpdir;
	} else if (mkdir(dir, 0755) && errno != EEXIST) {
		fprintf(stderr, PROG ": --data %s: %s\n", dir, strerror(errno));
		rc = 1;
		goto out_model;
	}
	rc = store_open(dir, mlp_numel(&m) * 12, &man, &s, &dram);
	if (rc == 0)
		rc = run(&op, s, &m, dram, &train_set, &test_set, &rng);
	if (s && (crc = tier_store_close(s)) && rc == 0)
		rc = lib_fail("close", crc);
	tier_manifest_free(man);
	if (tmpdir && rmdir(tmpdir))
		fprintf(stderr, PROG ": warning: %s: %s (left in place)\n", tmpdir, strerror(errno));
out_model:
	free(tmpdir);
	mlp_free(&m);
out_data:
	dataset_free(&train_set);
	dataset_free(&test_set);
	return rc;
}
