/*
 * cli.h - what the files of the cnlab binary share: the exit codes, the
 * command table, the per-invocation context and the request helpers that
 * turn API errors into messages and exit codes.
 *
 * Exit codes (README, "The CLI: cnlab"):
 *   0  success
 *   1  error (server unreachable, server-side failure, a job that failed
 *      to start, a wait that timed out)
 *   2  usage: bad flags or arguments, or a request the server called bad
 *   3  not logged in, or the session expired: run cnlab login
 *   4  not found (a project, server, job ... you cannot see)
 *   5  refused: over quota, not permitted, a deadline that cannot be met,
 *      or a conflict with the current state (a running server is not
 *      deleted, a project with work is not)
 *   cnlab run, once the job is submitted, exits with the job's own code.
 */
#ifndef CNL_CLI_CLI_H
#define CNL_CLI_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "cli/args.h"
#include "cli/config.h"
#include "cli/format.h"
#include "common/trace.h"
#include "net/client.h"
#include "wire/job.h"

enum {
	CNL_EXIT_OK = 0,
	CNL_EXIT_ERROR = 1,
	CNL_EXIT_USAGE = 2,
	CNL_EXIT_AUTH = 3,
	CNL_EXIT_NOT_FOUND = 4,
	CNL_EXIT_REFUSED = 5,
	CNL_EXIT_TIMEOUT = 6, /* the server did not connect or answer in time */
};

/* Defaults of --connect-timeout and --read-timeout (milliseconds). */
#define CNL_CLI_CONNECT_TIMEOUT_DEFAULT (10 * 1000)
#define CNL_CLI_READ_TIMEOUT_DEFAULT    (60 * 1000)

/* The state of one invocation. */
struct cnl_cli {
	struct cnl_cli_config cfg;  /* the settings file */
	const char *server;         /* effective base URL */
	const char *token;          /* effective token, or NULL */
	const char *project_flag;   /* --project, or NULL */
	bool json;                  /* --output json */
	bool logging_in;            /* 401 means bad credentials */
	int64_t connect_timeout_ms; /* --connect-timeout */
	int64_t read_timeout_ms;    /* --read-timeout; 0: none */
	struct cnl_client *client;  /* made on first use */
	/* The command's trace context, sent on each request (trace.c). */
	char traceparent[CNL_TRACE_HEADER_MAX];
	const struct cnl_cli_command *cmd;
	/* The whole command table (commands.c), for help and completion:
	 * handlers reach it only through here. */
	const struct cnl_cli_command *commands;
	size_t ncommands;
	const struct cnl_cli_flag *global_flags;
	const struct cnl_cli_flag *flags; /* global + command flags */
	size_t nflags;
	struct cnl_cli_args args;
};

/* One command: "server create", with its flags and handler. */
struct cnl_cli_command {
	const char *path;    /* words after "cnlab" */
	const char *usage;   /* positional arguments, e.g. "NAME" */
	const char *summary; /* one line */
	const struct cnl_cli_flag *flags; /* NULL-name terminated, or NULL */
	size_t min_pos, max_pos;
	bool passthrough; /* unknown flags after the first argument are
	                   * arguments (cnlab run) */
	bool hidden;      /* not listed in help or completion */
	int (*run)(struct cnl_cli *cli);
};

/* The command table (main.c) and its size. */
extern const struct cnl_cli_command cnl_cli_commands[];
extern const size_t cnl_cli_ncommands;
/* Flags every command takes (main.c), NULL-name terminated. */
extern const struct cnl_cli_flag cnl_cli_global_flags[];

/* The value of --@name for this command, or NULL. */
const char *cnl_cli_flag(struct cnl_cli *cli, const char *name);

/* Print "cnlab: MESSAGE" to stderr and return @code. */
int cnl_cli_fail(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * cnl_cli_call - @method @path with @body (borrowed), expecting a 2xx.
 * On success stores the parsed JSON body (new reference; json null for an
 * empty one) in *@ret and returns 0.  Otherwise prints what went wrong and
 * what to do, and returns the exit code (CNL_EXIT_*).  @what names the
 * object for "not found" messages, e.g. "server \"nb1\"".
 */
int cnl_cli_call(struct cnl_cli *cli, const char *method, const char *path,
                 json_t *body, const char *idem, const char *what,
                 json_t **ret);

/*
 * cnl_cli_call_named - cnl_cli_call() on the object of @kind called @name:
 * @method on @base, @name URL-escaped, then @tail ("" or e.g. "/invite"),
 * with @body (may be NULL); "not found" names it (kind "name").  With
 * --json the reply is printed and *@ret is NULL; otherwise *@ret is the
 * reply for the caller to print and free.  Returns the exit code.
 */
int cnl_cli_call_named(struct cnl_cli *cli, const char *method,
                       const char *base, const char *tail, const char *kind,
                       const char *name, json_t *body, json_t **ret);

/*
 * cnl_cli_list_begin - GET the list at @path (errors name @what, may be
 * NULL).  With --json the reply is printed and *@ret is NULL; otherwise
 * *@ret is the reply and @t a table of @ncols columns headed by @head,
 * for the caller to fill and end with cnl_cli_list_end().  Returns the
 * exit code.
 */
int cnl_cli_list_begin(struct cnl_cli *cli, const char *path, const char *what,
                       struct cnl_cli_table *t, int ncols,
                       const char *const *head, json_t **ret);

/* Print @t, free it and @reply; returns 0 (CNL_EXIT_OK). */
int cnl_cli_list_end(struct cnl_cli_table *t, json_t *reply);

/* cnl_cli_call() for raw bytes (artifact download): *@ret is the reply. */
/*
 * cnl_cli_reply_error - the message and exit code for a reply whose
 * status is not 2xx, as cnl_cli_call() prints them (@what: the kind of
 * thing asked for, for a 404, or NULL).
 */
int cnl_cli_reply_error(struct cnl_cli *cli, const struct cnl_client_reply *r,
                        const char *what);

/*
 * cnl_cli_unreachable - the message for a request that got no reply
 * (@r after -EIO from the client): CNL_EXIT_TIMEOUT naming the server and
 * which timeout ran out, else CNL_EXIT_ERROR with the reason.  @what: the
 * thing asked for, or NULL.
 */
int cnl_cli_unreachable(struct cnl_cli *cli, const struct cnl_client_reply *r,
                        const char *what);

/*
 * cnl_cli_timeouts - read --connect-timeout and --read-timeout, else
 * CNLAB_CONNECT_TIMEOUT and CNLAB_READ_TIMEOUT, else the defaults, into
 * @cli.  0, or CNL_EXIT_USAGE after a message naming the flag or variable.
 */
int cnl_cli_timeouts(struct cnl_cli *cli);

int cnl_cli_call_raw(struct cnl_cli *cli, const char *path, const char *what,
                     struct cnl_client_reply *ret);

/*
 * cnl_cli_stream - send @rq as it is (a streamed upload or download,
 * client.h); 0 with the reply in *@ret (free it) for a 2xx, else the exit
 * code with the message printed as cnl_cli_call's.
 */
int cnl_cli_stream(struct cnl_cli *cli, const struct cnl_client_request *rq,
                   const char *what, struct cnl_client_reply *ret);

/*
 * cnl_cli_project - resolve the project to act on: --project, else the
 * config file's default, else the caller's only project.  Stores its id
 * (in @id, CNL_CLI_ID_MAX bytes) and name (@name); returns 0 or an exit
 * code after printing what to do.
 */
#define CNL_CLI_ID_MAX 128
int cnl_cli_project(struct cnl_cli *cli, const char *want, char *id,
                    char *name);

/* Print @j as indented JSON on stdout; returns 0. */
int cnl_cli_print_json(const json_t *j);

/* String member @key of @o, or @dflt. */
const char *cnl_cli_str(const json_t *o, const char *key, const char *dflt);

/* The HTTP client of this invocation, made on first use; NULL when
 * libcurl cannot start (or the server URL or token is too long). */
struct cnl_client *cnl_cli_client(struct cnl_cli *cli);

/*
 * cnl_cli_project_items - the project's @what ("servers", "jobs"): GET
 * /v1/projects/ID/@what into *@ret; the project's name into @pname
 * (CNL_CLI_ID_MAX).  0 or an exit code.
 */
int cnl_cli_project_items(struct cnl_cli *cli, const char *what, char *pname,
                          json_t **ret);

/*
 * cnl_cli_comma_list - "A,B,C" (1..@max names of 1..@longest bytes) as a
 * JSON array; NULL when it is not one ("" included).
 */
json_t *cnl_cli_comma_list(const char *list, size_t longest, size_t max);
/*
 * cnl_cli_number_list - "K=V,K=V" (keys of 1..63 bytes, V numbers) as a
 * JSON object; NULL with the bad item in @bad (64 bytes) otherwise.
 */
json_t *cnl_cli_number_list(const char *list, char bad[64]);

/* A path built with printf; the caller frees it.  Exits on no memory. */
char *cnl_cli_pathf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Milliseconds from now until the RFC 3339 time @s (0 when past); -1 if
 * @s is NULL or not a time. */
int64_t cnl_cli_until(const char *s);

/* The same for the time @at_ms; -1 if it is 0 (unknown). */
int64_t cnl_cli_until_ms(int64_t at_ms);

/* The time @ms as the server writes it (RFC 3339, UTC, milliseconds)
 * into @buf (CNL_TIME_RFC3339_MAX bytes), or @none when it is 0. */
const char *cnl_cli_time(int64_t ms, char *buf, size_t len, const char *none);

/*
 * cnl_cli_read_job, _jobs, _server, _servers - decode a reply @o that
 * must be a job document (wire/job.h), a page of them, a server or a page
 * of servers into *@ret.  0, or CNL_EXIT_ERROR after a message naming
 * the field that does not read (*@ret then holds nothing to free).  Free
 * *@ret with the document's _done().
 */
int cnl_cli_read_job(const json_t *o, struct cnl_wire_job *ret);
int cnl_cli_read_jobs(const json_t *o, struct cnl_wire_jobs *ret);
int cnl_cli_read_server(const json_t *o, struct cnl_wire_server *ret);
int cnl_cli_read_servers(const json_t *o, struct cnl_wire_servers *ret);

/* Read one line from @f into @buf without the newline; -1 on EOF. */
int cnl_cli_read_line(FILE *f, char *buf, size_t len);

/*
 * cnl_cli_eta - @prefix and the wait a live status @st (NULL: none)
 * promises, for a
 * progress line: "ETA 12 min", "ETA ≈ 3h59m (2 running jobs gave no run
 * time; 4h00m assumed)" when the estimate is built on the scheduler's
 * default run time, "estimate unknown" when there is none.
 */
void cnl_cli_eta(const struct cnl_wire_status *st, const char *prefix,
                 char *buf, size_t len);

/*
 * cnl_cli_slice_label - a GPU shape as the seeds write slices: "h100-50"
 * -> "1×H100-50pct", "h100-full" -> "1×H100", "h100x4" -> "4×H100",
 * "a100-3g.20gb" -> "1×A100-3g.20gb".
 */
void cnl_cli_slice_label(const char *shape, char *buf, size_t len);

/* Write the settings file; 0 or an exit code after a message. */
int cnl_cli_save_config(struct cnl_cli *cli);

/* The version of cnlab, printed by cnlab version. */
#define CNL_CLI_VERSION "0.1.0"

/* The command handlers (cmd/<group>.c), listed in commands.c. */
int cnl_cli_cmd_login(struct cnl_cli *cli);
int cnl_cli_cmd_logout(struct cnl_cli *cli);
/* cmd/weblogin.c: browser sign-in (cnlab login --web) at the server's
 * OIDC provider; 0 with the ID token in *@ret (free it), else the exit
 * code after a message. */
int cnl_cli_web_id_token(struct cnl_cli *cli, char **ret);
int cnl_cli_cmd_whoami(struct cnl_cli *cli);
int cnl_cli_cmd_profiles_list(struct cnl_cli *cli);
int cnl_cli_cmd_server_create(struct cnl_cli *cli);
int cnl_cli_cmd_server_list(struct cnl_cli *cli);
int cnl_cli_cmd_server_open(struct cnl_cli *cli);
int cnl_cli_cmd_server_exec(struct cnl_cli *cli);
int cnl_cli_cmd_server_stop(struct cnl_cli *cli);
int cnl_cli_cmd_server_start(struct cnl_cli *cli);
int cnl_cli_cmd_server_delete(struct cnl_cli *cli);
int cnl_cli_cmd_server_show(struct cnl_cli *cli);
int cnl_cli_cmd_server_resize(struct cnl_cli *cli);
int cnl_cli_cmd_run(struct cnl_cli *cli);
int cnl_cli_cmd_secret_set(struct cnl_cli *cli);
/* --secret NAME[,NAME...] and --secret-env NAME=VAR[,...] as the
 * submission's "secrets" in @body: 0 or an exit code (cmd/secret.c). */
int cnl_cli_secret_refs(struct cnl_cli *cli, json_t *body);
int cnl_cli_cmd_secret_list(struct cnl_cli *cli);
int cnl_cli_cmd_secret_delete(struct cnl_cli *cli);
int cnl_cli_cmd_ssh_key_add(struct cnl_cli *cli);
int cnl_cli_cmd_ssh_key_list(struct cnl_cli *cli);
int cnl_cli_cmd_ssh_key_remove(struct cnl_cli *cli);
int cnl_cli_cmd_server_ssh(struct cnl_cli *cli);
int cnl_cli_cmd_server_ssh_config(struct cnl_cli *cli);
int cnl_cli_cmd_server_ssh_proxy(struct cnl_cli *cli);
int cnl_cli_cmd_jobs_list(struct cnl_cli *cli);
int cnl_cli_cmd_jobs_show(struct cnl_cli *cli);
int cnl_cli_cmd_jobs_explain(struct cnl_cli *cli);
int cnl_cli_cmd_cluster_list(struct cnl_cli *cli);
int cnl_cli_cmd_cluster_show(struct cnl_cli *cli);
int cnl_cli_cmd_cluster_set_policy(struct cnl_cli *cli);
int cnl_cli_cmd_jobs_logs(struct cnl_cli *cli);
int cnl_cli_cmd_jobs_cancel(struct cnl_cli *cli);
int cnl_cli_cmd_jobs_resize(struct cnl_cli *cli);
/* In-flight resize (cli.c): the body {"blocks": N} of --blocks N into
 * *@ret (0, or CNL_EXIT_USAGE after a message naming the flag), and the
 * "Size:" line of a show for @st. */
int cnl_cli_resize_body(struct cnl_cli *cli, json_t **ret);
void cnl_cli_print_size(const struct cnl_wire_status *st);
int cnl_cli_cmd_quota_show(struct cnl_cli *cli);
int cnl_cli_cmd_project_list(struct cnl_cli *cli);
int cnl_cli_cmd_project_use(struct cnl_cli *cli);
int cnl_cli_cmd_project_mark(struct cnl_cli *cli);
int cnl_cli_cmd_project_pin(struct cnl_cli *cli);
int cnl_cli_cmd_policy_burst(struct cnl_cli *cli);
int cnl_cli_cmd_cloud_add(struct cnl_cli *cli);
int cnl_cli_cmd_cloud_list(struct cnl_cli *cli);
int cnl_cli_cmd_cloud_instances(struct cnl_cli *cli);
int cnl_cli_cmd_peer_grant(struct cnl_cli *cli);
int cnl_cli_cmd_peer_grants(struct cnl_cli *cli);
int cnl_cli_cmd_peer_revoke(struct cnl_cli *cli);
int cnl_cli_cmd_peer_add(struct cnl_cli *cli);
int cnl_cli_cmd_peer_list(struct cnl_cli *cli);
int cnl_cli_cmd_peer_remove(struct cnl_cli *cli);
int cnl_cli_cmd_node_list(struct cnl_cli *cli);
int cnl_cli_cmd_node_show(struct cnl_cli *cli);
int cnl_cli_cmd_node_cordon(struct cnl_cli *cli);
int cnl_cli_cmd_node_drain(struct cnl_cli *cli);
int cnl_cli_cmd_node_undrain(struct cnl_cli *cli);
int cnl_cli_cmd_node_join_token(struct cnl_cli *cli);
int cnl_cli_cmd_node_revoke(struct cnl_cli *cli);
int cnl_cli_cmd_user_create(struct cnl_cli *cli);
int cnl_cli_cmd_user_list(struct cnl_cli *cli);
int cnl_cli_cmd_user_show(struct cnl_cli *cli);
int cnl_cli_cmd_user_invite(struct cnl_cli *cli);
int cnl_cli_cmd_user_disable(struct cnl_cli *cli);
int cnl_cli_cmd_user_enable(struct cnl_cli *cli);
int cnl_cli_cmd_user_link(struct cnl_cli *cli);
int cnl_cli_cmd_user_unlink(struct cnl_cli *cli);
int cnl_cli_cmd_project_create(struct cnl_cli *cli);
int cnl_cli_cmd_project_show(struct cnl_cli *cli);
int cnl_cli_cmd_project_delete(struct cnl_cli *cli);
int cnl_cli_cmd_member_add(struct cnl_cli *cli);
int cnl_cli_cmd_member_list(struct cnl_cli *cli);
int cnl_cli_cmd_member_set_role(struct cnl_cli *cli);
int cnl_cli_cmd_member_remove(struct cnl_cli *cli);
int cnl_cli_cmd_token_create(struct cnl_cli *cli);
int cnl_cli_cmd_token_list(struct cnl_cli *cli);
int cnl_cli_cmd_token_revoke(struct cnl_cli *cli);
int cnl_cli_cmd_profile_create(struct cnl_cli *cli);
int cnl_cli_cmd_profile_delete(struct cnl_cli *cli);
int cnl_cli_cmd_image_import(struct cnl_cli *cli);
int cnl_cli_cmd_image_list(struct cnl_cli *cli);
int cnl_cli_cmd_image_delete(struct cnl_cli *cli);
int cnl_cli_cmd_quota_set(struct cnl_cli *cli);
int cnl_cli_cmd_config_show(struct cnl_cli *cli);
int cnl_cli_cmd_config_set(struct cnl_cli *cli);
int cnl_cli_cmd_config_get(struct cnl_cli *cli);
int cnl_cli_cmd_audit(struct cnl_cli *cli);
int cnl_cli_cmd_completion(struct cnl_cli *cli);
int cnl_cli_cmd_complete(struct cnl_cli *cli);
int cnl_cli_cmd_version(struct cnl_cli *cli);

struct cnl_span;
/* The command's span (trace.c): begun before it runs, ended after with
 * its exit code, then exported (when OTEL_EXPORTER_OTLP_ENDPOINT is set). */
void cnl_cli_trace_begin(struct cnl_cli *cli, struct cnl_span *sp);
void cnl_cli_trace_end(struct cnl_cli *cli, struct cnl_span *sp, int code);

#endif /* CNL_CLI_CLI_H */
