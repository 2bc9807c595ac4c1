/*
 * allinone.c - the all-in-one platform's set-up (see allinone.h).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cnlab/errors.h"
#include "common/id.h"
#include "common/time.h"
#include "server/allinone.h"
#include "server/api.h"
#include "server/auth.h"

extern char **environ;

/* Random printable text of @n characters (base32-like alphabet). */
static int random_text(char *out, size_t n)
{
	static const char abc[] = "abcdefghjkmnpqrstuvwxyz23456789";
	unsigned char raw[CNL_AIO_SECRET_MAX];

	if (n >= sizeof(raw) || getrandom(raw, n, 0) != (ssize_t)n)
		return -EIO;
	for (size_t i = 0; i < n; i++)
		out[i] = abc[raw[i] % (sizeof(abc) - 1)];
	out[n] = '\0';
	return 0;
}

/* Read @path's first line into @out, or create it with @n random chars. */
static int secret_file(const char *dir, const char *name, size_t n, char *out,
                       char *err, size_t errlen)
{
	char path[PATH_MAX];
	FILE *f;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	/* 0600 whatever the umask, and closed again if someone opened it. */
	if ((f = fopen(path, "re"))) {
		fchmod(fileno(f), 0600);
		if (!fgets(out, CNL_AIO_SECRET_MAX, f))
			out[0] = '\0';
		fclose(f);
		out[strcspn(out, "\r\n")] = '\0';
		if (strlen(out) >= 8)
			return 0;
		snprintf(err, errlen, "%s is empty or too short", path);
		return -CNL_ECONFIG;
	}
	if (random_text(out, n) < 0) {
		snprintf(err, errlen, "no randomness");
		return -EIO;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
	          0600);
	if (fd < 0 || fchmod(fd, 0600) < 0 || write(fd, out, n) != (ssize_t)n ||
	    write(fd, "\n", 1) != 1) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	close(fd);
	return 0;
}

int cnl_aio_secrets(const char *data_dir, const char *env_secret,
                    const char *env_password, char *ret_secret,
                    char *ret_password, char *err, size_t errlen)
{
	int r;

	if ((mkdir(data_dir, 0700) < 0 && errno != EEXIST) ||
	    chmod(data_dir, 0700) < 0) {
		snprintf(err, errlen, "%s: %s", data_dir, strerror(errno));
		return -errno;
	}
	if (env_secret && env_secret[0])
		snprintf(ret_secret, CNL_AIO_SECRET_MAX, "%s", env_secret);
	else if ((r = secret_file(data_dir, "jwt.secret", 48, ret_secret, err,
	                          errlen)) < 0)
		return r;
	if (env_password && env_password[0])
		snprintf(ret_password, CNL_AIO_SECRET_MAX, "%s", env_password);
	else if ((r = secret_file(data_dir, "admin.password", 16, ret_password,
	                          err, errlen)) < 0)
		return r;
	return 0;
}

int cnl_aio_secrets_key_path(char *out, size_t len)
{
	const char *x = getenv("XDG_CONFIG_HOME"), *h = getenv("HOME");

	if (x && x[0] == '/')
		snprintf(out, len, "%s/cnlab/secrets.key", x);
	else if (h && h[0] == '/')
		snprintf(out, len, "%s/.config/cnlab/secrets.key", h);
	else
		return -1;
	return 0;
}

/* The embedded agent's node name: this host's. */
void cnl_aio_node_name(char *out, size_t len)
{
	snprintf(out, len, "localhost");
	gethostname(out, len - 1);
	out[len - 1] = '\0';
}

int cnl_aio_agent_token(struct cnl_store *s, char *ret_token, char *err,
                        size_t errlen)
{
	char name[256], cred[CNL_API_NODE_SECRET_MAX];
	int r;

	cnl_aio_node_name(name, sizeof(name));
	/* A fresh credential bound to its node each start; those of the
	 * embedded agents of earlier starts die (they are gone). */
	if ((r = cnl_store_tx_begin(s)) < 0)
		goto fail;
	if ((r = cnl_api_node_forget(s, name)) < 0 ||
	    (r = cnl_api_node_credential_issue(s, name, cnl_time_now_ms(),
	                                       cred)) < 0) {
		cnl_store_tx_rollback(s);
		goto fail;
	}
	if ((r = cnl_store_tx_commit(s)) < 0)
		goto fail;
	snprintf(ret_token, CNL_AIO_TOKEN_MAX, "%s", cred);
	explicit_bzero(cred, sizeof(cred));
	return 0;
fail:
	snprintf(err, errlen, "cannot issue the agent's credential: %s",
	         cnl_strerror(r));
	return r;
}

/* Whether NVML loads and reports at least one GPU. */
static bool nvml_has_gpus(void)
{
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	int (*init)(void), (*count)(unsigned *), (*shutdown)(void);
	unsigned n = 0;

	if (!h)
		return false;
	*(void **)&init = dlsym(h, "nvmlInit_v2");
	*(void **)&count = dlsym(h, "nvmlDeviceGetCount_v2");
	*(void **)&shutdown = dlsym(h, "nvmlShutdown");
	if (init && count && shutdown && init() == 0) {
		if (count(&n) != 0)
			n = 0;
		shutdown();
	}
	dlclose(h);
	return n > 0;
}

/* The cnlab-agent binary: beside us, in a build tree's ../agent, on PATH. */
static int find_agent(char *out, size_t len)
{
	char self[PATH_MAX], *slash;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	static const char *const rel[] = {"/cnlab-agent",
	                                  "/../agent/cnlab-agent"};

	if (n > 0) {
		self[n] = '\0';
		if ((slash = strrchr(self, '/')))
			*slash = '\0';
		for (size_t i = 0; i < 2; i++) {
			if ((size_t)snprintf(out, len, "%s%s", self, rel[i]) <
			        len &&
			    access(out, X_OK) == 0)
				return 0;
		}
	}
	snprintf(out, len, "cnlab-agent");
	return 0;
}

/* The CUDA shim beside the agent (a build tree's ../shim), or "". */
static void find_shim(const char *agent, char *out, size_t len)
{
	char dir[PATH_MAX], *slash;
	static const char *const rel[] = {"/libcnlab-cuda.so",
	                                  "/../shim/libcnlab-cuda.so",
	                                  "/../lib/libcnlab-cuda.so"};

	snprintf(dir, sizeof(dir), "%s", agent);
	out[0] = '\0';
	if (!(slash = strrchr(dir, '/')))
		return;
	*slash = '\0';
	for (size_t i = 0; i < 3; i++)
		if ((size_t)snprintf(out, len, "%s%s", dir, rel[i]) < len &&
		    access(out, R_OK) == 0)
			return;
	out[0] = '\0';
}

static const char *agent_run_dir;

void cnl_aio_set_agent_run_dir(const char *dir)
{
	agent_run_dir = dir;
}

pid_t cnl_aio_spawn_agent(const char *url, const char *token,
                          const char *data_dir, const char *gpus,
                          char *ret_gpus, char *err, size_t errlen)
{
	char agent[PATH_MAX], shim[PATH_MAX], work[PATH_MAX], tokenv[4200];
	char host[256];
	const char *argv[20];
	char **envp;
	size_t n = 0, ne = 0;
	pid_t pid;
	int r;

	find_agent(agent, sizeof(agent));
	find_shim(agent, shim, sizeof(shim));
	snprintf(ret_gpus, 128, "%s",
	         gpus              ? gpus
	         : nvml_has_gpus() ? "nvml"
	                           : "fake:2xH100-80GB-SXM");
	snprintf(work, sizeof(work), "%s/agent", data_dir);
	cnl_aio_node_name(host, sizeof(host));
	argv[n++] = agent;
	argv[n++] = "--server";
	argv[n++] = url;
	argv[n++] = "--name";
	argv[n++] = host;
	argv[n++] = "--gpus";
	argv[n++] = ret_gpus;
	argv[n++] = "--work-dir";
	argv[n++] = work;
	/* Its credential comes from this process at each start (and at each
	 * restart by the supervisor): a rotation of its own would leave the
	 * supervisor restarting it with a credential cnlabd killed. */
	argv[n++] = "--credential-rotate";
	argv[n++] = "0s";
	if (shim[0]) {
		argv[n++] = "--shim";
		argv[n++] = shim;
	}
	if (agent_run_dir && agent_run_dir[0]) {
		argv[n++] = "--run-dir";
		argv[n++] = agent_run_dir;
	}
	argv[n] = NULL;
	/* Our environment, plus the token; no other CNLAB_AGENT_ setting but
	 * CNLAB_AGENT_LISTEN, the agent's /metrics (docs/metrics.md). */
	for (char **e = environ; *e; e++)
		ne++;
	envp = calloc(ne + 2, sizeof(*envp));
	if (!envp)
		return -ENOMEM;
	ne = 0;
	for (char **e = environ; *e; e++)
		if (strncmp(*e, "CNLAB_AGENT_", 12) != 0 ||
		    strncmp(*e, "CNLAB_AGENT_LISTEN=", 19) == 0)
			envp[ne++] = *e;
	snprintf(tokenv, sizeof(tokenv), "CNLAB_AGENT_TOKEN=%s", token);
	envp[ne++] = tokenv;
	envp[ne] = NULL;
	/* cnlabd blocks SIGTERM and SIGINT (its main thread waits for them):
	 * the agent must start with them unblocked and at their defaults.
	 * fork and execve by hand rather than posix_spawn, for the death
	 * signal: a cnlabd killed outright (kill -9, OOM) takes its agent
	 * with it (SIGTERM: the agent leaves its workloads running for the
	 * next one to adopt).  The thread that forks is cnlabd's main
	 * thread, which lives as long as the process.  Between fork and
	 * execve the child makes system calls only. */
	pid_t parent = getpid();
	sigset_t none;

	sigemptyset(&none);
	pid = fork();
	if (pid == 0) {
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGPIPE, SIG_DFL);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
			_exit(127); /* cnlabd is gone already */
		execve(agent, (char *const *)argv, envp);
		_exit(127);
	}
	r = pid < 0 ? errno : 0;
	explicit_bzero(tokenv, sizeof(tokenv));
	free(envp);
	if (r) {
		snprintf(err, errlen, "cannot start %s: %s", agent,
		         strerror(r));
		return -r;
	}
	return pid;
}

/* The pid holding the agent's lock on @path (a POSIX record lock, which a
 * fork does not inherit: the workloads' supervisors never hold it), 0 if
 * none does. */
static pid_t lock_holder(const char *path)
{
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	pid_t pid = 0;

	if (fd < 0)
		return 0;
	if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK)
		pid = fl.l_pid;
	close(fd);
	return pid;
}

/* Whether process @pid runs the program named cnlab-agent. */
static bool is_agent(pid_t pid)
{
	char path[64], comm[32] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	if (!(f = fopen(path, "re")))
		return false;
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = '\0';
	fclose(f);
	comm[strcspn(comm, "\n")] = '\0';
	return strcmp(comm, "cnlab-agent") == 0;
}

int cnl_aio_stop_orphan(const char *data_dir, pid_t *ret_pid, char *err,
                        size_t errlen)
{
	char path[PATH_MAX];
	pid_t pid;

	*ret_pid = 0;
	snprintf(path, sizeof(path), "%s/agent/%s", data_dir,
	         CNL_AIO_AGENT_LOCK);
	if ((pid = lock_holder(path)) <= 0)
		return 0;
	if (!is_agent(pid)) {
		snprintf(err, errlen,
		         "%s is locked by process %d, which is not a "
		         "cnlab-agent; not starting a second agent on it",
		         path, (int)pid);
		return -EBUSY;
	}
	*ret_pid = pid;
	/* SIGTERM: it stops and leaves its workloads running (the new
	 * agent adopts them); 10 s, then SIGKILL (the workloads keep
	 * running still: their supervisors are not the agent). */
	kill(pid, SIGTERM);
	for (int i = 0; i < 150 && lock_holder(path) == pid; i++) {
		if (i == 100)
			kill(pid, SIGKILL);
		usleep(100 * 1000);
	}
	if (lock_holder(path) > 0) {
		snprintf(err, errlen, "the agent %d holding %s does not stop",
		         (int)pid, path);
		return -EBUSY;
	}
	return 1;
}

int cnl_aio_default_project(struct cnl_store *s, const char *admin, char *err,
                            size_t errlen)
{
	struct cnl_store_project p = {0};
	struct cnl_store_membership m = {0};
	struct cnl_store_user u;
	struct cnl_id_gen ids;
	int64_t now = cnl_time_now_ms();
	int r;

	cnl_id_gen_init_random(&ids);
	if ((r = cnl_store_user_get_by_name(s, admin, &u)) < 0 ||
	    (r = cnl_id_new(&ids, "prj", now, p.id, sizeof(p.id))) < 0)
		goto fail;
	snprintf(p.name, sizeof(p.name), "%s", CNL_AIO_PROJECT);
	p.created_ms = now;
	memcpy(m.user_id, u.id, sizeof(m.user_id));
	memcpy(m.project_id, p.id, sizeof(m.project_id));
	snprintf(m.role, sizeof(m.role), "project-admin");
	if ((r = cnl_store_tx_begin(s)) < 0)
		goto fail;
	if ((r = cnl_store_project_create(s, &p)) < 0 ||
	    (r = cnl_store_membership_set(s, &m)) < 0 ||
	    (r = cnl_store_tx_commit(s)) < 0) {
		cnl_store_tx_rollback(s);
		goto fail;
	}
	return 0;
fail:
	snprintf(err, errlen, "cannot create the %s project: %s",
	         CNL_AIO_PROJECT, cnl_strerror(r));
	return r;
}
