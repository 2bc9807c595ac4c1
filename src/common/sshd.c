/*
 * sshd.c - the sshd_config of a `cnlab server ssh` session (see sshd.h).
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/sshd.h"
#include "common/util.h"

static const char options[] = "AuthenticationMethods publickey\n"
                              "PubkeyAuthentication yes\n"
                              "PasswordAuthentication no\n"
                              "KbdInteractiveAuthentication no\n"
                              "HostbasedAuthentication no\n"
                              "PermitRootLogin no\n"
                              "PermitUserEnvironment no\n"
                              "PermitUserRC no\n"
                              "UsePAM no\n"
                              "StrictModes no\n"
                              "UseDNS no\n"
                              "PrintMotd no\n"
                              "PrintLastLog no\n"
                              "X11Forwarding no\n"
                              "PermitTunnel no\n"
                              "AllowTcpForwarding local\n"
                              "AllowAgentForwarding no\n"
                              "AllowStreamLocalForwarding no\n"
                              "GatewayPorts no\n"
                              "LoginGraceTime 30\n"
                              "PidFile none\n"
                              "LogLevel INFO\n"
                              "Subsystem sftp internal-sftp\n";

struct text {
	char *p;
	size_t n, cap;
};

static void put(struct text *t, const char *s, size_t n)
{
	if (t->n + n + 1 > t->cap) {
		t->cap = (t->n + n + 1) * 2;
		t->p = cnl_xrealloc(t->p, t->cap);
	}
	memcpy(t->p + t->n, s, n);
	t->n += n;
	t->p[t->n] = '\0';
}

static void puts_(struct text *t, const char *s)
{
	put(t, s, strlen(s));
}

/* Whether "NAME=VALUE" @e goes into SetEnv. */
static bool env_ok(const char *e)
{
	static const char *const skip[] = {
	    "HOME=", "USER=", "LOGNAME=", "SHELL=", "MAIL=", "TERM=", "SSH_"};

	if (!e || e[0] == '=' || !strchr(e, '='))
		return false;
	for (size_t k = 0; k < CNL_ARRAY_SIZE(skip); k++)
		if (strncmp(e, skip[k], strlen(skip[k])) == 0)
			return false;
	for (const char *c = e; *c; c++)
		if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20 ||
		    *c == 0x7f)
			return false;
	return true;
}

char *cnl_sshd_config(const char *dir, const json_t *env)
{
	struct text t = {0};
	size_t i, n_env = 0;
	json_t *v;

	put(&t, "", 0);
	if (dir) {
		puts_(&t, "HostKey ");
		puts_(&t, dir);
		puts_(&t, "/host_key\nAuthorizedKeysFile ");
		puts_(&t, dir);
		puts_(&t, "/authorized_keys\n");
	}
	puts_(&t, options);
	json_array_foreach (env, i, v) {
		const char *e = json_string_value(v);

		if (!env_ok(e))
			continue;
		/* One SetEnv line: sshd takes its first only. */
		puts_(&t, n_env++ ? " \"" : "SetEnv \"");
		puts_(&t, e);
		puts_(&t, "\"");
	}
	if (n_env)
		puts_(&t, "\n");
	return t.p;
}
