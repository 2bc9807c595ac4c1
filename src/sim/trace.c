/*
 * trace.c - the Alibaba GPU trace v2023 loader (see trace.h).
 *
 * A file is read one line at a time with getline(), so line length is
 * bounded only by CNL_TRACE_MAX_LINE.  A line is split in place at its
 * commas after its field count has been checked against the header, and
 * every field is then converted with the same few checked helpers, each of
 * which writes the "path:line:column: field: problem" message itself.  The
 * reader keeps the position, so a helper needs only the column.
 *
 * Node lists are loaded in two passes (check every row, then add them all)
 * so that a bad row leaves the cluster as it was.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "cnlab/errors.h"
#include "sim/trace.h"

/* Longest value quoted back in a message. */
#define SHOW "%.64s"

static const char *const node_header[] = {"sn", "cpu_milli", "memory_mib",
                                          "gpu", "model"};
enum { N_NODE_COLS = 5 };

static const char *const pod_header[] = {
    "name",          "cpu_milli",     "memory_mib",    "num_gpu",
    "gpu_milli",     "gpu_spec",      "qos",           "pod_phase",
    "creation_time", "deletion_time", "scheduled_time"};
enum { N_POD_COLS = 11, N_POD_SHORT_COLS = 5 };

/* Trace model names of the built-in catalog types. */
static const struct {
	const char *trace, *catalog;
} known_models[] = {
    {"T4", "T4"},
    {"P100", "P100"},
    {"V100M16", "V100-16GB"},
    {"V100M32", "V100-32GB"},
    {"A10", "A10"},
};

/* The undisclosed models, modelled as site types (CNL_TRACE_G_*). */
static const char *const undisclosed_models[] = {"G1", "G2", "G3"};

struct reader {
	FILE *f;
	const char *path;
	char *line; /* getline() buffer */
	size_t cap;
	size_t len;  /* of the current line, without its line end */
	long lineno; /* 1-based number of the current line */
	char *fields[N_POD_COLS];
	char *err;
	size_t errlen;
};

static int msg(struct reader *rd, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Write the message as it is (the caller adds any position). */
static int msg(struct reader *rd, int code, const char *fmt, ...)
{
	va_list ap;

	if (rd->err && rd->errlen) {
		va_start(ap, fmt);
		vsnprintf(rd->err, rd->errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

static int at(struct reader *rd, int code, int col, const char *field,
              const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* "path:line:col: field: " followed by the message. */
static int at(struct reader *rd, int code, int col, const char *field,
              const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!rd->err || !rd->errlen)
		return code;
	n = snprintf(rd->err, rd->errlen, "%s:%ld:%d: %s%s", rd->path,
	             rd->lineno, col, field ? field : "", field ? ": " : "");
	if (n < 0 || (size_t)n >= rd->errlen)
		return code;
	va_start(ap, fmt);
	vsnprintf(rd->err + n, rd->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return code;
}

static int reader_open(struct reader *rd, const char *path, char *err,
                       size_t errlen)
{
	memset(rd, 0, sizeof(*rd));
	rd->path = path;
	rd->err = err;
	rd->errlen = errlen;
	rd->f = fopen(path, "re");
	if (!rd->f) {
		int e = errno ? errno : EIO;
		return msg(rd, -e, "%s: cannot open: %s", path, strerror(e));
	}
	return 0;
}

static void reader_close(struct reader *rd)
{
	if (rd->f)
		fclose(rd->f);
	free(rd->line);
	rd->f = NULL;
	rd->line = NULL;
}

/* Column (field number) of byte offset `off` of the current line. */
static int column_of(const struct reader *rd, size_t off)
{
	int col = 1;

	for (size_t i = 0; i < off; i++)
		if (rd->line[i] == ',')
			col++;
	return col;
}

/* Read the next line into rd->line without its line end.  Returns 1, 0 at
 * the end of the file, or a negative code. */
static int read_line(struct reader *rd)
{
	ssize_t n;
	const char *nul;

	errno = 0;
	n = getline(&rd->line, &rd->cap, rd->f);
	if (n < 0) {
		int e = errno ? errno : EIO;
		if (feof(rd->f) && !ferror(rd->f))
			return 0;
		return msg(rd, -e, "%s:%ld: read error: %s", rd->path,
		           rd->lineno + 1, strerror(e));
	}
	rd->lineno++;
	rd->len = (size_t)n;
	if (rd->len > 0 && rd->line[rd->len - 1] == '\n')
		rd->len--;
	if (rd->len > 0 && rd->line[rd->len - 1] == '\r')
		rd->len--;
	rd->line[rd->len] = '\0';
	if (rd->len > CNL_TRACE_MAX_LINE)
		return at(rd, -CNL_ELIMIT, 1, NULL, "line longer than %d bytes",
		          CNL_TRACE_MAX_LINE);
	nul = memchr(rd->line, '\0', rd->len);
	if (nul)
		return at(rd, -CNL_EPARSE,
		          column_of(rd, (size_t)(nul - rd->line)), NULL,
		          "NUL byte in line");
	return 1;
}

static int count_fields(const struct reader *rd)
{
	int n = 1;

	for (size_t i = 0; i < rd->len; i++)
		if (rd->line[i] == ',')
			n++;
	return n;
}

/* Split the current line into exactly `want` fields (want <= N_POD_COLS). */
static int split(struct reader *rd, int want)
{
	int n = count_fields(rd);
	char *p = rd->line;

	if (rd->len == 0)
		return at(rd, -CNL_EPARSE, 1, NULL,
		          "empty line: expected %d fields", want);
	if (n < want)
		return at(rd, -CNL_EPARSE, n + 1, NULL,
		          "too few fields: expected %d, found %d", want, n);
	if (n > want)
		return at(rd, -CNL_EPARSE, want + 1, NULL,
		          "too many fields: expected %d, found %d", want, n);
	for (int i = 0; i < want; i++) {
		char *comma = strchr(p, ',');
		rd->fields[i] = p;
		if (comma) {
			*comma = '\0';
			p = comma + 1;
		}
		if (strchr(rd->fields[i], '"'))
			return at(rd, -CNL_EPARSE, i + 1, NULL,
			          "quoted fields are not supported: \"" SHOW
			          "\"",
			          rd->fields[i]);
	}
	return 0;
}

/* Read the header line: 0, or an error for an empty file. */
static int read_header(struct reader *rd)
{
	int r = read_line(rd);

	if (r == 0) {
		rd->lineno = 1; /* the missing header's line */
		return at(rd, -CNL_EPARSE, 1, NULL, "file is empty");
	}
	return r < 0 ? r : 0;
}

/* Check that the header line names exactly the `want` columns. */
static int check_header(struct reader *rd, const char *const *names, int want)
{
	int r = split(rd, want);

	if (r < 0)
		return r;
	for (int i = 0; i < want; i++)
		if (strcmp(rd->fields[i], names[i]) != 0)
			return at(rd, -CNL_EPARSE, i + 1, "header",
			          "expected \"%s\", found \"" SHOW "\"",
			          names[i], rd->fields[i]);
	return 0;
}

/* Field `col` as an integer in min..max. */
static int get_int(struct reader *rd, int col, const char *name, int64_t min,
                   int64_t max, int64_t *ret)
{
	const char *s = rd->fields[col - 1];
	char *end;
	long long v;

	if (s[0] == '\0')
		return at(rd, -CNL_EPARSE, col, name, "missing value");
	/* strtoll() would also take blanks and a '+'; the trace has neither. */
	if (!isdigit((unsigned char)s[0]) &&
	    !(s[0] == '-' && isdigit((unsigned char)s[1])))
		return at(rd, -CNL_EPARSE, col, name,
		          "not a number: \"" SHOW "\"", s);
	errno = 0;
	v = strtoll(s, &end, 10);
	if (*end != '\0')
		return at(rd, -CNL_EPARSE, col, name,
		          "not a number: \"" SHOW "\"", s);
	if (errno == ERANGE)
		return at(rd, -CNL_EPARSE, col, name,
		          "number out of range: \"" SHOW "\"", s);
	if (v < 0 && min >= 0)
		return at(rd, -CNL_EPARSE, col, name,
		          "must not be negative: \"" SHOW "\"", s);
	if (v < min || v > max)
		return at(rd, -CNL_EPARSE, col, name,
		          "out of range %" PRId64 "..%" PRId64 ": \"" SHOW "\"",
		          min, max, s);
	*ret = v;
	return 0;
}

/* Field `col` copied into buf[size]: non-empty unless `may_be_empty`. */
static int get_str(struct reader *rd, int col, const char *name,
                   bool may_be_empty, char *buf, size_t size)
{
	const char *s = rd->fields[col - 1];
	size_t n = strlen(s);

	if (n == 0 && !may_be_empty)
		return at(rd, -CNL_EPARSE, col, name, "missing value");
	if (n >= size)
		return at(rd, -CNL_EPARSE, col, name,
		          "longer than %zu characters: \"" SHOW "\"", size - 1,
		          s);
	memcpy(buf, s, n + 1);
	return 0;
}

/* Why (num_gpu, gpu_milli) cannot be a request, with the column to blame
 * (4 or 5); NULL when it can. */
static const char *bad_shape(int64_t num_gpu, int64_t gpu_milli, int *ret_col)
{
	*ret_col = 4;
	if (num_gpu < 0 || num_gpu > CNL_NODE_MAX_GPUS)
		return "num_gpu out of range 0..16";
	*ret_col = 5;
	if (gpu_milli < 0 || gpu_milli > 1000)
		return "gpu_milli out of range 0..1000";
	if (num_gpu == 0 && gpu_milli != 0)
		return "gpu_milli set on a task without GPUs";
	if (num_gpu > 1 && gpu_milli < 1000)
		return "gpu_milli below 1000 on a multi-GPU task";
	return NULL;
}

int cnl_trace_gpu_type(struct cnl_catalog *cat, const char *model)
{
	struct cnl_gpu_type t;
	int r;

	if (!model)
		return -CNL_EGPUTYPE;
	for (size_t i = 0; i < sizeof(known_models) / sizeof(known_models[0]);
	     i++)
		if (strcmp(model, known_models[i].trace) == 0)
			return cnl_catalog_find(cat, known_models[i].catalog);
	for (size_t i = 0;
	     i < sizeof(undisclosed_models) / sizeof(undisclosed_models[0]);
	     i++) {
		if (strcmp(model, undisclosed_models[i]) != 0)
			continue;
		r = cnl_catalog_find(cat, model);
		if (r >= 0)
			return r;
		memset(&t, 0, sizeof(t));
		snprintf(t.name, sizeof(t.name), "%s", model);
		snprintf(t.vendor, sizeof(t.vendor), "undisclosed");
		/* Placeholders: the trace does not disclose these models. */
		t.sm_count = CNL_TRACE_G_SM_COUNT;
		t.vram_mib = CNL_TRACE_G_VRAM_MIB;
		t.host_profile = -1;
		return cnl_catalog_add(cat, &t, NULL, 0);
	}
	return -CNL_EGPUTYPE;
}

/* The type of a model named in field `col`, with a message on failure. */
static int get_type(struct reader *rd, struct cnl_catalog *cat, int col,
                    const char *name, const char *model)
{
	int t = cnl_trace_gpu_type(cat, model);

	if (t == -CNL_EGPUTYPE)
		return at(rd, t, col, name, "unknown GPU model \"" SHOW "\"",
		          model);
	if (t < 0)
		return at(rd, t, col, name, "cannot add GPU model \"%s\": %s",
		          model, cnl_strerror(t));
	return t;
}

/* ---- node lists ------------------------------------------------------ */

struct node_row {
	char name[sizeof(((struct cnl_node *)0)->name)];
	long line;
	int64_t cpu_milli, mem_mib;
	int n_gpus, gpu_type;
};

static int parse_node(struct reader *rd, struct cnl_catalog *cat,
                      const struct cnl_cluster *c, struct node_row *row)
{
	int64_t v;
	int r;

	memset(row, 0, sizeof(*row));
	row->line = rd->lineno;
	if ((r = get_str(rd, 1, "sn", false, row->name, sizeof(row->name))) < 0)
		return r;
	if (cnl_cluster_find_node(c, row->name) >= 0)
		return at(rd, -CNL_EDUP, 1, "sn",
		          "node \"%s\" is already in the cluster", row->name);
	if ((r = get_int(rd, 2, "cpu_milli", 0, INT64_MAX, &row->cpu_milli)) <
	        0 ||
	    (r = get_int(rd, 3, "memory_mib", 0, INT64_MAX, &row->mem_mib)) <
	        0 ||
	    (r = get_int(rd, 4, "gpu", 0, CNL_NODE_MAX_GPUS, &v)) < 0)
		return r;
	row->n_gpus = (int)v;
	row->gpu_type = -1;
	if (row->n_gpus == 0) {
		if (rd->fields[4][0] != '\0')
			return at(rd, -CNL_EPARSE, 5, "model",
			          "GPU model \"" SHOW
			          "\" on a node without GPUs",
			          rd->fields[4]);
		return 0;
	}
	if (rd->fields[4][0] == '\0')
		return at(rd, -CNL_EPARSE, 5, "model",
		          "missing value on a node with GPUs");
	r = get_type(rd, cat, 5, "model", rd->fields[4]);
	if (r < 0)
		return r;
	row->gpu_type = r;
	return 0;
}

static int cmp_row_name(const void *a, const void *b)
{
	const struct node_row *x = *(const struct node_row *const *)a;
	const struct node_row *y = *(const struct node_row *const *)b;
	int r = strcmp(x->name, y->name);

	if (r != 0)
		return r;
	return x->line < y->line ? -1 : x->line > y->line;
}

/* A name used twice in the file: reported on its later line. */
static int check_dup_names(struct reader *rd, struct node_row *rows, size_t n)
{
	struct node_row **v;
	int r = 0;

	if (n < 2)
		return 0;
	v = malloc(n * sizeof(*v));
	if (!v)
		return msg(rd, -ENOMEM, "%s: out of memory", rd->path);
	for (size_t i = 0; i < n; i++)
		v[i] = &rows[i];
	qsort(v, n, sizeof(*v), cmp_row_name);
	for (size_t i = 1; i < n && r == 0; i++) {
		if (strcmp(v[i - 1]->name, v[i]->name) != 0)
			continue;
		r = msg(rd, -CNL_EDUP,
		        "%s:%ld:1: sn: node \"%s\" already defined on line %ld",
		        rd->path, v[i]->line, v[i]->name, v[i - 1]->line);
	}
	free(v);
	return r;
}

int cnl_trace_load_nodes(const char *path, struct cnl_catalog *cat,
                         struct cnl_cluster *c, char *err, size_t errlen)
{
	struct reader rd;
	struct node_row *rows = NULL;
	size_t n = 0, cap = 0;
	int r;

	if (c->cat != cat) {
		if (err && errlen)
			snprintf(err, errlen,
			         "%s: the cluster was not created over this "
			         "catalog",
			         path);
		return -EINVAL;
	}
	r = reader_open(&rd, path, err, errlen);
	if (r < 0)
		return r;
	if ((r = read_header(&rd)) < 0 ||
	    (r = check_header(&rd, node_header, N_NODE_COLS)) < 0)
		goto out;
	while ((r = read_line(&rd)) > 0) {
		if (n == CNL_TRACE_MAX_ROWS) {
			r = at(&rd, -CNL_ELIMIT, 1, NULL, "more than %d rows",
			       CNL_TRACE_MAX_ROWS);
			goto out;
		}
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 256;
			struct node_row *nr = realloc(rows, ncap * sizeof(*nr));
			if (!nr) {
				r = msg(&rd, -ENOMEM, "%s: out of memory",
				        path);
				goto out;
			}
			rows = nr;
			cap = ncap;
		}
		if ((r = split(&rd, N_NODE_COLS)) < 0 ||
		    (r = parse_node(&rd, cat, c, &rows[n])) < 0)
			goto out;
		n++;
	}
	if (r < 0)
		goto out;
	r = check_dup_names(&rd, rows, n);
	if (r < 0)
		goto out;

	for (size_t i = 0; i < n; i++) {
		struct cnl_node_spec spec = {.name = rows[i].name,
		                             .gpu_type = rows[i].gpu_type,
		                             .n_gpus = rows[i].n_gpus,
		                             .cpu_milli = rows[i].cpu_milli,
		                             .mem_mib = rows[i].mem_mib};
		r = cnl_cluster_add_node(c, &spec);
		if (r < 0) {
			r = msg(&rd, r,
			        "%s:%ld:1: cannot add node \"%s\" (%zu added "
			        "before it stay): %s",
			        path, rows[i].line, rows[i].name, i,
			        cnl_strerror(r));
			goto out;
		}
	}
	r = (int)n;
out:
	free(rows);
	reader_close(&rd);
	return r;
}

/* ---- pod lists ------------------------------------------------------- */

/* gpu_spec: "" or model names joined with '|'. */
static int parse_spec(struct reader *rd, struct cnl_catalog *cat, int col,
                      char *spec, uint64_t *ret)
{
	uint64_t mask = 0;
	char *p = spec;

	if (*p == '\0') {
		*ret = 0;
		return 0;
	}
	for (;;) {
		char *bar = strchr(p, '|');
		int t;

		if (bar)
			*bar = '\0';
		if (*p == '\0')
			return at(rd, -CNL_EPARSE, col, "gpu_spec",
			          "empty GPU model in the list");
		t = get_type(rd, cat, col, "gpu_spec", p);
		if (t < 0)
			return t;
		mask |= UINT64_C(1) << t;
		if (!bar)
			break;
		p = bar + 1;
	}
	*ret = mask;
	return 0;
}

static int parse_pod(struct reader *rd, struct cnl_catalog *cat, int cols,
                     struct cnl_trace_pod *p)
{
	int64_t num_gpu, gpu_milli;
	const char *why;
	int r, col;

	memset(p, 0, sizeof(*p));
	p->creation = p->deletion = p->scheduled = -1;
	if ((r = get_str(rd, 1, "name", false, p->name, sizeof(p->name))) < 0 ||
	    (r = get_int(rd, 2, "cpu_milli", 0, INT64_MAX, &p->cpu_milli)) <
	        0 ||
	    (r = get_int(rd, 3, "memory_mib", 0, INT64_MAX, &p->mem_mib)) < 0 ||
	    (r = get_int(rd, 4, "num_gpu", 0, INT32_MAX, &num_gpu)) < 0 ||
	    (r = get_int(rd, 5, "gpu_milli", 0, INT32_MAX, &gpu_milli)) < 0)
		return r;
	why = bad_shape(num_gpu, gpu_milli, &col);
	if (why)
		return at(rd, -CNL_EPARSE, col, pod_header[col - 1],
		          "%s (num_gpu %" PRId64 ", gpu_milli %" PRId64 ")",
		          why, num_gpu, gpu_milli);
	p->num_gpu = (int)num_gpu;
	p->gpu_milli = (int)gpu_milli;
	if (cols == N_POD_SHORT_COLS)
		return 0;
	if ((r = parse_spec(rd, cat, 6, rd->fields[5], &p->gpu_types)) < 0 ||
	    (r = get_str(rd, 7, "qos", false, p->qos, sizeof(p->qos))) < 0 ||
	    (r = get_str(rd, 8, "pod_phase", false, p->phase,
	                 sizeof(p->phase))) < 0 ||
	    (r = get_int(rd, 9, "creation_time", 0, INT64_MAX, &p->creation)) <
	        0 ||
	    (r = get_int(rd, 10, "deletion_time", 0, INT64_MAX, &p->deletion)) <
	        0)
		return r;
	if (rd->fields[10][0] == '\0')
		return 0; /* never scheduled */
	return get_int(rd, 11, "scheduled_time", 0, INT64_MAX, &p->scheduled);
}

int cnl_trace_load_pods(const char *path, struct cnl_catalog *cat,
                        struct cnl_trace_pod **ret, size_t *ret_n, char *err,
                        size_t errlen)
{
	struct reader rd;
	struct cnl_trace_pod *pods = NULL;
	size_t n = 0, cap = 0;
	int cols, r;

	r = reader_open(&rd, path, err, errlen);
	if (r < 0)
		return r;
	/* The five-column form is the multigpu variants'; anything else is
	 * checked against the full header. */
	if ((r = read_header(&rd)) < 0)
		goto out;
	cols = count_fields(&rd) == N_POD_SHORT_COLS ? N_POD_SHORT_COLS
	                                             : N_POD_COLS;
	if ((r = check_header(&rd, pod_header, cols)) < 0)
		goto out;

	while ((r = read_line(&rd)) > 0) {
		if (n == CNL_TRACE_MAX_ROWS) {
			r = at(&rd, -CNL_ELIMIT, 1, NULL, "more than %d rows",
			       CNL_TRACE_MAX_ROWS);
			goto out;
		}
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 1024;
			struct cnl_trace_pod *np =
			    realloc(pods, ncap * sizeof(*np));
			if (!np) {
				r = msg(&rd, -ENOMEM, "%s: out of memory",
				        path);
				goto out;
			}
			pods = np;
			cap = ncap;
		}
		if ((r = split(&rd, cols)) < 0 ||
		    (r = parse_pod(&rd, cat, cols, &pods[n])) < 0)
			goto out;
		n++;
	}
	if (r < 0)
		goto out;
	if (n == 0) {
		free(pods);
		pods = NULL;
	}
	*ret = pods;
	*ret_n = n;
	pods = NULL;
	r = (int)n;
out:
	free(pods);
	reader_close(&rd);
	return r;
}

int cnl_trace_pod_req(const struct cnl_catalog *cat,
                      const struct cnl_trace_pod *p, uint32_t project,
                      struct cnl_alloc_req *ret)
{
	struct cnl_alloc_req q;
	int col;

	if (p->cpu_milli < 0 || p->mem_mib < 0 ||
	    bad_shape(p->num_gpu, p->gpu_milli, &col))
		return -CNL_EPARSE;
	if (cat->n < 64 && (p->gpu_types >> cat->n) != 0)
		return -CNL_EGPUTYPE;
	memset(&q, 0, sizeof(q));
	q.gpu_type = CNL_GPU_TYPE_ANY;
	q.gpu_types = p->gpu_types;
	q.project = project;
	q.cpu_milli = p->cpu_milli;
	q.mem_mib = p->mem_mib;
	if (p->num_gpu == 0) {
		q.kind = CNL_REQ_CPU;
	} else if (p->gpu_milli < 1000) {
		/* 1000 milli = 100 blocks, rounded up so no share shrinks. */
		q.kind = CNL_REQ_BLOCKS;
		q.blocks = (p->gpu_milli + 9) / 10;
		if (q.blocks < 1)
			q.blocks = 1;
	} else {
		q.kind = CNL_REQ_WHOLE;
		q.gpus = p->num_gpu;
	}
	*ret = q;
	return 0;
}
