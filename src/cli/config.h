/*
 * config.h - the cnlab CLI's own settings file: which server, the bearer
 * token, and the default project.
 *
 * The file is JSON, {"server", "token", "project", "hosts"} (each
 * optional), at $CNLAB_CONFIG, else $XDG_CONFIG_HOME/cnlab/config.json,
 * else $HOME/.config/cnlab/config.json.  "token" is the default server's
 * ("server"); "hosts" keeps the credentials of other servers one logged in
 * to, by URL (its trailing '/' dropped), {"URL": {"token": "..."}}, as
 * gh's hosts file does: a token goes to the server that issued it, never
 * to another.  It holds a
 * credential, so it is written with mode 0600 in a folder made with 0700 (write
 * to a temporary file, then rename), and a file found readable by group or
 * others is tightened to 0600 on load with a warning.
 */
#ifndef CNL_CLI_CONFIG_H
#define CNL_CLI_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* The settings; every string is owned and may be NULL. */
struct cnl_cli_config {
	char *path; /* where it lives */
	char *server;
	/* The credential of token_server (on load: of server; when NULL:
	 * of server); saving stores it as that server's entry of hosts, or
	 * drops the entry when NULL. */
	char *token;
	char *token_server;
	char *project;
	json_t *hosts; /* the other servers' entries, as read */
};

/*
 * cnl_cli_config_path - where the file lives, from the variables above.
 * Returns a string to free(), or NULL when neither CNLAB_CONFIG,
 * XDG_CONFIG_HOME nor HOME is set.
 */
char *cnl_cli_config_path(void);

/*
 * cnl_cli_config_load - read the file at @path into *@ret (a missing file
 * gives empty settings).  Returns 0, or a negative errno / -CNL_EPARSE with
 * @err explaining; *@ret is then empty but for its path.  @warned is set
 * when the permissions had to be tightened.
 */
int cnl_cli_config_load(const char *path, struct cnl_cli_config *ret,
                        bool *warned, char *err, size_t errlen);

/*
 * cnl_cli_config_save - write @c to c->path with mode 0600, atomically.
 * Returns 0 or a negative errno with @err explaining.
 */
int cnl_cli_config_save(const struct cnl_cli_config *c, char *err,
                        size_t errlen);

/* cnl_cli_config_set - replace the string *@field with a copy of @v (which
 * may be *@field itself). */
void cnl_cli_config_set(char **field, const char *v);

/*
 * cnl_cli_config_use_server - make c->token the credential kept for
 * @server (NULL when none) and c->token_server @server.
 */
void cnl_cli_config_use_server(struct cnl_cli_config *c, const char *server);

/* cnl_cli_config_done - free the strings. */
void cnl_cli_config_done(struct cnl_cli_config *c);

#endif /* CNL_CLI_CONFIG_H */
