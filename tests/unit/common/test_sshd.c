/*
 * test_sshd.c - the sshd_config of a `cnlab server ssh` session
 * (common/sshd.h): its fixed options (public keys only, no root, no
 * forwarding into the owner's machine), the key files' lines only with a
 * folder, and SetEnv holding the server's environment but sshd's own
 * variables and values sshd_config cannot quote (a '"', a '\\', a
 * control character), which would otherwise end the quoted value or the
 * line and add options of a tenant's choosing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/sshd.h"

/* Whether @text has @line as one of its lines. */
static int has_line(const char *text, const char *line)
{
	size_t n = strlen(line);

	for (const char *p = text; p && *p;
	     p = strchr(p, '\n'), p = p ? p + 1 : p)
		if (strncmp(p, line, n) == 0 && (p[n] == '\n' || !p[n]))
			return 1;
	return 0;
}

static void test_sshd_fixed_options(void **state)
{
	char *c = cnl_sshd_config("/run/cnlab/ssh", NULL);

	(void)state;
	assert_true(has_line(c, "HostKey /run/cnlab/ssh/host_key"));
	assert_true(
	    has_line(c, "AuthorizedKeysFile /run/cnlab/ssh/authorized_keys"));
	assert_true(has_line(c, "AuthenticationMethods publickey"));
	assert_true(has_line(c, "PasswordAuthentication no"));
	assert_true(has_line(c, "KbdInteractiveAuthentication no"));
	assert_true(has_line(c, "PermitRootLogin no"));
	assert_true(has_line(c, "AllowTcpForwarding local"));
	assert_true(has_line(c, "AllowAgentForwarding no"));
	assert_true(has_line(c, "AllowStreamLocalForwarding no"));
	assert_true(has_line(c, "PermitTunnel no"));
	assert_true(has_line(c, "X11Forwarding no"));
	assert_true(has_line(c, "Subsystem sftp internal-sftp"));
	assert_null(strstr(c, "SetEnv"));
	free(c);
	/* No folder: no key files (the command line gives them). */
	c = cnl_sshd_config(NULL, NULL);
	assert_null(strstr(c, "HostKey"));
	assert_null(strstr(c, "AuthorizedKeysFile"));
	assert_true(has_line(c, "PermitRootLogin no"));
	free(c);
}

static void test_sshd_setenv_filtered(void **state)
{
	json_t *env =
	    json_pack("[s,s,s,s,s,s,s,s,s,s,s,s,s]", "CNLAB_PORT=8888",
	              "PATH=/opt/conda/bin:/usr/bin", "HOME=/root", "USER=root",
	              "SSH_AUTH_SOCK=/tmp/x", "TERM=xterm",
	              "EVIL=x\"\nAllowAgentForwarding yes", "Q=a\"b", "B=a\\b",
	              "T=a\tb", "=novalue", "NOEQUALS", "SPACE=a b");
	char *c = cnl_sshd_config(NULL, env);
	const char *se = strstr(c, "SetEnv ");

	(void)state;
	assert_non_null(se);
	assert_true(has_line(c, "SetEnv \"CNLAB_PORT=8888\" "
	                        "\"PATH=/opt/conda/bin:/usr/bin\" "
	                        "\"SPACE=a b\""));
	/* One SetEnv line (sshd takes its first only), nothing after it
	 * but its newline; the refused values nowhere. */
	assert_null(strstr(se + 1, "SetEnv"));
	assert_null(strstr(c, "AllowAgentForwarding yes"));
	assert_null(strstr(c, "HOME="));
	assert_null(strstr(c, "USER="));
	assert_null(strstr(c, "SSH_AUTH_SOCK"));
	assert_null(strstr(c, "TERM="));
	assert_null(strstr(c, "\"Q="));
	assert_null(strstr(c, "\"B="));
	assert_null(strstr(c, "\"T="));
	assert_null(strstr(c, "NOEQUALS"));
	assert_null(strstr(c, "novalue"));
	free(c);
	json_decref(env);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sshd_fixed_options),
	    cmocka_unit_test(test_sshd_setenv_filtered),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
