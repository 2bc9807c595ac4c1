/*
 * api_cli.h - the one-line install of the cnlab CLI that cnlabd serves:
 *
 *     curl -fsSL http://HOST:PORT/cli | sh
 *
 * Three PUBLIC routes (no token: a laptop has none before it installs the
 * CLI):
 *   GET /cli               a POSIX sh installer with this server's URL and
 *                          the platforms it has binaries for baked in
 *   GET /cli/SHA256SUMS    "<sha256>  cnlab-<os>-<arch>" lines (the format
 *                          of sha256sum), one per binary
 *   GET /cli/{file}        the binary cnlab-<os>-<arch>
 *
 * Which binaries.  With the setting cli_dir, the plain files of that
 * directory named cnlab-<os>-<arch> ([a-z0-9]+ and [a-z0-9_]+: no dot, no
 * slash, so no name can leave the directory).  Without it, the cnlab binary
 * beside cnlabd's own executable (or in ../cli/ of a build tree), served as
 * cnlab-linux-<this machine's arch>.
 *
 * When checksums are taken.  The list of binaries and their SHA-256 sums
 * are made once, by cnl_api_cli_new() at start-up: they say what the
 * operator published.  The bytes are read at each request.  A binary
 * changed after start-up is therefore served with its old sum, and the
 * installer refuses it (it deletes the download and installs nothing); a
 * restart publishes the new one.
 *
 * Which URL.  The installer downloads from, and tells the user to log in
 * to, the setting public_url when set (behind a proxy), else
 * http(s)://<the request's Host header>.  Both are checked to hold only
 * URL characters that need no quoting in sh, since they are written into
 * the script.
 */
#ifndef CNL_SERVER_API_CLI_H
#define CNL_SERVER_API_CLI_H

#include <stdbool.h>
#include <stddef.h>

#include "net/http_server.h"

/* Binaries one cnlabd serves. */
#define CNL_API_CLI_FILES_MAX 64
/* Bytes of a binary's name, "cnlab-<os>-<arch>", with its NUL. */
#define CNL_API_CLI_NAME_MAX 64
/* Largest binary served (the CLI is a few MiB). */
#define CNL_API_CLI_SIZE_MAX (256L * 1024 * 1024)
/* Bytes of public_url or of the base URL made from a Host header. */
#define CNL_API_CLI_URL_MAX 512

struct cnl_api_cli;

/*
 * cnl_api_cli_new - find the binaries to serve (in @cli_dir, or beside
 * this executable when @cli_dir is NULL) and take their SHA-256 sums.
 * @public_url (NULL: none) is an http:// or https:// URL of this server as
 * users reach it.  Returns 0, or -CNL_ECONFIG with @err naming the bad
 * setting or the file that could not be read.  No binary at all is not an
 * error: the installer then says that none is available.
 */
int cnl_api_cli_new(const char *cli_dir, const char *public_url,
                    struct cnl_api_cli **ret, char *err, size_t errlen);

/* cnl_api_cli_free - NULL is allowed. */
void cnl_api_cli_free(struct cnl_api_cli *cli);

/* cnl_api_cli_set_tls - whether the server speaks HTTPS (the URL's scheme
 * when there is no public_url). */
void cnl_api_cli_set_tls(struct cnl_api_cli *cli, bool tls);

/* cnl_api_cli_count - the number of binaries served. */
size_t cnl_api_cli_count(const struct cnl_api_cli *cli);

/* cnl_api_cli_valid_name - whether @name is cnlab-[a-z0-9]+-[a-z0-9_]+. */
bool cnl_api_cli_valid_name(const char *name);

/*
 * cnl_api_cli_valid_host - whether @host, a Host header, is a DNS name, an
 * IPv4 address or a bracketed IPv6 address, with an optional :port.
 */
bool cnl_api_cli_valid_host(const char *host);

/*
 * cnl_api_cli_script - the installer for a request that carried the Host
 * header @host (NULL: none), malloc'd into *@ret.  Returns 0, or
 * -CNL_EFIELD when there is no public_url and @host is missing or not
 * valid (the caller answers 400).
 */
int cnl_api_cli_script(const struct cnl_api_cli *cli, const char *host,
                       char **ret);

/*
 * cnl_api_cli_base_url - this server's URL as users reach it: public_url,
 * else http(s)://@host (a Host header), into @buf (CNL_API_CLI_URL_MAX
 * bytes).  0, or -CNL_EFIELD when neither is there.
 */
int cnl_api_cli_base_url(const struct cnl_api_cli *cli, const char *host,
                         char *buf);

/* cnl_api_cli_sums - the SHA256SUMS text, malloc'd ("" when empty). */
char *cnl_api_cli_sums(const struct cnl_api_cli *cli);

/* The handlers of the three routes (api.c's route table). */
void cnl_api_h_cli_script(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp);
void cnl_api_h_cli_sums(void *call, struct cnl_http_request *req,
                        struct cnl_http_response *resp);
void cnl_api_h_cli_file(void *call, struct cnl_http_request *req,
                        struct cnl_http_response *resp);

#endif /* CNL_SERVER_API_CLI_H */
