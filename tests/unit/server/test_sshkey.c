/*
 * test_sshkey.c - the public keys `cnlab ssh-key add` takes and the host
 * keys cnlabd makes (server/sshkey.h): keys made by ssh-keygen are taken
 * with ssh-keygen's own fingerprints; what is not a key, or a key with
 * options, a weak RSA key or a second line, is refused naming why; a host
 * key made here is one that ssh-keygen reads and whose public half it
 * derives to the same line.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cnlab/errors.h"
#include "server/sshkey.h"

/* Made with ssh-keygen 9.2 (-t ed25519, -t ecdsa -b 384, -t rsa -b 2048
 * and -b 1024); fingerprints as ssh-keygen -l prints them. */
static const char ED[] =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIF+Ps7mrMZfhb66aSt6e4FLj"
    "yOUyOzHMHTonGaUISAOD ana@laptop";
static const char EC[] =
    "ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlz"
    "dHAzODQAAABhBCy15zorehlpvVW48tvGcqoZ9ekuarQxtXE9efMmFFG/4HF+"
    "ZqjfHtkoV/cAfhDgDJUoyxNXLoWhR9oPTCk5o6YKQ+ZcIImlaQLiSEEAwHTf"
    "m9uySuebvgkw9heBcB8taQ== e384";
static const char R2[] =
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQColAYJxj4jUAylqsGChc/X"
    "LQNihVSP+2cfSGsTwbm3F6cJN/rhaaCeuDm5zwO50H4AsdxP8s3QY7fFG1pS"
    "uhG/+spJXo0JeAN2dxJC3phMjulQJ8UAy9fSAMpDt5hzujZozAtElU22b6Jv"
    "CNSNseJvzCQb2CJWuqtqaCwMS7KTZa6QIihEtFuyToYPK15dEKzxMwrxhv3D"
    "/csAirdWj/dg1y7sVAyLi4YyaxmhC++xe11aSJNxCQZJgt1k26dlz5ZiYGeW"
    "uCqaf5iOzZFs0Rr7ZyY50nS2EFS7PV49U8YQF7GugVeO5tWpiTCI0jp3J03L"
    "Xd/HpUc11Fvvpa8Tcv8r r2k";
static const char R1[] =
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDCfeSRYOhSkX/Gc+XVBpld"
    "IyrDacOMX/DmkOOENWjiY97Ou0QDMZxJrepwVbVFRmFds2vF3pPCYNiCUR8p"
    "hz4JthGbTHG+L5p/RUd1HQ485l4nAyUyS/1xl/AcEKETr32PU3LsHRgVbO4y"
    "IFZyNzOqZegQp+wBPDmY6b8x+umEZQ== r1k";

static void good(const char *line, const char *type, const char *fp,
                 const char *comment, int bits)
{
	struct cnl_sshkey k;
	char err[256] = "";

	if (cnl_sshkey_parse(line, &k, err, sizeof(err)) != 0)
		fail_msg("refused %.40s: %s", line, err);
	assert_string_equal(k.type, type);
	assert_string_equal(k.fingerprint, fp);
	assert_string_equal(k.comment, comment);
	assert_int_equal(k.bits, bits);
	cnl_sshkey_done(&k);
}

static void bad(const char *line, const char *why)
{
	struct cnl_sshkey k;
	char err[256] = "";

	if (cnl_sshkey_parse(line, &k, err, sizeof(err)) != -CNL_EPARSE)
		fail_msg("accepted: %.60s", line);
	if (!strstr(err, why))
		fail_msg("%.40s: \"%s\" does not say %s", line, err, why);
	cnl_sshkey_done(&k);
}

static void test_keys_taken(void **state)
{
	struct cnl_sshkey k;
	char err[256], *line;

	(void)state;
	good(ED, "ssh-ed25519",
	     "SHA256:UxQWGKoXzFnkT7NiAlUFgmXT3oY6218ZGlOd8iytAi4", "ana@laptop",
	     256);
	good(EC, "ecdsa-sha2-nistp384",
	     "SHA256:PrWHKrzQzRfUYQF93wehYoimAjDcdMRnF4kiFQ5FhFA", "e384", 384);
	good(R2, "ssh-rsa",
	     "SHA256:yKa4EfVtT73hwvV1beHad6JThDLUsrF8kNmN0P8JSR8", "r2k", 2048);
	/* A .pub file's newline, surrounding blanks, no comment. */
	assert_true(asprintf(&line, "  %s\n", ED) > 0);
	assert_int_equal(cnl_sshkey_parse(line, &k, err, sizeof(err)), 0);
	free(line);
	assert_string_equal(k.line, ED);
	cnl_sshkey_done(&k);
	line = strndup(ED, strrchr(ED, ' ') - ED);
	assert_int_equal(cnl_sshkey_parse(line, &k, err, sizeof(err)), 0);
	assert_string_equal(k.comment, "");
	assert_string_equal(k.line, line);
	cnl_sshkey_done(&k);
	free(line);
}

static void test_keys_refused(void **state)
{
	char line[12000];
	const char *b64 = strchr(ED, ' ') + 1;

	(void)state;
	bad("", "not a public key");
	bad(R1, "too weak");
	/* An authorized_keys line's options are the platform's to write. */
	snprintf(line, sizeof(line), "command=\"/bin/sh\" %s", ED);
	bad(line, "options");
	snprintf(line, sizeof(line), "no-pty,from=\"*\" %s", ED);
	bad(line, "options");
	/* A second line would be a second key in the file. */
	snprintf(line, sizeof(line), "%s\n%s", ED, R2);
	bad(line, "second line");
	snprintf(line, sizeof(line), "%s\rx", ED);
	bad(line, "control");
	bad("ssh-dss AAAAB3NzaC1kc3MAAACBAP== x", "DSA");
	bad("ssh-foo AAAA x", "not taken");
	bad("ssh-ed25519", "not base64");
	bad("ssh-ed25519 !!!! x", "not base64");
	/* Another type's blob under this type's name. */
	snprintf(line, sizeof(line), "ssh-rsa %.*s x",
	         (int)(strrchr(ED, ' ') - b64), b64);
	bad(line, "not a key of that type");
	/* A blob cut short (valid base64, 4 characters fewer). */
	snprintf(line, sizeof(line), "ssh-ed25519 %.*s x",
	         (int)(strrchr(ED, ' ') - b64) - 4, b64);
	bad(line, "not a key of that type");
	/* Bytes after the key. */
	bad("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIF+Ps7mrMZfhb66aSt6e4FLjyOUy"
	    "OzHMHTonGaUISAODAAAA x",
	    "not a key of that type");
	memset(line, 'A', sizeof(line) - 1);
	line[sizeof(line) - 1] = '\0';
	bad(line, "longer than");
}

/* ssh-keygen -y -f @path: the public line it derives, or "". */
static void derive(const char *path, char *out, size_t len)
{
	int p[2];
	pid_t pid;
	ssize_t n, got = 0;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 1);
		execlp("ssh-keygen", "ssh-keygen", "-y", "-f", path,
		       (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	while ((n = read(p[0], out + got, len - 1 - (size_t)got)) > 0)
		got += n;
	close(p[0]);
	out[got] = '\0';
	while (got > 0 && (out[got - 1] == '\n' || out[got - 1] == ' '))
		out[--got] = '\0';
	waitpid(pid, NULL, 0);
}

static void test_host_key(void **state)
{
	char *priv = NULL, *pub = NULL, *priv2 = NULL, *pub2 = NULL;
	char path[] = "/tmp/cnl-hostkey-XXXXXX", got[512];
	struct cnl_sshkey k;
	char err[256];
	int fd;

	(void)state;
	assert_int_equal(cnl_sshkey_host_new("nb", &priv, &pub), 0);
	assert_non_null(strstr(priv, "-----BEGIN OPENSSH PRIVATE KEY-----\n"));
	assert_non_null(strstr(priv, "\n-----END OPENSSH PRIVATE KEY-----\n"));
	/* Its public line is a key this parser takes. */
	assert_int_equal(cnl_sshkey_parse(pub, &k, err, sizeof(err)), 0);
	assert_string_equal(k.type, "ssh-ed25519");
	cnl_sshkey_done(&k);
	/* OpenSSH reads the private key and derives the same public one. */
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(fchmod(fd, 0600), 0);
	assert_int_equal(write(fd, priv, strlen(priv)), (ssize_t)strlen(priv));
	close(fd);
	derive(path, got, sizeof(got));
	unlink(path);
	if (strncmp(got, pub, strlen(pub)) != 0)
		fail_msg("ssh-keygen -y gave \"%s\", not \"%s\"", got, pub);
	/* Another call, another key. */
	assert_int_equal(cnl_sshkey_host_new("nb", &priv2, &pub2), 0);
	assert_string_not_equal(pub, pub2);
	free(priv);
	free(pub);
	free(priv2);
	free(pub2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_keys_taken),
	    cmocka_unit_test(test_keys_refused),
	    cmocka_unit_test(test_host_key),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
