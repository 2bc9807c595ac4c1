/*
 * plot.c - SVG line charts (see plot.h).  Axis ranges are rounded out to
 * "nice" steps; text is escaped.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sim/plot.h"

static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                     "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                     "#bcbd22", "#17becf"};

static void esc(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '<':
			fputs("&lt;", f);
			break;
		case '>':
			fputs("&gt;", f);
			break;
		case '&':
			fputs("&amp;", f);
			break;
		case '"':
			fputs("&quot;", f);
			break;
		default:
			fputc(*s, f);
		}
	}
}

static double nice_step(double span)
{
	double raw = span / 8, mag = pow(10, floor(log10(raw)));
	double r = raw / mag;

	return (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * mag;
}

int cnl_plot_svg(const char *path, const char *title, const char *xlabel,
                 const char *ylabel, const struct cnl_plot_series *s, int n,
                 char *err, size_t errlen)
{
	const double W = 860, H = 540, L = 80, R = 190, T = 50, B = 60;
	double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
	FILE *f;

	for (int i = 0; i < n; i++)
		for (int k = 0; k < s[i].n; k++) {
			x0 = fmin(x0, s[i].x[k]);
			x1 = fmax(x1, s[i].x[k]);
			y0 = fmin(y0, s[i].y[k]);
			y1 = fmax(y1, s[i].y[k]);
		}
	if (!isfinite(x0)) {
		x0 = y0 = 0;
		x1 = y1 = 1;
	}
	if (x1 <= x0)
		x1 = x0 + 1;
	if (y1 <= y0)
		y1 = y0 + 1;
	double xs = nice_step(x1 - x0), ys = nice_step(y1 - y0);
	x0 = floor(x0 / xs) * xs;
	x1 = ceil(x1 / xs) * xs;
	y0 = floor(y0 / ys) * ys;
	y1 = ceil(y1 / ys) * ys;
	f = fopen(path, "w");
	if (!f) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
#define PX(v) (L + ((v)-x0) / (x1 - x0) * (W - L - R))
#define PY(v) (H - B - ((v)-y0) / (y1 - y0) * (H - T - B))
	fprintf(f,
	        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
	        "height=\"%.0f\" font-family=\"sans-serif\" font-size=\"13\">\n"
	        "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
	        W, H);
	fprintf(f, "<text x=\"%.0f\" y=\"28\" font-size=\"16\">", L);
	esc(f, title);
	fputs("</text>\n", f);
	for (double v = x0; v <= x1 + xs / 2; v += xs)
		fprintf(f,
		        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
		        "stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" "
		        "text-anchor=\"middle\">%g</text>\n",
		        PX(v), PY(y0), PX(v), PY(y1), PX(v), PY(y0) + 18, v);
	for (double v = y0; v <= y1 + ys / 2; v += ys)
		fprintf(f,
		        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
		        "stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" "
		        "text-anchor=\"end\">%g</text>\n",
		        PX(x0), PY(v), PX(x1), PY(v), PX(x0) - 6, PY(v) + 4, v);
	fprintf(f,
	        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
	        "fill=\"none\" stroke=\"#333\"/>\n",
	        PX(x0), PY(y1), PX(x1) - PX(x0), PY(y0) - PY(y1));
	fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">",
	        (PX(x0) + PX(x1)) / 2, H - 15);
	esc(f, xlabel);
	fprintf(f,
	        "</text>\n<text transform=\"translate(20,%.1f) rotate(-90)\" "
	        "text-anchor=\"middle\">",
	        (PY(y0) + PY(y1)) / 2);
	esc(f, ylabel);
	fputs("</text>\n", f);
	for (int i = 0; i < n; i++) {
		const char *col = colors[i % 10];
		fprintf(f,
		        "<polyline fill=\"none\" stroke=\"%s\" "
		        "stroke-width=\"2\" points=\"",
		        col);
		for (int k = 0; k < s[i].n; k++)
			fprintf(f, "%.1f,%.1f ", PX(s[i].x[k]), PY(s[i].y[k]));
		fprintf(f,
		        "\"/>\n<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" "
		        "y2=\"%.0f\" stroke=\"%s\" stroke-width=\"3\"/>"
		        "<text x=\"%.0f\" y=\"%.0f\">",
		        W - R + 15, T + 20 + 22.0 * i, W - R + 40,
		        T + 20 + 22.0 * i, col, W - R + 46, T + 24 + 22.0 * i);
		esc(f, s[i].name);
		fputs("</text>\n", f);
	}
#undef PX
#undef PY
	fputs("</svg>\n", f);
	if (fclose(f) != 0) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	return 0;
}
