/*
 * ui_assets.h - the dashboard's static files, embedded in cnlabd at build
 * time: web/build.sh writes them into ${CMAKE_BINARY_DIR}/ui, and
 * ui_embed (ui_embed.c, a build tool) turns that folder into the table
 * below (ui_assets.c, generated).  api_ui.c serves it under /ui/.
 */
#ifndef CNL_SERVER_UI_ASSETS_H
#define CNL_SERVER_UI_ASSETS_H

#include <stddef.h>

struct cnl_ui_asset {
	const char *path;         /* relative to /ui/: "index.html" */
	const char *content_type; /* "text/html; charset=utf-8" */
	const char *etag;         /* strong: "\"<32 hex digits>\"" */
	const unsigned char *data;
	size_t len;
};

extern const struct cnl_ui_asset cnl_ui_assets[];
extern const size_t cnl_ui_n_assets;

#endif /* CNL_SERVER_UI_ASSETS_H */
