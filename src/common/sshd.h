/*
 * sshd.h - the sshd_config of a `cnlab server ssh` session, the same
 * wherever the server runs: an agent's container (sshd -i started by the
 * agent) or a Kubernetes pod (sshd -i started through the API server's
 * exec by cnlabd).
 *
 * The platform's keys only (public key, no password, no keyboard-
 * interactive), the tenant's own account only (sshd runs as the tenant,
 * so it can log in no one else), internal-sftp, ssh -L into the server's
 * own network and nothing of the owner's machine in (no -R, no agent, no
 * Unix sockets: a shared server's other members run as the same tenant),
 * and the server's environment (SetEnv) so that a session gets what the
 * server's process got.
 */
#ifndef CNL_COMMON_SSHD_H
#define CNL_COMMON_SSHD_H

#include <jansson.h>

/*
 * cnl_sshd_config - the text (malloc'd) of an sshd_config whose host key
 * and authorized_keys are @dir/host_key and @dir/authorized_keys (NULL:
 * no such lines; the command line gives them, -o HostKey=...), with
 * SetEnv of each "NAME=VALUE" string of the JSON array @env (NULL: none)
 * but HOME, USER, LOGNAME, SHELL, MAIL, TERM and SSH_* (sshd's own) and
 * values sshd_config cannot hold (a '"', a '\\' or a control character).
 */
char *cnl_sshd_config(const char *dir, const json_t *env);

#endif /* CNL_COMMON_SSHD_H */
