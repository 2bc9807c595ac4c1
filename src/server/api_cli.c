/*
 * api_cli.c - the one-line install of the cnlab CLI (see api_cli.h): the
 * catalog of binaries and their SHA-256 sums, made once at start-up; the
 * installer script generated per request with the server's URL; and the
 * handlers of GET /cli, /cli/SHA256SUMS and /cli/{file}.
 *
 * The installer is POSIX sh (dash, busybox sh, bash, macOS's sh).  Its
 * whole body is one function called by the last line, so that a transfer
 * cut short runs nothing, and so that commands reading standard input
 * cannot eat the rest of a script piped into sh.  It downloads into a
 * temporary directory, checks the sum there, and only then copies into a
 * temporary file in the install directory and renames it over cnlab: the
 * install directory never holds an unchecked byte, and an existing cnlab
 * is replaced in one step.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "cnlab/errors.h"
#include "common/log.h"
#include "common/util.h"
#include "net/metrics.h"
#include "server/api-internal.h"
#include "server/api_cli.h"

/* Every binary's name starts so; the rest is <os>-<arch>. */
#define PREFIX "cnlab-"

/* One binary served. */
struct cli_file {
	char name[CNL_API_CLI_NAME_MAX]; /* cnlab-linux-x86_64 */
	char *path;                      /* where its bytes are read */
	bool follow;                     /* path may be a symbolic link */
	char sha256[2 * 32 + 1];         /* lowercase hex, at start-up */
};

struct cnl_api_cli {
	struct cli_file *files; /* sorted by name */
	size_t n;
	char *public_url; /* without a trailing '/'; NULL: from Host */
	bool tls;
};

/*
 * The installer after its settings (CNLAB_URL, CNLAB_PLATFORMS), which
 * cnl_api_cli_script() writes first.  Keep it POSIX: no local, no [[ ]],
 * no arrays, no $'...'; tests/integration/installer.sh runs it under dash,
 * bash and busybox sh, and through shellcheck -s sh where installed.
 */
static const char script_body[] =
    "say() {\n"
    "\tprintf '%s\\n' \"$*\"\n"
    "}\n"
    "\n"
    "die() {\n"
    "\tprintf 'cnlab install: error: %s\\n' \"$*\" >&2\n"
    "\texit 1\n"
    "}\n"
    "\n"
    "tmpdir=\n"
    "tmpfile=\n"
    "cleanup() {\n"
    "\tif [ -n \"$tmpfile\" ]; then\n"
    "\t\trm -f \"$tmpfile\"\n"
    "\tfi\n"
    "\tif [ -n \"$tmpdir\" ]; then\n"
    "\t\trm -rf \"$tmpdir\"\n"
    "\tfi\n"
    "}\n"
    "\n"
    "# fetch URL FILE\n"
    "fetch() {\n"
    "\tif [ \"$downloader\" = curl ]; then\n"
    "\t\tcurl -fsSL -o \"$2\" \"$1\"\n"
    "\telse\n"
    "\t\twget -q -O \"$2\" \"$1\"\n"
    "\tfi\n"
    "}\n"
    "\n"
    "# sha256 FILE: the file's SHA-256 in hex.\n"
    "sha256() {\n"
    "\tcase $hasher in\n"
    "\tsha256sum) sha256sum \"$1\" | awk '{ print $1 }' ;;\n"
    "\tshasum) shasum -a 256 \"$1\" | awk '{ print $1 }' ;;\n"
    "\t*) openssl dgst -sha256 \"$1\" | sed 's/^.*= *//' ;;\n"
    "\tesac\n"
    "}\n"
    "\n"
    "main() {\n"
    "\tos=$(uname -s 2>/dev/null) || os=unknown\n"
    "\tarch=$(uname -m 2>/dev/null) || arch=unknown\n"
    "\tcase $os in\n"
    "\tLinux) os=linux ;;\n"
    "\tDarwin) os=darwin ;;\n"
    "\tesac\n"
    "\tcase $arch in\n"
    "\tx86_64 | amd64) arch=x86_64 ;;\n"
    "\taarch64 | arm64) arch=aarch64 ;;\n"
    "\tesac\n"
    "\tcase \" $CNLAB_PLATFORMS \" in\n"
    "\t*\" $os-$arch \"*) ;;\n"
    "\t*)\n"
    "\t\tdie \"$CNLAB_URL has no cnlab for OS $os, architecture $arch;\" \\\n"
    "\t\t\t\"available: ${CNLAB_PLATFORMS:-none}\"\n"
    "\t\t;;\n"
    "\tesac\n"
    "\tfile=cnlab-$os-$arch\n"
    "\n"
    "\tif command -v curl >/dev/null 2>&1; then\n"
    "\t\tdownloader=curl\n"
    "\telif command -v wget >/dev/null 2>&1; then\n"
    "\t\tdownloader=wget\n"
    "\telse\n"
    "\t\tdie \"neither curl nor wget is installed\"\n"
    "\tfi\n"
    "\tif command -v sha256sum >/dev/null 2>&1; then\n"
    "\t\thasher=sha256sum\n"
    "\telif command -v shasum >/dev/null 2>&1; then\n"
    "\t\thasher=shasum\n"
    "\telif command -v openssl >/dev/null 2>&1; then\n"
    "\t\thasher=openssl\n"
    "\telse\n"
    "\t\tdie \"cannot check the download: none of sha256sum,\" \\\n"
    "\t\t\t\"shasum or openssl is installed\"\n"
    "\tfi\n"
    "\n"
    "\tsysdir=${CNLAB_SYSTEM_BIN_DIR:-/usr/local/bin}\n"
    "\tif [ -n \"${CNLAB_INSTALL_DIR:-}\" ]; then\n"
    "\t\tdir=$CNLAB_INSTALL_DIR\n"
    "\telif [ -d \"$sysdir\" ] && [ -w \"$sysdir\" ]; then\n"
    "\t\tdir=$sysdir\n"
    "\telif [ -n \"${HOME:-}\" ]; then\n"
    "\t\tdir=$HOME/.local/bin\n"
    "\telse\n"
    "\t\tdie \"$sysdir is not writable and HOME is not set;\" \\\n"
    "\t\t\t\"set CNLAB_INSTALL_DIR\"\n"
    "\tfi\n"
    "\n"
    "\ttrap cleanup EXIT\n"
    "\ttrap 'exit 130' INT\n"
    "\ttrap 'exit 143' TERM\n"
    "\ttmpdir=$(mktemp -d 2>/dev/null) || tmpdir=\n"
    "\tif [ -z \"$tmpdir\" ]; then\n"
    "\t\ttmpdir=${TMPDIR:-/tmp}/cnlab-install.$$\n"
    "\t\tif ! (umask 077 && mkdir \"$tmpdir\"); then\n"
    "\t\t\ttmpdir=\n"
    "\t\t\tdie \"cannot create a temporary directory\"\n"
    "\t\tfi\n"
    "\tfi\n"
    "\n"
    "\tsay \"Downloading $file from $CNLAB_URL\"\n"
    "\tfetch \"$CNLAB_URL/cli/SHA256SUMS\" \"$tmpdir/SHA256SUMS\" ||\n"
    "\t\tdie \"cannot download $CNLAB_URL/cli/SHA256SUMS\"\n"
    "\t# shellcheck disable=SC2016 # an awk program, not an expansion\n"
    "\tpick='$2 == f || $2 == \"*\" f { print $1; exit }'\n"
    "\twant=$(awk -v f=\"$file\" \"$pick\" \"$tmpdir/SHA256SUMS\")\n"
    "\tif [ -z \"$want\" ]; then\n"
    "\t\tdie \"$CNLAB_URL/cli/SHA256SUMS has no checksum for $file\"\n"
    "\tfi\n"
    "\tfetch \"$CNLAB_URL/cli/$file\" \"$tmpdir/$file\" ||\n"
    "\t\tdie \"cannot download $CNLAB_URL/cli/$file\"\n"
    "\tgot=$(sha256 \"$tmpdir/$file\")\n"
    "\tif [ \"$got\" != \"$want\" ]; then\n"
    "\t\trm -f \"$tmpdir/$file\"\n"
    "\t\tdie \"SHA-256 checksum mismatch for $file:\" \\\n"
    "\t\t\t\"expected $want (SHA256SUMS), got ${got:-nothing};\" \\\n"
    "\t\t\t\"the download was deleted and nothing was installed\"\n"
    "\tfi\n"
    "\n"
    "\tmkdir -p \"$dir\" || die \"cannot create $dir\"\n"
    "\ttmpfile=$(mktemp \"$dir/.cnlab.XXXXXX\" 2>/dev/null) ||\n"
    "\t\ttmpfile=$dir/.cnlab.$$\n"
    "\tnew=$tmpdir/$file\n"
    "\tif ! cp \"$new\" \"$tmpfile\" || ! chmod 0755 \"$tmpfile\" ||\n"
    "\t\t! mv -f \"$tmpfile\" \"$dir/cnlab\"; then\n"
    "\t\tdie \"cannot install into $dir; set CNLAB_INSTALL_DIR to a\" \\\n"
    "\t\t\t\"directory you can write\"\n"
    "\tfi\n"
    "\ttmpfile=\n"
    "\tsay \"Installed cnlab to $dir/cnlab\"\n"
    "\tcase \":${PATH:-}:\" in\n"
    "\t*\":$dir:\"*) ;;\n"
    "\t*)\n"
    "\t\tsay \"\"\n"
    "\t\tsay \"$dir is not on your PATH; add it, e.g. in ~/.profile:\"\n"
    "\t\tsay \"  export PATH=\\\"$dir:\\$PATH\\\"\"\n"
    "\t\t;;\n"
    "\tesac\n"
    "\tsay \"\"\n"
    "\t# Remember this server unless the user already chose one, so a\n"
    "\t# plain cnlab login knows where to go.\n"
    "\t\"$dir/cnlab\" config set server \"$CNLAB_URL\" --if-unset \\\n"
    "\t\t>/dev/null 2>&1\n"
    "\tif [ \"$(\"$dir/cnlab\" config get server 2>/dev/null)\" = \\\n"
    "\t\t\"$CNLAB_URL\" ]; then\n"
    "\t\tsay \"Next, log in to $CNLAB_URL:\"\n"
    "\t\tsay \"  cnlab login\"\n"
    "\telse\n"
    "\t\tsay \"Next, log in:\"\n"
    "\t\tsay \"  cnlab login --server $CNLAB_URL\"\n"
    "\tfi\n"
    "}\n"
    "\n"
    "main \"$@\"\n";

/* ------------------------------------------------------------------------ */
/* Names, hosts and URLs                                                    */
/* ------------------------------------------------------------------------ */

static bool lower_or_digit(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* A run of one or more characters of [a-z0-9] (plus '_' when @underscore)
 * from @s; returns the character after it, or NULL for an empty run. */
static const char *name_part(const char *s, bool underscore)
{
	const char *p = s;

	while (lower_or_digit(*p) || (underscore && *p == '_'))
		p++;
	return p == s ? NULL : p;
}

bool cnl_api_cli_valid_name(const char *name)
{
	const char *p;

	if (!name || strlen(name) >= CNL_API_CLI_NAME_MAX ||
	    strncmp(name, PREFIX, strlen(PREFIX)) != 0)
		return false;
	if (!(p = name_part(name + strlen(PREFIX), false)) || *p != '-')
		return false;
	return (p = name_part(p + 1, true)) && *p == '\0';
}

static bool host_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '.' || c == '-';
}

static bool ipv6_char(char c)
{
	return (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
	       (c >= '0' && c <= '9') || c == ':' || c == '.';
}

/* The length of a valid host[:port] at the start of @s, which ends there
 * or at a '/'; 0 when there is none. */
static size_t host_len(const char *s)
{
	size_t i = 0, digits = 0;

	if (s[0] == '[') {
		for (i = 1; s[i] && s[i] != ']'; i++)
			if (!ipv6_char(s[i]))
				return 0;
		if (s[i] != ']' || i == 1)
			return 0;
		i++;
	} else {
		while (host_char(s[i]))
			i++;
		if (i == 0)
			return 0;
	}
	if (s[i] == ':') {
		for (i++; s[i] >= '0' && s[i] <= '9'; i++)
			digits++;
		if (digits == 0 || digits > 5)
			return 0;
	}
	if (s[i] != '\0' && s[i] != '/')
		return 0;
	return i;
}

bool cnl_api_cli_valid_host(const char *host)
{
	size_t n;

	if (!host || strlen(host) > 255)
		return false;
	n = host_len(host);
	return n > 0 && host[n] == '\0';
}

/* A URL of this server: http(s)://host[:port][/path], the path in
 * [A-Za-z0-9._~/-].  Nothing that sh would read inside '...' or "...". */
static bool valid_public_url(const char *url)
{
	const char *p;
	size_t n;

	if (strlen(url) >= CNL_API_CLI_URL_MAX)
		return false;
	if (strncmp(url, "http://", 7) == 0)
		p = url + 7;
	else if (strncmp(url, "https://", 8) == 0)
		p = url + 8;
	else
		return false;
	if (!(n = host_len(p)))
		return false;
	for (p += n; *p; p++)
		if (!host_char(*p) && *p != '_' && *p != '~' && *p != '/')
			return false;
	return true;
}

/* ------------------------------------------------------------------------ */
/* The catalog                                                              */
/* ------------------------------------------------------------------------ */

/*
 * Open @path for reading if it is a regular file no larger than
 * CNL_API_CLI_SIZE_MAX; a symbolic link is followed only when @follow.
 * Returns the descriptor and its size in *@ret_size, or -errno (-ENOENT
 * for anything that is not such a file).
 */
static int open_plain(const char *path, bool follow, size_t *ret_size)
{
	struct stat st;
	int fd;

	/* O_NONBLOCK: a FIFO in a binary's place must not hang us. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK |
	                    (follow ? 0 : O_NOFOLLOW));
	if (fd < 0)
		return errno == ELOOP ? -ENOENT : -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_size > CNL_API_CLI_SIZE_MAX) {
		close(fd);
		return -ENOENT;
	}
	*ret_size = (size_t)st.st_size;
	return fd;
}

/* SHA-256 of what @fd holds, in hex into @hex (65 bytes); 0 or -errno. */
static int fd_sha256(int fd, char *hex)
{
	unsigned char md[EVP_MAX_MD_SIZE], buf[64 * 1024];
	unsigned mdlen = 0;
	EVP_MD_CTX *ctx;
	ssize_t got;
	int r = 0;

	if (!(ctx = EVP_MD_CTX_new()))
		return -ENOMEM;
	if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
		r = -EIO;
	while (r == 0 && (got = read(fd, buf, sizeof(buf))) != 0) {
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			r = -errno;
		else if (EVP_DigestUpdate(ctx, buf, (size_t)got) != 1)
			r = -EIO;
	}
	if (r == 0 && (EVP_DigestFinal_ex(ctx, md, &mdlen) != 1 || mdlen != 32))
		r = -EIO;
	EVP_MD_CTX_free(ctx);
	if (r < 0)
		return r;
	for (unsigned i = 0; i < mdlen; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	return 0;
}

/* Add @path as @name, taking its sum; 0, 1 when it is no plain file (it is
 * skipped), or -CNL_ECONFIG with @err. */
static int add_file(struct cnl_api_cli *cli, const char *name, const char *path,
                    bool follow, char *err, size_t errlen)
{
	struct cli_file *f;
	size_t size;
	int fd, r;

	if ((fd = open_plain(path, follow, &size)) == -ENOENT)
		return 1;
	if (fd < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(-fd));
		return -CNL_ECONFIG;
	}
	if (cli->n == CNL_API_CLI_FILES_MAX) {
		close(fd);
		snprintf(err, errlen, "more than %d cnlab binaries to serve",
		         CNL_API_CLI_FILES_MAX);
		return -CNL_ECONFIG;
	}
	f = &cli->files[cli->n];
	r = fd_sha256(fd, f->sha256);
	close(fd);
	if (r < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(-r));
		return -CNL_ECONFIG;
	}
	snprintf(f->name, sizeof(f->name), "%s", name);
	f->path = cnl_xstrdup(path);
	f->follow = follow;
	cli->n++;
	return 0;
}

static int scan_dir(struct cnl_api_cli *cli, const char *dir, char *err,
                    size_t errlen)
{
	char path[PATH_MAX];
	struct dirent *e;
	DIR *d;
	int r = 0;

	if (!(d = opendir(dir))) {
		snprintf(err, errlen, "cli_dir %s: %s", dir, strerror(errno));
		return -CNL_ECONFIG;
	}
	while (r >= 0 && (e = readdir(d))) {
		if (!cnl_api_cli_valid_name(e->d_name))
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir,
		                     e->d_name) >= sizeof(path))
			continue;
		/* Plain files only: no link can point out of cli_dir. */
		r = add_file(cli, e->d_name, path, false, err, errlen);
		if (r == 1)
			cnl_log(CNL_LOG_WARN,
			        "CLI binary skipped: not a plain file, or too "
			        "large",
			        "file=%s", e->d_name);
	}
	closedir(d);
	return r < 0 ? r : 0;
}

/* This machine's architecture as the installer names it. */
static void this_arch(char *out, size_t len)
{
#if defined(__x86_64__)
	snprintf(out, len, "x86_64");
#elif defined(__aarch64__)
	snprintf(out, len, "aarch64");
#else
	struct utsname u;

	snprintf(out, len, "%s", uname(&u) == 0 ? u.machine : "unknown");
	for (char *p = out; *p; p++)
		if (*p == '-')
			*p = '_';
#endif
}

/* The cnlab binary beside this executable, or in a build tree's ../cli/
 * (as allinone.c finds cnlab-agent). */
static int add_beside_self(struct cnl_api_cli *cli, char *err, size_t errlen)
{
	static const char *const rel[] = {"/cnlab", "/../cli/cnlab"};
	char self[PATH_MAX], path[PATH_MAX], name[CNL_API_CLI_NAME_MAX];
	char arch[32], *slash;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	int r;

	this_arch(arch, sizeof(arch));
	snprintf(name, sizeof(name), PREFIX "linux-%s", arch);
	if (n <= 0 || !cnl_api_cli_valid_name(name))
		return 0;
	self[n] = '\0';
	if ((slash = strrchr(self, '/')))
		*slash = '\0';
	for (size_t i = 0; i < CNL_ARRAY_SIZE(rel); i++) {
		if ((size_t)snprintf(path, sizeof(path), "%s%s", self,
		                     rel[i]) >= sizeof(path) ||
		    access(path, X_OK) < 0)
			continue;
		r = add_file(cli, name, path, true, err, errlen);
		return r < 0 ? r : 0;
	}
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct cli_file *)a)->name,
	              ((const struct cli_file *)b)->name);
}

int cnl_api_cli_new(const char *cli_dir, const char *public_url,
                    struct cnl_api_cli **ret, char *err, size_t errlen)
{
	struct cnl_api_cli *cli;
	size_t n;
	int r;

	if (public_url && public_url[0] && !valid_public_url(public_url)) {
		snprintf(
		    err, errlen,
		    "public_url must be http:// or https:// with a host, "
		    "an optional port and a path of A-Z a-z 0-9 . _ ~ / -");
		return -CNL_ECONFIG;
	}
	cli = cnl_xcalloc(1, sizeof(*cli));
	cli->files = cnl_xcalloc(CNL_API_CLI_FILES_MAX, sizeof(*cli->files));
	if (public_url && public_url[0]) {
		cli->public_url = cnl_xstrdup(public_url);
		n = strlen(cli->public_url);
		while (n > 0 && cli->public_url[n - 1] == '/')
			cli->public_url[--n] = '\0';
	}
	r = cli_dir && cli_dir[0] ? scan_dir(cli, cli_dir, err, errlen)
	                          : add_beside_self(cli, err, errlen);
	if (r < 0) {
		cnl_api_cli_free(cli);
		return r;
	}
	qsort(cli->files, cli->n, sizeof(*cli->files), by_name);
	for (size_t i = 0; i < cli->n; i++)
		cnl_log(CNL_LOG_DEBUG, "CLI binary published",
		        "file=%s sha256=%s", cli->files[i].name,
		        cli->files[i].sha256);
	*ret = cli;
	return 0;
}

void cnl_api_cli_free(struct cnl_api_cli *cli)
{
	if (!cli)
		return;
	for (size_t i = 0; i < cli->n; i++)
		free(cli->files[i].path);
	free(cli->files);
	free(cli->public_url);
	free(cli);
}

void cnl_api_cli_set_tls(struct cnl_api_cli *cli, bool tls)
{
	cli->tls = tls;
}

size_t cnl_api_cli_count(const struct cnl_api_cli *cli)
{
	return cli ? cli->n : 0;
}

static const struct cli_file *find(const struct cnl_api_cli *cli,
                                   const char *name)
{
	for (size_t i = 0; i < cli->n; i++)
		if (strcmp(cli->files[i].name, name) == 0)
			return &cli->files[i];
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* The texts                                                                */
/* ------------------------------------------------------------------------ */

int cnl_api_cli_base_url(const struct cnl_api_cli *cli, const char *host,
                         char *buf)
{
	if (cli->public_url)
		snprintf(buf, CNL_API_CLI_URL_MAX, "%s", cli->public_url);
	else if (cnl_api_cli_valid_host(host))
		snprintf(buf, CNL_API_CLI_URL_MAX, "%s://%s",
		         cli->tls ? "https" : "http", host);
	else
		return -CNL_EFIELD;
	return 0;
}

int cnl_api_cli_script(const struct cnl_api_cli *cli, const char *host,
                       char **ret)
{
	struct cnl_metrics_buf b = {0};
	char url[CNL_API_CLI_URL_MAX];

	if (cnl_api_cli_base_url(cli, host, url) < 0)
		return -CNL_EFIELD;
	cnl_mb_printf(
	    &b,
	    "#!/bin/sh\n"
	    "# Installs the cnlab CLI from the CNLab server at %s:\n"
	    "#\n"
	    "#     curl -fsSL %s/cli | sh\n"
	    "#\n"
	    "# Generated by cnlabd.  It picks the cnlab binary for this OS\n"
	    "# and architecture, downloads it from %s/cli/,\n"
	    "# checks its SHA-256 against %s/cli/SHA256SUMS\n"
	    "# (a mismatch installs nothing), and installs it as cnlab,\n"
	    "# mode 0755, into the first of:\n"
	    "#   $CNLAB_INSTALL_DIR   when set (created when missing);\n"
	    "#   /usr/local/bin       when writable (as root); tests name\n"
	    "#                        another with CNLAB_SYSTEM_BIN_DIR;\n"
	    "#   ~/.local/bin         (created when missing).\n"
	    "set -u\n"
	    "CNLAB_URL='%s'\n"
	    "CNLAB_PLATFORMS='",
	    url, url, url, url, url);
	for (size_t i = 0; i < cli->n; i++)
		cnl_mb_printf(&b, "%s%s", i ? " " : "",
		              cli->files[i].name + strlen(PREFIX));
	cnl_mb_printf(&b, "'\n\n%s", script_body);
	*ret = b.p;
	return 0;
}

char *cnl_api_cli_sums(const struct cnl_api_cli *cli)
{
	struct cnl_metrics_buf b = {0};

	for (size_t i = 0; i < cli->n; i++)
		cnl_mb_printf(&b, "%s  %s\n", cli->files[i].sha256,
		              cli->files[i].name);
	return b.p ? b.p : cnl_xstrdup("");
}

/* The whole of @f's file, read now; 0 or -errno. */
static int read_binary(const struct cli_file *f, char **ret, size_t *ret_len)
{
	char *buf;
	size_t size = 0, n = 0;
	ssize_t got;
	int fd, e;

	if ((fd = open_plain(f->path, f->follow, &size)) < 0)
		return fd;
	buf = cnl_xmalloc(size + 1);
	while (n < size) {
		got = read(fd, buf + n, size - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			e = errno;
			free(buf);
			close(fd);
			return -e;
		}
		if (got == 0)
			break; /* shrunk meanwhile: send what there is */
		n += (size_t)got;
	}
	close(fd);
	buf[n] = '\0';
	*ret = buf;
	*ret_len = n;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Handlers                                                                 */
/* ------------------------------------------------------------------------ */

void cnl_api_h_cli_script(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	struct call *c = call;
	char *text;

	if (cnl_api_cli_script(c->api->cli, cnl_http_header(req, "Host"),
	                       &text) < 0) {
		cnl_http_error(resp, 400, "bad_request",
		               "the Host header is missing or not a host name; "
		               "the server's public_url setting names the URL");
		return;
	}
	resp->status = 200;
	resp->text = text;
	resp->content_type = "text/x-shellscript; charset=utf-8";
}

void cnl_api_h_cli_sums(void *call, struct cnl_http_request *req,
                        struct cnl_http_response *resp)
{
	struct call *c = call;

	resp->status = 200;
	resp->text = cnl_api_cli_sums(c->api->cli);
	resp->content_type = "text/plain; charset=utf-8";
}

void cnl_api_h_cli_file(void *call, struct cnl_http_request *req,
                        struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *name = cnl_http_param(req, "file");
	const struct cli_file *f;
	char q[CNL_LOG_QUOTE_MAX];
	char *bytes = NULL;
	size_t n = 0;
	int r;

	if (!cnl_api_cli_valid_name(name) || !(f = find(c->api->cli, name))) {
		cnl_http_error(resp, 404, "not_found",
		               "no such file; GET /cli/SHA256SUMS lists them");
		return;
	}
	if ((r = read_binary(f, &bytes, &n)) < 0) {
		cnl_log(CNL_LOG_ERROR, "cli binary unreadable",
		        "file=%s path=%s err=%s", f->name,
		        cnl_log_quote(q, sizeof(q), f->path), strerror(-r));
		cnl_http_error(resp, r == -ENOENT ? 404 : 500,
		               r == -ENOENT ? "not_found" : "internal",
		               "%s is not available", f->name);
		return;
	}
	resp->status = 200;
	resp->text = bytes; /* NUL-terminated: an empty file sends "" */
	resp->text_len = n;
	resp->content_type = "application/octet-stream";
}
