/*
 * allinone.h - `cnlabd --all-in-one`: the whole platform on one machine.
 *
 * On top of a normal cnlabd it
 *   1. keeps its secrets in the data directory (mode 0600): the JWT secret
 *      (jwt.secret) unless CNLAB_JWT_SECRET is set, and the first
 *      administrator's password (admin.password) unless
 *      CNLAB_ADMIN_PASSWORD is set, so a restart needs no environment;
 *   2. creates the administrator "admin" and the default profiles on a new
 *      store, the project "default" with the administrator as its
 *      project-admin (so the Quickstart works at once), and a service user
 *      "agent" holding the role "agent";
 *   3. starts an embedded node agent (the cnlab-agent binary, as a child
 *      process) with a fresh API token, on the machine's real GPUs when
 *      NVML finds some, else on a fake pool of two H100-80GB;
 *   4. prints the URL and how to log in.
 */
#ifndef CNL_SERVER_ALLINONE_H
#define CNL_SERVER_ALLINONE_H

#include <stddef.h>
#include <sys/types.h>

#include "store/store.h"

#define CNL_AIO_SECRET_MAX 128
/* The project a new all-in-one platform starts with. */
#define CNL_AIO_PROJECT "default"

/*
 * cnl_aio_secrets - read or create data_dir/jwt.secret and
 * data_dir/admin.password (each 0600); the values go to @ret_secret and
 * @ret_password (CNL_AIO_SECRET_MAX bytes).  An environment value, when
 * given, is used instead of the file.  0 or -errno with @err.
 */
int cnl_aio_secrets(const char *data_dir, const char *env_secret,
                    const char *env_password, char *ret_secret,
                    char *ret_password, char *err, size_t errlen);

/* Room for the embedded agent's credential, NUL included. */
#define CNL_AIO_TOKEN_MAX 64

/*
 * cnl_aio_secrets_key_path - where the all-in-one keeps its secrets key
 * when no secrets_key_file is set: $XDG_CONFIG_HOME/cnlab/secrets.key,
 * else ~/.config/cnlab/secrets.key; the user's, not the data
 * directory's.  0, or -1 when neither variable is set.
 */
int cnl_aio_secrets_key_path(char *out, size_t len);

/* cnl_aio_node_name - the embedded agent's node name (this host's). */
void cnl_aio_node_name(char *out, size_t len);

/*
 * cnl_aio_agent_token - a new node credential bound to the embedded
 * agent's node (this host's name), into @ret_token (CNL_AIO_TOKEN_MAX);
 * the node's earlier credentials die.  0 or an error with @err.
 */
int cnl_aio_agent_token(struct cnl_store *s, char *ret_token, char *err,
                        size_t errlen);

/*
 * cnl_aio_spawn_agent - start cnlab-agent (found next to this binary, in
 * ../agent/ of a build tree, or on PATH) for the server at @url with
 * @token in its environment, working in data_dir/agent.  @gpus: a
 * provider spec, or NULL to choose (NVML when it answers, else
 * "fake:2xH100-80GB-SXM").  The chosen spec goes to @ret_gpus (128).
 * The child gets SIGTERM when cnlabd dies (PR_SET_PDEATHSIG); call from
 * the main thread only (the signal follows the thread that forked).
 * Returns the child's pid or -errno.
 */
pid_t cnl_aio_spawn_agent(const char *url, const char *token,
                          const char *data_dir, const char *gpus,
                          char *ret_gpus, char *err, size_t errlen);

/* cnl_aio_set_agent_run_dir - the embedded agent's run_dir (--run-dir:
 * its containers' bundles and crun's state, on a tmpfs), or NULL for none
 * (they stay in its work directory).  Before the first spawn; @dir is
 * kept, not copied. */
void cnl_aio_set_agent_run_dir(const char *dir);

/* The embedded agent's lock, in its work directory (data_dir/agent): a
 * POSIX record lock that cnlab-agent holds while it runs (agent.c). */
#define CNL_AIO_AGENT_LOCK "agent.lock"

/*
 * cnl_aio_stop_orphan - before an embedded agent starts: when a
 * cnlab-agent still holds the lock of data_dir/agent (the orphan of an
 * earlier cnlabd, or a hand-started one), stop it (SIGTERM, SIGKILL after
 * 10 s) and wait until the lock is free, so that one node never has two
 * agents.  Returns 0 (none), 1 (stopped, its pid in *@ret_pid) or -EBUSY
 * with @err (the holder is not a cnlab-agent, or does not stop).
 */
int cnl_aio_stop_orphan(const char *data_dir, pid_t *ret_pid, char *err,
                        size_t errlen);

/*
 * cnl_aio_default_project - create the project CNL_AIO_PROJECT with the
 * user @admin as its project-admin, in one transaction.  0 or an error
 * with @err.
 */
int cnl_aio_default_project(struct cnl_store *s, const char *admin, char *err,
                            size_t errlen);

#endif /* CNL_SERVER_ALLINONE_H */
