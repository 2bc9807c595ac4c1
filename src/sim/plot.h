/*
 * plot.h - line charts as standalone SVG files, for the simulator's
 * reports (no plotting library needed to read them).
 */
#ifndef CNL_SIM_PLOT_H
#define CNL_SIM_PLOT_H

#include <stddef.h>

#define CNL_PLOT_MAX_POINTS 4096

struct cnl_plot_series {
	const char *name;
	int n;
	double x[CNL_PLOT_MAX_POINTS], y[CNL_PLOT_MAX_POINTS];
};

/* cnl_plot_svg - write the series to `path` as an SVG line chart with
 * axes, ticks, a legend and the title; 0 or a negative errno (message in
 * `err`). */
int cnl_plot_svg(const char *path, const char *title, const char *xlabel,
                 const char *ylabel, const struct cnl_plot_series *s, int n,
                 char *err, size_t errlen);

#endif /* CNL_SIM_PLOT_H */
